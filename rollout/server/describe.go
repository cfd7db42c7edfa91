package server

import (
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// describeScenarios is the GET /v1/scenarios answer: every scenario of reg,
// by name.
func describeScenarios(reg *env.Registry) rollout.ScenarioList {
	out := rollout.ScenarioList{Scenarios: []rollout.Scenario{}}
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		if err != nil {
			continue // Names lists only what Lookup finds
		}
		info := sc.Info()
		d := rollout.Scenario{
			Name:          info.Name,
			Summary:       info.Summary,
			Doc:           info.Doc,
			Schedule:      info.Schedule.String(),
			Roles:         make([]rollout.Role, len(info.Roles)),
			Params:        make([]rollout.Param, len(info.Params)),
			Policies:      info.PolicyNames(),
			DefaultPolicy: info.DefaultPolicyName(),
		}
		for i, r := range info.Roles {
			d.Roles[i] = rollout.Role{Name: r.Name, Doc: r.Doc}
		}
		for i, p := range info.Params {
			rp := rollout.Param{Name: p.Name, Kind: p.Kind.String(), Default: p.Default, Doc: p.Doc, Choices: p.Choices}
			if p.Bounded {
				lo, hi := p.Min, p.Max
				rp.Min, rp.Max = &lo, &hi
			}
			d.Params[i] = rp
		}
		out.Scenarios = append(out.Scenarios, d)
	}
	return out
}

// describeAllocators is the GET /v1/allocators answer.
func describeAllocators(reg *credit.Registry) rollout.AllocatorList {
	out := rollout.AllocatorList{Allocators: []rollout.Allocator{}}
	for _, name := range reg.Names() {
		e, ok := reg.Entry(name)
		if !ok {
			continue
		}
		a := rollout.Allocator{Name: e.Name, Doc: e.Doc, Params: make([]rollout.AllocatorParam, len(e.Params))}
		for i, p := range e.Params {
			a.Params[i] = rollout.AllocatorParam{Name: p.Name, Default: p.Default, Doc: p.Doc}
		}
		out.Allocators = append(out.Allocators, a)
	}
	return out
}
