// Command publicgoods is the troupe command with a scenario defined outside
// troupe: a repeated public-goods game. Each round every citizen gets 10
// coins and puts some into a pot, which is multiplied by r, shared equally
// and announced. Keeping the coins is each one's best answer, giving them
// all is the group's: the team reward and the scores pull apart.
//
//	go run ./examples/publicgoods run publicgoods -n 100 -P reciprocator -o pg.jsonl
package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

const endowment = 10

// coins is the action space: "0" to "10", the legal list of every turn.
var coins = agents.IntRange(0, endowment)

// citizen decides every round, then leaves once the last one is played.
var citizen = &agents.Role{
	Name: "citizen", Initial: "deciding", Acting: []agents.State{"deciding"}, Terminal: []agents.State{"done"},
	Events: fsm.Events{
		{Name: "contribute", Src: []string{"deciding"}, Dst: "deciding"},
		{Name: "finish", Src: []string{"deciding"}, Dst: "done"},
	},
}

// Scenario returns the public-goods scenario.
func Scenario() env.Scenario {
	return env.Define(&env.Info{
		Name: "publicgoods", Summary: "contribute to a pot multiplied by r and shared equally, round after round",
		Schedule: env.Simultaneous, Roles: []*agents.Role{citizen}, PublicView: true,
		Params: []env.ParamSpec{
			env.Int("citizens", 4, 2, 1000, "number of citizens N"),
			env.Int("rounds", 5, 1, 100, "rounds played"),
			env.Float("r", 1.6, 1, 1000, "pot multiplier; 1 < r < N makes it a dilemma"),
		},
		Policies: map[string]env.PolicyMaker{
			"free-rider":   func(env.Params, string) (agents.Policy, error) { return coins.Always(0), nil },
			"cooperator":   func(env.Params, string) (agents.Policy, error) { return coins.Always(endowment), nil },
			"reciprocator": func(env.Params, string) (agents.Policy, error) { return coins.Scripted(reciprocate), nil },
		},
		Counterfactual: &env.CounterfactualSpec{NullAction: map[string]string{"citizen": coins.Text(0)}},
	}, func(p env.Params, _ uint64) (env.Game, error) {
		g := &game{r: p.Float("r"), rounds: p.Int("rounds"), score: env.Score{Agents: make([]float64, p.Int("citizens"))}}
		for i := range g.score.Agents {
			g.seats = append(g.seats, env.Seat{ID: fmt.Sprintf("citizen-%d", i), Role: citizen.Name})
		}
		return g, nil
	})
}

// reciprocate gives what everyone gave on average last round, all ten
// coins in the first.
func reciprocate(obs *agents.Observation) int {
	if len(obs.Inbox) == 0 {
		return endowment
	}
	sum, paid := 0, strings.Fields(obs.Inbox[len(obs.Inbox)-1].Payload)
	for _, f := range paid {
		c, _ := coins.Parse(f)
		sum += c
	}
	return sum / len(paid)
}

type game struct {
	r             float64
	rounds, round int
	seats         []env.Seat
	score         env.Score
}

func (g *game) Seats() []env.Seat     { return g.seats }
func (g *game) Start(*env.Step) error { return nil }
func (g *game) Score() env.Score      { return g.score }

func (g *game) Observe(int) env.View {
	return env.View{Legal: coins.Legal(), Text: fmt.Sprintf("Round %d of %d. You hold %d coins. Put some into the pot (0-%d): "+
		"it is multiplied by %g and shared by all %d citizens; everyone's contribution is announced.",
		g.round+1, g.rounds, endowment, endowment, g.r, len(g.seats))}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	paid, pot := make([]string, len(moves)), 0
	g.round++
	for i, m := range moves {
		c, err := coins.Parse(m.Action.Text)
		if err != nil { // anything else puts nothing in
			s.Note(m.Seat, "illegal", true)
		}
		paid[i], pot = coins.Text(c), pot+c
		g.score.Agents[m.Seat] += endowment - float64(c)
	}
	for i := range g.score.Agents {
		g.score.Agents[i] += g.r * float64(pot) / float64(len(g.seats))
	}
	g.score.Team += float64(len(g.seats)*endowment) + (g.r-1)*float64(pot)
	ev := agents.Event("contribute")
	if g.round == g.rounds {
		ev = "finish"
		s.End()
	}
	return errors.Join(s.FireAll(ev), s.Announce("contributions", strings.Join(paid, " ")))
}
