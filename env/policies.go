package env

import (
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

// MakePolicy builds the policy called name for role: one of the scenario's
// own (Policies) or "random". An unknown name wraps ErrUnknownPolicy and
// lists the known ones.
func (in *Info) MakePolicy(p Params, role, name string) (agents.Policy, error) {
	if mk, ok := in.Policies[name]; ok {
		pol, err := mk(p, role)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", name, err)
		}
		if pol == nil {
			return nil, fmt.Errorf("policy %q: the scenario's policy maker returned no policy", name)
		}
		return pol, nil
	}
	if name == "random" {
		return agents.Random(), nil
	}
	return nil, fmt.Errorf("%w %q (scenario %s has %s)", ErrUnknownPolicy, name, in.Name, strings.Join(in.PolicyNames(), ", "))
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

// PolicyMakerFunc builds the policy called name for role, or returns
// ErrUnknownPolicy when it does not know the name.
type PolicyMakerFunc func(role, name string) (agents.Policy, error)

// AssignPolicies gives every role a policy: perRole[role], else fallback,
// else the scenario's DefaultPolicy, else "random". Each role's policy is
// made once, by build (nil means MakePolicy with p), so the PolicyFor it
// returns hands one policy value to every seat of a role and is safe for
// concurrent use. It also returns each role's policy name. A role the
// scenario does not have wraps ErrUnknownRole.
func (in *Info) AssignPolicies(p Params, perRole map[string]string, fallback string, build PolicyMakerFunc) (PolicyFor, map[string]string, error) {
	for _, role := range slices.Sorted(maps.Keys(perRole)) {
		if in.Role(role) == nil {
			return nil, nil, fmt.Errorf("%w %q: scenario %s has %s", ErrUnknownRole, role, in.Name, in.RoleNames())
		}
	}
	if fallback == "" {
		fallback = in.DefaultPolicyName()
	}
	if build == nil {
		build = func(role, name string) (agents.Policy, error) { return in.MakePolicy(p, role, name) }
	}
	byRole := make(map[string]agents.Policy, len(in.Roles))
	names := make(map[string]string, len(in.Roles))
	for _, r := range in.Roles {
		name, ok := perRole[r.Name]
		if !ok {
			name = fallback
		}
		pol, err := build(r.Name, name)
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
