package play_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestRunCancelledWritesAPrefix: a run cancelled while an early group is
// still playing and later groups have finished writes exactly the groups
// before the cut one, whatever finished after it, and counts the rest as
// interrupted. (Writing a later group behind a gap was a bug.)
func TestRunCancelledWritesAPrefix(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "4"})
	cfg.Episodes, cfg.GroupSize, cfg.Concurrency = 40, 4, 8
	want, _ := runJSONL(t, cfg, trajectories.Flat, nil)

	local := &env.LocalExecutor{Play: env.Play{Scenario: cfg.Scenario, Params: cfg.Params, Policy: cfg.Policy}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	later := 0 // episodes of groups 3..6 played
	written := make(chan struct{})
	var once sync.Once
	cfg.Progress = func(p play.Progress) {
		if p.Done >= 8 {
			once.Do(func() { close(written) })
		}
	}
	cfg.Executor = env.ExecutorFunc(func(ctx context.Context, req env.Request) *episode.Record {
		switch g := req.GroupIndex; {
		case g == 2:
			// Group 2 plays until the run is cancelled: it is cut.
			<-ctx.Done()
			return &episode.Record{Scenario: req.Scenario, Index: req.Index, RolloutID: req.RolloutID, GroupIndex: g,
				Status: protocol.StatusAborted, End: env.EndInterrupted, Err: context.Cause(ctx).Error()}
		case g >= 3 && g <= 6:
			<-written // groups 0 and 1 are out
			rec := local.Execute(ctx, req)
			mu.Lock()
			if later++; later == 16 {
				cancel() // four later groups finished whole
			}
			mu.Unlock()
			return rec
		}
		return local.Execute(ctx, req)
	})
	var buf bytes.Buffer
	sum, err := play.Run(ctx, cfg, teamOut(trajectories.NewJSONLWriter(&buf, trajectories.Flat)))
	require.ErrorIs(t, err, context.Canceled)
	rollouts, rerr := trajectories.ReadRollouts(bytes.NewReader(buf.Bytes()))
	require.NoError(t, rerr)
	require.Len(t, rollouts, 8, "groups 0 and 1, whole")
	assert.Equal(t, 8, sum.Episodes, "the summary counts what the file holds")
	assert.Equal(t, int64(32), sum.Samples)
	assert.GreaterOrEqual(t, sum.Interrupted, 16+1, "the cut group and the whole groups behind it")
	assert.True(t, bytes.HasPrefix(want, buf.Bytes()), "the output is a prefix of the uninterrupted run's")
	assert.Equal(t, string(want[:len(buf.Bytes())]), buf.String())
}

// TestRunFromAGroupContinuesTheRun: a run that starts at group K, numbering
// its samples from those of the groups before, writes what the whole run
// writes after them, byte for byte.
func TestRunFromAGroupContinuesTheRun(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "5"})
	cfg.Episodes, cfg.GroupSize, cfg.Concurrency = 23, 3, 4
	for _, layout := range []trajectories.Layout{trajectories.Flat, trajectories.Nested} {
		full, _ := runJSONL(t, cfg, layout, nil)
		head := cfg
		head.Episodes = 4 * 3 // the first four groups, as the run plays them
		prefix, hs := runJSONL(t, head, layout, nil)
		require.True(t, bytes.HasPrefix(full, prefix))

		tail := cfg
		tail.FirstGroup = 4
		var done []play.Progress
		tail.Progress = func(p play.Progress) { done = append(done, p) }
		rest, sum := runJSONL(t, tail, layout, &trajectories.Output{IndexBase: hs.Samples, Allocators: teamOut(nil).Allocators})
		assert.Equal(t, string(full), string(prefix)+string(rest))
		assert.Equal(t, 23-12, sum.Episodes, "the summary is this run's")
		require.NotEmpty(t, done)
		assert.Equal(t, play.Progress{Done: 23, Total: 23}, play.Progress{Done: done[len(done)-1].Done, Total: done[len(done)-1].Total})
	}

	all := cfg
	all.FirstGroup = 8 // every group written: nothing to play
	out, sum := runJSONL(t, all, trajectories.Flat, nil)
	assert.Empty(t, out)
	assert.Zero(t, sum.Episodes)
	all.FirstGroup = 9
	_, err := play.Run(context.Background(), all, teamOut(trajectories.Discard))
	assert.ErrorIs(t, err, env.ErrBadConfig)
}

// TestRequestIsTheListsEntry: Request(i) is Requests()[i], for the
// executors that take the list, and Requester()(i), for those that make
// them one by one.
func TestRequestIsTheListsEntry(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3"})
	cfg.GroupSize, cfg.RolloutIDBase, cfg.GroupIndexBase = 3, 100, 7
	reqs := cfg.Requests()
	require.Len(t, reqs, cfg.Episodes)
	request := cfg.Requester()
	for i, r := range reqs {
		require.Equal(t, r, cfg.Request(i))
		require.Equal(t, r, request(i))
	}
	assert.Equal(t, int64(7+13), reqs[39].GroupIndex)
	assert.Equal(t, int64(139), reqs[39].RolloutID)
}
