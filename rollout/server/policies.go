package server

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/rollout"
)

// PolicySettings turns a request's policy fields into the settings of
// role's policy name in the request's run spec (runspec.Policy.Settings),
// for the policies Config.Policies makes: an LLM's endpoint, model and
// sampling, the request's Roles[role] over its Sampling over the
// service's defaults. It is called for every role whose policy the request
// names and that is not one of the scenario's own or "random" (those take
// no settings and ignore Sampling). nil settings are none; an error is
// answered 400 bad_policy.
type PolicySettings func(name, role string, req *rollout.Request) (json.RawMessage, error)

// CallRecorder counts the model calls a policy makes (an LLM policy calls it
// once per server call, with the call's latency and error). It is safe for
// concurrent use.
type CallRecorder interface {
	RecordCall(latency time.Duration, err error)
}

// CallCounter is the CallRecorder whose counts GET /metrics reports
// (troupe_llm_calls_total, troupe_llm_call_duration_seconds): the caller
// that makes Config.Policies makes one, hands it to the policies its
// maker makes (the maker's closure holds it), and sets it as
// Config.Calls. The zero value counts from zero.
type CallCounter struct {
	duration histogram
	ok, err  atomic.Uint64
}

// RecordCall implements CallRecorder.
func (c *CallCounter) RecordCall(latency time.Duration, err error) {
	if err != nil {
		c.err.Add(1)
	} else {
		c.ok.Add(1)
	}
	c.duration.observe(latency)
}
