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
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
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
	cfg := play.Config{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Episodes: 6, GroupSize: 2, Concurrency: 3, Seed: 9}
	allocs := []trajectories.Allocator{credit.Team{}, credit.Individual{}}

	var rewards [][]float64 // per episode, per sample: the samples' dict rewards
	withSamples := &trajectories.Output{Allocators: allocs, Format: trajectories.RewardDict, Observe: func(ep *trajectories.Episode) {
		for _, s := range ep.Samples {
			rewards = append(rewards, []float64{s.Reward.Dict["team"], s.Reward.Dict["individual"]})
		}
	}}
	_, err = play.Run(context.Background(), cfg, withSamples)
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
	sum, err := play.Run(context.Background(), cfg, recordOnly)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5}, seen)
	assert.Equal(t, int64(len(credited)), sum.Samples)
	assert.Equal(t, rewards, credited)
}

func TestAnObserveCreditErrorStopsTheRun(t *testing.T) {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "3"})
	require.NoError(t, err)
	cfg := play.Config{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Episodes: 20, Seed: 1}
	boom := errors.New("boom")
	var calls int
	sum, err := play.Run(context.Background(), cfg, &trajectories.Output{ObserveCredit: func(rec *episode.Record, c *trajectories.Credit) error {
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

// records are a group of hand-made records: each status with its number
// of emitted turns, the game's label "g".
func records(group int64, statuses []protocol.Status, turns []int) []*episode.Record {
	recs := make([]*episode.Record, len(statuses))
	for i, st := range statuses {
		rec := &episode.Record{Scenario: "s", Index: int64(i), GroupIndex: group, Status: st, Label: "g", Seats: []episode.Seat{{ID: "a", Role: "r"}}}
		for k := range turns[i] {
			rec.Turns = append(rec.Turns, episode.Turn{Turn: k, Emit: true})
		}
		recs[i] = rec
	}
	return recs
}

// writeGroup finishes and writes one group, returning its samples
// written.
func writeGroup(t *testing.T, o *trajectories.Output, recs []*episode.Record) int {
	t.Helper()
	write, err := o.Finish(context.Background(), recs)
	require.NoError(t, err)
	total := 0
	for k := range recs {
		n, err := write(k)
		require.NoError(t, err)
		total += n
	}
	return total
}

// TestReserveNumbersEachGroupFromItsBlock: Reserve is asked once per
// group, in output order, for the group's samples (placeholders
// included), and the group's samples are numbered from what it returns.
func TestReserveNumbersEachGroupFromItsBlock(t *testing.T) {
	var asked []int
	next := int64(1000)
	var c trajectories.Collector
	o := &trajectories.Output{Sink: &c, IndexBase: 7, Reserve: func(n int) int64 {
		asked = append(asked, n)
		base := next
		next += int64(n) + 50 // another caller's block between
		return base
	}}
	done := protocol.StatusCompleted
	assert.Equal(t, 3, writeGroup(t, o, records(0, []protocol.Status{done, done}, []int{2, 1})))
	assert.Equal(t, 2, writeGroup(t, o, records(1, []protocol.Status{done, protocol.StatusAborted}, []int{1, 0})))
	assert.Equal(t, []int{3, 2}, asked, "one call per group, a placeholder counted")
	var got []int64
	for _, ep := range c.Episodes() {
		for _, s := range ep.Samples {
			got = append(got, s.Index)
		}
	}
	assert.Equal(t, []int64{1000, 1001, 1002, 1053, 1054}, got, "IndexBase unused")
}

// TestLabelRemoveFailedAndNoPlaceholders: Label replaces the game's label
// (kept as game_label when it differs), RemoveFailed marks the samples of
// aborted and failed episodes, and NoPlaceholders writes an episode
// without samples without one.
func TestLabelRemoveFailedAndNoPlaceholders(t *testing.T) {
	label, err := protocol.RawLabel([]byte(`{"answer": 4}`))
	require.NoError(t, err)
	var c trajectories.Collector
	o := &trajectories.Output{Sink: &c, Label: label, RemoveFailed: true, NoPlaceholders: true}
	recs := records(0, []protocol.Status{protocol.StatusCompleted, protocol.StatusFailed, protocol.StatusAborted, protocol.StatusTruncated}, []int{1, 1, 0, 1})
	recs[3].Label = `{"answer":4}` // the game's label says the same
	recs[0].Turns[0].Notes = map[string]any{"note": 1}
	assert.Equal(t, 3, writeGroup(t, o, recs))
	eps := c.Episodes()
	require.Len(t, eps, 4)
	assert.Empty(t, eps[2].Samples, "no placeholder")
	for i, ep := range []*trajectories.Episode{eps[0], eps[1], eps[3]} {
		require.Len(t, ep.Samples, 1)
		s := ep.Samples[0]
		assert.Equal(t, label, s.Label)
		assert.Equal(t, i == 1, s.RemoveSample, "episode %d", ep.Index)
		if ep.Index == 3 {
			assert.NotContains(t, s.Metadata.Extra, trajectories.GameLabelKey, "the same label stays put")
		} else {
			assert.Equal(t, "g", s.Metadata.Extra[trajectories.GameLabelKey])
		}
	}
	assert.Equal(t, map[string]any{"note": 1}, recs[0].Turns[0].Notes, "the turn's notes are not written into")
	assert.Equal(t, 1, eps[0].Samples[0].Metadata.Extra["note"])

	// Without NoPlaceholders the episode gets one, stamped too.
	var d trajectories.Collector
	o = &trajectories.Output{Sink: &d, Label: label, RemoveFailed: true}
	writeGroup(t, o, records(0, []protocol.Status{protocol.StatusAborted}, []int{0}))
	ph := d.Episodes()[0].Samples
	require.Len(t, ph, 1)
	assert.True(t, trajectories.IsPlaceholder(&ph[0]))
	assert.Equal(t, label, ph[0].Label)

	// Unset, the game's label and the samples stay as they are.
	var e trajectories.Collector
	writeGroup(t, &trajectories.Output{Sink: &e}, records(0, []protocol.Status{protocol.StatusFailed}, []int{1}))
	s := e.Episodes()[0].Samples[0]
	assert.Equal(t, protocol.TextLabel("g"), s.Label)
	assert.False(t, s.RemoveSample)
	assert.Nil(t, s.Metadata.Extra)
}
