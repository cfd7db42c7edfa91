package server

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
)

// PolicyRequest is what a PolicyFactory gets for one rollout request: the
// scenario, its validated parameters, the request itself (Policy, Policies,
// Sampling and SessionID are the fields meant for policies), and the
// recorder that counts model calls into the service's metrics.
type PolicyRequest struct {
	// Scenario is the scenario itself: policies that fit its optional
	// interfaces (env.StructuredActions) need more than its Info.
	Scenario env.Scenario
	Info     *env.Info
	Params   env.Params
	Request  *rollout.Request
	Calls    CallRecorder
}

// PolicyFactory builds the policies of one request's episodes. The server
// calls it once per request, after the scenario and parameters are
// validated; the env.PolicyFor it returns serves every episode of the
// request, concurrently, so the policies it hands out must be safe for
// concurrent use. An error is answered as 400 bad_policy with its text, so
// it should name the bad policy or role and what is allowed.
type PolicyFactory func(req PolicyRequest) (env.PolicyFor, error)

// CallRecorder counts the model calls a policy makes (an LLM policy calls it
// once per server call, with the call's latency and error), so that
// GET /metrics reports them. It is safe for concurrent use.
type CallRecorder interface {
	RecordCall(latency time.Duration, err error)
}

// PolicyMaker builds the policy called name for one role. It returns
// ok=false for a name it does not know, so that the next maker is asked. An
// LLM integration is a PolicyMaker that knows its own names ("llm") and
// reads req.Request.Sampling.
type PolicyMaker func(req PolicyRequest, role, name string) (p agents.Policy, ok bool, err error)

// Errors of policy resolution, wrapped in the errors a factory returns.
var (
	ErrUnknownPolicy = env.ErrUnknownPolicy
	ErrUnknownRole   = env.ErrUnknownRole
)

// Named returns a PolicyFactory that resolves each role's policy name
// (Request.Policies[role], else Request.Policy, else the scenario's default
// policy, else "random") and builds it with the first of makers that knows
// the name; names no maker knows are looked up among the scenario's own
// policies and "random". Each role's policy is built once per request.
func Named(makers ...PolicyMaker) PolicyFactory {
	makers = slices.Clone(makers)
	return func(req PolicyRequest) (env.PolicyFor, error) {
		info, r := req.Info, req.Request
		perRole := make(map[string]string, len(r.Policies))
		for role, name := range r.Policies {
			perRole[role] = strings.TrimSpace(name)
		}
		policy, _, err := info.AssignPolicies(req.Params, perRole, strings.TrimSpace(r.Policy), func(role, name string) (agents.Policy, error) {
			return makeNamed(req, makers, role, name)
		})
		return policy, err
	}
}

// ScriptedPolicies is the default PolicyFactory: the scenario's own named
// policies and "random". It ignores Sampling.
func ScriptedPolicies() PolicyFactory { return Named() }

func makeNamed(req PolicyRequest, makers []PolicyMaker, role, name string) (agents.Policy, error) {
	for _, mk := range makers {
		p, ok, err := mk(req, role, name)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", name, err)
		}
		if ok {
			if p == nil {
				return nil, fmt.Errorf("policy %q: the policy maker returned no policy", name)
			}
			return p, nil
		}
	}
	return req.Info.MakePolicy(req.Params, role, name)
}
