package credit_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// shapleyOf runs the exact Shapley allocator on g's episode.
func shapleyOf(t *testing.T, g game) []float64 {
	t.Helper()
	var replays atomic.Int64
	got, err := allocate(credit.Shapley{MaxAgents: credit.MaxShapleyAgents}, g.episode(&replays))
	require.NoError(t, err)
	assert.Equal(t, int64(g.full()), replays.Load(), "each coalition but N is re-simulated once")
	return got[0]
}

func TestShapleyGloveGame(t *testing.T) {
	assert.InDeltaSlice(t, []float64{2.0 / 3, 1.0 / 6, 1.0 / 6}, shapleyOf(t, gloveGame()), 1e-12)
}

func TestShapleyProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 1; k <= 7; k++ {
		v, w := randomGame(rng, k), randomGame(rng, k)
		v.v[0], w.v[0] = rng.Float64(), rng.Float64() // v(∅) ≠ 0 too
		phiV, phiW := shapleyOf(t, v), shapleyOf(t, w)

		sum := 0.0
		for _, x := range phiV {
			sum += x
		}
		assert.InDelta(t, v.v[v.full()]-v.v[0], sum, 1e-12, "efficiency, k=%d", k)

		// Additivity: φ(v + w) = φ(v) + φ(w), and φ(c·v) = c·φ(v).
		sumGame, scaled := game{k, make([]float64, len(v.v))}, game{k, make([]float64, len(v.v))}
		for m := range v.v {
			sumGame.v[m] = v.v[m] + w.v[m]
			scaled.v[m] = -3 * v.v[m]
		}
		phiSum, phiScaled := shapleyOf(t, sumGame), shapleyOf(t, scaled)
		for i := range k {
			assert.InDelta(t, phiV[i]+phiW[i], phiSum[i], 1e-12, "additivity, k=%d player %d", k, i)
			assert.InDelta(t, -3*phiV[i], phiScaled[i], 1e-12, "linearity, k=%d player %d", k, i)
		}

		// Null player: make the last player change nothing.
		null := game{k, make([]float64, len(v.v))}
		last := 1 << (k - 1)
		for m := range v.v {
			null.v[m] = v.v[m&^last]
		}
		assert.InDelta(t, 0, shapleyOf(t, null)[k-1], 1e-12, "null player, k=%d", k)

		if k < 2 {
			continue
		}
		// Symmetry: make players 0 and 1 interchangeable.
		sym := game{k, make([]float64, len(v.v))}
		for m := range v.v {
			swapped := m &^ 3
			swapped |= (m & 1) << 1
			swapped |= (m & 2) >> 1
			sym.v[m] = (v.v[m] + v.v[swapped]) / 2
		}
		phi := shapleyOf(t, sym)
		assert.InDelta(t, phi[0], phi[1], 1e-12, "symmetry, k=%d", k)
	}
}

func TestExactShapleyAgreesWithTheDefinition(t *testing.T) {
	// The definition by permutations, all k! of them.
	rng := rand.New(rand.NewPCG(3, 4))
	g := randomGame(rng, 5)
	want := make([]float64, g.k)
	n := 0
	var permute func(perm []int, used int)
	permute = func(perm []int, used int) {
		if len(perm) == g.k {
			n++
			m := 0
			for _, i := range perm {
				want[i] += g.v[m|1<<i] - g.v[m]
				m |= 1 << i
			}
			return
		}
		for i := range g.k {
			if used&(1<<i) == 0 {
				permute(append(perm, i), used|1<<i)
			}
		}
	}
	permute(nil, 0)
	for i := range want {
		want[i] /= float64(n)
	}
	assert.InDeltaSlice(t, want, credit.ExactShapley(g.k, g.v), 1e-12)
}

func TestShapleyLimits(t *testing.T) {
	g := randomGame(rand.New(rand.NewPCG(5, 6)), 5)
	_, err := allocate(credit.Shapley{MaxAgents: 4}, g.episode(nil))
	require.ErrorIs(t, err, credit.ErrTooManyAgents)
	assert.Contains(t, err.Error(), "5 agents, above the limit of 4")

	_, err = allocate(credit.Shapley{Sim: credit.Sim{Budget: 30}}, g.episode(nil))
	require.ErrorIs(t, err, credit.ErrBudget)
	assert.Contains(t, err.Error(), "needs 31 re-simulations, the budget is 30")

	ep := g.episode(nil)
	ep.Replay = nil
	for _, a := range []trajectories.Allocator{credit.Shapley{}, credit.MonteCarloShapley{}, credit.LeaveOneOut{}, credit.Difference{}, credit.COMA{}} {
		_, err = allocate(a, ep)
		require.ErrorIs(t, err, credit.ErrNoReplay, a.Name())
	}
}

func TestMonteCarloShapleyConvergesToExact(t *testing.T) {
	// Random 8-agent games with values in [0, 1): every marginal lies in
	// (-1, 1), so with 4000 permutations an estimate's standard error is
	// below 1/√4000 ≈ 0.016 and in practice about 0.006. The stated
	// tolerance, 0.03, is about five standard errors.
	const tolerance = 0.03
	rng := rand.New(rand.NewPCG(7, 8))
	for n := range 5 {
		g := randomGame(rng, 8)
		exact := credit.ExactShapley(g.k, g.v)
		got, err := allocate(credit.MonteCarloShapley{Permutations: 4000, Seed: uint64(n)}, g.episode(nil))
		require.NoError(t, err)
		assert.InDeltaSlice(t, exact, got[0], tolerance, "game %d", n)
	}
}

func TestMonteCarloShapleyErrorShrinksWithPermutations(t *testing.T) {
	// The root-mean-square error over the agents of 20 random 8-agent
	// games, for growing numbers of permutations M. Expected: ∝ 1/√M.
	rng := rand.New(rand.NewPCG(9, 10))
	var games []game
	for range 20 {
		games = append(games, randomGame(rng, 8))
	}
	rmse := map[int]float64{}
	t.Log("permutations  rmse     rmse·√M")
	for _, m := range []int{10, 30, 100, 300, 1000, 3000} {
		ss, n := 0.0, 0
		for s, g := range games {
			exact := credit.ExactShapley(g.k, g.v)
			got, err := allocate(credit.MonteCarloShapley{Permutations: m, Seed: uint64(s)}, g.episode(nil))
			require.NoError(t, err)
			for i, x := range got[0] {
				ss += (x - exact[i]) * (x - exact[i])
				n++
			}
		}
		rmse[m] = math.Sqrt(ss / float64(n))
		t.Logf("%12d  %.5f  %.3f", m, rmse[m], rmse[m]*math.Sqrt(float64(m)))
	}
	// 300 times the permutations: the error should fall about 17-fold;
	// ask for 8.
	assert.Less(t, rmse[3000]*8, rmse[10])
}

func TestMonteCarloShapleyIsExactlyEfficientAndDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	g := randomGame(rng, 10)
	g.v[0] = 0.25
	var values [][]float64
	for _, parallel := range []int{1, 2, 5} {
		got, err := allocate(credit.MonteCarloShapley{Permutations: 7, Sim: credit.Sim{Parallel: parallel}}, g.episode(nil))
		require.NoError(t, err)
		sum := 0.0
		for _, x := range got[0] {
			sum += x
		}
		assert.InDelta(t, g.v[g.full()]-0.25, sum, 1e-12, "every permutation's marginals sum to v(N) - v(∅)")
		values = append(values, got[0])
	}
	assert.Equal(t, values[0], values[1], "parallelism does not change the values")
	assert.Equal(t, values[0], values[2])

	other, err := allocate(credit.MonteCarloShapley{Permutations: 7, Seed: 1}, g.episode(nil))
	require.NoError(t, err)
	assert.NotEqual(t, values[0], other[0], "another seed draws other permutations")
}

func TestMonteCarloShapleyBudgetNotes(t *testing.T) {
	g := randomGame(rand.New(rand.NewPCG(13, 14)), 10)
	var replays atomic.Int64
	a := credit.MonteCarloShapley{Permutations: 50, Sim: credit.Sim{Budget: 40}}
	dst := [][]float64{make([]float64, 10)}
	notes, err := credit.AllocateNoted(context.Background(), a, []*trajectories.Episode{g.episode(&replays)}, dst)
	require.NoError(t, err)
	require.Len(t, notes, 1)
	assert.Equal(t, true, notes[0][credit.NoteBudgetExhausted])
	used := notes[0][credit.NoteSamplesUsed].(int)
	assert.Less(t, used, 50)
	assert.Positive(t, used)
	assert.LessOrEqual(t, replays.Load(), int64(40), "the budget caps the re-simulations")

	// The estimate is the one of the permutations it used.
	fewer, err := allocate(credit.MonteCarloShapley{Permutations: used}, g.episode(nil))
	require.NoError(t, err)
	assert.Equal(t, fewer[0], dst[0])

	notes, err = credit.AllocateNoted(context.Background(), credit.MonteCarloShapley{Permutations: 5}, []*trajectories.Episode{g.episode(nil)}, dst)
	require.NoError(t, err)
	assert.Nil(t, notes[0], "nothing to say when the budget sufficed")

	_, err = allocate(credit.MonteCarloShapley{Sim: credit.Sim{Budget: 5}}, g.episode(nil))
	require.ErrorIs(t, err, credit.ErrBudget)
}

func TestLeaveOneOutOnAGame(t *testing.T) {
	g := gloveGame()
	got, err := allocate(credit.LeaveOneOut{}, g.episode(nil))
	require.NoError(t, err)
	// Without the left glove nothing; without one right glove still a pair.
	assert.Equal(t, []float64{1, 0, 0}, got[0])
}

func TestReplayErrorsAreReportedNotZeroed(t *testing.T) {
	g := gloveGame()
	ep := g.episode(nil)
	boom := errors.New("boom")
	ep.Replay = episode.ReplayerFunc(func(context.Context, episode.Counterfactual) (episode.Score, error) {
		return episode.Score{}, boom
	})
	for _, a := range []trajectories.Allocator{credit.Shapley{}, credit.MonteCarloShapley{}, credit.LeaveOneOut{Sim: credit.Sim{Parallel: 3}}, credit.Difference{}} {
		_, err := allocate(a, ep)
		require.ErrorIs(t, err, boom, a.Name())
		assert.Contains(t, err.Error(), "episode 0 of game: re-simulation with")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := [][]float64{make([]float64, 3)}
	err := credit.Shapley{}.Allocate(ctx, []*trajectories.Episode{g.episode(nil)}, dst)
	require.ErrorIs(t, err, context.Canceled)
}

func TestTheFirstFailingReplayIsReportedWhateverTheTiming(t *testing.T) {
	g := randomGame(rand.New(rand.NewPCG(15, 16)), 7)
	ep := g.episode(nil)
	// Coalitions {0, 2, 5} (mask 37, the 38th re-simulated) and {1, 4, 5}
	// (mask 50) fail.
	ep.Replay = episode.ReplayerFunc(func(_ context.Context, cf episode.Counterfactual) (episode.Score, error) {
		m := g.full()
		for _, i := range cf.Absent {
			m &^= 1 << i
		}
		if m == 37 || m == 50 {
			return episode.Score{}, errors.New("bad coalition")
		}
		return episode.Score{Team: g.v[m]}, nil
	})
	for range 20 {
		_, err := allocate(credit.Shapley{Sim: credit.Sim{Parallel: 4}}, ep)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `"p1", "p3", "p4", "p6" absent: bad coalition`)
	}
}
