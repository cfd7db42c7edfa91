package runspec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Resolvers are what turn names into Go values.
type Resolvers struct {
	Scenarios  *env.Registry
	Allocators *credit.Registry // nil: credit.Builtin()
	// Policies makes the policies the scenarios do not own ("llm", a
	// learner), from requests with the spec's Scenario, Params, Seed and
	// the role's policy Name and Settings. For a name it does not know it
	// returns env.ErrUnknownPolicy, and the scenario's own policies and
	// "random" (env.Info.MakePolicy) then resolve it; its other errors
	// refuse the spec. nil: the scenario's own policies and "random" only.
	Policies env.PolicyMaker
	// Parallel names the policies asked concurrently for simultaneous
	// actors (play.Config.ParallelPolicies): slow remote ones such as "llm".
	// Answers are applied in seat order all the same.
	Parallel []string
}

// Resolved is a spec turned into Go values.
type Resolved struct {
	// Spec is the spec with every default explicit: every parameter, every
	// role's policy, the allocators by their canonical names. Its Hash is
	// the run's identity.
	Spec     Spec
	Scenario env.Scenario
	Info     *env.Info
	// Config is the run, without what the spec leaves to the caller
	// (Concurrency, FailFast, Executor, Progress).
	Config     play.Config
	Allocators []trajectories.Allocator
	Format     trajectories.RewardFormat
	// PolicyNames maps every role to its policy's name.
	PolicyNames map[string]string
}

// Output is the output stage of the resolved run, writing to sink.
func (r *Resolved) Output(sink trajectories.Sink) *trajectories.Output {
	return &trajectories.Output{Sink: sink, Allocators: r.Allocators, Format: r.Format, Merge: r.Spec.MergeTurns,
		MergeReward: trajectories.MergeReward(r.Spec.MergeReward)}
}

// Executor is a local executor of the resolved run's episodes: what a
// worker that is handed the run's requests plays them with.
func (r *Resolved) Executor() *env.LocalExecutor {
	return &env.LocalExecutor{Play: r.Config.Play, Drive: r.Config.Drive}
}

// Hash is the hash of the resolved spec.
func (r *Resolved) Hash() string { return r.Spec.Hash() }

// Requests are the run's episode requests, in order (Config.Requests,
// whose seeds are the spec's Seeds when it fixes them).
func (r *Resolved) Requests() []env.Request { return r.Config.Requests() }

// seedsOf is the play.Config.Seeds of fixed seeds sd: every episode plays
// the scenario seed sd.Scenario, and episode i the policy seed
// seeds.Mix(Policy, i) when sd.Policy is set, else seeds.Mix(Scenario, 2,
// its rollout_id).
func seedsOf(sd *Seeds, rolloutIDBase int64) func(i int) (uint64, uint64) {
	if sd == nil {
		return nil
	}
	sd = sd.clone()
	return func(i int) (uint64, uint64) {
		if sd.Policy != nil {
			return sd.Scenario, seeds.Mix(*sd.Policy, uint64(i))
		}
		return sd.Scenario, seeds.Mix(sd.Scenario, 2, uint64(rolloutIDBase+int64(i)))
	}
}

// At is the resolved run placed at other ids and seeds: its spec's
// rollout_id_base, group_index_base and seeds replaced, and its Config's
// ids with them. Nothing else a spec resolves to depends on them (policy
// makers see Seed, which At keeps), so a caller that hands out ids from a
// counter (the rollout service) resolves a request first and places it
// once it passed every check: a refused request takes no ids. Its errors
// are Validate's.
func (r *Resolved) At(rolloutIDBase, groupIndexBase int64, sd *Seeds) (*Resolved, error) {
	n := *r // r.Spec is normalized: so is n.Spec
	n.Spec.RolloutIDBase, n.Spec.GroupIndexBase, n.Spec.Seeds = rolloutIDBase, groupIndexBase, sd.clone()
	if err := n.Spec.validatePlace(); err != nil {
		return nil, err
	}
	n.Config.RolloutIDBase, n.Config.GroupIndexBase = rolloutIDBase, groupIndexBase
	n.Config.Seeds = seedsOf(n.Spec.Seeds, rolloutIDBase)
	return &n, nil
}

// Resolve validates s against the scenario and turns it into a run. Roles
// the spec gives no policy play the scenario's default policy, else
// random (env.Info.DefaultPolicyName). Its errors about the spec are
// *FieldError naming the field.
func (s *Spec) Resolve(r Resolvers) (*Resolved, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	n := s.Normalized()
	if r.Scenarios == nil {
		return nil, errors.New("runspec: Resolve needs a scenario registry")
	}
	sc, err := r.Scenarios.Lookup(n.Scenario)
	if err != nil {
		return nil, &FieldError{Field: "scenario", Err: err}
	}
	info := sc.Info()
	params, err := info.ParseParams(n.Params)
	if err != nil {
		return nil, &FieldError{Field: "params", Err: err}
	}
	n.Params = params.Map()
	emit, err := emitOf(info, &n)
	if err != nil {
		return nil, err
	}
	allocs, err := allocatorsOf(r.Allocators, info, &n)
	if err != nil {
		return nil, err
	}
	if err := checkNeeds(info, emit, allocs); err != nil {
		return nil, err
	}
	if err := checkTreeCredit(n.Tree, allocs); err != nil {
		return nil, err
	}
	n.Allocators = make([]string, 0, len(allocs)) // n may share s's array
	for _, a := range allocs {
		n.Allocators = append(n.Allocators, a.Name())
	}
	format, err := trajectories.ParseRewardFormat(n.RewardFormat)
	if err != nil {
		return nil, &FieldError{Field: "reward_format", Err: err}
	}
	invalid := env.InvalidRule{}
	if n.OnInvalid.Mode == InvalidEnd {
		invalid = env.InvalidRule{Mode: env.InvalidEnd, Penalty: n.OnInvalid.Penalty, Bonus: n.OnInvalid.Bonus}
	}
	policy, policyNames, parallel, err := policiesOf(r, sc, params, &n)
	if err != nil {
		return nil, err
	}
	return &Resolved{
		Spec:     n,
		Scenario: sc,
		Info:     info,
		Config: play.Config{
			Play: env.Play{
				Scenario: sc,
				Params:   params,
				Policy:   policy,
				Limits:   env.Limits{MaxSteps: n.Limits.MaxSteps, MaxTurns: n.Limits.MaxTurns, MaxMessages: n.Limits.MaxMessages},
				Invalid:  invalid,
				Emit:     emit,
			},
			// The one place a run's play description is made from data:
			// every executor, runner and worker embeds it.
			Drive: env.Drive{
				Timeout:          time.Duration(n.Limits.Timeout),
				ParallelPolicies: parallel,
				Tree:             treeOf(n.Tree),
			},
			Episodes:       n.Episodes,
			GroupSize:      n.GroupSize,
			Seed:           n.Seed,
			RolloutIDBase:  n.RolloutIDBase,
			GroupIndexBase: n.GroupIndexBase,
			Seeds:          seedsOf(n.Seeds, n.RolloutIDBase),
		},
		Allocators:  allocs,
		Format:      format,
		PolicyNames: policyNames,
	}, nil
}

// emitOf checks the roles n emits and samples as trees against the
// scenario's, and returns the filter of the emitted ones (nil: all).
// A tree role must be emitted: its candidates would be no samples.
func emitOf(info *env.Info, n *Spec) (env.EmitFilter, error) {
	for i, role := range n.Emit {
		if info.Role(role) == nil {
			return nil, fieldErr(fmt.Sprintf("emit[%d]", i), "scenario %s has no role %q (its roles: %s, or all)", info.Name, role, info.RoleNames())
		}
	}
	var emit env.EmitFilter
	if len(n.Emit) > 0 {
		emit = env.EmitRoles(n.Emit...)
	}
	if n.Tree != nil {
		for i, role := range n.Tree.Roles {
			if info.Role(role) == nil {
				return nil, fieldErr(fmt.Sprintf("tree.roles[%d]", i), "scenario %s has no role %q (its roles: %s)", info.Name, role, info.RoleNames())
			}
			if len(n.Emit) > 0 && !slices.Contains(n.Emit, role) {
				return nil, fieldErr(fmt.Sprintf("tree.roles[%d]", i), "role %q is not emitted: its candidates would be no samples", role)
			}
		}
	}
	return emit, nil
}

// allocatorsOf parses n's allocators from reg (nil: credit.Builtin()),
// resimulating where the scenario offers it, and refuses one given twice:
// dict rewards are keyed by name, so a second would overwrite the first.
func allocatorsOf(reg *credit.Registry, info *env.Info, n *Spec) ([]trajectories.Allocator, error) {
	if reg == nil {
		reg = credit.Builtin()
	}
	resimulate := info.Counterfactual != nil && info.Counterfactual.Resimulate
	allocs := make([]trajectories.Allocator, 0, len(n.Allocators))
	for i, spec := range n.Allocators {
		a, err := reg.ParseDefaultingSim(spec, resimulate)
		if err != nil {
			return nil, &FieldError{Field: fmt.Sprintf("allocators[%d]", i), Err: fmt.Errorf("%q: %w", spec, err)}
		}
		if slices.ContainsFunc(allocs, func(b trajectories.Allocator) bool { return b.Name() == a.Name() }) {
			return nil, fieldErr(fmt.Sprintf("allocators[%d]", i), "%q: allocator %s given twice", spec, a.Name())
		}
		allocs = append(allocs, a)
	}
	return allocs, nil
}

// policiesOf makes the policy of every role: the one n names, through
// r.Policies first, then the scenario's own (and the replay policy where
// the scenario has none of that name), the default for the others, whose
// names it adds to n.Policies. parallel reports whether any of them is
// one that r.Parallel says plays its seats at once.
func policiesOf(r Resolvers, sc env.Scenario, params env.Params, n *Spec) (policy env.PolicyFor, names map[string]string, parallel bool, err error) {
	info := sc.Info()
	for _, role := range slices.Sorted(maps.Keys(n.Policies)) {
		if info.Role(role) == nil {
			return nil, nil, false, fieldErr("policies", "scenario %s has no role %q (its roles: %s)", info.Name, role, info.RoleNames())
		}
	}
	perRole := make(map[string]string, len(n.Policies))
	for role, p := range n.Policies {
		perRole[role] = p.Name
	}
	build := func(req env.PolicyRequest) (agents.Policy, error) {
		req.Settings = n.Policies[req.Role].Settings // none for a role the spec leaves to the default
		if r.Policies != nil {
			pol, err := r.Policies(req)
			switch {
			case err == nil && pol == nil:
				return nil, fmt.Errorf("policy %q: the policy maker returned no policy", req.Name)
			case err == nil:
				parallel = parallel || slices.Contains(r.Parallel, req.Name)
				return pol, nil
			case !errors.Is(err, env.ErrUnknownPolicy):
				return nil, fmt.Errorf("policy %q: %w", req.Name, err)
			}
		}
		if _, own := info.Policies[req.Name]; req.Name == ReplayPolicy && !own {
			return replayOf(req.Settings, func(name string) (agents.Policy, error) {
				then := req
				then.Name, then.Settings = name, nil
				return info.MakePolicy(then)
			})
		}
		return info.MakePolicy(req)
	}
	policy, names, err = info.AssignPolicies(env.PolicyRequest{Scenario: sc, Params: params, Seed: n.Seed}, perRole, build)
	if err != nil {
		return nil, nil, false, &FieldError{Field: "policies", Err: err}
	}
	for role, name := range names {
		if _, ok := n.Policies[role]; !ok {
			n.Policies[role] = Policy{Name: name}
		}
	}
	return policy, names, parallel, nil
}

// checkNeeds refuses, before any episode runs, allocators that need what
// the scenario does not offer: per-agent scores it may lack are found at the
// first group, but absence and null actions are declared up front.
func checkNeeds(info *env.Info, emit env.EmitFilter, allocators []trajectories.Allocator) error {
	cf := info.Counterfactual
	for i, a := range allocators {
		field := fmt.Sprintf("allocators[%d]", i)
		needs := credit.NeedsOf(a)
		if needs.Absent && (cf == nil || !cf.AbsentOK) {
			return fieldErr(field, "%s: scenario %s does not declare what an absent agent means", a.Name(), info.Name)
		}
		if !needs.Null {
			continue
		}
		for _, r := range info.Roles {
			if emit != nil && !emit(env.Seat{Role: r.Name}) {
				continue // its turns get no reward
			}
			if !cf.HasNullAction(r.Name) {
				return fieldErr(field, "%s: scenario %s declares no null action for role %q (emit only other roles)", a.Name(), info.Name, r.Name)
			}
		}
	}
	return nil
}

// checkTreeCredit refuses, before any episode runs, a tree-sampled run's
// allocators that cannot credit a candidate (trajectories.TreeRefused).
func checkTreeCredit(tree *Tree, allocators []trajectories.Allocator) error {
	if tree == nil {
		return nil
	}
	for i, a := range allocators {
		if trajectories.TreeCreditOf(a) == trajectories.TreeRefused {
			return fieldErr(fmt.Sprintf("allocators[%d]", i), "%s: %v: its values depend on other episodes than a candidate's own continuation (use at-grpo or magrpo, which compare a turn's candidates)", a.Name(), trajectories.ErrTreeCredit)
		}
	}
	return nil
}

// InvalidOf is the spec's form of an invalid-answer rule.
func InvalidOf(rule env.InvalidRule) Invalid {
	if rule.Mode == env.InvalidPass {
		return Invalid{Mode: InvalidPass}
	}
	return Invalid{Mode: InvalidEnd, Penalty: rule.Penalty, Bonus: rule.Bonus}
}

// LimitsOf is the spec's form of episode limits and the wall-time limit
// of an episode's driver.
func LimitsOf(l env.Limits, timeout time.Duration) Limits {
	return Limits{MaxSteps: l.MaxSteps, MaxTurns: l.MaxTurns, MaxMessages: l.MaxMessages, Timeout: Duration(timeout)}
}

// Named is the spec's policies of a role -> name map (policies without
// settings).
func Named(names map[string]string) map[string]Policy {
	out := make(map[string]Policy, len(names))
	for role, name := range names {
		out[role] = Policy{Name: strings.TrimSpace(name)}
	}
	return out
}

// treeOf is a spec's tree sampling as a run plays it.
func treeOf(t *Tree) *episode.Tree {
	if t == nil {
		return nil
	}
	return &episode.Tree{K: t.K, Alpha: t.Alpha, Joint: t.Joint, Roles: slices.Clone(t.Roles)}
}

// Unfrozen is the emit list of a run whose frozen roles are played and
// recorded but write no samples: emit (empty: every role of info) less
// frozen, in info's order when emit is empty. A role both in emit and
// frozen is refused, as is freezing every role (a run of no samples); the
// error names the role.
func Unfrozen(info *env.Info, emit, frozen []string) ([]string, error) {
	if len(frozen) == 0 {
		return emit, nil
	}
	for _, r := range frozen {
		if slices.Contains(emit, r) {
			return nil, fmt.Errorf("role %s is frozen, and emitted too: a frozen role's turns become no samples", r)
		}
	}
	if len(emit) == 0 {
		for _, r := range info.Roles {
			if !slices.Contains(frozen, r.Name) {
				emit = append(emit, r.Name)
			}
		}
	}
	if len(emit) == 0 {
		return nil, fmt.Errorf("every role is frozen (%s): the run would write no samples", strings.Join(frozen, ", "))
	}
	return emit, nil
}
