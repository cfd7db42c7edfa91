package credit_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// potluck is a simultaneous game whose rules say nothing about the empty
// coalition: every present guest brings a dish worth its answer (0 to 2),
// and the team scores the dishes plus 1 for the venue. It declares absent
// seats and skips them, but never checks whether anybody is left: the
// engine must end the all-absent replay itself (it used to fail it with
// "the game named no agent to act"), and Score then gives v(∅) = 1.
type potluck struct{ dishes []int }

var guest = &agents.Role{
	Name:     "guest",
	Initial:  "cooking",
	Events:   fsm.Events{agents.Edge("cooking", "bring", "arrived")},
	Terminal: []agents.State{"arrived"},
}

func potluckScenario() env.Scenario {
	info := &env.Info{
		Name:           "potluck",
		Schedule:       env.Simultaneous,
		Roles:          []*agents.Role{guest},
		Params:         []env.ParamSpec{env.Int("guests", 3, 1, 12, "guests")},
		Counterfactual: &env.CounterfactualSpec{NullAction: map[string]string{"guest": "0"}, AbsentOK: true},
	}
	return env.Define(info, func(p env.Params, _ uint64) (env.Game, error) {
		return &potluck{dishes: make([]int, p.Int("guests"))}, nil
	})
}

func (g *potluck) Seats() []env.Seat {
	seats := make([]env.Seat, len(g.dishes))
	for i := range seats {
		seats[i] = env.Seat{ID: "g" + strconv.Itoa(i), Role: "guest"}
	}
	return seats
}
func (g *potluck) Start(*env.Step) error { return nil }
func (g *potluck) Observe(int) env.View {
	return env.View{Text: "bring a dish", Legal: []string{"0", "1", "2"}}
}
func (g *potluck) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		g.dishes[m.Seat], _ = strconv.Atoi(m.Action.Text)
		if err := s.Fire(m.Seat, "bring"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}
func (g *potluck) Score() env.Score {
	team := 1.0
	agents := make([]float64, len(g.dishes))
	for i, d := range g.dishes {
		team += float64(d)
		agents[i] = float64(d)
	}
	return env.Score{Team: team, Agents: agents}
}

// TestCounterfactualAllocatorsOnTheEmptyCoalition runs the allocators that
// replay the empty coalition (exact and Monte Carlo Shapley; leave-one-out
// of a lone agent) on a scenario that does not handle it itself.
func TestCounterfactualAllocatorsOnTheEmptyCoalition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		guests int
		a      trajectories.Allocator
	}{
		{"shapley", 3, credit.Shapley{}},
		{"shapley resimulate", 3, credit.Shapley{Sim: credit.Sim{Resimulate: true}}},
		{"shapley-mc", 3, credit.MonteCarloShapley{Permutations: 5}},
		{"leave-one-out of one", 1, credit.LeaveOneOut{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := potluckScenario()
			p, err := sc.Info().ParseParams(map[string]string{"guests": strconv.Itoa(tc.guests)})
			require.NoError(t, err)
			ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
				Play:       env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
				Seed:       1,
				PolicySeed: 2,
			}))
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			got, err := allocate(tc.a, ep)
			require.NoError(t, err)
			// Additive game: each guest's share is its own dish, and the
			// shares sum to v(N) - v(∅) = G - 1.
			assert.InDeltaSlice(t, ep.Score.Agents, got[0], 1e-12)
			sum := 0.0
			for _, v := range got[0] {
				sum += v
			}
			assert.InDelta(t, ep.Score.Team-1, sum, 1e-12)
		})
	}
}
