package experiment

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStudentTMatchesTables(t *testing.T) {
	// Two-sided 5% and 1% critical values of Student's t.
	for _, c := range []struct{ t, df, p float64 }{
		{2.093024, 19, 0.05}, {2.861000, 19, 0.01}, {2.262157, 9, 0.05},
		{12.7062, 1, 0.05}, {1.959964, 1e7, 0.05}, {0, 5, 1},
	} {
		assert.InDelta(t, c.p, studentTwoSided(c.t, c.df), 2e-5, "t=%v df=%v", c.t, c.df)
	}
}

func TestBootstrapCICoversTheMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	covered, trials := 0, 300
	for k := range trials {
		xs := make([]float64, 20)
		for i := range xs {
			xs[i] = 0.7 + 0.1*rng.NormFloat64()
		}
		lo, hi := bootstrapCI(xs, uint64(k))
		lo2, hi2 := bootstrapCI(xs, uint64(k))
		assert.Equal(t, [2]float64{lo, hi}, [2]float64{lo2, hi2}, "the same seed gives the same interval")
		m := summarise(xs).Mean
		assert.True(t, lo <= m && m <= hi)
		if lo <= 0.7 && 0.7 <= hi {
			covered++
		}
	}
	// A percentile bootstrap of 20 normal values covers a little under
	// its nominal 95%.
	cover := float64(covered) / float64(trials)
	assert.Greater(t, cover, 0.88)
	assert.Less(t, cover, 0.99)
	lo, hi := bootstrapCI([]float64{3}, 1)
	assert.Equal(t, [2]float64{3, 3}, [2]float64{lo, hi})
}

func TestSignFlipIsExactForFewSeeds(t *testing.T) {
	// Three positive differences: of the 8 flips, only all-plus and
	// all-minus reach |sum| = 3.
	assert.Equal(t, 0.25, signFlip([]float64{1, 1, 1}, 1))
	assert.Equal(t, 1.0, signFlip([]float64{0, 0}, 1))
	// 1, 2, -3: sums ±0, ±2, ±4, ±6 over flips; observed 0: every flip reaches it.
	assert.Equal(t, 1.0, signFlip([]float64{1, 2, -3}, 1))
	// Twenty equal positive differences: drawn flips; p ≈ 2/2^20, bounded
	// below by the observed flip's 1/(draws+1).
	d := make([]float64, 20)
	for i := range d {
		d[i] = 0.1
	}
	assert.Less(t, signFlip(d, 1), 1e-3)
}

func TestCompareAndHolm(t *testing.T) {
	a := []float64{0.9, 0.8, 0.95, 0.85}
	b := []float64{0.7, 0.75, 0.7, 0.8}
	c := compare(a, b, 3)
	assert.Equal(t, 4, c.N)
	assert.Equal(t, 4, c.Wins)
	assert.InDelta(t, 0.1375, c.Diff, 1e-12)
	sd := summarise([]float64{0.2, 0.05, 0.25, 0.05}).Std
	assert.InDelta(t, 0.1375/sd, float64(c.D), 1e-12)
	assert.Equal(t, 2.0/16, c.PSign)
	assert.True(t, c.CILow > 0 && c.CIHigh > c.CILow)
	tstat := 0.1375 / (sd / 2)
	assert.InDelta(t, studentTwoSided(tstat, 3), c.PT, 1e-12)

	same := compare(a, a, 3)
	assert.Equal(t, Number(0), same.D)
	assert.Equal(t, 1.0, same.PT)
	assert.Equal(t, 4, same.Ties)

	cs := []Comparison{{PSign: 0.01}, {PSign: 0.04}, {PSign: 0.03}}
	holm(cs)
	assert.InDelta(t, 0.03, cs[0].PHolm, 1e-12)
	assert.InDelta(t, 0.06, cs[2].PHolm, 1e-12)
	assert.InDelta(t, 0.06, cs[1].PHolm, 1e-12, "step-down p-values never decrease")
	assert.False(t, math.IsNaN(cs[1].PHolm))
}

// TestEveryComparisonEncodes: seeds that all differ by the same amount
// have an infinite d_z, which JSON cannot hold: it is written null, and
// the rest of the comparison as usual.
func TestEveryComparisonEncodes(t *testing.T) {
	c := compare([]float64{1, 2, 3}, []float64{0.5, 1.5, 2.5}, 1)
	assert.True(t, math.IsInf(float64(c.D), 1))
	b, err := json.Marshal(c)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"cohen_dz":null`)
	assert.Contains(t, string(b), `"diff":0.5`)
	c = compare([]float64{0, 1}, []float64{1, 2}, 1)
	assert.True(t, math.IsInf(float64(c.D), -1))
	_, err = json.Marshal(c)
	require.NoError(t, err)
}
