package experiment_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// bruteForce tries every way of spreading n patrons over k nights.
func bruteForce(n, k int, c float64) float64 {
	if k == 1 {
		return elfarol.Utility(float64(n), c)
	}
	best := math.Inf(-1)
	for x := 0; x <= n; x++ {
		best = max(best, elfarol.Utility(float64(x), c)+bruteForce(n-x, k-1, c))
	}
	return best
}

func TestElFarolOptimumMatchesBruteForce(t *testing.T) {
	for _, c := range []float64{0.5, 1, 2, 3.5, 6} {
		for k := 1; k <= 4; k++ {
			for n := 0; n <= 12; n++ {
				got, err := experiment.ElFarolOptimum(n, k, c)
				require.NoError(t, err)
				assert.InDelta(t, bruteForce(n, k, c), got, 1e-12, "n=%d k=%d c=%v", n, k, c)
			}
		}
	}
}

func TestElFarolOptimumAtCapacity(t *testing.T) {
	// N = K·c patrons fill every night to capacity: G* = K·c/e.
	got, err := experiment.ElFarolOptimum(42, 7, 6)
	require.NoError(t, err)
	assert.InDelta(t, 7*6/math.E, got, 1e-12)
	// Far above capacity, the best is not to spread evenly: crowding one
	// night and keeping the others at capacity beats it.
	crowded, err := experiment.ElFarolOptimum(200, 7, 6)
	require.NoError(t, err)
	even := 4*elfarol.Utility(29, 6) + 3*elfarol.Utility(28, 6)
	assert.Greater(t, crowded, 2*even)
	assert.InDelta(t, 6*elfarol.Utility(6, 6)+elfarol.Utility(164, 6), crowded, 1e-12)
}

func TestElFarolOptimumRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		c    float64
	}{{-1, 7, 6}, {10, 0, 6}, {10, 7, 0}, {10, 7, math.NaN()}, {10, 7, math.Inf(1)}} {
		_, err := experiment.ElFarolOptimum(tc.n, tc.k, tc.c)
		assert.Error(t, err, "%+v", tc)
	}
}

func TestKnownOptimum(t *testing.T) {
	sc := elfarol.New()
	p, err := sc.Info().ParseParams(map[string]string{"agents": "42"})
	require.NoError(t, err)
	opt, ok := experiment.KnownOptimum("elfarol")
	require.True(t, ok)
	g, err := opt(p)
	require.NoError(t, err)
	assert.InDelta(t, 7*6/math.E, g, 1e-12)
	_, ok = experiment.KnownOptimum("tictactoe")
	assert.False(t, ok)

	opt, ok = experiment.KnownOptimum("committee")
	require.True(t, ok)
	for kv, want := range map[[2]string]float64{{"1", "4"}: 1, {"0", "4"}: 0.25, {"0", "5"}: 0.2} {
		p, err := committee.New().Info().ParseParams(map[string]string{"informed": kv[0], "options": kv[1]})
		require.NoError(t, err)
		g, err := opt(p)
		require.NoError(t, err)
		assert.Equal(t, want, g, "%v", kv)
	}
}
