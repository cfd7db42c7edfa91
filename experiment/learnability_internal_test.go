package experiment

import (
	"context"
	"math"
	"slices"
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

// tinyBar is an El Farol week small enough to enumerate: 4 patrons, 3
// nights, so a patron has 2 other nights and the other three 3³ = 27
// joint redraws.
const tinyPatrons, tinyNights, tinyCapacity = 4, 3, 1.5

// tinyBarWeeks plays n weeks of tinyBar at random, each its own group.
func tinyBarWeeks(t *testing.T, n int) []*episode.Record {
	t.Helper()
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": strconv.Itoa(tinyPatrons), "nights": strconv.Itoa(tinyNights), "capacity": strconv.FormatFloat(tinyCapacity, 'g', -1, 64)})
	require.NoError(t, err)
	exec := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}}
	var weeks []*episode.Record
	for i := range n {
		rec := exec.Execute(context.Background(), env.Request{Scenario: "elfarol", Seed: uint64(31 + i), PolicySeed: uint64(47 + i), Index: int64(i)})
		require.True(t, rec.Finished(), rec.Err)
		weeks = append(weeks, rec)
	}
	return weeks
}

// exactLearnability recounts Agogino & Tumer's learnability by hand, by
// enumeration: at each state (week z, patron i), L_i(z) = E|Δr_i| over
// i's moves to each other night ÷ E|Δr_i| over the 27 equally likely
// redraws of the other patrons' nights (their own nights among them), r
// the team reward G = Σ_k φ(x_k) or the difference reward
// D_i = φ(x_{k_i}) − φ(x_{k_i} − 1); the mean over the states. It also
// returns the sum of |Δr_i| over the own moves.
func exactLearnability(t *testing.T, weeks []*episode.Record, difference bool) (mean, ownAbs float64) {
	t.Helper()
	phi := func(x int) float64 { return elfarol.Utility(float64(x), tinyCapacity) }
	// reward is r_i at the nights given. G sums φ over the attendances in
	// increasing order, so that two weeks whose attendances are a
	// permutation of each other have the same G to the bit (a move that
	// only permutes them changes nothing).
	reward := func(nights []int, i int) float64 {
		x := make([]int, tinyNights)
		for _, k := range nights {
			x[k]++
		}
		if difference {
			return phi(x[nights[i]]) - phi(x[nights[i]]-1)
		}
		slices.Sort(x)
		g := 0.0
		for _, n := range x {
			g += phi(n)
		}
		return g
	}
	sum, states := 0.0, 0
	for _, rec := range weeks {
		nights := make([]int, len(rec.Seats))
		for _, turn := range rec.Turns {
			k, err := strconv.Atoi(turn.Action)
			require.NoError(t, err, "a random patron picks a night")
			nights[turn.Seat] = k
		}
		for i := range nights {
			r0 := reward(nights, i)
			own, n := 0.0, 0
			for k := range tinyNights {
				if k != nights[i] {
					z := slices.Clone(nights)
					z[i] = k
					own += math.Abs(reward(z, i) - r0)
					n++
				}
			}
			others, m := 0.0, 0
			for code := range 27 {
				z := slices.Clone(nights)
				c := code
				for j := range z {
					if j != i {
						z[j] = c % tinyNights
						c /= tinyNights
					}
				}
				others += math.Abs(reward(z, i) - r0)
				m++
			}
			ownAbs += own
			require.Positive(t, others, "the others always move r_i here")
			sum += (own / float64(n)) / (others / float64(m))
			states++
		}
	}
	return sum / float64(states), ownAbs
}

// diagnoseWeeks measures weeks as the diagnostics of a cell would, every
// patron of every week, with the seed given.
func diagnoseWeeks(t *testing.T, weeks []*episode.Record, allocator string, samples int, seed uint64) *Diagnostics {
	t.Helper()
	alloc, err := credit.Builtin().Parse(allocator)
	require.NoError(t, err)
	at := map[int]bool{}
	for i := range weeks {
		at[i] = true
	}
	d := &diagnoser{cfg: Diagnose{Episodes: len(weeks), Agents: tinyPatrons, Samples: samples}, alloc: alloc,
		learn: map[string]bool{elfarol.RolePatron: true}, at: at, seed: seed, result: &Diagnostics{}}
	for _, rec := range weeks {
		require.NoError(t, d.group(context.Background(), []*episode.Record{rec}))
	}
	return d.result
}

// TestLearnabilityMatchesAnExactRecount: on weeks small enough to
// enumerate, the diagnostics' own changes are the exact ones (every other
// night once), the learnability lies within its interval, its mean over
// 200 seeds is within 1% of the exact learnability (the mean of the
// per-state ratios of expectations, recounted by hand), and its interval
// covers that value in 95% ± 4.5% of the seeds. Without the correction,
// the ratio of the sample means overstates it by 2.4% (team) and 3.5%
// (difference), and the interval covers it in 86% and 82% of the seeds:
// the test fails.
func TestLearnabilityMatchesAnExactRecount(t *testing.T) {
	t.Parallel()
	const samples, seeds = DefaultDiagnoseSamples, 200
	weeks := tinyBarWeeks(t, 16)
	for _, allocator := range []string{"team", "difference"} {
		t.Run(allocator, func(t *testing.T) {
			exact, ownAbs := exactLearnability(t, weeks, allocator == "difference")
			covered, sum, sumsq, se := 0, 0.0, 0.0, 0.0
			for seed := range uint64(seeds) {
				d := diagnoseWeeks(t, weeks, allocator, samples, seed)
				require.Equal(t, len(weeks)*tinyPatrons*(tinyNights-1), d.Own, "every own move once")
				require.InDelta(t, ownAbs, d.OwnAbs, 1e-9, "the own moves' |Δr_i| are the exact ones")
				require.Equal(t, len(weeks)*tinyPatrons, d.States, "every state finite")
				l := d.Learnability()
				lo, hi := d.LearnabilityInterval()
				require.True(t, lo <= l && l <= hi && lo < hi, "seed %d: %g not within [%g, %g]", seed, l, lo, hi)
				if lo <= exact && exact <= hi {
					covered++
				}
				sum += l
				sumsq += l * l
				se += (hi - lo) / 2 / z95
			}
			sd := math.Sqrt(sumsq/seeds - (sum/seeds)*(sum/seeds))
			coverage := float64(covered) / seeds
			t.Logf("%s: exact %.5f, mean estimate %.5f over %d seeds (sd %.5f, mean standard error %.5f), coverage %.3f",
				allocator, exact, sum/seeds, seeds, sd, se/seeds, coverage)
			assert.InDelta(t, 0.95, coverage, 0.045, "the 95 percent interval covers the exact learnability in about 95 percent of the seeds")
			assert.InEpsilon(t, exact, sum/seeds, 0.01, "the estimate is unbiased to 1 percent")
		})
	}
}
