package experiment_test

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// The El Farol grid's learner with no framework: what troupe's engine,
// bus, allocators and learner compute for a cell, written as one loop. It
// is the grid's plain Go loop, beside which BenchmarkElFarolGrid's cost is
// read, and an oracle: it draws from the seeds troupe gives the same turns,
// so TestThePlainLoopPlaysTheGrid demands every episode's G bit for bit.
const (
	plainNights   = 7
	plainCapacity = 6.0
	plainAlpha    = 0.1  // egreedy's alpha
	plainEpsilon  = 0.05 // egreedy's epsilon; init 0, unbiased steps
)

// plainCell plays one cell of the grid: n patrons learning for weeks
// episodes under reward (team, individual or difference), from the cell's
// run seed. It appends each week's G to team and returns it.
func plainCell(n int, reward string, runSeed uint64, weeks int, team []float64) []float64 {
	q := make([][plainNights]float64, n)     // action values, init 0
	trace := make([][plainNights]float64, n) // the unbiased step's ō
	choice := make([]int, n)
	for w := range weeks {
		// The runner's policy seed of episode w, the engine's seed of
		// seat i's first turn, and the learner's streams (explore 1,
		// random 2, tie 3) drawn from it.
		policySeed := seeds.Mix(runSeed, 2, uint64(w))
		var counts [plainNights]int
		for i := range n {
			seed := seeds.Mix2(policySeed, uint64(i), 0)
			a := 0
			if seeds.Float64(seeds.Mix1(seed, 1)) < plainEpsilon {
				a = seeds.Intn(seeds.Mix1(seed, 2), plainNights)
			} else {
				a = plainGreedy(&q[i], seed)
			}
			choice[i] = a
			counts[a]++
		}
		var phi [plainNights]float64
		g := 0.0
		for k, x := range counts {
			phi[k] = elfarol.Utility(float64(x), plainCapacity)
			g += phi[k]
		}
		team = append(team, g)
		for i, a := range choice {
			var r float64
			switch reward {
			case "team":
				r = g
			case "individual":
				r = phi[a]
			case "difference": // G minus G with patron i at home
				without := 0.0
				for k, v := range phi {
					if k == a {
						v = elfarol.Utility(float64(counts[a]-1), plainCapacity)
					}
					without += v
				}
				r = g - without
			}
			o := &trace[i][a]
			*o += plainAlpha * (1 - *o)
			v := &q[i][a]
			*v += plainAlpha / *o * (r - *v)
		}
	}
	return team
}

// plainGreedy is the index of the largest value, a tie broken by the
// turn's tie stream among the tied actions in order.
func plainGreedy(values *[plainNights]float64, seed uint64) int {
	best, ties := 0, 1
	for k := 1; k < plainNights; k++ {
		switch {
		case values[k] > values[best]:
			best, ties = k, 1
		case values[k] == values[best]:
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	j := seeds.Intn(seeds.Mix1(seed, 3), ties)
	for k, v := range values {
		if v == values[best] {
			if j == 0 {
				return k
			}
			j--
		}
	}
	return best
}

// TestThePlainLoopPlaysTheGrid runs a small grid through troupe and through
// plainCell, and demands the same G in every episode of every cell: the
// engine, the allocators and the learner of an experiment are the textbook
// algorithm and nothing else.
func TestThePlainLoopPlaysTheGrid(t *testing.T) {
	cfg := elFarolGrid(t, "")
	cfg.Axes[0].Values = []string{"20", "60"}
	cfg.Seeds, cfg.Episodes = 2, 300
	res, err := experiment.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 3 * 2; len(res.Cells) != want {
		t.Fatalf("%d cells, want %d", len(res.Cells), want)
	}
	for _, c := range res.Cells {
		n, err := strconv.Atoi(c.Params["agents"])
		if err != nil {
			t.Fatal(err)
		}
		want := plainCell(n, c.Allocator, c.RunSeed, cfg.Episodes, nil)
		if i := slices.IndexFunc(want, func(g float64) bool { return math.IsNaN(g) }); i >= 0 {
			t.Fatalf("plain loop: NaN at week %d", i)
		}
		if !slices.Equal(c.Team, want) {
			i := 0
			for i < min(len(c.Team), len(want)) && c.Team[i] == want[i] {
				i++
			}
			t.Errorf("agents %d, %s, seed %d: the grid and the plain loop part at week %d of %d/%d", n, c.Allocator, c.Seed, i, len(c.Team), len(want))
		}
	}
}

// BenchmarkElFarolGridPlainLoop is BenchmarkElFarolGrid's work as the plain
// Go loop, its cells shared among the cores as the grid shares them:
// cpu-s/grid beside the grid's is what the framework costs.
func BenchmarkElFarolGridPlainLoop(b *testing.B) {
	type cell struct {
		n       int
		reward  string
		runSeed uint64
	}
	var cells []cell
	for _, n := range []int{20, 60, 100, 200} {
		for _, reward := range []string{"team", "individual", "difference"} {
			for s := range 3 {
				cells = append(cells, cell{n, reward, seeds.Mix(1, uint64(s))})
			}
		}
	}
	workers := runtime.GOMAXPROCS(0)
	cpu := cputime.Seconds()
	for b.Loop() {
		done := make(chan float64, workers)
		for w := range workers {
			go func() {
				sum := 0.0
				var team []float64
				for i := w; i < len(cells); i += workers {
					c := cells[i]
					team = plainCell(c.n, c.reward, c.runSeed, 1000, team[:0])
					sum += team[len(team)-1]
				}
				done <- sum
			}()
		}
		for range workers {
			if math.IsNaN(<-done) {
				b.Fatal("NaN")
			}
		}
	}
	cpu = cputime.Seconds() - cpu
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/grid")
	if cputime.Available {
		b.ReportMetric(cpu/float64(b.N), "cpu-s/grid")
	}
}
