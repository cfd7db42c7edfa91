// Command skeleton is a troupe scenario, made by `troupe new scenario`,
// and the troupe command with it registered (main.go):
//
//	go test ./...                           # scenariotest.Check, the role against looplab/fsm, the golden transcript
//	go run . scenarios skeleton             # its rules, roles, parameters and policies
//	go run . run skeleton -n 100 -o out.jsonl
//	go test -run Golden -update             # accept an intended change of the transcript
//
// The rules: at the start each player is told, in private, a lucky
// colour, and joins the channel #table. Every round, each player names a
// colour; the colours named are sent to #table, and each player scores one
// point for every other player who named the same colour, and one more
// when it named its lucky colour. The team reward is the sum of the
// scores.
//
// It shows the bus's three kinds of address (a private message, Tell; a
// channel, Join and Send to protocol.Channel; Announce would broadcast),
// and a counterfactual declaration (Info.Counterfactual), which the
// counterfactual allocators need: a player may be absent (the others play
// without it), and since the follow policy answers what the others named,
// counterfactuals re-simulate the other players (Resimulate). So
// `go run . run skeleton -a team,leave-one-out --reward-format dict` gives
// every sample its leave-one-out credit under the key "leave-one-out".
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
	"math/rand/v2"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// table is the channel the players join, where the colours named are sent.
const table = "table"

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
		Doc:      "Simultaneous, one step per round. Each player is told a lucky colour in private and joins #table. Each round every player names red, green or blue; the colours are sent to #table. A player scores 1 per round for every other player who named its colour, and 1 more for naming its lucky colour; anything else scores nothing. Team reward: the sum of the scores.",
		Schedule: env.Simultaneous,
		Roles:    []*agents.Role{player},
		Counterfactual: &env.CounterfactualSpec{
			AbsentOK:   true,
			Resimulate: true,
			Doc:        "an absent player names no colour and scores nothing; the others play on, and follow answers what they named",
		},
		Params: []env.ParamSpec{
			env.Int("players", 3, 2, 100, "number of players"),
			env.Int("rounds", 3, 1, 100, "rounds played"),
		},
		Policies: map[string]env.PolicyMaker{
			"red":    func(env.PolicyRequest) (agents.Policy, error) { return colours.Always(0), nil },
			"follow": func(env.PolicyRequest) (agents.Policy, error) { return colours.Scripted(follow), nil },
		},
	}, func(p env.Params, seed uint64) (env.Game, error) {
		n := p.Int("players")
		lucky := make([]int, n)
		for i := range lucky {
			lucky[i] = rand.New(rand.NewPCG(seed, uint64(i))).IntN(colours.Len())
		}
		return &game{rounds: p.Int("rounds"), seats: env.Numbered(player.Name, n), lucky: lucky, score: env.Score{Agents: make([]float64, n)}}, nil
	})
}

// follow names the colour most named in the latest round (the first of a
// tie), its lucky colour in the first round.
func follow(obs *agents.Observation) int {
	if len(obs.Inbox) == 0 {
		return 0
	}
	last := obs.Inbox[len(obs.Inbox)-1]
	if last.Kind == "lucky" {
		c, _ := colours.Parse(last.Payload)
		return c
	}
	counts := make([]int, colours.Len())
	for _, c := range strings.Fields(last.Payload) {
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
	lucky         []int // each seat's lucky colour
	score         env.Score
}

func (g *game) Seats() []env.Seat { return g.seats }
func (g *game) Score() env.Score  { return g.score }

// Start tells each player its lucky colour, a private message only it
// reads, and has it join #table.
func (g *game) Start(s *env.Step) error {
	var errs []error
	for i := range g.seats {
		if s.Absent(i) {
			continue
		}
		s.Join(i, table)
		errs = append(errs, s.Tell(i, "lucky", colours.Text(g.lucky[i])))
	}
	return errors.Join(errs...)
}

func (g *game) Observe(int) env.View {
	return env.View{Legal: colours.Legal(), Text: fmt.Sprintf("Round %d of %d. Name a colour (%s): you score a point for every other player who names it too, and one more if it is your lucky colour.",
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
		c := named[i]
		if c < 0 {
			continue
		}
		points := float64(counts[c] - 1)
		if c == g.lucky[m.Seat] {
			points++
		}
		g.score.Agents[m.Seat] += points
		g.score.Team += points
	}
	ev := agents.Event("choose")
	if g.round == g.rounds {
		ev = "finish"
		s.End()
	}
	return errors.Join(s.FireAll(ev), s.Send(protocol.EnvSender, protocol.Channel(table), "colours", strings.Join(said, " ")))
}
