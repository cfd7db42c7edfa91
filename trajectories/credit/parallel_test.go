package credit_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestReplaysRunInParallel counts, in synctest's virtual time, how long
// exact Shapley takes over a 4-player game whose every re-simulation takes
// one second: the first replay runs alone, the other 14 on Parallel
// workers at once.
func TestReplaysRunInParallel(t *testing.T) {
	for parallel, want := range map[int]time.Duration{1: 15 * time.Second, 2: 8 * time.Second, 4: 5 * time.Second, 16: 2 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			g := gloveGame()
			g = game{4, append(g.v, g.v...)} // a fourth player who changes nothing
			ep := g.episode(nil)
			inner := ep.Replay
			ep.Replay = episode.ReplayerFunc(func(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
				time.Sleep(time.Second)
				return inner.Replay(ctx, cf)
			})
			start := time.Now()
			got, err := allocate(credit.Shapley{Sim: credit.Sim{Parallel: parallel}}, ep)
			require.NoError(t, err)
			assert.Equal(t, want, time.Since(start), "parallel %d", parallel)
			assert.InDeltaSlice(t, []float64{2.0 / 3, 1.0 / 6, 1.0 / 6, 0}, got[0], 1e-12)
		})
	}
}

// TestCheapReplaysStayOnTheCallingGoroutine: re-simulations that take no
// time (a game that rescores its counterfactuals) start no worker, however
// many there are and whatever Parallel says; the values are the same as
// when they fan out.
func TestCheapReplaysStayOnTheCallingGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gloveGame()
		g = game{4, append(g.v, g.v...)}
		ep := g.episode(nil)
		inner := ep.Replay
		before := runtime.NumGoroutine()
		calls := 0
		ep.Replay = episode.ReplayerFunc(func(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
			calls++ // unsynchronised: the race detector objects to a worker
			assert.Equal(t, before, runtime.NumGoroutine(), "a replay on a worker")
			return inner.Replay(ctx, cf)
		})
		got, err := allocate(credit.Shapley{Sim: credit.Sim{Parallel: 16}}, ep)
		require.NoError(t, err)
		assert.Equal(t, 15, calls)
		assert.InDeltaSlice(t, []float64{2.0 / 3, 1.0 / 6, 1.0 / 6, 0}, got[0], 1e-12)
	})
}
