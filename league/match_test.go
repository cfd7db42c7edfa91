package league_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/league"
)

// choice is a pool of four opponents the focal player beats at known
// rates, and draws from the seed.
func choice(seed uint64) *league.Choice {
	rates := map[string]float64{"p1": 0.9, "p2": 0.6, "p3": 0.3, "p4": 0.5}
	return &league.Choice{
		Focal: "me", Pool: []string{"p1", "p2", "p3", "p4"}, Latest: "p4",
		WinRate: func(o string) float64 { return rates[o] },
		Draw:    func(k uint64) float64 { return seeds.Float64(seeds.Mix(seed, k)) },
	}
}

// Every rule's frequencies over many draws match the probabilities its
// rule gives (Weights), within four standard deviations, and those are
// the rule's definition.
func TestMatchmakingFrequenciesMatchTheirRule(t *testing.T) {
	hard := func(x float64) float64 { return (1 - x) * (1 - x) }
	hardTotal := hard(0.9) + hard(0.6) + hard(0.3) + hard(0.5)
	varTotal := 0.9*0.1 + 0.6*0.4 + 0.3*0.7 + 0.5*0.5
	for _, c := range []struct {
		rule string
		want map[string]float64
	}{
		{"uniform", map[string]float64{"p1": 0.25, "p2": 0.25, "p3": 0.25, "p4": 0.25}},
		{"self", map[string]float64{"me": 1}},
		{"latest", map[string]float64{"p4": 1}},
		{"pfsp", map[string]float64{"p1": hard(0.9) / hardTotal, "p2": hard(0.6) / hardTotal, "p3": hard(0.3) / hardTotal, "p4": hard(0.5) / hardTotal}},
		{"pfsp:weighting=variance", map[string]float64{"p1": 0.09 / varTotal, "p2": 0.24 / varTotal, "p3": 0.21 / varTotal, "p4": 0.25 / varTotal}},
		{"pfsp:weighting=linear", map[string]float64{"p1": 0.1 / 1.7, "p2": 0.4 / 1.7, "p3": 0.7 / 1.7, "p4": 0.5 / 1.7}},
		{"fixed:p1=3,p3=1", map[string]float64{"p1": 0.75, "p3": 0.25}},
		{"mix:self=0.5,uniform=0.5", map[string]float64{"me": 0.5, "p1": 0.125, "p2": 0.125, "p3": 0.125, "p4": 0.125}},
	} {
		t.Run(c.rule, func(t *testing.T) {
			r, err := league.ParseRule(c.rule)
			require.NoError(t, err)
			back, err := league.ParseRule(r.String())
			require.NoError(t, err)
			assert.Equal(t, r.String(), back.String())
			weights := league.Weights(r, choice(0))
			require.Len(t, weights, len(c.want))
			for name, w := range c.want {
				assert.InDelta(t, w, weights[name], 1e-12, "weight of %s", name)
			}
			const n = 40000
			counts := map[string]int{}
			for i := range uint64(n) {
				name, err := r.Choose(choice(i))
				require.NoError(t, err)
				counts[name]++
			}
			for name, w := range c.want {
				sd := math.Sqrt(n * w * (1 - w))
				assert.InDelta(t, n*w, float64(counts[name]), 4*sd+1, "%s drawn %d times of %d", name, counts[name], n)
			}
			for name := range counts {
				assert.Contains(t, c.want, name, "drawn but not in the rule")
			}
		})
	}
}

func TestMatchmakingIsDeterministic(t *testing.T) {
	r, err := league.ParseRule("mix:pfsp=0.5,uniform=0.3,latest=0.2")
	require.NoError(t, err)
	for i := range uint64(100) {
		a, err := r.Choose(choice(i))
		require.NoError(t, err)
		b, err := r.Choose(choice(i))
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
}

func TestParseRuleErrors(t *testing.T) {
	for spec, msg := range map[string]string{
		"":                    "unknown rule",
		"elo":                 "unknown rule",
		"uniform:x=1":         "takes no parameters",
		"pfsp:weighting=soft": "weighting",
		"pfsp:p=-1":           "positive",
		"pfsp:q=1":            "no parameter",
		"fixed":               "NAME=WEIGHT",
		"fixed:a=x":           "weight",
		"fixed:a=0":           "sum to 0",
		"mix:fixed=1":         "NAME=WEIGHT",
		"mix:self=1,self=2":   "twice",
	} {
		_, err := league.ParseRule(spec)
		require.ErrorIs(t, err, league.ErrBadRule, spec)
		assert.ErrorContains(t, err, msg, spec)
	}
	// A fixed rule naming a player the league lacks says so at the draw.
	r, err := league.ParseRule("fixed:ghost=1")
	require.NoError(t, err)
	_, err = r.Choose(choice(0))
	require.ErrorIs(t, err, league.ErrNoOpponent)
	assert.ErrorContains(t, err, "ghost")
}
