package credit_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/scenarios/werewolf"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// benchEpisodes plays n episodes of one group with random policies,
// through a LocalExecutor so that their re-simulations reuse engines, as
// in a run. Each episode's Replay counts its replays into replays.
func benchEpisodes(b *testing.B, sc env.Scenario, kv map[string]string, emit env.EmitFilter, n int, replays *atomic.Int64) []*trajectories.Episode {
	b.Helper()
	p, err := sc.Info().ParseParams(kv)
	if err != nil {
		b.Fatal(err)
	}
	x := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random()), Emit: emit}}
	eps := make([]*trajectories.Episode, n)
	for i := range eps {
		ep := trajectories.NewEpisode(x.Execute(context.Background(), env.Request{Seed: 1, PolicySeed: uint64(100 + i), Index: int64(i), RolloutID: int64(i)}))
		if ep.Err != "" {
			b.Fatal(ep.Err)
		}
		ep.Replay = countingReplayer{inner: ep.Replay, replays: replays}
		eps[i] = ep
	}
	return eps
}

// countingReplayer counts the replays of inner. The one-out
// counterfactuals it answers at once (episode.OneOutReplayer), it passes
// on uncounted: they are no replays.
type countingReplayer struct {
	inner   episode.Replayer
	replays *atomic.Int64
}

func (c countingReplayer) Replay(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
	c.replays.Add(1)
	return c.inner.Replay(ctx, cf)
}

func (c countingReplayer) ReplayOneOut(null bool, seats []int, team []float64) bool {
	oo, ok := c.inner.(episode.OneOutReplayer)
	return ok && oo.ReplayOneOut(null, seats, team)
}

// benchAllocator times allocation over groups of eps, reporting the cost
// and re-simulations per episode.
func benchAllocator(b *testing.B, a trajectories.Allocator, eps []*trajectories.Episode, replays *atomic.Int64) {
	dst := make([][]float64, len(eps))
	for e, ep := range eps {
		dst[e] = make([]float64, len(ep.Samples))
	}
	replays.Store(0)
	n := 0
	for b.Loop() {
		if err := a.Allocate(context.Background(), eps, dst); err != nil {
			b.Fatal(err)
		}
		n += len(eps)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/episode")
	b.ReportMetric(float64(replays.Load())/float64(n), "replays/episode")
}

// BenchmarkAllocators is the cost of each allocator per episode. The
// stateless and stateful ones allocate groups of 8 episodes; the
// counterfactual ones one episode at a time, their re-simulations spread
// over GOMAXPROCS goroutines. Exact Shapley runs only where it may (12
// agents at most). signal (one speaker, one listener) is re-simulated, as
// its documentation asks, and only the speaker's turns are emitted: its
// listener declares no null action.
func BenchmarkAllocators(b *testing.B) {
	cheap := []string{"team", "equal-split", "individual", "discount", "grpo", "rloo", "rae"}
	counterfactual := []string{"difference", "difference:c=average", "leave-one-out", "coma", "shapley-mc:permutations=10", "shapley"}
	for _, n := range []int{10, 50, 200} {
		kv := map[string]string{"agents": strconv.Itoa(n)}
		b.Run(fmt.Sprintf("elfarol/agents=%d", n), func(b *testing.B) {
			benchSpecs(b, elfarol.New(), kv, nil, cheap, counterfactual)
		})
	}
	b.Run("signal", func(b *testing.B) {
		var resim []string
		for _, spec := range counterfactual {
			if strings.Contains(spec, ":") {
				resim = append(resim, spec+",sim=resimulate")
			} else {
				resim = append(resim, spec+":sim=resimulate")
			}
		}
		benchSpecs(b, signal.New(), nil, env.EmitRoles(signal.RoleSpeaker), cheap, resim)
	})
	// Two teams (2 wolves, 6 of the village), credited per team:
	// exact Shapley re-simulates 3 + 63 coalitions, not 255.
	b.Run("werewolf", func(b *testing.B) {
		benchSpecs(b, werewolf.New(), nil, nil, cheap, counterfactual)
	})
}

func benchSpecs(b *testing.B, sc env.Scenario, kv map[string]string, emit env.EmitFilter, cheap, counterfactual []string) {
	var replays atomic.Int64
	eps := benchEpisodes(b, sc, kv, emit, 8, &replays)
	reg := credit.Builtin()
	for _, spec := range append(cheap, counterfactual...) {
		a, err := reg.Parse(spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := a.(credit.Shapley); ok && len(eps[0].Seats) > credit.DefaultMaxAgents {
			continue
		}
		group := eps
		if credit.NeedsOf(a).Replay {
			group = eps[:1]
		}
		b.Run(spec, func(b *testing.B) { benchAllocator(b, a, group, &replays) })
	}
}

// BenchmarkShapleyExact12 compares exact Shapley for 12 El Farol patrons
// (2^12 - 1 = 4095 coalition values, each re-simulated once and cached, in
// parallel) with the episode runs it needs, played one after another.
// Without the cache, the 12 agents' marginal contributions would take
// 12·2^11·2 = 49152 runs. Run it with -cpu 1,2 to see the re-simulations
// use both cores.
func BenchmarkShapleyExact12(b *testing.B) {
	var replays atomic.Int64
	eps := benchEpisodes(b, elfarol.New(), map[string]string{"agents": "12"}, nil, 1, &replays)
	ep := eps[0]
	b.Run("shapley", func(b *testing.B) {
		benchAllocator(b, credit.Shapley{Out: credit.Null}, eps, &replays)
	})
	b.Run("episode-runs", func(b *testing.B) {
		k := len(ep.Seats)
		n := 0
		for b.Loop() {
			for mask := range 1<<k - 1 {
				var out []int
				for i := range k {
					if mask&(1<<i) == 0 {
						out = append(out, i)
					}
				}
				if _, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Null: out}); err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/run")
	})
}

// BenchmarkShapleyMCError measures Monte Carlo Shapley on a 12-patron El
// Farol episode against the exact values: its cost and its root-mean-square
// error for growing numbers of permutations.
func BenchmarkShapleyMCError(b *testing.B) {
	var replays atomic.Int64
	eps := benchEpisodes(b, elfarol.New(), map[string]string{"agents": "12", "nights": "3", "capacity": "3"}, nil, 1, &replays)
	dst := [][]float64{make([]float64, 12)}
	if err := (credit.Shapley{Out: credit.Null}).Allocate(context.Background(), eps, dst); err != nil {
		b.Fatal(err)
	}
	exact := dst[0]
	scale := 0.0
	for _, x := range exact {
		scale += x * x
	}
	scale = math.Sqrt(scale / float64(len(exact)))
	for _, m := range []int{10, 100, 1000} {
		b.Run("permutations="+strconv.Itoa(m), func(b *testing.B) {
			a := credit.MonteCarloShapley{Out: credit.Null, Permutations: m}
			benchAllocator(b, a, eps, &replays)
			// The error over 20 seeds (20 different sets of orderings).
			ss := 0.0
			got := [][]float64{make([]float64, 12)}
			for seed := range uint64(20) {
				a.Seed = seed
				if err := a.Allocate(context.Background(), eps, got); err != nil {
					b.Fatal(err)
				}
				for i, x := range got[0] {
					ss += (x - exact[i]) * (x - exact[i])
				}
			}
			rmse := math.Sqrt(ss / float64(20*len(exact)))
			b.ReportMetric(rmse, "rmse")
			b.ReportMetric(rmse/scale, "rel-rmse")
		})
	}
}
