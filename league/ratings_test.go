package league_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/league"
)

// synthetic is a population of known strength: true Elo ratings, from
// which two-player matches are won with the Elo (Bradley–Terry)
// probability, and n-player matches ranked by strength plus logistic
// noise of the same scale.
var synthetic = map[string]float64{"a": 1900, "b": 1700, "c": 1550, "d": 1450, "e": 1300, "f": 1100}

func knownOrder() []string {
	names := []string{"a", "b", "c", "d", "e", "f"}
	slices.SortFunc(names, func(x, y string) int { return int(synthetic[y] - synthetic[x]) })
	return names
}

func orderBy(names []string, rating func(string) float64) []string {
	out := slices.Clone(names)
	slices.SortStableFunc(out, func(x, y string) int {
		switch rx, ry := rating(x), rating(y); {
		case rx > ry:
			return -1
		case rx < ry:
			return 1
		}
		return 0
	})
	return out
}

// Two-player matches with known win rates: both ratings end in the known
// order, and Elo's differences estimate the true ones.
func TestRatingsConvergeToTheKnownOrder(t *testing.T) {
	names := knownOrder()
	rng := rand.New(rand.NewPCG(1, 2))
	elo, glicko := league.NewElo(16), league.NewGlicko(0.5, 30)
	for range 12000 {
		i, j := rng.IntN(len(names)), rng.IntN(len(names)-1)
		if j >= i {
			j++
		}
		a, b := names[i], names[j]
		p := 1 / (1 + math.Pow(10, (synthetic[b]-synthetic[a])/400))
		res := []float64{-1, 1}
		if rng.Float64() < p {
			res = []float64{1, -1}
		}
		o := league.Outcome{Players: []string{a, b}, Results: res}
		elo.Add(o)
		glicko.Add(o)
	}
	glicko.EndPeriod()
	assert.Equal(t, names, orderBy(names, elo.Of), "Elo order")
	assert.Equal(t, names, orderBy(names, func(p string) float64 { return glicko.Of(p).R }), "Glicko-2 order")
	meanTrue, meanElo := 0.0, 0.0
	for _, n := range names {
		meanTrue += synthetic[n] / float64(len(names))
		meanElo += elo.Of(n) / float64(len(names))
	}
	for _, n := range names {
		assert.InDelta(t, synthetic[n]-meanTrue, elo.Of(n)-meanElo, 80, "Elo of %s", n)
		assert.InDelta(t, synthetic[n]-meanTrue, glicko.Of(n).R-meanElo, 80, "Glicko-2 of %s", n)
		assert.Less(t, glicko.Of(n).RD, 60.0, "Glicko-2 RD of %s after 4000 games each", n)
	}
}

// Four-player matches ranked by noisy strength: the pairwise
// decomposition recovers the known order too.
func TestRatingsConvergeInNPlayerMatches(t *testing.T) {
	names := knownOrder()
	rng := rand.New(rand.NewPCG(3, 4))
	elo, glicko := league.NewElo(16), league.NewGlicko(0.5, 20)
	for range 6000 {
		perm := rng.Perm(len(names))[:4]
		o := league.Outcome{}
		for _, k := range perm {
			u := rng.Float64()
			noise := 400 / math.Ln10 * math.Log(u/(1-u)) // logistic, the Elo scale
			o.Players = append(o.Players, names[k])
			o.Results = append(o.Results, synthetic[names[k]]+noise)
		}
		elo.Add(o)
		glicko.Add(o)
	}
	glicko.EndPeriod()
	assert.Equal(t, names, orderBy(names, elo.Of), "Elo order")
	assert.Equal(t, names, orderBy(names, func(p string) float64 { return glicko.Of(p).R }), "Glicko-2 order")
}
