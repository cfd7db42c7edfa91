package experiment

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestFactorednessOfTheLocalRewardMatchesAnExactRecount: with as many
// samples as a patron has other nights, the diagnostics enumerate every
// own change, and their factoredness of El Farol's local reward (the
// patron's own night's φ) must equal a recount done exactly: a move from
// night a to night b leaves G unchanged exactly when x_b + 1 = x_a (it
// only permutes the attendances), and the local reward likewise. Signs
// taken from the floating-point differences as they come understate it
// (a permutation gives ΔG = ±1 ulp, Δr = 0).
func TestFactorednessOfTheLocalRewardMatchesAnExactRecount(t *testing.T) {
	const agentsN, nights, capacity = 60, 7, 6.0
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": strconv.Itoa(agentsN), "nights": strconv.Itoa(nights), "capacity": "6"})
	require.NoError(t, err)
	exec := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}}
	ctx := context.Background()
	var group []*episode.Record
	at := map[int]bool{}
	for i := range 4 {
		rec := exec.Execute(ctx, env.Request{Scenario: "elfarol", Seed: uint64(11 + i), PolicySeed: uint64(23 + i), Index: int64(i)})
		require.True(t, rec.Finished(), rec.Err)
		group = append(group, rec)
		at[i] = true
	}
	alloc, err := credit.Builtin().Parse("individual")
	require.NoError(t, err)
	d := &diagnoser{cfg: Diagnose{Episodes: len(group), Agents: agentsN, Samples: nights - 1}, alloc: alloc,
		learn: map[string]bool{elfarol.RolePatron: true}, at: at, seed: 5, result: &Diagnostics{}}
	require.NoError(t, d.group(ctx, group))

	phi := func(x int) float64 { return elfarol.Utility(float64(x), capacity) }
	sign := func(v float64) int {
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return 0
	}
	var own, exact, naive int
	for _, rec := range group {
		night := make([]int, len(rec.Seats))
		x := make([]int, nights)
		for _, turn := range rec.Turns {
			n, err := strconv.Atoi(turn.Action)
			require.NoError(t, err, "a random patron picks a night")
			night[turn.Seat] = n
			x[n]++
		}
		for i := range rec.Seats {
			a := night[i]
			for b := range nights {
				if b == a {
					continue
				}
				own++
				dg := phi(x[a]-1) + phi(x[b]+1) - phi(x[a]) - phi(x[b])
				dr := phi(x[b]+1) - phi(x[a])
				sg, sr := sign(dg), sign(dr)
				if x[b]+1 == x[a] { // a permutation of the attendances
					sg, sr = 0, 0
				}
				if sg == sr {
					exact++
				}
				if sign(dg) == sign(dr) {
					naive++
				}
			}
		}
	}
	require.Equal(t, own, d.result.Own, "every own change enumerated")
	want := float64(exact) / float64(own)
	t.Logf("factoredness: diagnostics %.4f, exact recount %.4f, naive signs %.4f (%d own changes)", d.result.Factoredness(), want, float64(naive)/float64(own), own)
	assert.InDelta(t, want, d.result.Factoredness(), 0.005)
	assert.Equal(t, exact, d.result.Aligned, "the same changes agree")
	assert.Greater(t, d.result.States, 0)
	assert.False(t, math.IsNaN(d.result.Learnability()))
}
