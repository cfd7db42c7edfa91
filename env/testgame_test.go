package env_test

import (
	"fmt"
	"strconv"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// relay is a small configurable game for the engine's tests. Seats "a",
// "b", "c" play role "p". Each move is a number; the game adds it to a
// total, broadcasts it, and ends when the total reaches target. Hooks let a
// test break the game in chosen ways.
type relay struct {
	seats  []env.Seat
	sched  env.Schedule
	target int
	total  int
	next   int
	hooks  relayHooks
	log    *[]string // what the game saw, for assertions
}

type relayHooks struct {
	next      func(s *env.Step) []int
	apply     func(s *env.Step, moves []env.Move) error
	start     func(s *env.Step) error
	observe   func(seat int) env.View
	panicAt   int  // panic in Apply at this step (0: never)
	noEnd     bool // never call End
	badEvent  bool // fire an event the state does not allow
	scoreless bool
	score     func() env.Score // the game's score instead of its own (nil: its own)
	public    bool             // the scenario declares Info.PublicView
}

var relayRole = &agents.Role{
	Name:    "p",
	Initial: "idle",
	Events: fsm.Events{
		agents.Edge("idle", "move", "idle"),
		agents.Edge("idle", "finish", "done"),
	},
	Terminal: []agents.State{"done"},
}

func relayScenario(schedule env.Schedule, target int, hooks relayHooks, log *[]string) env.Scenario {
	info := &env.Info{
		Name:       "relay",
		Summary:    "test game",
		Schedule:   schedule,
		PublicView: hooks.public,
		Roles:      []*agents.Role{relayRole},
		Params:     []env.ParamSpec{env.Int("seats", 3, 1, 26, "number of seats")},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{"p": "0"},
			AbsentOK:   true,
		},
	}
	return env.Define(info, func(p env.Params, seed uint64) (env.Game, error) {
		n := p.Int("seats")
		g := &relay{target: target, hooks: hooks, log: log, sched: schedule}
		for i := range n {
			g.seats = append(g.seats, env.Seat{ID: string(rune('a' + i)), Role: "p"})
		}
		return g, nil
	})
}

func (g *relay) note(format string, args ...any) {
	if g.log != nil {
		*g.log = append(*g.log, fmt.Sprintf(format, args...))
	}
}

func (g *relay) Seats() []env.Seat { return g.seats }

func (g *relay) Start(s *env.Step) error {
	if g.hooks.start != nil {
		return g.hooks.start(s)
	}
	return nil
}

func (g *relay) Next(s *env.Step) []int {
	if g.hooks.next != nil {
		return g.hooks.next(s)
	}
	if g.sched != env.Sequential {
		return nil // everyone (simultaneous), whoever has mail (async)
	}
	i := g.next
	g.next = (g.next + 1) % len(g.seats)
	return []int{i}
}

func (g *relay) Observe(seat int) env.View {
	if g.hooks.observe != nil {
		return g.hooks.observe(seat)
	}
	g.note("observe %s total=%d", g.seats[seat].ID, g.total)
	return env.View{Text: "total " + strconv.Itoa(g.total), Legal: []string{"1", "2", "3"}}
}

func (g *relay) Apply(s *env.Step, moves []env.Move) error {
	if g.hooks.panicAt == s.Time() {
		panic("relay: boom")
	}
	if g.hooks.apply != nil {
		return g.hooks.apply(s, moves)
	}
	for _, m := range moves {
		v, err := strconv.Atoi(m.Action.Text)
		if err != nil {
			s.Note(m.Seat, "illegal", true)
			continue
		}
		g.total += v
		g.note("apply %s %d", g.seats[m.Seat].ID, v)
		if err := s.Send(g.seats[m.Seat].ID, "*", "add", m.Action.Text); err != nil {
			return err
		}
		ev := agents.Event("move")
		if g.hooks.badEvent {
			ev = "nonsense"
		}
		if err := s.Fire(m.Seat, ev); err != nil {
			return err
		}
	}
	if g.total >= g.target && !g.hooks.noEnd {
		if err := s.FireAll("finish"); err != nil {
			return err
		}
		s.End()
	}
	return nil
}

func (g *relay) Score() env.Score {
	if g.hooks.score != nil {
		return g.hooks.score()
	}
	if g.hooks.scoreless {
		return env.Score{Team: float64(g.total)}
	}
	per := make([]float64, len(g.seats))
	for i := range per {
		per[i] = float64(g.total) / float64(len(per))
	}
	return env.Score{Team: float64(g.total), Agents: per}
}
