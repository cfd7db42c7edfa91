package credit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// bargainEpisode plays one round of bargain, two teams of two: east-0,
// east-1, west-0 and west-1 demand the given coins of a pie of 12. Every
// coalition of demands that fit the pie is a deal, so every value of the
// game is additive and each allocator's per-side value has a closed form.
func bargainEpisode(t *testing.T, demands ...string) *trajectories.Episode {
	t.Helper()
	sc := bargain.New()
	p, err := sc.Info().ParseParams(map[string]string{"rounds": "1", "pie": "12", "members": "2"})
	require.NoError(t, err)
	seat := map[string]int{"east-0": 0, "east-1": 1, "west-0": 2, "west-1": 3}
	policy := func(s env.Seat) agents.Policy { return agents.Replay(demands[seat[s.ID]]) }
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: policy}}))
	require.True(t, ep.Finished(), ep.Err)
	return ep
}

// Every allocator credits a seat out of its own side's reward: east
// demanding 3 and 1, west 2 and 0, east's G is 4 and west's 2 (general
// sum); an allocator that read the one team reward (their sum, 6) would
// credit the wrong side's coins.
func TestAllocatorsCreditEachSide(t *testing.T) {
	ep := bargainEpisode(t, "3", "1", "2", "0")
	require.Equal(t, []float64{4, 2}, ep.Score.Teams)
	require.Equal(t, 6.0, ep.Score.Team)
	pulled := []float64{3, 1, 2, 0} // what each seat brings its side
	// The role's actions, as difference c=average and coma weigh them: 3,
	// 1, 2 and 0, once each; their mean is 1.5.
	const mean = 1.5
	for _, tc := range []struct {
		spec string
		want []float64
	}{
		{"team", []float64{4, 4, 2, 2}},
		{"equal-split", []float64{2, 2, 1, 1}},
		{"equal-split-sample", []float64{2, 2, 1, 1}},
		// Each bargainer's marginal value to its side is its demand.
		{"difference", pulled},
		{"difference:sim=resimulate", pulled},
		{"leave-one-out", pulled},
		{"leave-one-out:mode=null", pulled},
		{"shapley", pulled},
		{"shapley:mode=null,sim=resimulate", pulled},
		{"shapley-mc:permutations=7", pulled},
		// Its demand, less the role's average demand.
		{"difference:c=average", []float64{3 - mean, 1 - mean, 2 - mean, 0 - mean}},
		{"coma:samples=10", []float64{3 - mean, 1 - mean, 2 - mean, 0 - mean}},
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
// one group, one role on both sides.
func TestGroupAllocatorsKeepSidesApart(t *testing.T) {
	a := bargainEpisode(t, "3", "0", "0", "0") // east 3, west 0
	b := bargainEpisode(t, "1", "0", "0", "2") // east 1, west 2
	b.Index, b.RolloutID = 1, 1
	for _, tc := range []struct {
		spec   string
		wantA  []float64
		wantB  []float64
		reason string
	}{
		// east: 3 and 1 (mean 2), west: 0 and 2 (mean 1), in seat order
		// east-0, east-1, west-0, west-1; pooled, the mean would be 1.5.
		{"dr-grpo", []float64{1, 1, -1, -1}, []float64{-1, -1, 1, 1}, "units of a side"},
		{"dr-grpo:key=scenario+group", []float64{1, 1, -1, -1}, []float64{-1, -1, 1, 1}, "whatever the key"},
		{"rloo", []float64{2, 2, -2, -2}, []float64{-2, -2, 2, 2}, "the other episode's units of the side"},
		{"magrpo", []float64{1, 1, -1, -1}, []float64{-1, -1, 1, 1}, "each side across the group"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			alloc, err := credit.Builtin().Parse(tc.spec)
			require.NoError(t, err)
			dst := [][]float64{make([]float64, 4), make([]float64, 4)}
			require.NoError(t, alloc.Allocate(t.Context(), []*trajectories.Episode{a, b}, dst))
			assert.InDeltaSlice(t, tc.wantA, dst[0], 1e-12, tc.reason)
			assert.InDeltaSlice(t, tc.wantB, dst[1], 1e-12, tc.reason)
		})
	}
}
