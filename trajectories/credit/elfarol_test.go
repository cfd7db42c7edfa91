package credit_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// barWeek is one El Farol episode and what the closed forms need: each
// patron's night and each night's attendance.
type barWeek struct {
	ep       *trajectories.Episode
	capacity float64
	night    []int
	x        []int
}

func playBar(t testing.TB, agents_, nights int, capacity float64, seed uint64) barWeek {
	t.Helper()
	sc := elfarol.New()
	p, err := sc.Info().ParseParams(map[string]string{
		"agents": strconv.Itoa(agents_), "nights": strconv.Itoa(nights), "capacity": strconv.FormatFloat(capacity, 'g', -1, 64),
	})
	require.NoError(t, err)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
		Seed:       seed,
		PolicySeed: seed + 1,
		Index:      int64(seed),
	}))
	require.Equal(t, "", ep.Err)
	w := barWeek{ep: ep, capacity: capacity, night: make([]int, agents_), x: make([]int, nights)}
	for _, a := range ep.Turns {
		k, err := strconv.Atoi(a.Action)
		require.NoError(t, err)
		w.night[a.Seat] = k
		w.x[k]++
	}
	return w
}

func (w barWeek) phi(x int) float64 { return elfarol.Utility(float64(x), w.capacity) }

// moved is the change of G when a patron leaves night from for night to
// (to = -1: stays home).
func (w barWeek) moved(from, to int) float64 {
	if to == from {
		return 0
	}
	d := w.phi(w.x[from]-1) - w.phi(w.x[from])
	if to >= 0 {
		d += w.phi(w.x[to]+1) - w.phi(w.x[to])
	}
	return d
}

func TestDifferenceRewardsOnElFarolMatchTheClosedForm(t *testing.T) {
	w := playBar(t, 40, 7, 6, 1)
	// Staying home (the null action) and being absent both take the
	// patron out of its night: D_i = φ(x_k) - φ(x_k - 1).
	for _, a := range []trajectories.Allocator{
		credit.Difference{},
		credit.Difference{Sim: credit.Sim{Resimulate: true, Parallel: 1}},
		credit.LeaveOneOut{},
		credit.LeaveOneOut{Out: credit.Null},
	} {
		got, err := allocate(a, w.ep)
		require.NoError(t, err, a.Name())
		for i, k := range w.night {
			assert.InDelta(t, w.phi(w.x[k])-w.phi(w.x[k]-1), got[0][i], 1e-9, "%s patron %d", a.Name(), i)
		}
	}
}

func TestAverageActionAndCOMAOnElFarolMatchTheClosedForm(t *testing.T) {
	w := playBar(t, 30, 5, 4, 2)
	// The patrons' empirical distribution over nights.
	p := make([]float64, len(w.x))
	for k, n := range w.x {
		p[k] = float64(n) / float64(len(w.night))
	}
	got, err := allocate(credit.Difference{Average: true}, w.ep)
	require.NoError(t, err)
	coma, err := allocate(credit.COMA{}, w.ep)
	require.NoError(t, err)
	for i, k := range w.night {
		// G(z) - Σ_a p(a) G(z with i at night a) = -Σ_a p(a) ΔG(k→a).
		wla, uniform, distinct := 0.0, 0.0, 0
		for a := range w.x {
			wla -= p[a] * w.moved(k, a)
			if w.x[a] > 0 {
				uniform -= w.moved(k, a)
				distinct++
			}
		}
		assert.InDelta(t, wla, got[0][i], 1e-9, "WLa patron %d", i)
		assert.InDelta(t, uniform/float64(distinct), coma[0][i], 1e-9, "COMA patron %d", i)
	}
}

// barValue is v(S) for El Farol with the patrons outside S at home: the
// world utility of the attendance of S alone.
func (w barWeek) barValue(mask int) float64 {
	x := make([]int, len(w.x))
	for i, k := range w.night {
		if mask&(1<<i) != 0 {
			x[k]++
		}
	}
	g := 0.0
	for _, n := range x {
		g += w.phi(n)
	}
	return g
}

func TestShapleyOnElFarolMatchesTheAnalyticGame(t *testing.T) {
	w := playBar(t, 9, 3, 2, 3)
	v := make([]float64, 1<<9)
	for m := range v {
		v[m] = w.barValue(m)
	}
	want := credit.ExactShapley(9, v)

	got, err := allocate(credit.Shapley{Out: credit.Null}, w.ep)
	require.NoError(t, err)
	assert.InDeltaSlice(t, want, got[0], 1e-9)
	absent, err := allocate(credit.Shapley{}, w.ep)
	require.NoError(t, err)
	assert.InDeltaSlice(t, want, absent[0], 1e-9, "an absent patron is one at home")
	sum := 0.0
	for i, x := range got[0] {
		sum += x
		for j, y := range got[0] {
			if w.night[i] == w.night[j] {
				assert.InDelta(t, x, y, 1e-9, "patrons %d and %d share a night: symmetric", i, j)
			}
		}
	}
	assert.InDelta(t, w.ep.Score.Team, sum, 1e-9, "efficiency: Σφ = G - v(∅), v(∅) = 0")

	mc, err := allocate(credit.MonteCarloShapley{Out: credit.Null, Permutations: 400}, w.ep)
	require.NoError(t, err)
	assert.InDeltaSlice(t, want, mc[0], 0.1)
}

func TestCounterfactualsNeedTheScenarioToDeclareThem(t *testing.T) {
	// El Farol without its counterfactual declaration.
	base := elfarol.New()
	info := *base.Info()
	info.Name = "elfarol-bare"
	info.Counterfactual = nil
	sc := env.Define(&info, base.New)
	p, err := info.ParseParams(map[string]string{"agents": "4"})
	require.NoError(t, err)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}, Seed: 1}))
	require.Empty(t, ep.Err)

	_, err = allocate(credit.LeaveOneOut{}, ep)
	require.ErrorIs(t, err, episode.ErrNoAbsence)
	assert.Contains(t, err.Error(), "elfarol-bare")
	for _, a := range []trajectories.Allocator{credit.Difference{}, credit.Shapley{Out: credit.Null}, credit.MonteCarloShapley{Out: credit.Null}} {
		_, err = allocate(a, ep)
		require.ErrorIs(t, err, episode.ErrNoNullAction, a.Name())
		assert.Contains(t, err.Error(), `role "patron"`)
	}
	// Alternative actions need no declaration.
	_, err = allocate(credit.COMA{}, ep)
	require.NoError(t, err)
}

func TestCounterfactualAllocatorsInARun(t *testing.T) {
	sc := elfarol.New()
	p, err := sc.Info().ParseParams(map[string]string{"agents": "8", "nights": "3", "capacity": "2"})
	require.NoError(t, err)
	reg := credit.Builtin()
	run := func(concurrency int) []byte {
		var allocs []trajectories.Allocator
		for _, spec := range []string{"difference", "shapley:mode=null", "shapley-mc:mode=null,permutations=20", "coma:samples=2", "rloo"} {
			a, err := reg.Parse(spec)
			require.NoError(t, err)
			allocs = append(allocs, a)
		}
		var buf bytes.Buffer
		sink := trajectories.NewJSONLWriter(&buf, trajectories.Flat)
		_, err := play.Run(context.Background(), play.Config{
			Play:        env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
			Episodes:    6,
			GroupSize:   3,
			Concurrency: concurrency,
			Seed:        5,
		}, &trajectories.Output{Sink: sink, Allocators: allocs, Format: trajectories.RewardDict})
		require.NoError(t, err)
		return buf.Bytes()
	}
	one := run(1)
	assert.Equal(t, string(one), string(run(4)), "the output does not depend on the concurrency")
	samples, err := trajectories.ReadAll(bytes.NewReader(one))
	require.NoError(t, err)
	require.Len(t, samples, 48)
	for _, s := range samples {
		keys := slices.Sorted(maps.Keys(s.Reward.Dict))
		assert.Equal(t, []string{"coma:samples=2", "difference", "rloo", "shapley-mc:mode=null,permutations=20", "shapley:mode=null"}, keys)
	}
}

func TestCOMAFitsItsBudgetAndSaysSo(t *testing.T) {
	w := playBar(t, 12, 5, 2, 4)
	a := credit.COMA{Sim: credit.Sim{Budget: 30}}
	dst := [][]float64{make([]float64, 12)}
	notes, err := credit.AllocateNoted(context.Background(), a, []*trajectories.Episode{w.ep}, dst)
	require.NoError(t, err)
	require.Equal(t, true, notes[0][credit.NoteBudgetExhausted])
	m := notes[0][credit.NoteSamplesUsed].(int)
	assert.Less(t, m, len(w.x), "fewer alternatives than nights")

	// The same as asking for m alternatives in the first place.
	fewer, err := allocate(credit.COMA{Samples: m}, w.ep)
	require.NoError(t, err)
	assert.Equal(t, fewer[0], dst[0])

	_, err = allocate(credit.COMA{Sim: credit.Sim{Budget: 5}}, w.ep)
	require.ErrorIs(t, err, credit.ErrBudget)
	for _, exact := range []trajectories.Allocator{credit.Difference{Sim: credit.Sim{Budget: 11}}, credit.Difference{Average: true, Sim: credit.Sim{Budget: 40}}, credit.LeaveOneOut{Sim: credit.Sim{Budget: 11}}} {
		_, err = allocate(exact, w.ep)
		require.ErrorIs(t, err, credit.ErrBudget, exact.Name())
		assert.Contains(t, err.Error(), "episode 4 of elfarol needs")
	}
}

// TestOneOutReplaysAreReplays checks that the allocators that take one
// agent out at a time give, through a replayer that answers them all at
// once (episode.OneOutReplayer, El Farol's), what they give when every
// counterfactual is replayed on its own, bit for bit.
func TestOneOutReplaysAreReplays(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		w := playBar(t, 60, 7, 6, seed)
		_, ok := w.ep.Replay.(episode.OneOutReplayer)
		require.True(t, ok, "El Farol's replayer answers one-out counterfactuals at once")
		oneByOne := *w.ep
		replayer := w.ep.Replay
		// Counted atomically: the allocators replay the counterfactuals
		// concurrently (Sim's fan-out).
		var calls atomic.Int64
		oneByOne.Replay = episode.ReplayerFunc(func(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
			calls.Add(1)
			return replayer.Replay(ctx, cf)
		})
		for _, a := range []trajectories.Allocator{
			credit.Difference{},
			credit.LeaveOneOut{},
			credit.LeaveOneOut{Out: credit.Null},
		} {
			calls.Store(0)
			want, err := allocate(a, &oneByOne)
			require.NoError(t, err, a.Name())
			assert.Equal(t, int64(60), calls.Load(), a.Name())
			got, err := allocate(a, w.ep)
			require.NoError(t, err, a.Name())
			assert.Equal(t, want, got, a.Name())
		}
	}
}
