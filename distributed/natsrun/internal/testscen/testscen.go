// Package testscen holds the scenarios and policies the distributed tests
// and benchmarks run, in the test process and in worker processes alike:
// the built-in scenarios with a slow policy added, and "count", a small
// sequential game whose length is a parameter.
package testscen

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Options shape the registry.
type Options struct {
	// Delay is how long the "sleepy" policy waits before each answer: a
	// stand-in for an LLM call, latency-bound and cheap in CPU.
	Delay time.Duration
	// Crash allows the "crash" policy, which ends the process (exit code
	// 3) when it plays in the episode whose scenario seed is the
	// scenario's crash_seed parameter. Only worker processes set it.
	Crash bool
	// LLM, when set, is the OpenAI base URL of the "llm" policy's server
	// (an llmtest server in the benchmarks); every scenario's llm policy
	// shares one client.
	LLM string
	// ElfarolCapacity, when set, makes elfarol play every episode with
	// this capacity, whatever its parameter says: a worker built with a
	// changed scenario of the same name (its fingerprint differs).
	ElfarolCapacity string
	// LieEvery, when set, makes count a liar's build: it adds 1 to the
	// team reward of every episode whose scenario seed is a multiple of
	// LieEvery (100: about 1% of seeds), and plays the others, and the
	// fingerprint's, as count does.
	LieEvery uint64
	// LyingSleepy makes count's "sleepy" policy a liar's: it names the
	// largest number every turn instead of a random one. count's default
	// policy, which fingerprints play, is unchanged.
	LyingSleepy bool
}

// CrashExit is the exit code of a process the "crash" policy ended.
const CrashExit = 3

// Registry returns elfarol, tictactoe and count, each with the policies
// "sleepy" (wait Delay, then play random) and, with Crash, "crash".
func Registry(o Options) *env.Registry {
	var client *llm.Client
	if o.LLM != "" {
		cfg := llmConfig(o.LLM)
		var err error
		if client, err = llm.NewClient(cfg); err != nil {
			panic(err) // a fixed configuration but for the URL
		}
	}
	var elf env.Scenario = elfarol.New()
	if o.ElfarolCapacity != "" {
		elf = withCapacity(elf, o.ElfarolCapacity)
	}
	reg, err := env.NewRegistry(
		withPolicies(elf, o, client),
		withPolicies(tictactoe.New(), o, client),
		withPolicies(countLying(o.LieEvery), o, client),
	)
	if err != nil {
		panic(err) // fixed definitions, checked by the tests
	}
	return reg
}

// withCapacity is elfarol (sc) playing every episode with capacity c,
// whatever its parameter says: the same name, roles and parameters, other
// episodes.
func withCapacity(sc env.Scenario, c string) env.Scenario {
	info := sc.Info()
	return env.Define(info, func(p env.Params, seed uint64) (env.Game, error) {
		given := p.Map()
		given["capacity"] = c
		q, err := info.ParseParams(given)
		if err != nil {
			return nil, err
		}
		return sc.New(q, seed)
	})
}

// llmConfig asks a vLLM-shaped server for JSON actions, greedily.
func llmConfig(url string) llm.Config {
	cfg := llm.DefaultConfig()
	cfg.BaseURL = url
	cfg.Model = "test"
	greedy := 0.0
	cfg.Temperature = &greedy
	cfg.MaxInFlight = 1024
	return cfg
}

// Sleepy waits d (or until ctx ends), then plays random.
func Sleepy(d time.Duration) agents.Policy {
	random := agents.Random()
	return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return agents.Action{}, context.Cause(ctx)
		case <-t.C:
		}
		return random.Act(ctx, obs)
	})
}

func withPolicies(sc env.Scenario, o Options, client *llm.Client) env.Scenario {
	info := *sc.Info()
	info.Policies = map[string]env.PolicyMaker{}
	for name, mk := range sc.Info().Policies {
		info.Policies[name] = mk
	}
	info.Policies["sleepy"] = func(env.PolicyRequest) (agents.Policy, error) { return Sleepy(o.Delay), nil }
	if o.LyingSleepy && info.Name == "count" {
		info.Policies["sleepy"] = func(env.PolicyRequest) (agents.Policy, error) {
			return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
				return agents.Action{Text: obs.Legal[len(obs.Legal)-1]}, nil
			}), nil
		}
	}
	if client != nil {
		info.Policies["llm"] = func(env.PolicyRequest) (agents.Policy, error) {
			return llm.NewPolicy(client, llmConfig(o.LLM), llm.WithScenario(&info))
		}
	}
	if o.Crash && info.Name == "count" {
		info.Policies["crash"] = func(req env.PolicyRequest) (agents.Policy, error) {
			mark := "seed=" + req.Params.String("crash_seed") + " "
			random := agents.Random()
			return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
				if strings.HasPrefix(obs.View, mark) {
					os.Exit(CrashExit)
				}
				return random.Act(ctx, obs)
			}), nil
		}
	}
	return env.Define(&info, sc.New)
}

var player = &agents.Role{
	Name:    "player",
	Doc:     "names a number from 0 to 3 on each turn",
	Initial: "playing",
	Events: fsm.Events{
		agents.Edge("playing", "finish", "done"),
	},
	Terminal: []agents.State{"done"},
}

// Count is a sequential game of two players who take turns naming a
// number from 0 to 3, for a number of turns set by the "turns" parameter;
// the team reward is the sum of the numbers, each player's score its own
// sum. Each view starts with "seed=SEED ", so a policy can recognise an
// episode.
func Count() env.Scenario { return countLying(0) }

// countLying is Count, lying on the seeds that are multiples of lieEvery
// (0: none).
func countLying(lieEvery uint64) env.Scenario {
	info := &env.Info{
		Name:     "count",
		Summary:  "two players name numbers in turn; the reward is their sum",
		Doc:      "Sequential. Players alternate; each names 0..3. After `turns` turns the episode ends; the team reward is the total, each player's score its own total.",
		Schedule: env.Sequential,
		Roles:    []*agents.Role{player},
		Params: []env.ParamSpec{
			env.Int("turns", 4, 1, 1000, "turns in an episode, both players together"),
			env.String("crash_seed", "", "the scenario seed of the episode the crash policy ends its process in"),
		},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{"player": "0"},
			AbsentOK:   false,
			Doc:        "naming 0 adds nothing",
		},
	}
	return env.Define(info, func(p env.Params, seed uint64) (env.Game, error) {
		lie := lieEvery > 0 && seed%lieEvery == 0
		return &count{turns: p.Int("turns"), seed: seed, lie: lie, legal: []string{"0", "1", "2", "3"}}, nil
	})
}

type count struct {
	turns, played int
	seed          uint64
	lie           bool // add 1 to the team reward
	sums          [2]float64
	legal         []string
}

func (g *count) Seats() []env.Seat {
	return []env.Seat{{ID: "p0", Role: "player"}, {ID: "p1", Role: "player"}}
}

func (g *count) Start(*env.Step) error { return nil }

func (g *count) Next(*env.Step) []int { return []int{g.played % 2} }

func (g *count) Observe(seat int) env.View {
	return env.View{Text: fmt.Sprintf("seed=%d turn=%d total=%g", g.seed, g.played, g.sums[0]+g.sums[1]), Legal: g.legal}
}

func (g *count) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		n, err := strconv.Atoi(m.Action.Text)
		if err != nil || n < 0 || n > 3 {
			s.Note(m.Seat, "illegal", true)
			n = 0
		}
		g.sums[m.Seat] += float64(n)
		g.played++
	}
	if err := s.Send("p"+strconv.Itoa(moves[0].Seat), "*", "said", moves[0].Action.Text); err != nil {
		return err
	}
	if g.played >= g.turns {
		if err := s.FireAll("finish"); err != nil {
			return err
		}
		s.End()
	}
	return nil
}

func (g *count) Score() env.Score {
	team := g.sums[0] + g.sums[1]
	if g.lie {
		team++
	}
	return env.Score{Team: team, Agents: []float64{g.sums[0], g.sums[1]}}
}

// Plan is a run, as plain data that a test and a process it starts can
// both turn into the same play.Config.
type Plan struct {
	Scenario    string            `json:"scenario"`
	Params      map[string]string `json:"params,omitempty"`
	Policy      string            `json:"policy"` // played by every role
	Episodes    int               `json:"episodes"`
	GroupSize   int               `json:"group_size,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
	Seed        uint64            `json:"seed"`
	Allocators  []string          `json:"allocators,omitempty"` // specs of credit.Builtin
	Tree        *runspec.Tree     `json:"tree,omitempty"`       // tree sampling, if any
}

// Output is the output stage of the plan's run, writing to sink: its
// allocators, with dict rewards.
func (p Plan) Output(sink trajectories.Sink) (*trajectories.Output, error) {
	var allocs []trajectories.Allocator
	for _, spec := range p.Allocators {
		a, err := credit.Builtin().Parse(spec)
		if err != nil {
			return nil, err
		}
		allocs = append(allocs, a)
	}
	return &trajectories.Output{Sink: sink, Allocators: allocs, Format: trajectories.RewardDict}, nil
}

// Config builds the plan's run from reg, resolving it as a run spec
// (package runspec) as every runner does, and the role-to-policy map a
// distributed run's spec needs. Its output stage is Output's. Episodes 0
// (a benchmark's, set later) resolves as 1 and stays 0.
func (p Plan) Config(reg *env.Registry) (play.Config, map[string]runspec.Policy, error) {
	sc, err := reg.Lookup(p.Scenario)
	if err != nil {
		return play.Config{}, nil, err
	}
	policies := map[string]runspec.Policy{}
	for _, r := range sc.Info().Roles {
		policies[r.Name] = runspec.Policy{Name: p.Policy}
	}
	spec := runspec.Spec{Scenario: p.Scenario, Params: p.Params, Policies: policies, Episodes: max(p.Episodes, 1), GroupSize: p.GroupSize, Seed: p.Seed, Tree: p.Tree}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: reg})
	if err != nil {
		return play.Config{}, nil, err
	}
	if _, err := p.Output(nil); err != nil {
		return play.Config{}, nil, err
	}
	cfg := res.Config
	cfg.Episodes, cfg.Concurrency = p.Episodes, p.Concurrency
	return cfg, res.Spec.Policies, nil
}
