// Command skeleton is a troupe scenario, made by `troupe new scenario`,
// and the troupe command with it registered (main.go):
//
//	go test ./...                           # envtest.Check, the role against looplab/fsm, the golden transcript
//	go run . scenarios skeleton             # its rules, roles, parameters and policies
//	go run . run skeleton -n 100 -o out.jsonl
//	go test -run Golden -update             # accept an intended change of the transcript
//
// The rules: every round, each player names a colour; the colours named
// are announced, and each player scores one point for every other player
// who named the same colour. The team reward is the sum of the scores.
//
// The player's state machine (Role; the engine asks a player to act while
// it is choosing, and the game moves it with the events):
//
//	stateDiagram-v2
//	    [*] --> choosing
//	    choosing --> choosing: choose
//	    choosing --> done: finish
//	    done --> [*]
//
// Edit Scenario, the game and the policies into your own scenario; keep
// the test, and the doc's diagram in step with the role (TestDoc checks
// it).
package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// colours is the action space: an observation's legal actions are its
// names, a game reads a move as the colour's number.
var colours = agents.Enum("red", "green", "blue")

// player is the one role, declared in looplab/fsm's vocabulary: the events
// are fsm.Events, Acting says when the engine asks a player for a move.
var player = &agents.Role{
	Name:    "player",
	Doc:     "names a colour every round",
	Initial: "choosing",
	Events: fsm.Events{
		{Name: "choose", Src: []string{"choosing"}, Dst: "choosing"},
		{Name: "finish", Src: []string{"choosing"}, Dst: "done"},
	},
	Acting:   []agents.State{"choosing"},
	Terminal: []agents.State{"done"},
}

// Scenario returns the skeleton scenario.
func Scenario() env.Scenario {
	return env.Define(&env.Info{
		Name:     "skeleton",
		Summary:  "name a colour; score a point for every other player who named it too",
		Doc:      "Simultaneous, one step per round. Each player names red, green or blue; the colours are announced. A player scores 1 per round for every other player who named its colour; anything else scores nothing. Team reward: the sum of the scores.",
		Schedule: env.Simultaneous,
		Roles:    []*agents.Role{player},
		Params: []env.ParamSpec{
			env.Int("players", 3, 2, 100, "number of players"),
			env.Int("rounds", 3, 1, 100, "rounds played"),
		},
		Policies: map[string]env.PolicyMaker{
			"red":    func(env.PolicyRequest) (agents.Policy, error) { return colours.Always(0), nil },
			"follow": func(env.PolicyRequest) (agents.Policy, error) { return colours.Scripted(follow), nil },
		},
	}, func(p env.Params, _ uint64) (env.Game, error) {
		n := p.Int("players")
		return &game{rounds: p.Int("rounds"), seats: env.Numbered(player.Name, n), score: env.Score{Agents: make([]float64, n)}}, nil
	})
}

// follow names the colour most named in the latest announcement (the
// first of a tie), red in the first round.
func follow(obs *agents.Observation) int {
	if len(obs.Inbox) == 0 {
		return 0
	}
	counts := make([]int, colours.Len())
	for _, c := range strings.Fields(obs.Inbox[len(obs.Inbox)-1].Payload) {
		if i, err := colours.Parse(c); err == nil {
			counts[i]++
		}
	}
	best := 0
	for i, n := range counts {
		if n > counts[best] {
			best = i
		}
	}
	return best
}

type game struct {
	rounds, round int
	seats         []env.Seat
	score         env.Score
}

func (g *game) Seats() []env.Seat     { return g.seats }
func (g *game) Start(*env.Step) error { return nil }
func (g *game) Score() env.Score      { return g.score }

func (g *game) Observe(int) env.View {
	return env.View{Legal: colours.Legal(), Text: fmt.Sprintf("Round %d of %d. Name a colour (%s): you score a point for every other player who names it too.",
		g.round+1, g.rounds, strings.Join(colours.Legal(), ", "))}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	g.round++
	named := make([]int, len(moves)) // each move's colour, -1 for an illegal answer
	said := make([]string, len(moves))
	counts := make([]int, colours.Len())
	for i, m := range moves {
		c, err := colours.Parse(m.Action.Text)
		if err != nil {
			s.Note(m.Seat, "illegal", true)
			named[i], said[i] = -1, "-"
			continue
		}
		named[i], said[i] = c, colours.Text(c)
		counts[c]++
	}
	for i, m := range moves {
		if c := named[i]; c >= 0 {
			g.score.Agents[m.Seat] += float64(counts[c] - 1)
			g.score.Team += float64(counts[c] - 1)
		}
	}
	ev := agents.Event("choose")
	if g.round == g.rounds {
		ev = "finish"
		s.End()
	}
	return errors.Join(s.FireAll(ev), s.Announce("colours", strings.Join(said, " ")))
}
