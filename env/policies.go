package env

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
)

// ErrUnknownPolicy is returned for a policy name a scenario does not offer.
var ErrUnknownPolicy = errors.New("unknown policy")

// ErrUnknownRole is returned when a policy is assigned to a role the
// scenario does not have.
var ErrUnknownRole = errors.New("unknown role")

// PolicyRequest asks a PolicyMaker for one role's policy in a run: the
// policy called Name, with Settings, for Role of Scenario played with
// Params. It is the one request every maker of policies gets: a
// scenario's own (Info.Policies), a run's (runspec.Resolvers.Policies),
// a rollout service's, a league's and a distributed worker's. What only
// one kind of maker needs (a service's call recorder, a worker's LLM
// endpoint) is not in it: the maker's own closure holds it.
type PolicyRequest struct {
	// Scenario is the scenario played: a policy may need more than its
	// Info (its StructuredActions, to constrain an LLM's answers).
	Scenario Scenario
	// Params are the run's validated parameters.
	Params Params
	// Role is the role whose seats the policy plays.
	Role string
	// Name is the policy's name: one of the scenario's own, "random", or
	// one a maker above the scenario knows ("llm", a league's players).
	Name string
	// Settings are the policy's settings, a JSON object as the run spec
	// gives them (an LLM's model and sampling); nil: none. A maker that
	// cannot honour settings refuses them rather than ignore them.
	Settings json.RawMessage
	// Seed is the run seed: it roots what a policy draws once per run
	// (an LLM client's retry jitter). Episodes' policy seeds are not it:
	// each observation carries its own.
	Seed uint64
}

// PolicyMaker makes the policy a request names. It returns an error
// wrapping ErrUnknownPolicy for a name it does not know, so that a caller
// that holds several makers asks the next one (a run asks its own makers
// before the scenario's policies and "random"); any other error is the
// policy's, reported as is. The policy it returns plays every seat of the
// role in every episode of the run, concurrently: it must be safe for
// concurrent use. It never returns a nil policy without an error.
type PolicyMaker func(req PolicyRequest) (agents.Policy, error)

// MakePolicy is the PolicyMaker of the scenario's own policies (Policies)
// and "random", for req.Role. They take no settings: a request with some
// is refused, not played without them. An unknown name wraps
// ErrUnknownPolicy and lists the known ones.
func (in *Info) MakePolicy(req PolicyRequest) (agents.Policy, error) {
	mk, own := in.Policies[req.Name]
	if !own && req.Name != "random" {
		return nil, fmt.Errorf("%w %q (scenario %s has %s)%s", ErrUnknownPolicy, req.Name, in.Name, strings.Join(in.PolicyNames(), ", "), didYouMean(req.Name, in.PolicyNames()))
	}
	if len(req.Settings) > 0 {
		return nil, fmt.Errorf("policy %q takes no settings: it cannot honour %s; leave them out, or name a policy that takes settings (llm)", req.Name, req.Settings)
	}
	if !own {
		return agents.Random(), nil
	}
	pol, err := mk(req)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", req.Name, err)
	}
	if pol == nil {
		return nil, fmt.Errorf("policy %q: the scenario's policy maker returned no policy", req.Name)
	}
	return pol, nil
}

// DefaultPolicyName is the policy a role plays when a run names none for
// it: the scenario's DefaultPolicy, else "random". It is the one place
// that rule lives; runs resolve their policies through AssignPolicies or
// package runspec, which use it.
func (in *Info) DefaultPolicyName() string {
	if in.DefaultPolicy != "" {
		return in.DefaultPolicy
	}
	return "random"
}

// AssignPolicies gives every role a policy: the one called perRole[role],
// else req.Name, else the scenario's DefaultPolicy, else "random". Each
// role's policy is made once, by build (nil: MakePolicy) from req with the
// role's Role and Name (its Scenario, Params, Settings and Seed are req's;
// a build that knows each role's settings sets them), so the PolicyFor it
// returns hands one policy value to every seat of a role and is safe for
// concurrent use. It also returns each role's policy name. A role the
// scenario does not have wraps ErrUnknownRole.
func (in *Info) AssignPolicies(req PolicyRequest, perRole map[string]string, build PolicyMaker) (PolicyFor, map[string]string, error) {
	for _, role := range slices.Sorted(maps.Keys(perRole)) {
		if in.Role(role) == nil {
			return nil, nil, fmt.Errorf("%w %q: scenario %s has %s%s", ErrUnknownRole, role, in.Name, in.RoleNames(), didYouMean(role, strings.Split(in.RoleNames(), ", ")))
		}
	}
	fallback := req.Name
	if fallback == "" {
		fallback = in.DefaultPolicyName()
	}
	if build == nil {
		build = in.MakePolicy
	}
	byRole := make(map[string]agents.Policy, len(in.Roles))
	names := make(map[string]string, len(in.Roles))
	for _, r := range in.Roles {
		name, ok := perRole[r.Name]
		if !ok {
			name = fallback
		}
		rreq := req
		rreq.Role, rreq.Name = r.Name, name
		pol, err := build(rreq)
		if err != nil {
			return nil, nil, fmt.Errorf("scenario %s role %s: %w", in.Name, r.Name, err)
		}
		if pol == nil {
			return nil, nil, fmt.Errorf("scenario %s role %s: policy %q: no policy was made", in.Name, r.Name, name)
		}
		byRole[r.Name], names[r.Name] = pol, name
	}
	return ByRole(byRole, nil), names, nil
}

// ByRole plays policies[seat.Role] in each seat, and fallback in the seats
// of roles the map leaves out (nil fallback: none, which the engine reports
// as a seat without a policy). The map is copied, so the PolicyFor is safe
// for concurrent use and later changes to policies do not reach it.
//
//	env.ByRole(map[string]agents.Policy{"x": minimax}, agents.Random())
func ByRole(policies map[string]agents.Policy, fallback agents.Policy) PolicyFor {
	if len(policies) > 8 {
		byRole := maps.Clone(policies)
		return func(s Seat) agents.Policy {
			if p, ok := byRole[s.Role]; ok {
				return p
			}
			return fallback
		}
	}
	// A few roles are scanned: the engine asks once per seat and episode,
	// and comparing a seat's role with the declared name, usually the same
	// string, is cheaper than hashing it.
	roles := slices.Sorted(maps.Keys(policies))
	pols := make([]agents.Policy, len(roles))
	for i, r := range roles {
		pols[i] = policies[r]
	}
	return func(s Seat) agents.Policy {
		for i, r := range roles {
			if r == s.Role {
				return pols[i]
			}
		}
		return fallback
	}
}

// RoleNames lists the scenario's roles in declaration order, comma
// separated, for messages.
func (in *Info) RoleNames() string {
	names := make([]string, len(in.Roles))
	for i, r := range in.Roles {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}
