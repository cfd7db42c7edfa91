package cli

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// runFlags are the raw values of troupe run's flags.
type runFlags struct {
	// tree sampling: --tree K, --tree-alpha, --tree-joint, --tree-roles
	tree      int
	treeAlpha float64
	treeJoint bool
	treeRoles []string

	episodes        int
	concurrency     int
	seed            uint64
	out             string
	episodesOut     string // --episodes-out: the episode records; "" for none
	params          []string
	allocators      []string
	rewardFormat    string
	groupSize       int
	layout          string
	mergeTurns      bool
	policies        []string
	emit            []string
	maxSteps        int
	maxTurns        int
	maxMessages     int
	timeout         time.Duration
	failFast        bool
	maxFailures     int // --max-failures: aborted and failed episodes a run may have and exit 0; -1: any
	rolloutIDBase   int64
	quiet           bool
	onInvalid       string
	llm             llm.Config // the "llm" policy's default server and sampling
	llmEndpoints    []string   // --llm-endpoint: NAME=URL,... defines an endpoint, NAME names the default one
	roleLLM         []string   // --role-llm ROLE=key=value,...: a role's endpoint, model, sampling, frozen
	nats            natsrun.Flags
	llmEnvErr       error         // a bad TROUPE_LLM_* variable, reported if "llm" is used
	specFile        string        // --spec: the run spec file; "" runs the flags
	printSpec       bool          // --print-spec: print the run's spec and exit
	resume          bool          // --resume: continue the run --out holds
	checkpointEvery time.Duration // --checkpoint-every
	lookupEnv       func(string) (string, bool)
	tokenInGiven    bool   // --llm-token-in or TROUPE_LLM_TOKEN_IN given (tokenInGiven)
	mergeReward     string // --merge-reward
	eps             *llmEndpoints
}

// endpoints are the run's LLM endpoints, read once: the --llm-* flags and
// --llm-endpoint values. A bad TROUPE_LLM_* variable is reported here,
// when a role plays llm.
func (f *runFlags) endpoints() (*llmEndpoints, error) {
	if f.llmEnvErr != nil {
		return nil, f.llmEnvErr
	}
	if f.eps == nil {
		eps, err := parseEndpoints(f.llm, f.llmEndpoints, f.lookupEnv, f.tokenInGiven)
		if err != nil {
			return nil, err
		}
		f.eps = eps
	}
	return f.eps, nil
}

// plan is a validated run: everything play.Run needs, and where the samples
// go.
type plan struct {
	cfg        play.Config
	spec       *runspec.Resolved // the run spec it was resolved from
	allocators []trajectories.Allocator
	format     trajectories.RewardFormat
	layout     trajectories.Layout
	merge      bool              // --merge-turns
	out        string            // "-" for stdout
	episodes   string            // --episodes-out, "" for none
	policies   map[string]string // role -> policy name, for the summary
	llm        *llmPool          // the run's LLM clients and policies, when a role plays "llm"
}

// stdoutPath is the --out value that sends samples to standard output.
const stdoutPath = "-"

// defaultOut is where a run writes when --out is not given.
func defaultOut(scenario string) string { return "troupe-" + scenario + ".jsonl" }

// buildPlan checks every flag against the scenario and turns them into a
// run: the flags become a run spec (specOf), which the resolver turns into
// the run (planOf). Every error is a *UsageError naming the flag and the
// bad value, and where it helps, the values that are allowed.
func buildPlan(reg *env.Registry, allocs *credit.Registry, name string, f *runFlags) (*plan, error) {
	spec, err := specOf(reg, allocs, name, f)
	if err != nil {
		return nil, err
	}
	return planOf(reg, allocs, spec, f, "")
}

// specOf reads the flags that describe the run into a run spec, checking
// their syntax and the names they give against the scenario.
func specOf(reg *env.Registry, allocs *credit.Registry, name string, f *runFlags) (*runspec.Spec, error) {
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
	given, err := env.ParseAssignments(f.params)
	if err != nil {
		return nil, usagef("--param: %w", err)
	}
	invalid, err := parseInvalidRule(f.onInvalid)
	if err != nil {
		return nil, err
	}
	roles, err := roleLLMsOf(info, f.roleLLM)
	if err != nil {
		return nil, err
	}
	emitRoles, err := buildEmit(info, f.emit)
	if err != nil {
		return nil, err
	}
	if emitRoles, err = unfrozen(info, emitRoles, roles); err != nil {
		return nil, err
	}
	allocators, err := splitAllocators(allocs, f.allocators)
	if err != nil {
		return nil, err
	}
	if _, err := trajectories.ParseRewardFormat(f.rewardFormat); err != nil {
		return nil, usagef("--reward-format: %w", err)
	}
	policies, err := policiesOf(info, f.policies, settingsOf(&f.llm), roles, f.endpoints)
	if err != nil {
		return nil, err
	}
	var mergeReward string
	if f.mergeTurns {
		if _, err := trajectories.ParseMergeReward(f.mergeReward); err != nil || f.mergeReward == "" {
			return nil, usagef("--merge-reward %q: want mean, sum or last", f.mergeReward)
		}
		mergeReward = f.mergeReward
	}
	var tree *runspec.Tree
	switch {
	case f.tree == 1 || f.tree < 0:
		return nil, usagef("--tree %d: want at least 2 candidates per turn (0: no tree sampling)", f.tree)
	case f.tree >= 2:
		roles, err := splitRoles(info, "--tree-roles", f.treeRoles)
		if err != nil {
			return nil, err
		}
		tree = &runspec.Tree{K: f.tree, Alpha: f.treeAlpha, Joint: f.treeJoint, Roles: roles}
	case f.treeJoint || len(f.treeRoles) > 0:
		return nil, usagef("--tree-joint and --tree-roles need --tree K")
	}
	return &runspec.Spec{
		Tree:      tree,
		Scenario:  info.Name,
		Params:    given,
		Policies:  policies,
		Emit:      emitRoles,
		OnInvalid: runspec.InvalidOf(invalid),
		Limits: runspec.LimitsOf(env.Limits{
			MaxSteps:    f.maxSteps,
			MaxTurns:    f.maxTurns,
			MaxMessages: f.maxMessages,
		}, f.timeout),
		Allocators:    allocators,
		RewardFormat:  f.rewardFormat,
		Episodes:      f.episodes,
		GroupSize:     f.groupSize,
		Seed:          f.seed,
		RolloutIDBase: f.rolloutIDBase,
		MergeTurns:    f.mergeTurns,
		MergeReward:   mergeReward,
	}, nil
}

// specFlags are troupe run's flags that describe the run: with --spec, the
// spec file does, and they must not be given.
// The LLM settings that shape prompts are among them: the spec's apply
// (llmShape), and a flag given beside it would be ignored.
var specFlags = []string{"episodes", "seed", "param", "policy", "allocator", "reward-format", "group-size", "emit",
	"max-steps", "max-turns", "max-messages", "timeout", "rollout-id-base", "on-invalid", "tree", "tree-alpha", "tree-joint", "tree-roles",
	"merge-turns", "merge-reward", "role-llm", "llm-no-memory", "llm-max-context", "llm-format", "llm-invalid-retries", "llm-feedback"}

// fieldFlags maps a run spec's fields to the flags that set them, for
// messages.
var fieldFlags = map[string]string{
	"params": "--param", "policies": "--policy", "emit": "--emit", "allocators": "--allocator",
	"reward_format": "--reward-format", "on_invalid": "--on-invalid", "episodes": "--episodes",
	"group_size": "--group-size", "limits": "--max-*", "rollout_id_base": "--rollout-id-base", "tree": "--tree*",
	"merge_turns": "--merge-turns", "merge_reward": "--merge-reward",
}

// llmFlags maps the fields of an llm role's settings (llmSettings) to the
// flags that set them, for messages: a resume refused for another
// setting names its flag.
var llmFlags = map[string]string{
	"model": "--llm-model", "endpoint": "--role-llm endpoint=", "temperature": "--llm-temperature", "top_p": "--llm-top-p",
	"top_k": "--llm-top-k", "max_tokens": "--llm-max-tokens", "stop": "--llm-stop", "stop_token_ids": "--llm-stop-token-id",
	"repetition_penalty": "--llm-repetition-penalty", "min_tokens": "--llm-min-tokens", "extra": "--llm-extra",
	"no_memory": "--llm-no-memory", "max_context": "--llm-max-context", "format": "--llm-format",
	"invalid_retries": "--llm-invalid-retries", "feedback": "--llm-feedback", "kind": "--llm-kind",
	"token_in": "--llm-token-in", "tokenize": "--llm-tokenize",
}

// flagOf is the flag that sets the spec field at path (a resume's
// difference: "episodes", "policies.bob.settings.no_memory"), or "".
func flagOf(path string) string {
	parts := strings.Split(path, ".")
	if len(parts) >= 4 && parts[0] == "policies" && parts[2] == "settings" {
		if flag, ok := llmFlags[parts[3]]; ok {
			return flag
		}
		return "--role-llm " + parts[1] + "=" + parts[3] + "="
	}
	top, _, _ := strings.Cut(parts[0], "[")
	return fieldFlags[top]
}

// planOf resolves spec into a run, with the flags that say how it is
// played (concurrency, output, fail-fast, the LLM server). from names the
// spec file, "" when the spec came from the flags: errors name the file's
// field, or else the flag.
func planOf(reg *env.Registry, allocs *credit.Registry, spec *runspec.Spec, f *runFlags, from string) (*plan, error) {
	if f.concurrency < 1 {
		return nil, usagef("--concurrency %d: must be at least 1", f.concurrency)
	}
	if f.out == "" {
		return nil, usagef("--out is empty: give a file path, or - for standard output")
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
	if spec.Seeds != nil {
		// play.Run derives every episode's seeds from the run seed.
		return nil, usagef("--spec %s: seeds: troupe run derives the episodes' seeds from seed; fixed seeds are a rollout request's (troupe serve): leave them out", from)
	}
	// Policies come last in Resolve: an LLM policy opens a client, which
	// nothing after it may fail to close.
	var llms *llmPool
	made := map[string]agents.Policy{} // by settings: roles of the same settings share a policy
	r, err := spec.Resolve(runspec.Resolvers{
		Scenarios:  reg,
		Allocators: allocs,
		Parallel:   []string{llmPolicyName},
		Policies: func(req env.PolicyRequest) (agents.Policy, error) {
			if req.Name != llmPolicyName {
				return nil, env.ErrUnknownPolicy
			}
			if llms == nil {
				eps, err := f.endpoints()
				if err != nil {
					return nil, err
				}
				// The seed roots the clients' retry jitter.
				llms = newLLMPool(eps, req.Seed)
			}
			if pol, ok := made[string(req.Settings)]; ok {
				return pol, nil
			}
			pol, err := llms.policy(req)
			if err != nil {
				return nil, &UsageError{Err: err} // it names the role and the field
			}
			made[string(req.Settings)] = pol
			return pol, nil
		},
	})
	if err != nil {
		llms.close()
		if ue, ok := errors.AsType[*UsageError](err); ok {
			return nil, ue // a bad --llm-endpoint
		}
		if fe, ok := errors.AsType[*runspec.FieldError](err); ok {
			if from != "" {
				return nil, usagef("--spec %s: %w", from, err)
			}
			field, _, _ := strings.Cut(fe.Field, ".")
			field, _, _ = strings.Cut(field, "[")
			if flag, ok := fieldFlags[field]; ok {
				return nil, usagef("%s: %w", flag, fe.Err)
			}
			return nil, &UsageError{Err: fe.Err}
		}
		return nil, &UsageError{Err: err}
	}
	cfg := r.Config
	cfg.Concurrency = f.concurrency
	cfg.FailFast = f.failFast
	return &plan{
		cfg:        cfg,
		spec:       r,
		allocators: r.Allocators,
		format:     r.Format,
		layout:     layout,
		merge:      r.Spec.MergeTurns,
		out:        f.out,
		episodes:   f.episodesOut,
		policies:   r.PolicyNames,
		llm:        llms,
	}, nil
}

// close closes the run's LLM clients and its allocators (closeAllocators).
func (p *plan) close() error {
	p.llm.close()
	return closeAllocators(p.allocators)
}

// policiesOf reads --policy values: "NAME" plays NAME in every role,
// "ROLE=NAME" in one role (and wins over a bare NAME). Roles named by
// neither are left out of the spec: they play the scenario's default
// policy, or random.
//
// The name "llm" is available in every scenario: an LLM policy on the
// server the --llm-* flags (or TROUPE_LLM_* variables) name, with the
// sampling settings of those flags (base), or, for a role with a
// --role-llm, its endpoint, model and sampling over them. A role whose
// --role-llm gives any of those plays llm, and --policy ROLE=NAME of
// another policy is refused; one of frozen alone plays what it would.
//
// The settings of an llm role record its endpoint's kind, token-in and
// tokenization (llmShape), which endpoints reads from the flags.
func policiesOf(info *env.Info, specs []string, base llmSettings, roles map[string]roleLLM, endpoints func() (*llmEndpoints, error)) (map[string]runspec.Policy, error) {
	all := ""
	perRole := map[string]string{}
	for _, spec := range specs {
		role, name, scoped := strings.Cut(spec, "=")
		role, name = strings.TrimSpace(role), strings.TrimSpace(name)
		if !scoped {
			name = role
		}
		if name == "" {
			return nil, usagef("--policy %q: empty policy name (policies of %s: %s)", spec, info.Name, strings.Join(info.PolicyNames(), ", "))
		}
		if name != llmPolicyName && !slices.Contains(info.PolicyNames(), name) {
			return nil, usagef("--policy %q: scenario %s has no policy %q (it has %s, and llm)", spec, info.Name, name, strings.Join(info.PolicyNames(), ", "))
		}
		if !scoped {
			if all != "" {
				return nil, usagef("--policy %q: a policy for every role was already given (%q); use ROLE=NAME for one role", spec, all)
			}
			all = name
			continue
		}
		if info.Role(role) == nil {
			return nil, usagef("--policy %q: scenario %s has no role %q (its roles: %s)", spec, info.Name, role, info.RoleNames())
		}
		if prev, dup := perRole[role]; dup {
			return nil, usagef("--policy %q: role %s was already given policy %q", spec, role, prev)
		}
		perRole[role] = name
	}
	out := map[string]runspec.Policy{}
	for _, r := range info.Roles {
		name, ok := perRole[r.Name]
		rl := roles[r.Name]
		// A --role-llm of frozen alone freezes the role whatever it plays.
		hasLLM := !reflect.ValueOf(rl.settings).IsZero()
		switch {
		case hasLLM && ok && name != llmPolicyName:
			return nil, usagef("--role-llm %s: role %s plays policy %q (--policy %s=%s); a --role-llm role plays llm", r.Name, r.Name, name, r.Name, name)
		case hasLLM:
			name = llmPolicyName
		case !ok:
			name = all
		}
		switch name {
		case "":
			continue // the resolver's default
		case llmPolicyName:
			st := base
			if hasLLM {
				st = rl.settings.over(base)
			}
			eps, err := endpoints()
			if err != nil {
				return nil, &UsageError{Err: err}
			}
			cfg, err := eps.config(st.Endpoint)
			if err != nil {
				return nil, usagef("--role-llm: role %s: %w", r.Name, err)
			}
			st.endpointOf(&cfg)
			out[r.Name] = runspec.Policy{Name: name, Settings: st.encode()}
		default:
			out[r.Name] = runspec.Policy{Name: name}
		}
	}
	return out, nil
}

// splitAllocators reads --allocator values into allocator specs, which
// the resolver builds.
func splitAllocators(reg *credit.Registry, values []string) ([]string, error) {
	if reg == nil {
		reg = credit.Builtin()
	}
	var specs []string
	for _, v := range values {
		specs = append(specs, credit.SplitSpecs(v)...)
	}
	if len(specs) == 0 {
		return nil, usagef("--allocator: none given (known: %s)", strings.Join(reg.Names(), ", "))
	}
	for i, spec := range specs {
		if spec == "" {
			return nil, usagef("--allocator: empty allocator name (known: %s)", strings.Join(reg.Names(), ", "))
		}
		if slices.Contains(specs[:i], spec) {
			return nil, usagef("--allocator %q: allocator %s given twice", spec, spec)
		}
	}
	return specs, nil
}

// buildEmit reads --emit values: "all", or role names (repeated or comma
// separated) whose turns alone become samples.
func buildEmit(info *env.Info, specs []string) ([]string, error) {
	var roles []string
	sawAll := false
	for _, spec := range specs {
		for part := range strings.SplitSeq(spec, ",") {
			part = strings.TrimSpace(part)
			switch {
			case part == "all":
				sawAll = true
			case part == "":
				return nil, usagef("--emit %q: empty role name (roles of %s: %s)", spec, info.Name, info.RoleNames())
			case info.Role(part) == nil:
				return nil, usagef("--emit %q: scenario %s has no role %q (its roles: %s, or all)", spec, info.Name, part, info.RoleNames())
			case !slices.Contains(roles, part):
				roles = append(roles, part)
			}
		}
	}
	if sawAll && len(roles) > 0 {
		return nil, usagef("--emit: give either all or a list of roles, not both")
	}
	return roles, nil
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

// roleLLMsOf reads the --role-llm values, one per role, checking the
// roles against the scenario.
func roleLLMsOf(info *env.Info, values []string) (map[string]roleLLM, error) {
	out := map[string]roleLLM{}
	for _, v := range values {
		r, err := parseRoleLLM(v)
		if err != nil {
			return nil, err
		}
		if info.Role(r.role) == nil {
			return nil, usagef("--role-llm %q: scenario %s has no role %q (its roles: %s)", v, info.Name, r.role, info.RoleNames())
		}
		if _, dup := out[r.role]; dup {
			return nil, usagef("--role-llm %q: role %s was given settings already", v, r.role)
		}
		out[r.role] = r
	}
	return out, nil
}

// unfrozen is the run's emitted roles (none: all) less the frozen ones
// (runspec.Unfrozen): a frozen role is played and recorded in the episode
// records, and its turns become no samples, as a role --emit leaves out.
func unfrozen(info *env.Info, emit []string, roles map[string]roleLLM) ([]string, error) {
	var frozen []string
	for _, r := range info.Roles {
		if roles[r.Name].frozen {
			frozen = append(frozen, r.Name)
		}
	}
	emit, err := runspec.Unfrozen(info, emit, frozen)
	if err != nil {
		return nil, usagef("--role-llm frozen, --emit: %w", err)
	}
	return emit, nil
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

// splitRoles reads a flag's comma-separated, repeatable role names,
// checking them against the scenario.
func splitRoles(info *env.Info, flag string, given []string) ([]string, error) {
	var roles []string
	for _, g := range given {
		for r := range strings.SplitSeq(g, ",") {
			r = strings.TrimSpace(r)
			if info.Role(r) == nil {
				return nil, usagef("%s: scenario %s has no role %q (its roles: %s)", flag, info.Name, r, info.RoleNames())
			}
			roles = append(roles, r)
		}
	}
	return roles, nil
}
