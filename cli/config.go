package cli

import (
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/llm"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// runFlags are the raw values of troupe run's flags.
type runFlags struct {
	episodes      int
	concurrency   int
	seed          uint64
	out           string
	episodesOut   string // --episodes-out: the episode records; "" for none
	params        []string
	allocators    []string
	rewardFormat  string
	groupSize     int
	layout        string
	policies      []string
	emit          []string
	maxSteps      int
	maxTurns      int
	maxMessages   int
	timeout       time.Duration
	failFast      bool
	rolloutIDBase int64
	quiet         bool
	onInvalid     string
	llm           llm.Config // the "llm" policy's server and sampling
	nats          natsrun.Flags
	llmEnvErr     error // a bad TROUPE_LLM_* variable, reported if "llm" is used
}

// plan is a validated run: everything env.Run needs, and where the samples
// go.
type plan struct {
	cfg        env.RunConfig
	allocators []trajectories.Allocator
	format     trajectories.RewardFormat
	layout     trajectories.Layout
	out        string            // "-" for stdout
	episodes   string            // --episodes-out, "" for none
	policies   map[string]string // role -> policy name, for the summary
	closers    []func()          // what the run must close when it ends (LLM clients)
	emit       []string          // the roles whose turns are emitted; nil: all
	llm        *llmPolicies      // the run's LLM policy, when a role plays "llm"
}

// stdoutPath is the --out value that sends samples to standard output.
const stdoutPath = "-"

// defaultOut is where a run writes when --out is not given.
func defaultOut(scenario string) string { return "troupe-" + scenario + ".jsonl" }

// buildPlan checks every flag against the scenario and turns them into a
// run. Every error is a *UsageError naming the flag and the bad value, and
// where it helps, the values that are allowed.
func buildPlan(reg *env.Registry, allocs *credit.Registry, name string, f *runFlags) (*plan, error) {
	sc, err := reg.Lookup(name)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	info := sc.Info()
	for _, c := range []struct {
		flag string
		v    int64
		min  int64
	}{
		{"--episodes", int64(f.episodes), 1},
		{"--concurrency", int64(f.concurrency), 1},
		{"--group-size", int64(f.groupSize), 1},
		{"--max-steps", int64(f.maxSteps), 0},
		{"--max-turns", int64(f.maxTurns), 0},
		{"--max-messages", int64(f.maxMessages), 0},
		{"--rollout-id-base", f.rolloutIDBase, 0},
	} {
		if c.v < c.min {
			return nil, usagef("%s %d: must be at least %d", c.flag, c.v, c.min)
		}
	}
	if f.timeout < 0 {
		return nil, usagef("--timeout %v: must not be negative", f.timeout)
	}
	if f.out == "" {
		return nil, usagef("--out is empty: give a file path, or - for standard output")
	}

	given, err := env.ParseAssignments(f.params)
	if err != nil {
		return nil, usagef("--param: %w", err)
	}
	params, err := info.ParseParams(given)
	if err != nil {
		return nil, usagef("--param: %w", err)
	}
	invalid, err := parseInvalidRule(f.onInvalid)
	if err != nil {
		return nil, err
	}
	emit, emitRoles, err := buildEmit(info, f.emit)
	if err != nil {
		return nil, err
	}
	allocators, err := buildAllocators(allocs, f.allocators, info.Counterfactual != nil && info.Counterfactual.Resimulate)
	if err != nil {
		return nil, err
	}
	if err := checkNeeds(info, emit, allocators); err != nil {
		return nil, err
	}
	format, err := trajectories.ParseRewardFormat(f.rewardFormat)
	if err != nil {
		return nil, usagef("--reward-format: %w", err)
	}
	var layout trajectories.Layout
	switch f.layout {
	case "flat":
		layout = trajectories.Flat
	case "nested":
		layout = trajectories.Nested
	default:
		return nil, usagef("--layout %q: want flat (one sample per line) or nested (one episode per line)", f.layout)
	}
	if f.episodesOut != "" && f.episodesOut == f.out {
		return nil, usagef("--episodes-out %q: that is --out too; give the records a file of their own", f.episodesOut)
	}
	// Policies last: an LLM policy opens a client, which nothing after it
	// may fail to close.
	llmPolicy := func() (*llmPolicies, error) { return newLLMPolicies(sc, params, f) }
	policy, names, llms, err := buildPolicies(info, params, f.policies, llmPolicy)
	if err != nil {
		return nil, err
	}
	var closers []func()
	if llms != nil {
		closers = append(closers, llms.client.Close)
	}
	return &plan{
		cfg: env.RunConfig{
			Scenario: sc,
			Params:   params,
			Policy:   policy,
			Invalid:  invalid,
			// LLM calls of simultaneous actors overlap; answers are still
			// applied in seat order.
			ParallelPolicies: llms != nil,
			Limits: env.Limits{
				MaxSteps:    f.maxSteps,
				MaxTurns:    f.maxTurns,
				MaxMessages: f.maxMessages,
				Timeout:     f.timeout,
			},
			Emit:          emit,
			Episodes:      f.episodes,
			GroupSize:     f.groupSize,
			Concurrency:   f.concurrency,
			Seed:          f.seed,
			RolloutIDBase: f.rolloutIDBase,
			FailFast:      f.failFast,
		},
		allocators: allocators,
		format:     format,
		layout:     layout,
		out:        f.out,
		episodes:   f.episodesOut,
		policies:   names,
		closers:    closers,
		emit:       emitRoles,
		llm:        llms,
	}, nil
}

// buildPolicies reads --policy values: "NAME" plays NAME in every role,
// "ROLE=NAME" in one role (and wins over a bare NAME). Roles named by
// neither play the scenario's default policy, or random. It returns the
// policy of each seat and, for the summary, each role's policy name.
//
// The name "llm" is available in every scenario: an LLM policy on the
// server the --llm-* flags (or TROUPE_LLM_* variables) name, made by
// newLLM the first time a role asks for it.
func buildPolicies(info *env.Info, params env.Params, specs []string, newLLM func() (*llmPolicies, error)) (env.PolicyFor, map[string]string, *llmPolicies, error) {
	all := ""
	perRole := map[string]string{}
	for _, spec := range specs {
		role, name, scoped := strings.Cut(spec, "=")
		role, name = strings.TrimSpace(role), strings.TrimSpace(name)
		if !scoped {
			name = role
		}
		if name == "" {
			return nil, nil, nil, usagef("--policy %q: empty policy name (policies of %s: %s)", spec, info.Name, strings.Join(info.PolicyNames(), ", "))
		}
		if name != llmPolicyName && !slices.Contains(info.PolicyNames(), name) {
			return nil, nil, nil, usagef("--policy %q: scenario %s has no policy %q (it has %s, and llm)", spec, info.Name, name, strings.Join(info.PolicyNames(), ", "))
		}
		if !scoped {
			if all != "" {
				return nil, nil, nil, usagef("--policy %q: a policy for every role was already given (%q); use ROLE=NAME for one role", spec, all)
			}
			all = name
			continue
		}
		if info.Role(role) == nil {
			return nil, nil, nil, usagef("--policy %q: scenario %s has no role %q (its roles: %s)", spec, info.Name, role, info.RoleNames())
		}
		if prev, dup := perRole[role]; dup {
			return nil, nil, nil, usagef("--policy %q: role %s was already given policy %q", spec, role, prev)
		}
		perRole[role] = name
	}
	var llms *llmPolicies
	build := func(role, name string) (agents.Policy, error) {
		if name != llmPolicyName {
			return info.MakePolicy(params, role, name)
		}
		if llms == nil {
			var err error
			if llms, err = newLLM(); err != nil {
				return nil, err
			}
		}
		return llms.policy, nil
	}
	policy, names, err := info.AssignPolicies(params, perRole, all, build)
	if err != nil {
		if llms != nil {
			llms.client.Close()
		}
		return nil, nil, nil, usagef("--policy: %w", err)
	}
	return policy, names, llms, nil
}

// buildEmit reads --emit values: "all", or role names (repeated or comma
// separated) whose turns alone become samples.
func buildEmit(info *env.Info, specs []string) (env.EmitFilter, []string, error) {
	var roles []string
	sawAll := false
	for _, spec := range specs {
		for part := range strings.SplitSeq(spec, ",") {
			part = strings.TrimSpace(part)
			switch {
			case part == "all":
				sawAll = true
			case part == "":
				return nil, nil, usagef("--emit %q: empty role name (roles of %s: %s)", spec, info.Name, info.RoleNames())
			case info.Role(part) == nil:
				return nil, nil, usagef("--emit %q: scenario %s has no role %q (its roles: %s, or all)", spec, info.Name, part, info.RoleNames())
			case !slices.Contains(roles, part):
				roles = append(roles, part)
			}
		}
	}
	if sawAll && len(roles) > 0 {
		return nil, nil, usagef("--emit: give either all or a list of roles, not both")
	}
	if len(roles) == 0 {
		return nil, nil, nil
	}
	return env.EmitRoles(roles...), roles, nil
}

// checkNeeds refuses, before any episode runs, allocators that need what
// the scenario does not offer: per-agent scores it may lack are found at the
// first group, but absence and null actions are declared up front.
func checkNeeds(info *env.Info, emit env.EmitFilter, allocators []trajectories.Allocator) error {
	cf := info.Counterfactual
	for _, a := range allocators {
		needs := credit.NeedsOf(a)
		if needs.Absent && (cf == nil || !cf.AbsentOK) {
			return usagef("--allocator %s: scenario %s does not declare what an absent agent means", a.Name(), info.Name)
		}
		if !needs.Null {
			continue
		}
		for _, r := range info.Roles {
			if emit != nil && !emit(env.Seat{Role: r.Name}) {
				continue // its turns get no reward
			}
			if !cf.HasNullAction(r.Name) {
				return usagef("--allocator %s: scenario %s declares no null action for role %q (emit only other roles with --emit)", a.Name(), info.Name, r.Name)
			}
		}
	}
	return nil
}

// buildAllocators reads --allocator values. Each value is one allocator
// spec or a comma-separated list of them. A spec's own parameters are comma
// separated too ("rae:alpha=0.9,beta=1"), so a piece that reads key=value
// (no ':' or '(' before its '=') continues the previous spec; commas inside
// parentheses ("discount:of=rloo(key=role),gamma=0.9") never split.
//
// resimulate is the scenario's declared counterfactual mode: counterfactual
// allocators that do not choose one take it (credit.ParseDefaultingSim).
func buildAllocators(reg *credit.Registry, values []string, resimulate bool) ([]trajectories.Allocator, error) {
	var specs []string
	for _, v := range values {
		specs = append(specs, credit.SplitSpecs(v)...)
	}
	if len(specs) == 0 {
		return nil, usagef("--allocator: none given (known: %s)", strings.Join(reg.Names(), ", "))
	}
	out := make([]trajectories.Allocator, 0, len(specs))
	seen := map[string]bool{}
	for _, spec := range specs {
		if spec == "" {
			return nil, usagef("--allocator: empty allocator name (known: %s)", strings.Join(reg.Names(), ", "))
		}
		a, err := reg.ParseDefaultingSim(spec, resimulate)
		if err != nil {
			return nil, usagef("--allocator %q: %w", spec, err)
		}
		if seen[a.Name()] {
			// Dict rewards are keyed by name: a second one would overwrite
			// the first.
			return nil, usagef("--allocator %q: allocator %s given twice", spec, a.Name())
		}
		seen[a.Name()] = true
		out = append(out, a)
	}
	return out, nil
}

// llmPolicyName is the policy name that plays an LLM in any scenario.
const llmPolicyName = "llm"

// llmPolicies is the LLM policy of a run and the client it shares with
// every role that plays it.
type llmPolicies struct {
	client *llm.Client
	policy *llm.Policy
}

// newLLMPolicies connects the "llm" policy to the server of the --llm-*
// flags, fitted to the scenario (its rules in the system prompt, its
// structured answers' schemas).
func newLLMPolicies(sc env.Scenario, params env.Params, f *runFlags) (*llmPolicies, error) {
	if f.llmEnvErr != nil {
		return nil, f.llmEnvErr
	}
	cfg := f.llm
	cfg.Seed = f.seed // reproducible retry jitter
	client, err := llm.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	policy, err := llm.NewPolicy(client, cfg, llm.ForScenario(sc, params)...)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &llmPolicies{client: client, policy: policy}, nil
}

// parseInvalidRule reads --on-invalid: what an invalid answer (an LLM's
// unparseable or rule-breaking output, after its re-asks) does.
func parseInvalidRule(s string) (env.InvalidRule, error) {
	switch s {
	case "pass", "":
		return env.InvalidRule{}, nil
	case "forfeit":
		return env.Forfeit, nil
	case "penalty":
		return env.SpiralPenalty, nil
	}
	return env.InvalidRule{}, usagef("--on-invalid %q: want pass (the scenario's rules judge the move), forfeit (the offender scores -1, the others +1, the episode ends) or penalty (SPIRAL's -1.5 and +0.5)", s)
}
