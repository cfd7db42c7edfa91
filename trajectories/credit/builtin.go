package credit

import (
	"fmt"
	"strconv"

	"github.com/troupe-rl/troupe/trajectories"
)

// Parameters shared by the counterfactual allocators.
var (
	simParams = []Param{
		{Name: "sim", Default: "frozen", Doc: "frozen: the agents not changed replay their recorded actions; resimulate: their policies are asked again, with the same seeds. In a scenario whose counterfactual declaration asks for re-simulation (its agents answer one another: committee, signal) the default is resimulate; either way the key leaves the default out (-a difference writes the key difference)"},
		{Name: "budget", Default: strconv.Itoa(DefaultBudget), Doc: "most re-simulations per episode"},
		{Name: "parallel", Doc: "re-simulations at once (default: the number of CPUs); changes speed only"},
	}
	modeParam = Param{Name: "mode", Default: "absent", Doc: "what agents outside a coalition do: absent (take no part) or null (play their role's null action)"}
)

// builtinEntries are the built-in allocators, in the order troupe
// allocators lists them.
func builtinEntries() []Entry {
	return append(scoreEntries(), counterfactualEntries()...)
}

// scoreEntries are the allocators that read the episodes' scores alone.
func scoreEntries() []Entry {
	return []Entry{
		{Name: "team", Doc: "every sample gets the team reward G (its agent's team's, G_T, in a scenario with teams)", Make: fixed(Team{})},
		{Name: "equal-split", Doc: "every agent's samples get G/K, K the number of agents (G_T/K_T, among its team, in a scenario with teams)", Make: fixed(EqualSplit{})},
		{Name: "equal-split-sample", Doc: "every sample gets G/S, S the number of samples", Make: fixed(EqualSplit{PerSample: true})},
		{Name: "individual", Doc: "every sample gets its agent's own score from the scenario (an error for scenarios without per-agent scores)", Make: fixed(Individual{})},
		{
			Name: "discount",
			Doc:  "turn discounting: another allocator's value times γ^(T-t), t the sample's turn and T the agent's last (unit=turn), or t its step and T the episode's last (unit=step)",
			Params: []Param{
				{Name: "gamma", Default: ftoa(DefaultGamma), Doc: "γ in [0, 1]"},
				{Name: "unit", Default: "turn", Doc: "turn (the agent's own turns) or step (the episode's steps)"},
				{Name: "of", Default: "team", Doc: "the allocator discounted: a name, or name(key=value;...)"},
			},
			wrap: makeDiscount,
		},
		{
			Name:   "grpo",
			Doc:    "GRPO: (R - mean)/(std + eps) over the agents that share the group key, R the base reward; groups of one get 0",
			Params: append([]Param{{Name: "eps", Default: ftoa(DefaultEps), Doc: "added to the std"}}, groupParams...),
			Make:   makeGroupNorm("grpo", NormStd),
		},
		{
			Name:   "dr-grpo",
			Doc:    "Dr.GRPO: R - mean over the agents that share the group key; groups of one get 0",
			Params: groupParams,
			Make:   makeGroupNorm("dr-grpo", NormCentre),
		},
		{
			Name:   "rloo",
			Doc:    "RLOO (Kool et al. 2019): R - mean of the units that share the group key in the group's other episodes (an episode's own units share its outcome); = dr-grpo × n/(n-1) with one unit per episode and key; groups of one episode get 0",
			Params: groupParams,
			Make:   makeGroupNorm("rloo", NormLeaveOneOut),
		},
		{
			Name: "magrpo",
			Doc:  "MAGRPO (arXiv 2508.04652): R - mean R over joint rollouts from one history, shared by the rollout's samples (÷ std + eps with std=true); tree-sampled episodes (--tree): the K candidates of one turn, R their continuation's G; others: the group's episodes, R = G (one history only in one-step games); groups of one get 0",
			Params: []Param{
				{Name: "std", Default: "false", Doc: "divide by the group's std + eps, as GRPO does"},
				{Name: "eps", Default: ftoa(DefaultEps), Doc: "added to the std"},
			},
			Make: makeMAGRPO,
		},
		{
			Name:   "at-grpo",
			Doc:    "AT-GRPO (arXiv 2510.11062): tree-sampled episodes (--tree): (r - mean)/(std + eps) over the K candidates of one agent at one turn, r = alpha·G + L of each candidate's continuation; others: grpo with key=scenario+group+agent+turn (the t-th turns of one agent across the group's episodes), = magrpo:std=true with the team reward and one turn per agent",
			Params: append([]Param{{Name: "eps", Default: ftoa(DefaultEps), Doc: "added to the std"}}, atGroupParams...),
			Make: func(m map[string]string) (trajectories.Allocator, error) {
				g, err := makeGroupNorm("at-grpo", NormStd)(m)
				if err != nil {
					return nil, err
				}
				return ATGRPO{g.(GroupNorm)}, nil
			},
		},
		{
			Name: "rae",
			Doc:  "SPIRAL's role-conditioned advantage: R - b per (scenario, role), b an EMA of the role's reward updated after use, kept across runs with state=",
			Params: []Param{
				{Name: "alpha", Default: ftoa(DefaultAlpha), Doc: "EMA decay: b ← α b + (1-α) R"},
				{Name: "base", Default: "auto", Doc: "the role's reward R: auto (the agent's score if the scenario has one, else G), team or individual"},
				{Name: "state", Doc: "JSON file the baselines are loaded from and saved to at the end of the run"},
			},
			Make: makeRAE,
		},
	}
}

// counterfactualEntries are the allocators that replay the episodes with
// agents acting otherwise (or absent).
func counterfactualEntries() []Entry {
	return []Entry{
		{
			Name: "difference",
			Doc:  "difference reward D_i = G(z) - G(z with i playing c_i): c=null is WL0 (the role's null action), c=average is WLa (the role's empirical action distribution)",
			Params: append([]Param{
				{Name: "c", Default: "null", Doc: "null or average"},
				{Name: "alternatives", Default: strconv.Itoa(DefaultAlternatives), Doc: "c=average: most frequent actions of the role weighed"},
			}, simParams...),
			Make: makeDifference,
		},
		{
			Name:   "leave-one-out",
			Doc:    "v(N) - v(N \\ {i}): G minus the team reward without agent i",
			Params: append([]Param{modeParam}, simParams...),
			Make:   makeLeaveOneOut,
		},
		{
			Name: "shapley",
			Doc:  "exact Shapley value over all 2^K coalitions (re-simulated once each, in parallel); episodes above max-agents are an error. In a scenario with teams, per team: the coalitions of its members, the other teams present, valued by its reward",
			Params: append([]Param{
				modeParam,
				{Name: "max-agents", Default: strconv.Itoa(DefaultMaxAgents), Doc: fmt.Sprintf("most agents per episode, at most %d", MaxShapleyAgents)},
			}, simParams...),
			Make: makeShapley,
		},
		{
			Name: "shapley-mc",
			Doc:  "Monte Carlo Shapley value over sampled orderings (Castro et al. 2009); exactly efficient; stops early, with a note, when the budget runs out",
			Params: append([]Param{
				modeParam,
				{Name: "permutations", Default: strconv.Itoa(DefaultPermutations), Doc: "orderings sampled per episode"},
				{Name: "seed", Default: "0", Doc: "mixed with the episode's seeds to draw the orderings"},
			}, simParams...),
			Make: makeMonteCarloShapley,
		},
		{
			Name: "coma",
			Doc:  "COMA-style baseline: G(z) - mean over alternative actions u' of agent i of G(z with i playing u'), u' uniform over the actions its role played",
			Params: append([]Param{
				{Name: "samples", Default: strconv.Itoa(DefaultCOMASamples), Doc: "alternatives per agent at most"},
				{Name: "seed", Default: "0", Doc: "mixed with the episode's seeds to draw the alternatives"},
			}, simParams...),
			Make: makeCOMA,
		},
	}
}

var groupParams = []Param{
	{Name: "key", Default: DefaultGroupKey.String(), Doc: "fields whose values define a normalisation group, joined by '+': scenario, group, role, agent, turn (the unit is then one turn)"},
	{Name: "base", Default: "team", Doc: "the reward normalised: team, individual or auto (individual when the scenario has it)"},
}

var atGroupParams = []Param{
	{Name: "key", Default: ATKey.String(), Doc: groupParams[0].Doc + ", turn"},
	groupParams[1],
}

func makeMAGRPO(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "magrpo", m: m}
	a := MAGRPO{Std: p.choice("std", "false", "true") == 1, Eps: p.float("eps", 0, 1e300)}
	return made(a, p.err)
}

// made returns a, or nil with err.
func made(a trajectories.Allocator, err error) (trajectories.Allocator, error) {
	if err != nil {
		return nil, err
	}
	return a, nil
}

// fixed is the Maker of an allocator without parameters.
func fixed(a trajectories.Allocator) Maker {
	return func(map[string]string) (trajectories.Allocator, error) { return a, nil }
}

func makeDiscount(r *Registry, m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "discount", m: m}
	d := Discount{Gamma: p.float("gamma", 0, 1), Unit: Unit(p.choice("unit", unitNames...))}
	if p.err != nil {
		return nil, p.err
	}
	of, err := r.Parse(m["of"])
	if err != nil {
		return nil, fmt.Errorf("discount: of=%s: %w", m["of"], err)
	}
	d.Of = of
	return d, nil
}

func makeGroupNorm(name string, mode NormMode) Maker {
	return func(m map[string]string) (trajectories.Allocator, error) {
		p := &paramReader{alloc: name, m: m}
		g := GroupNorm{Mode: mode, Base: Source(p.choice("base", sourceNames...))}
		if mode == NormStd {
			g.Eps = p.float("eps", 0, 1e300)
		}
		if p.err != nil {
			return nil, p.err
		}
		key, err := ParseGroupKey(m["key"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		g.Key = key
		return g, nil
	}
}

func makeRAE(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "rae", m: m}
	cfg := RAEConfig{Alpha: p.float("alpha", 0, 1), Base: Source(p.choice("base", sourceNames...)), StatePath: m["state"]}
	if p.err != nil {
		return nil, p.err
	}
	if cfg.Alpha == 1 {
		p.fail("alpha", "a number in [0, 1)")
		return nil, p.err
	}
	return NewRAE(cfg)
}

func readSim(p *paramReader) Sim {
	s := Sim{Resimulate: p.choice("sim", "frozen", "resimulate") == 1, Budget: p.int("budget", 1, 1<<30)}
	if p.str("parallel") != "" {
		s.Parallel = p.int("parallel", 1, 1<<10)
	}
	return s
}

func makeDifference(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "difference", m: m}
	d := Difference{Average: p.choice("c", "null", "average") == 1, Alternatives: p.int("alternatives", 1, 1<<20), Sim: readSim(p)}
	return made(d, p.err)
}

func makeLeaveOneOut(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "leave-one-out", m: m}
	l := LeaveOneOut{Out: Presence(p.choice("mode", presenceNames...)), Sim: readSim(p)}
	return made(l, p.err)
}

func makeShapley(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "shapley", m: m}
	s := Shapley{Out: Presence(p.choice("mode", presenceNames...)), MaxAgents: p.int("max-agents", 1, MaxShapleyAgents), Sim: readSim(p)}
	return made(s, p.err)
}

func makeMonteCarloShapley(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "shapley-mc", m: m}
	s := MonteCarloShapley{
		Out:          Presence(p.choice("mode", presenceNames...)),
		Permutations: p.int("permutations", 1, 1<<24),
		Seed:         p.uint64("seed"),
		Sim:          readSim(p),
	}
	return made(s, p.err)
}

func makeCOMA(m map[string]string) (trajectories.Allocator, error) {
	p := &paramReader{alloc: "coma", m: m}
	c := COMA{Samples: p.int("samples", 1, 1<<20), Seed: p.uint64("seed"), Sim: readSim(p)}
	return made(c, p.err)
}
