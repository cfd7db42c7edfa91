package cli

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// relay is a small multi-step test scenario: its seats take turns, one per
// step (seat (t-1) mod n at step t), for laps rounds; then the episode
// ends. Even seats play role "lead", odd seats role "follow". Every turn
// answers "a" or "b"; the team reward is the number of "a" answers.
//
// It exists so that the command line's tests know exactly how many samples
// each episode has (laps × runners) and can stop a run in the middle of an
// episode.
type relay struct{ info *env.Info }

const (
	relayReady agents.State = "ready"
	relayDone  agents.State = "done"
	relayPass  agents.Event = "pass"
	relayEnd   agents.Event = "finish"
)

func relayRole(name string) *agents.Role {
	return &agents.Role{
		Name:    name,
		Doc:     "takes its turn when the baton comes round",
		Initial: relayReady,
		Events: fsm.Events{
			agents.Edge(relayReady, relayPass, relayReady),
			agents.Edge(relayReady, relayEnd, relayDone),
		},
		Terminal: []agents.State{relayDone},
	}
}

// errBroken is what the "broken" policy answers.
var errBroken = errors.New("broken policy")

// newRelay returns the scenario with its policies "always-a" and "broken"
// (fails at its agent's second turn), plus extra.
func newRelay(extra map[string]env.PolicyMaker) env.Scenario {
	policies := map[string]env.PolicyMaker{
		"always-a": func(env.PolicyRequest) (agents.Policy, error) {
			return agents.Scripted(func(*agents.Observation) string { return "a" }), nil
		},
		"broken": func(env.PolicyRequest) (agents.Policy, error) {
			return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
				if obs.Turn == 1 {
					return agents.Action{}, errBroken
				}
				return agents.Action{Text: "b"}, nil
			}), nil
		},
	}
	for k, v := range extra {
		policies[k] = v
	}
	return &relay{info: &env.Info{
		Name:     "relay",
		Summary:  "runners pass a baton, one turn per step",
		Doc:      "A test scenario.",
		Schedule: env.Sequential,
		Roles:    []*agents.Role{relayRole("lead"), relayRole("follow")},
		Params: []env.ParamSpec{
			env.Int("runners", 3, 1, 100, "number of seats"),
			env.Int("laps", 4, 1, 1000, "turns each seat takes"),
		},
		Policies: policies,
	}}
}

func (r *relay) Info() *env.Info { return r.info }

func (r *relay) New(p env.Params, _ uint64) (env.Game, error) {
	n := p.Int("runners")
	seats := make([]env.Seat, n)
	for i := range seats {
		role := "lead"
		if i%2 == 1 {
			role = "follow"
		}
		seats[i] = env.Seat{ID: "runner-" + strconv.Itoa(i), Role: role}
	}
	return &relayGame{seats: seats, turns: n * p.Int("laps")}, nil
}

type relayGame struct {
	seats []env.Seat
	turns int
	as    int
}

var relayLegal = []string{"a", "b"}

func (g *relayGame) Seats() []env.Seat      { return g.seats }
func (g *relayGame) Start(*env.Step) error  { return nil }
func (g *relayGame) Next(s *env.Step) []int { return []int{(s.Time() - 1) % len(g.seats)} }
func (g *relayGame) Observe(int) env.View   { return env.View{Text: "your turn", Legal: relayLegal} }
func (g *relayGame) Score() env.Score       { return env.Score{Team: float64(g.as)} }

func (g *relayGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		if m.Action.Text == "a" {
			g.as++
		}
		if err := s.Fire(m.Seat, relayPass); err != nil {
			return err
		}
	}
	if s.Time() == g.turns {
		if err := s.FireAll(relayEnd); err != nil {
			return err
		}
		s.End()
	}
	return nil
}

func TestRelayIsAValidScenario(t *testing.T) {
	_, err := env.NewRegistry(newRelay(nil))
	require.NoError(t, err)
}
