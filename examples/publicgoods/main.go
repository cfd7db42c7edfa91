// Command publicgoods is the whole troupe command with a scenario of its
// own: a repeated public-goods game, in which each round every citizen puts
// some of its 10 coins into a pot, multiplied by r and shared by all.
//
//	go run ./examples/publicgoods run publicgoods -n 100 -P reciprocator -o pg.jsonl
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/looplab/fsm"
	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/cli"
	"github.com/troupe-rl/troupe/env"
)

func main() { os.Exit(cli.Main(cli.WithScenarios(Scenario()))) }

const endowment = 10 // a citizen's coins each round

var coins = agents.IntRange(0, endowment) // the action space: "0" to "10"

// citizen decides every round, and is done once the last one is played.
var citizen = &agents.Role{
	Name: "citizen", Initial: "deciding", Acting: []agents.State{"deciding"}, Terminal: []agents.State{"done"},
	Events: fsm.Events{{Name: "finish", Src: []string{"deciding"}, Dst: "done"}},
}

// Scenario returns the public-goods scenario.
func Scenario() env.Scenario {
	return env.Define(&env.Info{
		Name: "publicgoods", Summary: "contribute to a pot multiplied by r and shared equally, round after round",
		Schedule: env.Simultaneous, Roles: []*agents.Role{citizen}, PublicView: true,
		Params: []env.ParamSpec{
			env.Int("citizens", 4, 2, 1000, "number of citizens N"), env.Int("rounds", 5, 1, 100, "rounds played"),
			env.Float("r", 1.6, 1, 1000, "pot multiplier; 1 < r < N makes it a dilemma"),
		},
		Policies: map[string]env.PolicyMaker{
			"free-rider":   func(env.PolicyRequest) (agents.Policy, error) { return coins.Always(0), nil },
			"cooperator":   func(env.PolicyRequest) (agents.Policy, error) { return coins.Always(endowment), nil },
			"reciprocator": func(env.PolicyRequest) (agents.Policy, error) { return coins.Scripted(reciprocate), nil },
		},
		Counterfactual: &env.CounterfactualSpec{NullAction: map[string]string{"citizen": coins.Text(0)}},
	}, func(p env.Params, _ uint64) (env.Game, error) {
		return &game{r: p.Float("r"), rounds: p.Int("rounds"), score: env.Score{Agents: make([]float64, p.Int("citizens"))}}, nil
	})
}

// reciprocate gives last round's mean contribution, 10 in the first.
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
	score         env.Score
}

func (g *game) Seats() []env.Seat     { return env.Numbered(citizen.Name, len(g.score.Agents)) }
func (g *game) Start(*env.Step) error { return nil }
func (g *game) Score() env.Score      { return g.score }

func (g *game) Observe(int) env.View {
	return env.View{Legal: coins.Legal(), Text: fmt.Sprintf("Round %d of %d. Put some of your %d coins into the pot (0-%d): it is "+
		"multiplied by %g and shared by all %d citizens; everyone's contribution is announced.", g.round+1, g.rounds, endowment, endowment, g.r, len(g.score.Agents))}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	paid, pot := make([]string, len(moves)), 0
	for i, m := range moves {
		c, err := coins.Parse(m.Action.Text)
		if err != nil { // anything else puts nothing in
			s.Note(m.Seat, "illegal", true)
		}
		paid[i], pot = coins.Text(c), pot+c
		g.score.Agents[m.Seat] += endowment - float64(c)
	}
	for i := range g.score.Agents {
		g.score.Agents[i] += g.r * float64(pot) / float64(len(g.score.Agents))
	}
	g.score.Team += float64(len(g.score.Agents)*endowment) + (g.r-1)*float64(pot)
	var done error
	if g.round++; g.round == g.rounds {
		done = s.FireAll("finish")
		s.End()
	}
	return errors.Join(done, s.Announce("contributions", strings.Join(paid, " ")))
}
