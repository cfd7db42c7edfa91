package experiment_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
)

// TestFindModesOnKnownInputs pins the mode detection on inputs whose
// modes are known: the outcomes the issue reports (0.57 / 0.77 / 0.96),
// El Farol's bimodal N = 200 (ten seeds at 0.81, ten at 0.97), an
// outlier, and inputs that must stay one mode.
func TestFindModesOnKnownInputs(t *testing.T) {
	type mode struct {
		center float64
		seeds  int
	}
	cases := map[string]struct {
		xs   []float64
		want []mode
	}{
		"trimodal": {
			// No single gap is significant (p_1 ≈ 0.09), the two widest
			// together are (p_2 ≈ 4·10⁻⁴).
			xs:   []float64{0.96, 0.57, 0.77, 0.58, 0.95, 0.76, 0.97, 0.56, 0.78, 0.96},
			want: []mode{{0.57, 3}, {0.77, 3}, {0.96, 4}},
		},
		"two clear clusters, ten and ten": {
			xs: []float64{0.80, 0.81, 0.82, 0.81, 0.80, 0.82, 0.81, 0.81, 0.80, 0.82,
				0.96, 0.97, 0.98, 0.97, 0.96, 0.98, 0.97, 0.97, 0.96, 0.98},
			want: []mode{{0.81, 10}, {0.97, 10}},
		},
		"one outlier seed is not a mode": {
			xs:   []float64{0.81, 0.80, 0.83, 0.82, 0.81, 0.65, 0.82, 0.80},
			want: []mode{{5.69 / 7, 7}},
		},
		"two outliers apart are not modes": {
			xs:   []float64{0.30, 0.81, 0.80, 0.83, 0.82, 0.81, 0.65, 0.82, 0.80, 0.81, 0.82},
			want: []mode{{7.32 / 9, 9}},
		},
		"two seeds together are a mode": {
			xs:   []float64{0.65, 0.81, 0.80, 0.83, 0.82, 0.81, 0.65, 0.82, 0.80, 0.81, 0.82},
			want: []mode{{0.65, 2}, {7.32 / 9, 9}},
		},
		"an even spread is one mode": {
			xs:   []float64{0.50, 0.52, 0.54, 0.56, 0.58, 0.60, 0.62, 0.64, 0.66, 0.68, 0.70},
			want: []mode{{0.6, 11}},
		},
		"noise below the resolution is one mode": {
			// The gap 0.0006 is most of the range, but 0.06% of the values.
			xs:   []float64{0.9890, 0.9891, 0.9890, 0.9897, 0.9898},
			want: []mode{{0.98932, 5}},
		},
		"equal values": {
			xs:   []float64{0, 0, 0},
			want: []mode{{0, 3}},
		},
		"two equal groups": {
			xs:   []float64{0, 1, 0, 1, 0, 1},
			want: []mode{{0, 3}, {1, 3}},
		},
		"one value": {
			xs:   []float64{0.5},
			want: []mode{{0.5, 1}},
		},
		"two values cannot be told apart": {
			xs:   []float64{0.5, 0.75},
			want: []mode{{0.625, 2}},
		},
		"negative values": {
			xs:   []float64{-10, -10.5, -9.8, 5, 5.2},
			want: []mode{{-10.1, 3}, {5.1, 2}},
		},
		"values that are not finite are left out": {
			xs:   []float64{math.NaN(), 0.2, math.Inf(1), 0.9, 0.21, 0.91, 0.2},
			want: []mode{{0.61 / 3, 3}, {0.905, 2}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := experiment.FindModes(c.xs, experiment.ModeRule{})
			require.Len(t, got, len(c.want), "%+v", got)
			finite := 0
			for _, x := range c.xs {
				if !math.IsNaN(x) && !math.IsInf(x, 0) {
					finite++
				}
			}
			for i, w := range c.want {
				assert.InDelta(t, w.center, got[i].Center, 1e-9, "mode %d", i)
				assert.Equal(t, w.seeds, got[i].Seeds, "mode %d", i)
				assert.InDelta(t, float64(w.seeds)/float64(finite), got[i].Share, 1e-12, "mode %d", i)
				assert.LessOrEqual(t, got[i].Low, got[i].Center)
				assert.GreaterOrEqual(t, got[i].High, got[i].Center)
				if i > 0 {
					assert.Less(t, got[i-1].High, got[i].Low, "modes are disjoint and in order")
				}
			}
		})
	}
	assert.Empty(t, experiment.FindModes(nil, experiment.ModeRule{}))
	assert.Empty(t, experiment.FindModes([]float64{math.NaN()}, experiment.ModeRule{}))
}

// TestFindModesMinShare: the least share of a mode is the rule's. Of 10
// seeds in clusters of 3, 3 and 4, a share of 0.35 keeps the cluster of 4
// only, 0.5 none of them.
func TestFindModesMinShare(t *testing.T) {
	xs := []float64{0.96, 0.57, 0.77, 0.58, 0.95, 0.76, 0.97, 0.56, 0.78, 0.96}
	centers := func(share float64) []float64 {
		var out []float64
		for _, m := range experiment.FindModes(xs, experiment.ModeRule{MinShare: share}) {
			out = append(out, math.Round(100*m.Center)/100)
		}
		return out
	}
	assert.Equal(t, []float64{0.57, 0.77, 0.96}, centers(0))
	assert.Equal(t, []float64{0.57, 0.77, 0.96}, centers(0.3))
	assert.Equal(t, []float64{0.96}, centers(0.35))
	assert.Empty(t, centers(0.5))
}

// TestFindModesOnRandomDraws: a continuous spread, values drawn uniformly
// at random or normally, is one mode but in a few of the draws (the
// rule's significance is 1%; the min over the sets of gaps tested makes
// it 1 to 3%); the gap rule FindModes had (a gap of 0.2 of the range
// splits) split 96% of the uniform draws of 10 and a third of those of 20. Two or three clusters
// of 10 seeds, normal with their centres 12 standard deviations apart,
// are that many modes in 98% of the draws or more.
func TestFindModesOnRandomDraws(t *testing.T) {
	const draws = 1000
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{5, 10, 20, 50, 200} {
		uniform, normal := 0, 0
		for range draws {
			xs, ys := make([]float64, n), make([]float64, n)
			for i := range xs {
				xs[i] = 0.3 + 0.5*rng.Float64()
				ys[i] = 0.5 + 0.01*rng.NormFloat64()
			}
			modes := experiment.FindModes(xs, experiment.ModeRule{})
			require.NotEmpty(t, modes, "n=%d: %v", n, xs)
			if len(modes) > 1 {
				uniform++
			}
			if len(experiment.FindModes(ys, experiment.ModeRule{})) > 1 {
				normal++
			}
		}
		t.Logf("%d seeds: split in %d of %d uniform draws, %d normal draws", n, uniform, draws, normal)
		assert.LessOrEqual(t, uniform, draws*4/100, "n=%d: a uniform spread is one mode", n)
		assert.LessOrEqual(t, normal, draws*4/100, "n=%d: a normal spread is one mode", n)
	}
	for _, k := range []int{2, 3} {
		wrong := 0
		for range draws {
			var xs []float64
			for c := range k {
				for range 10 {
					xs = append(xs, 0.5+0.12*float64(c)+0.01*rng.NormFloat64())
				}
			}
			if modes := experiment.FindModes(xs, experiment.ModeRule{}); len(modes) != k {
				wrong++
			}
		}
		t.Logf("%d clusters of 10 seeds, 12 sd apart: not %d modes in %d of %d draws", k, k, wrong, draws)
		assert.LessOrEqual(t, wrong, draws*2/100, "%d clusters are %d modes", k, k)
	}
}

// TestFindModesIgnoresOrder: the modes depend on the values, not on the
// order of the seeds.
func TestFindModesIgnoresOrder(t *testing.T) {
	xs := []float64{0.3, 0.9, 0.31, 0.88, 0.5, 0.32, 0.89}
	want := experiment.FindModes(xs, experiment.ModeRule{})
	require.Len(t, want, 2, "0.5 is a stray")
	for i := range xs {
		rotated := append(append([]float64{}, xs[i:]...), xs[:i]...)
		assert.Equal(t, want, experiment.FindModes(rotated, experiment.ModeRule{}))
	}
}

// TestModeRuleAndDiagnoseSamplesAreChecked: a mode rule whose numbers are
// not shares, and diagnostics of fewer than 2 samples (the learnability's
// correction needs a variance), are refused before anything runs.
func TestModeRuleAndDiagnoseSamplesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		edit func(*experiment.Config)
		want string
	}{
		{func(c *experiment.Config) { c.Diagnose = experiment.Diagnose{Episodes: 2, Samples: 1} }, "diagnose samples 1: at least 2"},
		{func(c *experiment.Config) { c.Modes.MinShare = 1.5 }, "mode min share 1.5"},
		{func(c *experiment.Config) { c.Modes.Significance = -0.1 }, "mode significance -0.1"},
	} {
		cfg := smallBar(t, "")
		tc.edit(&cfg)
		_, err := experiment.Run(context.Background(), cfg)
		require.ErrorIs(t, err, experiment.ErrBadConfig, tc.want)
		assert.ErrorContains(t, err, tc.want)
	}
}
