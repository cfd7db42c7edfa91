package experiment_test

import (
	"math"
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
			xs:   []float64{0.96, 0.57, 0.77, 0.58, 0.95, 0.76, 0.97, 0.56, 0.78, 0.96},
			want: []mode{{0.57, 3}, {0.77, 3}, {0.96, 4}},
		},
		"bimodal, ten and ten": {
			xs: []float64{0.80, 0.81, 0.82, 0.81, 0.80, 0.82, 0.81, 0.81, 0.80, 0.82,
				0.96, 0.97, 0.98, 0.97, 0.96, 0.98, 0.97, 0.97, 0.96, 0.98},
			want: []mode{{0.81, 10}, {0.97, 10}},
		},
		"an outlier is a mode of its own": {
			xs:   []float64{0.81, 0.80, 0.83, 0.82, 0.81, 0.65, 0.82, 0.80},
			want: []mode{{0.65, 1}, {5.69 / 7, 7}},
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
		"one value": {
			xs:   []float64{0.5},
			want: []mode{{0.5, 1}},
		},
		"negative values": {
			xs:   []float64{-10, -10.5, -9.8, 5, 5.2},
			want: []mode{{-10.1, 3}, {5.1, 2}},
		},
		"values that are not finite are left out": {
			xs:   []float64{math.NaN(), 0.2, math.Inf(1), 0.9, 0.21},
			want: []mode{{0.205, 2}, {0.9, 1}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := experiment.FindModes(c.xs)
			require.Len(t, got, len(c.want), "%+v", got)
			total, share := 0, 0.0
			for i, w := range c.want {
				assert.InDelta(t, w.center, got[i].Center, 1e-9, "mode %d", i)
				assert.Equal(t, w.seeds, got[i].Seeds, "mode %d", i)
				assert.LessOrEqual(t, got[i].Low, got[i].Center)
				assert.GreaterOrEqual(t, got[i].High, got[i].Center)
				if i > 0 {
					assert.Less(t, got[i-1].High, got[i].Low, "modes are disjoint and in order")
				}
				total += got[i].Seeds
				share += got[i].Share
			}
			assert.InDelta(t, 1, share, 1e-12)
			assert.Equal(t, total, int(math.Round(float64(total)/share)))
		})
	}
	assert.Empty(t, experiment.FindModes(nil))
	assert.Empty(t, experiment.FindModes([]float64{math.NaN()}))
}

// TestFindModesIgnoresOrder: the modes depend on the values, not on the
// order of the seeds.
func TestFindModesIgnoresOrder(t *testing.T) {
	xs := []float64{0.3, 0.9, 0.31, 0.88, 0.5, 0.32}
	want := experiment.FindModes(xs)
	for i := range xs {
		rotated := append(append([]float64{}, xs[i:]...), xs[:i]...)
		assert.Equal(t, want, experiment.FindModes(rotated))
	}
}
