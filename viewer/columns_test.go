package viewer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntsKeepEveryValue: whatever the values (counting up, small,
// negative, the extremes of int64), a column gives back what went in,
// widening as it must, and costs nothing for ids that count up.
func TestIntsKeepEveryValue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, slope := range []int64{0, 1} {
		var c ints
		c.slope = slope
		var want []int64
		put := func(v int64) {
			c.add(v)
			want = append(want, v)
		}
		for k := range 300 {
			put(int64(k) + 7) // counting up
		}
		if slope == 1 {
			assert.Zero(t, c.width, "ids counting up cost nothing")
		}
		for range 300 {
			put(r.Int64N(200) - 100)
		}
		for _, v := range []int64{math.MaxInt64, math.MinInt64, -1, 0, 1 << 40} {
			put(v)
		}
		for range 300 {
			put(int64(r.Uint64()))
		}
		c.seal()
		require.Equal(t, len(want), c.n)
		assert.EqualValues(t, 8, c.width)
		for k, v := range want {
			require.Equal(t, v, c.get(k), "row %d, slope %d", k, slope)
		}
	}
}

// TestFloatsKeepEveryValue: a float column keeps each value's bits, as a
// table while it has few and whole past maxColTable.
func TestFloatsKeepEveryValue(t *testing.T) {
	var c floats
	var want []float64
	put := func(v float64) {
		c.add(v)
		want = append(want, v)
	}
	for k := range 1000 {
		put(float64(k%7) / 3)
	}
	for _, v := range []float64{math.NaN(), math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64} {
		put(v)
	}
	assert.False(t, c.whole)
	assert.EqualValues(t, 1, c.codes.width, "a few values: a byte a row")
	for k := range maxColTable {
		put(float64(k) + 0.5)
	}
	assert.True(t, c.whole, "past the table's bound: whole")
	c.seal()
	require.Equal(t, len(want), c.len())
	for k, v := range want {
		require.Equal(t, math.Float64bits(v), math.Float64bits(c.get(k)), "row %d", k)
	}
}

// TestSpansFindEveryStart: a row's start is found from its block's and
// the lengths and gaps between.
func TestSpansFindEveryStart(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s spans
	type span struct{ start, size int64 }
	var want []span
	at := int64(0)
	for k := range 1000 {
		gap := int64(0)
		if k%17 == 3 {
			gap = r.Int64N(5000)
		}
		size := 1 + r.Int64N(1<<20)
		if k == 500 {
			size = 5 << 30 // an episode past 4 GiB
		}
		at += gap
		s.add(at, size)
		want = append(want, span{at, size})
		at += size
	}
	s.seal()
	for k, w := range want {
		start, size := s.at(k)
		require.Equal(t, w, span{start, size}, "row %d", k)
	}
}

// TestIdsThatCountUpCostNothing: a file whose rollout ids and episode
// numbers count up keeps no byte for them.
func TestIdsThatCountUpCostNothing(t *testing.T) {
	x := Synthesized("run", 1000)
	assert.Zero(t, x.rollout.bytes()+x.index.bytes())
	assert.Equal(t, []int{999}, x.Lookup(999))
	assert.Empty(t, x.Lookup(1000))
}
