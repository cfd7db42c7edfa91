package credit_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// unevenGroup is one GRPO group of three episodes whose roles have uneven
// numbers of agents: role "a" has agents with team rewards 1, 1, 3, 5 (two
// in the first episode), role "b" a single agent.
func unevenGroup() []*trajectories.Episode {
	return []*trajectories.Episode{
		agentEpisode(1, []float64{0, 2, 9}, seats("a", "a", "b"), []int{1, 2, 1}),
		agentEpisode(3, []float64{4}, seats("a"), []int{1}),
		agentEpisode(5, []float64{6}, seats("a"), []int{3}),
	}
}

func TestGroupNormOnUnevenGroups(t *testing.T) {
	// Role a's units: rewards 1, 1, 3, 5; mean 2.5; sample std
	// sqrt((2.25+2.25+0.25+6.25)/3) = sqrt(11/3).
	std := math.Sqrt(11.0 / 3)
	r := []float64{1, 1, 3, 5}
	for name, tc := range map[string]struct {
		a   credit.GroupNorm
		adv func(i int) float64
	}{
		"grpo":    {credit.GRPO(), func(i int) float64 { return (r[i] - 2.5) / (std + 1e-6) }},
		"dr-grpo": {credit.DrGRPO(), func(i int) float64 { return r[i] - 2.5 }},
		// RLOO's baseline leaves out the unit's episode: units 0 and 1
		// share episode 0 (and its reward), so theirs is the mean of
		// units 2 and 3.
		"rloo": {credit.RLOO(), func(i int) float64 { return r[i] - []float64{8.0 / 2, 8.0 / 2, 7.0 / 3, 5.0 / 3}[i] }},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := allocate(tc.a, unevenGroup()...)
			require.NoError(t, err)
			// Every sample of a unit gets its unit's advantage; b, alone in
			// its group, gets 0.
			assert.InDeltaSlice(t, []float64{tc.adv(0), tc.adv(1), tc.adv(1), 0}, got[0], 1e-12)
			assert.InDeltaSlice(t, []float64{tc.adv(2)}, got[1], 1e-12)
			assert.InDeltaSlice(t, []float64{tc.adv(3), tc.adv(3), tc.adv(3)}, got[2], 1e-12)
			if name == "rloo" {
				return // centred only when every episode has as many units
			}
			sum := 0.0
			for i := range r {
				sum += tc.adv(i)
			}
			assert.InDelta(t, 0, sum, 1e-12, "a group's advantages are centred")
		})
	}
}

func TestGroupNormBaseAndKey(t *testing.T) {
	got, err := allocate(credit.GroupNorm{Mode: credit.NormCentre, Base: credit.SourceIndividual}, unevenGroup()...)
	require.NoError(t, err)
	// Role a's individual scores: 0, 2, 4, 6; mean 3.
	assert.Equal(t, [][]float64{{-3, -1, -1, 0}, {1}, {3, 3, 3}}, got)

	got, err = allocate(credit.GroupNorm{Mode: credit.NormCentre, Key: credit.KeyScenario}, unevenGroup()...)
	require.NoError(t, err)
	// One group of every agent: rewards 1, 1, 1, 3, 5; mean 2.2.
	assert.InDeltaSlice(t, []float64{-1.2, -1.2, -1.2, -1.2}, got[0], 1e-12)
	assert.InDeltaSlice(t, []float64{0.8}, got[1], 1e-12)

	got, err = allocate(credit.GroupNorm{Mode: credit.NormCentre, Key: credit.KeyAgent}, unevenGroup()...)
	require.NoError(t, err)
	// a0 plays in all three episodes (1, 3, 5); a1 and a2 once each.
	assert.Equal(t, [][]float64{{-2, 0, 0, 0}, {0}, {2, 2, 2}}, got)

	_, err = allocate(credit.GroupNorm{Base: credit.SourceIndividual}, agentEpisode(1, nil, seats("a"), []int{1}))
	require.ErrorIs(t, err, credit.ErrNoAgentScores)
}

func TestGroupNormLeavesUnfinishedEpisodesOut(t *testing.T) {
	group := unevenGroup()
	group[2].Status = protocol.StatusAborted
	got, err := allocate(credit.DrGRPO(), group...)
	require.NoError(t, err)
	// Role a: 1, 1, 3 (the aborted episode's 5 does not count); mean 5/3.
	assert.InDeltaSlice(t, []float64{-2.0 / 3, -2.0 / 3, -2.0 / 3, 0}, got[0], 1e-12)
	assert.Equal(t, []float64{0, 0, 0}, got[2])
}

func TestGroupNormGivesZeroWhenNothingDiffers(t *testing.T) {
	group := []*trajectories.Episode{
		agentEpisode(2, nil, seats("a"), []int{1}),
		agentEpisode(2, nil, seats("a"), []int{1}),
	}
	for _, a := range []credit.GroupNorm{credit.GRPO(), {Mode: credit.NormStd}, credit.RLOO()} {
		got, err := allocate(a, group...)
		require.NoError(t, err)
		assert.Equal(t, [][]float64{{0}, {0}}, got, a.Name())
	}
	got, err := allocate(credit.GRPO(), agentEpisode(7, nil, seats("a", "b"), []int{1, 1}))
	require.NoError(t, err)
	assert.Equal(t, [][]float64{{0, 0}}, got, "groups of one get 0")
}

func TestParseGroupKey(t *testing.T) {
	k, err := credit.ParseGroupKey("role+scenario")
	require.NoError(t, err)
	assert.Equal(t, credit.KeyRole|credit.KeyScenario, k)
	assert.Equal(t, "scenario+role", k.String())
	assert.Equal(t, credit.DefaultGroupKey.String(), credit.GroupKey(0).String())
	for _, bad := range []string{"", "role+", "role+role", "seat"} {
		_, err := credit.ParseGroupKey(bad)
		assert.ErrorIs(t, err, credit.ErrBadAllocatorParam, bad)
	}
}

func TestGroupNormOfEqualRewardsIsExactlyZero(t *testing.T) {
	// 0.1 + 0.1 + 0.1 is not 3 × 0.1 in floating point; equal rewards
	// must still give exactly 0, not a rounding residue.
	group := []*trajectories.Episode{agentEpisode(0.1, nil, seats("a", "a", "a"), []int{1, 1, 1})}
	for _, a := range []credit.GroupNorm{credit.GRPO(), credit.DrGRPO(), credit.RLOO()} {
		got, err := allocate(a, group...)
		require.NoError(t, err)
		assert.Equal(t, [][]float64{{0, 0, 0}}, got, a.Name())
	}
}
