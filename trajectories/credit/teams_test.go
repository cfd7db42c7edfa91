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
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

var puller = &agents.Role{Name: "puller", Initial: "pulling", Acting: []agents.State{"pulling"},
	Terminal: []agents.State{"done"}, Events: fsm.Events{agents.Edge("pulling", "stop", "done")}}

// tug is a one-step tug of war of two teams: each puller pulls 0 to 3,
// and each side's reward is how much more it pulled than the other: red's
// G = Σ red − Σ blue, blue's the opposite. Every value of the game is
// additive, so each allocator's per-side value is known in closed form.
type tug struct {
	seats  []env.Seat
	pulled [2]float64
}

func (g *tug) Seats() []env.Seat     { return g.seats }
func (g *tug) Start(*env.Step) error { return nil }
func (g *tug) Observe(int) env.View  { return env.View{Text: "pull", Legal: []string{"0", "1", "2", "3"}} }
func (g *tug) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		n, _ := strconv.Atoi(m.Action.Text)
		g.pulled[g.seats[m.Seat].Team] += float64(n)
	}
	s.End()
	return s.FireAll("stop")
}
func (g *tug) Score() env.Score {
	d := g.pulled[0] - g.pulled[1]
	return env.Score{Teams: []float64{d, -d}}
}

// tugEpisode plays red seats r0, r1, r2 and blue b0, b1 (in the seat order
// r0, b0, r1, b1, r2) pulling the given amounts.
func tugEpisode(t *testing.T, pulls map[string]string) *trajectories.Episode {
	t.Helper()
	seats := []env.Seat{{ID: "r0", Role: "puller"}, {ID: "b0", Role: "puller", Team: 1}, {ID: "r1", Role: "puller"},
		{ID: "b1", Role: "puller", Team: 1}, {ID: "r2", Role: "puller"}}
	info := &env.Info{Name: "tug", Schedule: env.Simultaneous, Roles: []*agents.Role{puller}, Teams: []string{"red", "blue"},
		Counterfactual: &env.CounterfactualSpec{AbsentOK: true, NullAction: map[string]string{"puller": "0"}}}
	sc := env.Define(info, func(env.Params, uint64) (env.Game, error) { return &tug{seats: seats}, nil })
	policy := func(s env.Seat) agents.Policy { return agents.Replay(pulls[s.ID]) }
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Policy: policy}}))
	require.True(t, ep.Finished(), ep.Err)
	return ep
}

// Every allocator credits a seat out of its own side's reward: on the tug
// of war, red pulling 3, 1, 2 and blue 2, 0, red's G is 4 and blue's -4;
// an allocator that read the one team reward (their sum, 0) would give
// every counterfactual 0.
func TestAllocatorsCreditEachSide(t *testing.T) {
	ep := tugEpisode(t, map[string]string{"r0": "3", "b0": "2", "r1": "1", "b1": "0", "r2": "2"})
	require.Equal(t, []float64{4, -4}, ep.Score.Teams)
	require.Equal(t, 0.0, ep.Score.Team)
	pulled := []float64{3, 2, 1, 0, 2} // in seat order
	// The role's actions, as difference c=average and coma weigh them: 3,
	// 2, 1, 0 and 2 once each.
	mean := (3.0 + 2 + 1 + 0 + 2) / 5
	distinct := (3.0 + 2 + 1 + 0) / 4
	for _, tc := range []struct {
		spec string
		want []float64
	}{
		{"team", []float64{4, -4, 4, -4, 4}},
		{"equal-split", []float64{4.0 / 3, -2, 4.0 / 3, -2, 4.0 / 3}},
		{"equal-split-sample", []float64{4.0 / 3, -2, 4.0 / 3, -2, 4.0 / 3}},
		// Each puller's marginal value to its side is what it pulled.
		{"difference", pulled},
		{"difference:sim=resimulate", pulled},
		{"leave-one-out", pulled},
		{"leave-one-out:mode=null", pulled},
		{"shapley", pulled},
		{"shapley:mode=null,sim=resimulate", pulled},
		{"shapley-mc:permutations=7", pulled},
		// What it pulled, less the role's average pull.
		{"difference:c=average", []float64{3 - mean, 2 - mean, 1 - mean, 0 - mean, 2 - mean}},
		{"coma:samples=10", []float64{3 - distinct, 2 - distinct, 1 - distinct, 0 - distinct, 2 - distinct}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			a, err := credit.Builtin().Parse(tc.spec)
			require.NoError(t, err)
			dst := [][]float64{make([]float64, len(ep.Samples))}
			_, err = credit.AllocateNoted(t.Context(), a, []*trajectories.Episode{ep}, dst)
			require.NoError(t, err)
			assert.InDeltaSlice(t, tc.want, dst[0], 1e-12)
		})
	}
}

// Group normalisation compares a side with itself only: two episodes of
// one group, the same role on both sides.
func TestGroupAllocatorsKeepSidesApart(t *testing.T) {
	a := tugEpisode(t, map[string]string{"r0": "3", "b0": "0", "r1": "0", "b1": "0", "r2": "0"}) // red 3, blue -3
	b := tugEpisode(t, map[string]string{"r0": "0", "b0": "0", "r1": "0", "b1": "0", "r2": "1"}) // red 1, blue -1
	b.Index, b.RolloutID = 1, 1
	for _, tc := range []struct {
		spec   string
		wantA  []float64
		wantB  []float64
		reason string
	}{
		// red: 3 and 1 (mean 2), blue: -3 and -1 (mean -2), in seat order
		// r0, b0, r1, b1, r2.
		{"dr-grpo", []float64{1, -1, 1, -1, 1}, []float64{-1, 1, -1, 1, -1}, "units of a side"},
		{"dr-grpo:key=scenario+group", []float64{1, -1, 1, -1, 1}, []float64{-1, 1, -1, 1, -1}, "whatever the key"},
		{"rloo", []float64{2, -2, 2, -2, 2}, []float64{-2, 2, -2, 2, -2}, "the other episode's units of the side"},
		{"magrpo", []float64{1, -1, 1, -1, 1}, []float64{-1, 1, -1, 1, -1}, "each side across the group"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			alloc, err := credit.Builtin().Parse(tc.spec)
			require.NoError(t, err)
			dst := [][]float64{make([]float64, 5), make([]float64, 5)}
			require.NoError(t, alloc.Allocate(t.Context(), []*trajectories.Episode{a, b}, dst))
			assert.InDeltaSlice(t, tc.wantA, dst[0], 1e-12, tc.reason)
			assert.InDeltaSlice(t, tc.wantB, dst[1], 1e-12, tc.reason)
		})
	}
}
