package league

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The worked example of Glickman's "Example of the Glicko-2 system": a
// player rated 1500 (RD 200, σ 0.06) beats a 1400 (RD 30) and loses to a
// 1550 (RD 100) and a 1700 (RD 300) in one period, τ = 0.5: the paper's
// answer is r' = 1464.06, RD' = 151.52, σ' = 0.05999.
func TestGlickoMatchesGlickmansExample(t *testing.T) {
	g := NewGlicko(0.5, 1)
	r := &GlickoRating{R: 1500, RD: 200, Sigma: 0.06}
	games := []glickoGame{
		{mu: toMu(1400), phi: 30 / glickoScale, s: 1, w: 1},
		{mu: toMu(1550), phi: 100 / glickoScale, s: 0, w: 1},
		{mu: toMu(1700), phi: 300 / glickoScale, s: 0, w: 1},
	}
	g.update(r, games)
	assert.InDelta(t, 1464.06, r.R, 0.01)
	assert.InDelta(t, 151.52, r.RD, 0.01)
	assert.InDelta(t, 0.05999, r.Sigma, 0.00001)

	// A player who sits a period out keeps its rating; its RD grows.
	idle := &GlickoRating{R: 1600, RD: 100, Sigma: 0.06}
	g.update(idle, nil)
	assert.Equal(t, 1600.0, idle.R)
	assert.InDelta(t, math.Sqrt(100*100+(0.06*glickoScale)*(0.06*glickoScale)), idle.RD, 1e-9)
}

func TestEloUpdates(t *testing.T) {
	e := NewElo(32)
	e.Add(Outcome{Players: []string{"a", "b"}, Results: []float64{1, -1}})
	assert.InDelta(t, 1516, e.Of("a"), 1e-9)
	assert.InDelta(t, 1484, e.Of("b"), 1e-9)
	// A draw between equals changes nothing; a self-match is not rated.
	e.Add(Outcome{Players: []string{"c", "d"}, Results: []float64{0, 0}})
	assert.Equal(t, 1500.0, e.Of("c"))
	e.Add(Outcome{Players: []string{"a"}, Results: []float64{1}})
	assert.InDelta(t, 1516, e.Of("a"), 1e-9)
	// Three players ranked a > b > c: a match moves a by at most K.
	e3 := NewElo(32)
	e3.Add(Outcome{Players: []string{"a", "b", "c"}, Results: []float64{3, 2, 1}})
	assert.InDelta(t, 1516, e3.Of("a"), 1e-9)
	assert.InDelta(t, 1500, e3.Of("b"), 1e-9)
	assert.InDelta(t, 1484, e3.Of("c"), 1e-9)
}
