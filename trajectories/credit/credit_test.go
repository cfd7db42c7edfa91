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

func TestTeamAndEqualSplitSumToTheTeamReward(t *testing.T) {
	// Three agents; the second takes three turns, so per-agent and
	// per-sample splits differ.
	ep := agentEpisode(12, nil, seats("r", "r", "r"), []int{1, 3, 1})

	team, err := allocate(credit.Team{}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{12, 12, 12, 12, 12}, team[0])

	perAgent, err := allocate(credit.EqualSplit{}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{4, 4, 4, 4, 4}, perAgent[0], "G/K on every sample of every agent")

	perSample, err := allocate(credit.EqualSplit{PerSample: true}, ep)
	require.NoError(t, err)
	sum := 0.0
	for _, v := range perSample[0] {
		assert.InDelta(t, 12.0/5, v, 1e-12)
		sum += v
	}
	assert.InDelta(t, 12, sum, 1e-12, "the samples' values sum to G")
}

func TestIndividualGivesEachAgentItsOwnScore(t *testing.T) {
	ep := agentEpisode(5, []float64{1, -2, 3}, seats("r", "r", "s"), []int{2, 1, 1})
	got, err := allocate(credit.Individual{}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 1, -2, 3}, got[0])

	failed := agentEpisode(0, nil, seats("r"), []int{1})
	failed.Status = protocol.StatusFailed
	got, err = allocate(credit.Individual{}, failed)
	require.NoError(t, err, "an unfinished episode has no scores to miss")
	assert.Equal(t, []float64{0}, got[0])

	_, err = allocate(credit.Individual{}, agentEpisode(5, nil, seats("r"), []int{1}))
	require.ErrorIs(t, err, credit.ErrNoAgentScores)
	assert.Contains(t, err.Error(), "test", "the error names the scenario")
}

func TestASampleOfAnUnknownAgentIsAnError(t *testing.T) {
	ep := agentEpisode(1, []float64{1}, seats("r"), []int{1})
	ep.Samples[0].Metadata.Agent = "ghost"
	for _, a := range []trajectories.Allocator{credit.Individual{}, credit.GRPO(), credit.Discount{Gamma: 0.5}} {
		_, err := allocate(a, ep)
		require.ErrorIs(t, err, credit.ErrBadEpisode, a.Name())
		assert.Contains(t, err.Error(), `"ghost"`)
	}
}

func TestDiscountByTurn(t *testing.T) {
	// a0 takes 3 turns, a1 one. T is each agent's last turn, so the last
	// turn of each keeps the full value.
	ep := agentEpisode(8, []float64{2, 4}, seats("r", "r"), []int{3, 1})
	got, err := allocate(credit.Discount{Gamma: 0.5}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{8 * 0.25, 8 * 0.5, 8, 8}, got[0])

	got, err = allocate(credit.Discount{Of: credit.Individual{}, Gamma: 0.5}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{2 * 0.25, 2 * 0.5, 2, 4}, got[0], "it composes with the allocator it discounts")

	got, err = allocate(credit.Discount{Gamma: 1}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{8, 8, 8, 8}, got[0], "γ = 1 changes nothing")

	got, err = allocate(credit.Discount{Gamma: 0}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0, 8, 8}, got[0], "γ = 0 keeps only last turns")
}

func TestDiscountByStep(t *testing.T) {
	// Steps 1..4; the episode's last step is 4.
	ep := agentEpisode(8, nil, seats("r", "r"), []int{3, 1})
	got, err := allocate(credit.Discount{Gamma: 0.5, Unit: credit.UnitStep}, ep)
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 2, 4, 8}, got[0])
}

func TestDiscountRejectsGammaOutsideTheUnitInterval(t *testing.T) {
	ep := agentEpisode(8, nil, seats("r"), []int{1})
	for _, g := range []float64{-0.1, 1.5, math.NaN()} {
		_, err := allocate(credit.Discount{Gamma: g}, ep)
		require.ErrorIs(t, err, credit.ErrBadAllocatorParam, "gamma %v", g)
	}
}

func TestDiscountPassesOnWhatItWraps(t *testing.T) {
	rae, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5})
	require.NoError(t, err)
	d := credit.Discount{Of: rae, Gamma: 0.9}
	assert.True(t, trajectories.AnySequential([]trajectories.Allocator{d}), "a discounted RAE is still sequential")
	assert.False(t, trajectories.AnySequential([]trajectories.Allocator{credit.Discount{Gamma: 0.9}}))
	assert.Equal(t, credit.Needs{Replay: true, Null: true}, credit.NeedsOf(credit.Discount{Of: credit.Difference{}, Gamma: 1}))
	assert.Equal(t, credit.Needs{}, credit.NeedsOf(credit.Team{}))
}
