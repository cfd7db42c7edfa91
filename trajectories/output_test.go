package trajectories_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestObserveCreditSeesWhatTheSamplesHold: ObserveCredit gets every
// episode's record and credit, in order, without the samples projected,
// and its credit is what Observe's samples are rewarded with.
func TestObserveCreditSeesWhatTheSamplesHold(t *testing.T) {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "5", "nights": "3"})
	require.NoError(t, err)
	cfg := env.RunConfig{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Episodes: 6, GroupSize: 2, Concurrency: 3, Seed: 9}
	allocs := []trajectories.Allocator{credit.Team{}, credit.Individual{}}

	var rewards [][]float64 // per episode, per sample: the samples' dict rewards
	withSamples := &trajectories.Output{Allocators: allocs, Format: trajectories.RewardDict, Observe: func(ep *trajectories.Episode) {
		for _, s := range ep.Samples {
			rewards = append(rewards, []float64{s.Reward.Dict["team"], s.Reward.Dict["individual"]})
		}
	}}
	_, err = env.Run(context.Background(), cfg, withSamples)
	require.NoError(t, err)

	var seen []int64
	var credited [][]float64
	recordOnly := &trajectories.Output{Allocators: allocs, ObserveCredit: func(rec *episode.Record, c *trajectories.Credit) error {
		seen = append(seen, rec.Index)
		require.Equal(t, []string{"team", "individual"}, c.Allocators)
		for k := range rec.Emitted() {
			credited = append(credited, []float64{c.Values[0][k], c.Values[1][k]})
		}
		return nil
	}}
	assert.True(t, recordOnly.Recycles(), "ObserveCredit keeps nothing: the run may reuse the records")
	sum, err := env.Run(context.Background(), cfg, recordOnly)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5}, seen)
	assert.Equal(t, int64(len(credited)), sum.Samples)
	assert.Equal(t, rewards, credited)
}

func TestAnObserveCreditErrorStopsTheRun(t *testing.T) {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "3"})
	require.NoError(t, err)
	cfg := env.RunConfig{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Episodes: 20, Seed: 1}
	boom := errors.New("boom")
	var calls int
	sum, err := env.Run(context.Background(), cfg, &trajectories.Output{ObserveCredit: func(rec *episode.Record, c *trajectories.Credit) error {
		calls++
		assert.Nil(t, c, "no allocators, no credit")
		if rec.Index == 2 {
			return boom
		}
		return nil
	}})
	require.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "episode 2")
	assert.Equal(t, 3, calls)
	assert.Equal(t, 2, sum.Episodes, "the episode whose observer failed is not counted as written")
}
