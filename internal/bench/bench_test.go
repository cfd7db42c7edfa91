// Package bench holds troupe's throughput benchmarks: every built-in
// scenario through the whole framework (engine, bus, FSMs, recorder,
// allocator, sink), and El Farol and tic-tac-toe as plain Go loops beside
// them, so the framework's overhead shows as a ratio measured in the same
// run. Run them with `make bench`.
//
// Each reports turns/s (wall) and turns/cpu-s: turns per second of the
// process's user+system CPU time over the benchmark, which is what a busy,
// shared machine leaves comparable (wall time there measures the
// neighbours). Start-up is outside the timed region.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// run plays b.N episodes of the named scenario at concurrency 2 (this
// machine's cores) and reports agent-turns/s, episodes/s and allocations
// per turn.
func run(b *testing.B, name string, kv map[string]string, sink trajectories.Sink) {
	playBench(b, name, kv, sink, b.N)
}

// playBench plays episodes episodes of the named scenario, b.N of them or a
// multiple, as run does.
func playBench(b *testing.B, name string, kv map[string]string, sink trajectories.Sink, episodes int) {
	sc, err := scenarios.Builtin().Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	p, err := sc.Info().ParseParams(kv)
	if err != nil {
		b.Fatal(err)
	}
	// Every scenario plays its own default policy: random for those with
	// a list of legal actions, scripted for those with structured moves.
	policy, _, err := sc.Info().AssignPolicies(env.PolicyRequest{Scenario: sc, Params: p}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := play.Config{
		Play:        env.Play{Scenario: sc, Params: p, Policy: policy},
		Episodes:    episodes,
		Concurrency: runtime.GOMAXPROCS(0),
		Seed:        1,
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	cpu := cputime.Seconds()
	sum, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: sink, Allocators: []trajectories.Allocator{credit.Team{}}})
	cpu = cputime.Seconds() - cpu
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if err != nil {
		b.Fatal(err)
	}
	if sum.Scored != episodes {
		b.Fatalf("%d of %d episodes scored: %s", sum.Scored, episodes, sum.FirstFailure)
	}
	report(b, episodes, int(sum.Turns), cpu)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(sum.Turns), "allocs/turn")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(sum.Turns), "B/turn")
	b.ReportMetric(float64(after.NumGC-before.NumGC)*1e6/float64(sum.Turns), "gcs/Mturn")
}

// report writes the throughput metrics of episodes episodes that took
// turns agent-turns and cpu seconds of CPU.
func report(b *testing.B, episodes, turns int, cpu float64) {
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(turns)/secs, "turns/s")
	b.ReportMetric(float64(episodes)/secs, "episodes/s")
	if cpu > 0 {
		b.ReportMetric(float64(turns)/cpu, "turns/cpu-s")
	}
}

// BenchmarkScenarios runs every built-in scenario on its defaults, with
// samples written as JSONL to a discarding writer and not serialised at all.
func BenchmarkScenarios(b *testing.B) {
	for _, name := range scenarios.Builtin().Names() {
		b.Run(name+"/jsonl", func(b *testing.B) {
			run(b, name, nil, trajectories.NewJSONLWriter(io.Discard, trajectories.Flat))
		})
		b.Run(name+"/discard", func(b *testing.B) { run(b, name, nil, trajectories.Discard) })
	}
}

// BenchmarkElFarol100 is the target: El Farol with 100 agents.
func BenchmarkElFarol100(b *testing.B) {
	kv := map[string]string{"agents": "100"}
	b.Run("jsonl", func(b *testing.B) {
		run(b, "elfarol", kv, trajectories.NewJSONLWriter(io.Discard, trajectories.Flat))
	})
	b.Run("discard", func(b *testing.B) { run(b, "elfarol", kv, trajectories.Discard) })
	b.Run("plain-go-loop", func(b *testing.B) { plainElFarol(b, 100, 7, 6) })
}

// BenchmarkElFarolAgents is El Farol from 100 to 100,000 agents per
// episode with everything `troupe run -o ... --episodes-out ...` writes:
// JSONL samples and episode records (to discarding writers), with the
// team allocator. Each iteration plays agentTurns turns (agentTurns/n
// episodes of n agents), so the points do the same work; the cost of a turn
// should not depend on how many agents share its episode, so turns/cpu-s
// should be about flat across the points.
func BenchmarkElFarolAgents(b *testing.B) {
	for _, n := range []int{100, 1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			sink := trajectories.Tee(trajectories.NewJSONLWriter(io.Discard, trajectories.Flat), trajectories.NewEpisodeWriter(io.Discard))
			kv := map[string]string{"agents": strconv.Itoa(n)}
			playBench(b, "elfarol", kv, sink, b.N*(agentTurns/n))
		})
	}
}

// agentTurns is the turns of one iteration of BenchmarkElFarolAgents: four
// episodes of its largest size.
const agentTurns = 400_000

// BenchmarkTicTacToe is random self-play tic-tac-toe through the framework
// and as a plain Go loop, the engine's cost per turn on a small sequential
// game.
func BenchmarkTicTacToe(b *testing.B) {
	b.Run("jsonl", func(b *testing.B) {
		run(b, "tictactoe", nil, trajectories.NewJSONLWriter(io.Discard, trajectories.Flat))
	})
	b.Run("discard", func(b *testing.B) { run(b, "tictactoe", nil, trajectories.Discard) })
	b.Run("plain-go-loop", plainTicTacToe)
}

// plainElFarol is the same game with no framework: per episode, each agent
// draws a night from the same per-turn seed the framework would give the
// random policy, attendance is counted and G computed. Two goroutines share
// the episodes, like the framework's runner at concurrency 2.
func plainElFarol(b *testing.B, n, k int, c float64) {
	workers := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	cpu := cputime.Seconds()
	done := make(chan float64, workers)
	for w := range workers {
		go func() {
			counts := make([]int, k)
			total := 0.0
			for ep := w; ep < b.N; ep += workers {
				clear(counts)
				policySeed := seeds.Mix(1, 2, uint64(ep))
				for i := range n {
					counts[seeds.Intn(seeds.Mix1(seeds.Mix2(policySeed, uint64(i), 0), 0), k)]++
				}
				for _, x := range counts {
					total += elfarol.Utility(float64(x), c)
				}
			}
			done <- total
		}()
	}
	sum := 0.0
	for range workers {
		sum += <-done
	}
	cpu = cputime.Seconds() - cpu
	b.StopTimer()
	if math.IsNaN(sum) {
		b.Fatal("NaN")
	}
	report(b, b.N, b.N*n, cpu)
}

// ticTacToeLines are the board's eight lines, cells numbered 0..8 row by
// row.
var ticTacToeLines = [8][3]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {0, 3, 6}, {1, 4, 7}, {2, 5, 8}, {0, 4, 8}, {2, 4, 6}}

// plainTicTacToe is random self-play tic-tac-toe with no framework: per
// turn, the mover draws one of the empty cells from the per-turn seed the
// framework would give the random policy, marks it, and the board is
// checked for a line. Two goroutines share the episodes, like the runner.
func plainTicTacToe(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	cpu := cputime.Seconds()
	type result struct{ turns, xWins int }
	done := make(chan result, workers)
	for w := range workers {
		go func() {
			var r result
			var board [9]int8
			var empty [9]int
			for ep := w; ep < b.N; ep += workers {
				board = [9]int8{}
				policySeed := seeds.Mix(1, 2, uint64(ep))
				var turns [2]uint64
				for t := 0; t < 9; t++ {
					mover := t % 2
					n := 0
					for c, v := range board {
						if v == 0 {
							empty[n] = c
							n++
						}
					}
					seed := seeds.Mix2(policySeed, uint64(mover), turns[mover])
					turns[mover]++
					board[empty[seeds.Intn(seeds.Mix1(seed, 0), n)]] = int8(mover + 1)
					r.turns++
					won := false
					for _, l := range ticTacToeLines {
						if v := board[l[0]]; v != 0 && v == board[l[1]] && v == board[l[2]] {
							won = true
						}
					}
					if won {
						if mover == 0 {
							r.xWins++
						}
						break
					}
				}
			}
			done <- r
		}()
	}
	var total result
	for range workers {
		r := <-done
		total.turns += r.turns
		total.xWins += r.xWins
	}
	cpu = cputime.Seconds() - cpu
	b.StopTimer()
	if b.N > 1000 && total.xWins == 0 {
		b.Fatal("x never won: the loop is broken")
	}
	report(b, b.N, total.turns, cpu)
}

// BenchmarkMemoryFlat shows that a run's memory does not grow with its
// length: the heap that survives a forced garbage collection, measured a
// tenth of the way into runs of 10,000 and 100,000 episodes and again at
// nine tenths. Flat means the two agree. (Heap in use without a collection
// depends on the collector's pacing rather than on what the run holds.)
func BenchmarkMemoryFlat(b *testing.B) {
	for _, episodes := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("episodes=%d", episodes), func(b *testing.B) {
			sc := elfarol.New()
			p, _ := sc.Info().ParseParams(map[string]string{"agents": "100"})
			var early, late uint64
			live := func() uint64 {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			for range b.N {
				cfg := play.Config{
					Play:        env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
					Episodes:    episodes,
					Concurrency: 2,
					Seed:        1,
					Progress: func(pr play.Progress) {
						switch pr.Done {
						case episodes / 10:
							early = live()
						case episodes * 9 / 10:
							late = live()
						}
					},
				}
				out := &trajectories.Output{Sink: trajectories.NewJSONLWriter(io.Discard, trajectories.Flat), Allocators: []trajectories.Allocator{credit.Team{}}}
				if _, err := play.Run(context.Background(), cfg, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(early)/(1<<20), "live-heap-at-10%-MiB")
			b.ReportMetric(float64(late)/(1<<20), "live-heap-at-90%-MiB")
		})
	}
}

// The runner recycles the records of trajectories' Output.
var _ play.RecyclingOutput = (*trajectories.Output)(nil)
