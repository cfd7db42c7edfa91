package server

import (
	"encoding/json"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/runspec"
)

// PolicyRequest is what a PolicyMaker gets for one role of a request's run
// spec: the resolver's request (the scenario, its parameters, the role and
// its policy's name and settings) and the recorder that counts model calls
// into the service's metrics.
type PolicyRequest struct {
	runspec.PolicyRequest
	Calls CallRecorder
}

// PolicyMaker builds the policies the scenarios do not own (an LLM) for
// the roles of a request's run spec: it is the service's
// runspec.Resolvers.Policies. It returns ok=false for a name it does not
// know, which the scenario's own policies and "random" then resolve
// (roles a request names no policy for play the scenario's default, else
// random: the resolver's rule). It is called once per role and request;
// the policy it returns serves every episode of the request,
// concurrently, so it must be safe for concurrent use. An error is
// answered as 400 bad_policy with its text, so it should name the bad
// field and what is allowed.
type PolicyMaker func(req PolicyRequest) (p agents.Policy, ok bool, err error)

// PolicySettings turns a request's policy fields into the settings of a
// role's policy in the request's run spec (runspec.Policy.Settings), for
// the policies a PolicyMaker makes: an LLM's model and sampling, the
// request's Sampling over the service's defaults. It is called for every
// role whose policy the request names and that is not one of the
// scenario's own or "random" (those take no settings and ignore
// Sampling). nil settings are none; an error is answered 400 bad_policy.
type PolicySettings func(name string, req *rollout.Request) (json.RawMessage, error)

// CallRecorder counts the model calls a policy makes (an LLM policy calls it
// once per server call, with the call's latency and error), so that
// GET /metrics reports them. It is safe for concurrent use.
type CallRecorder interface {
	RecordCall(latency time.Duration, err error)
}
