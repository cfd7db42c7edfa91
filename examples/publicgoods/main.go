// Command publicgoods defines a scenario outside troupe, with its public API
// only, and runs it: a one-round public-goods game. Each citizen holds 10
// coins and puts some into a pot; the pot is multiplied by r and shared
// equally. Keeping everything is each citizen's best answer, contributing
// everything is best for the group, so the team reward (the sum of payoffs)
// and the individual scores pull apart: a credit-assignment problem.
//
//	go run ./examples/publicgoods -policy cooperator -episodes 100 > pg.jsonl
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

const endowment = 10

// Scenario returns the public-goods scenario.
func Scenario() env.Scenario {
	// A role is looplab/fsm's declaration, plus the states its agents act
	// in: every citizen decides at once, so no Next is needed.
	citizen := &agents.Role{
		Name:     "citizen",
		Initial:  "deciding",
		Events:   fsm.Events{{Name: "contribute", Src: []string{"deciding"}, Dst: "done"}},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"deciding"},
	}
	always := func(coins string) env.PolicyMaker {
		return func(env.Params, string) (agents.Policy, error) {
			return agents.Scripted(func(*agents.Observation) string { return coins }), nil
		}
	}
	legal := make([]string, endowment+1) // "0".."10", shared by every episode
	for c := range legal {
		legal[c] = strconv.Itoa(c)
	}
	return env.Define(&env.Info{
		Name:     "publicgoods",
		Summary:  "contribute to a pot multiplied by r and shared equally",
		Schedule: env.Simultaneous,
		Roles:    []*agents.Role{citizen},
		Params: []env.ParamSpec{
			env.Int("citizens", 4, 2, 1000, "number of citizens N"),
			env.Float("r", 1.6, 1, 1000, "pot multiplier; 1 < r < N makes it a dilemma"),
		},
		Policies: map[string]env.PolicyMaker{"free-rider": always("0"), "cooperator": always("10")},
	}, func(p env.Params, _ uint64) (env.Game, error) {
		g := &game{r: p.Float("r"), legal: legal, paid: make([]int, p.Int("citizens"))}
		for i := range g.paid {
			g.seats = append(g.seats, env.Seat{ID: "citizen-" + strconv.Itoa(i), Role: citizen.Name})
		}
		return g, nil
	})
}

type game struct {
	r     float64
	seats []env.Seat
	legal []string
	paid  []int // per seat: coins put in the pot
}

func (g *game) Seats() []env.Seat     { return g.seats }
func (g *game) Start(*env.Step) error { return nil }

func (g *game) Observe(int) env.View {
	text := fmt.Sprintf("You hold %d coins. Put some into the pot (0-%d): it is multiplied by %g and shared by all %d citizens.",
		endowment, endowment, g.r, len(g.seats))
	return env.View{Text: text, Legal: g.legal}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		if m.IsLegal(g.legal) { // anything else puts nothing in
			g.paid[m.Seat], _ = strconv.Atoi(m.Action.Text)
		}
		if err := s.Fire(m.Seat, "contribute"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}

func (g *game) Score() env.Score {
	pot := 0
	for _, c := range g.paid {
		pot += c
	}
	share := g.r * float64(pot) / float64(len(g.seats))
	score := env.Score{Agents: make([]float64, len(g.seats))}
	for i, c := range g.paid {
		score.Agents[i] = endowment - float64(c) + share
		score.Team += score.Agents[i]
	}
	return score
}

// Run plays n episodes, every citizen playing the named policy, and writes
// their samples to w as JSONL, each rewarded with the team reward.
func Run(ctx context.Context, policy string, n int, w io.Writer) (env.Summary, error) {
	sc := Scenario()
	p, err := sc.Info().ParseParams(nil)
	if err != nil {
		return env.Summary{}, err
	}
	pol := agents.Random()
	if mk, ok := sc.Info().Policies[policy]; ok {
		if pol, err = mk(p, "citizen"); err != nil {
			return env.Summary{}, err
		}
	} else if policy != "random" {
		return env.Summary{}, fmt.Errorf("no policy %q (have %v)", policy, sc.Info().PolicyNames())
	}
	return env.Run(ctx, env.RunConfig{
		Scenario: sc, Params: p, Policy: env.SamePolicy(pol), Episodes: n, Concurrency: 4, Seed: 1,
	}, &trajectories.Output{Sink: trajectories.NewJSONLWriter(w, trajectories.Flat), Allocators: []trajectories.Allocator{credit.Team{}}})
}

func main() {
	policy := flag.String("policy", "random", "random, free-rider or cooperator")
	episodes := flag.Int("episodes", 100, "episodes to play")
	flag.Parse()
	sum, err := Run(context.Background(), *policy, *episodes, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "%d episodes, %d samples, mean team reward %.2f\n", sum.Episodes, sum.Samples, sum.MeanTeamReward())
}
