package env_test

import (
	"context"
	"errors"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// volley is a game with no turn of its own and no Next: its players act in
// the state "waiting" (a user's name for "waiting for my shot"), hit the
// ball (waiting -> idle) and wake the other (idle -> waiting), so the
// states alone say who acts. Callbacks see the step: the role's
// enter_waiting notes when a player was woken, after_stop ends the
// episode, and a guard refuses to stop before the fourth step.
type volley struct {
	seats []env.Seat
	shots int
}

var errTooEarly = errors.New("too early to stop")

func volleyRole() *agents.Role {
	return &agents.Role{
		Name:    "player",
		Initial: "waiting",
		Events: fsm.Events{
			agents.Edge("waiting", "hit", "idle"),
			agents.Edge("idle", "wake", "waiting"),
			{Name: "stop", Src: []string{"waiting", "idle"}, Dst: "done"},
		},
		Callbacks: agents.Callbacks{
			"enter_waiting": func(t agents.Transition) error {
				t.Env.Note(t.Seat, "woken_at", t.Env.Time())
				return nil
			},
			"before_stop": func(t agents.Transition) error {
				if t.Env.Time() < 4 {
					return errTooEarly
				}
				return nil
			},
			"after_stop": func(t agents.Transition) error {
				t.Env.End()
				return nil
			},
		},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"waiting"},
	}
}

func volleyScenario(schedule env.Schedule) env.Scenario {
	info := &env.Info{Name: "volley", Summary: "test game", Schedule: schedule, Roles: []*agents.Role{volleyRole()}}
	return env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return &volley{seats: []env.Seat{{ID: "a", Role: "player"}, {ID: "b", Role: "player"}}}, nil
	})
}

func (g *volley) Seats() []env.Seat { return g.seats }

// Start sends b to idle: a serves.
func (g *volley) Start(s *env.Step) error { return s.Fire(1, "hit") }

func (g *volley) Observe(int) env.View { return env.View{Text: "ball", Legal: []string{"hit", "stop"}} }

func (g *volley) Apply(s *env.Step, moves []env.Move) error {
	m := moves[0]
	if m.Action.Text == "stop" {
		err := s.FireAll("stop")
		if errors.Is(err, agents.ErrCanceled) {
			s.Note(m.Seat, "refused", err.Error())
			return nil // the guard said no: play on, same player
		}
		return err
	}
	g.shots++
	if err := s.Fire(m.Seat, "hit"); err != nil {
		return err
	}
	return s.Fire(1-m.Seat, "wake")
}

func (g *volley) Score() env.Score { return env.Score{Team: float64(g.shots)} }

func TestStatesDriveASequentialGame(t *testing.T) {
	// a hits, b hits, a asks to stop too early (refused), a hits, b stops.
	answers := map[string][]string{"a": {"hit", "stop", "hit"}, "b": {"hit", "stop"}}
	pol := agents.Scripted(func(o *agents.Observation) string { return answers[o.Agent][o.Turn] })
	ep := runOne(t, volleyScenario(env.Sequential), pol, nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, env.EndTerminated, ep.End)
	var who, states []string
	for _, s := range ep.Samples {
		who = append(who, s.Metadata.Agent)
		states = append(states, s.Metadata.State)
	}
	assert.Equal(t, []string{"a", "b", "a", "a", "b"}, who, "the states pass the turn")
	assert.Equal(t, []string{"waiting", "waiting", "waiting", "waiting", "waiting"}, states, "the user's acting state is in every sample")
	// b was woken at step 4 (a's hit), after its sample of step 2: the
	// callback's note lands there.
	assert.Equal(t, 4, ep.Samples[1].Metadata.Extra["woken_at"])
	assert.Contains(t, ep.Samples[2].Metadata.Extra["refused"], "too early to stop")
	assert.Equal(t, 3.0, ep.Score.Team)
}

func TestStatesDriveAnAsyncGame(t *testing.T) {
	// With declared acting states, async asks whoever the states name,
	// mail or not.
	answers := map[string][]string{"a": {"hit", "hit"}, "b": {"hit", "stop"}}
	pol := agents.Scripted(func(o *agents.Observation) string { return answers[o.Agent][o.Turn] })
	ep := runOne(t, volleyScenario(env.Async), pol, nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, 4, len(ep.Samples))
}

func TestStatesDriveASimultaneousGame(t *testing.T) {
	var log []string
	sc := relayScenario(env.Simultaneous, 1, relayHooks{next: func(*env.Step) []int { return nil }}, &log)
	ep := runOne(t, sc, agents.Replay("1"), nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Len(t, ep.Samples, 3, "Next's nil leaves it to the states: every acting seat")
}

func TestNamingASeatThatDoesNotActFails(t *testing.T) {
	sc := env.Define(&env.Info{Name: "volley", Summary: "test", Schedule: env.Sequential, Roles: []*agents.Role{volleyRole()}},
		func(env.Params, uint64) (env.Game, error) {
			return &namesB{volley{seats: []env.Seat{{ID: "a", Role: "player"}, {ID: "b", Role: "player"}}}}, nil
		})
	ep := runOne(t, sc, agents.Replay("hit"), nil)
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Contains(t, ep.Err, `the game named agent "b", whose role "player" does not act in state "idle"`)
}

func TestTwoSeatsInActingStatesFailASequentialGame(t *testing.T) {
	sc := env.Define(&env.Info{Name: "volley", Summary: "test", Schedule: env.Sequential, Roles: []*agents.Role{volleyRole()}},
		func(env.Params, uint64) (env.Game, error) {
			return &bothServe{volley{seats: []env.Seat{{ID: "a", Role: "player"}, {ID: "b", Role: "player"}}}}, nil
		})
	ep := runOne(t, sc, agents.Replay("hit"), nil)
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Contains(t, ep.Err, "sequential game has 2 agents in acting states, want 1: [a in waiting, b in waiting]")
}

// namesB names b, which is idle.
type namesB struct{ volley }

func (g *namesB) Next(*env.Step) []int { return []int{1} }

// bothServe leaves both players waiting.
type bothServe struct{ volley }

func (g *bothServe) Start(*env.Step) error { return nil }

// quiz has one role that acts in two states, with different legal
// actions in each: it asks, then answers.
type quiz struct{ volley }

func quizRole() *agents.Role {
	return &agents.Role{
		Name:    "player",
		Initial: "asking",
		Events: fsm.Events{
			agents.Edge("asking", "ask", "answering"),
			agents.Edge("answering", "answer", "done"),
		},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"asking", "answering"},
	}
}

func (g *quiz) Start(*env.Step) error { return nil }

func (g *quiz) Observe(int) env.View { panic("ObserveIn is called instead") }

func (g *quiz) ObserveIn(_ int, state agents.State) env.View {
	if state == "asking" {
		return env.View{Text: "ask", Legal: []string{"why?", "how?"}}
	}
	return env.View{Text: "answer", Legal: []string{"because", "so"}}
}

func (g *quiz) Apply(s *env.Step, moves []env.Move) error {
	ev := agents.Event("ask")
	if s.State(0) == "answering" {
		ev = "answer"
		s.End()
	}
	return s.Fire(0, ev)
}

func TestLegalActionsByState(t *testing.T) {
	sc := env.Define(&env.Info{Name: "quiz", Summary: "test", Schedule: env.Sequential, Roles: []*agents.Role{quizRole()}},
		func(env.Params, uint64) (env.Game, error) {
			return &quiz{volley{seats: []env.Seat{{ID: "a", Role: "player"}}}}, nil
		})
	var legal [][]string
	pol := agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
		legal = append(legal, o.Legal)
		return agents.Action{Text: o.Legal[0]}, nil
	})
	ep := runOne(t, sc, pol, nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, [][]string{{"why?", "how?"}, {"because", "so"}}, legal)
	assert.Equal(t, "asking", ep.Samples[0].Metadata.State)
	assert.Equal(t, "answering", ep.Samples[1].Metadata.State)
}
