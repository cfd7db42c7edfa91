package viewer

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTQuantile975(t *testing.T) {
	// Student's t 0.975 quantiles (R: qt(0.975, df)).
	for df, want := range map[float64]float64{1: 12.7062, 5: 2.5706, 30: 2.0423, 40: 2.0211, 60: 2.0003, 100: 1.9840, 1000: 1.9623, 1e9: 1.9600} {
		assert.InDelta(t, want, tQuantile975(df), 2e-4, "df %v", df)
	}
	assert.InDelta(t, 2.1009+0.5*(2.0930-2.1009), tQuantile975(18.5), 2e-3, "between the table's rows")
}

func TestPairedAndWelchIntervals(t *testing.T) {
	// Paired: differences 1, 2, 3, 4: mean 2.5, sd 1.2910, se 0.6455,
	// t(3) 3.1824.
	var d moments
	for _, v := range []float64{1, 2, 3, 4} {
		d.add(v)
	}
	iv := pairedInterval("team reward", d)
	require.True(t, iv.Valid())
	assert.InDelta(t, 2.5, iv.Diff, 1e-12)
	assert.InDelta(t, 0.645497, iv.SE, 1e-6)
	assert.InDelta(t, 2.5-3.1824*0.645497, iv.Lo, 1e-3)
	assert.Equal(t, "B higher", iv.Verdict)
	assert.Contains(t, iv.Sentence, "paired over 4 episodes")

	// Welch: a = 1..5 (var 2.5), b = 2, 4, 6 (var 4): se = sqrt(0.5 + 4/3),
	// df = (0.5+1.3333)² / (0.25/4 + 1.7778/2) = 3.5328.
	var a, b moments
	for _, v := range []float64{1, 2, 3, 4, 5} {
		a.add(v)
	}
	for _, v := range []float64{2, 4, 6} {
		b.add(v)
	}
	iv = welchInterval("team reward", a, b)
	assert.InDelta(t, 1, iv.Diff, 1e-12)
	assert.InDelta(t, math.Sqrt(0.5+4.0/3), iv.SE, 1e-12)
	assert.InDelta(t, 3.5328, iv.DF, 1e-3)
	assert.Equal(t, "no clear difference", iv.Verdict)
	assert.Contains(t, iv.Sentence, "includes 0")

	var one moments
	one.add(1)
	assert.False(t, pairedInterval("x", one).Valid())
	assert.Contains(t, pairedInterval("x", one).Sentence, "at least two pairs")
}

// TestCompareIntervals: runs with the same seeds pair episode by episode,
// runs with other seeds fall back to Welch.
func TestCompareIntervals(t *testing.T) {
	mk := func(seed uint64, teams ...float64) *File {
		x := newFile("run", "run")
		for i, v := range teams {
			x.add(&EpisodeInfo{Ordinal: i, RolloutID: int64(i), Index: int64(i), Seed: seed + uint64(i), Status: "completed", Team: v,
				Allocators: []string{"team"}, Alloc: []float64{v / 2}}, nil)
		}
		x.seal()
		return x
	}
	a := mk(1, 10, 11, 12, 13)
	b := mk(1, 11, 13, 15, 17) // differences 1, 2, 3, 4
	c := compare(a.Overview(), b.Overview(), 0, 1)
	require.Len(t, c.Intervals, 2)
	assert.True(t, c.Intervals[0].Paired)
	assert.InDelta(t, 0.645497, c.Intervals[0].SE, 1e-6)
	assert.InDelta(t, 0.645497/2, c.Intervals[1].SE, 1e-6, "the allocator's episode means, paired too")

	other := mk(50, 11, 13, 15, 17)
	c = compare(a.Overview(), other.Overview(), 0, 1)
	require.Len(t, c.Intervals, 2)
	assert.False(t, c.Intervals[0].Paired, "other seeds: unpaired")
	assert.InDelta(t, 2.5, c.Intervals[0].Diff, 1e-12)
	assert.Contains(t, c.Intervals[0].Sentence, "Welch")
}
