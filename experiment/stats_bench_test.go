package experiment

import (
	"math/rand/v2"
	"testing"

	"github.com/troupe-rl/troupe/internal/cputime"
)

// BenchmarkStatistics is the statistics of the El Farol grid of
// BenchmarkElFarolGrid (4 points × 3 allocators) at the default of 20
// seeds: the bootstrap intervals of every row and the paired comparisons
// of every two allocators, from per-seed finals. Every Run pays it once.
func BenchmarkStatistics(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const points, allocs, seeds = 4, 3, 20
	rows := make([]Row, points*allocs)
	for i := range rows {
		for range seeds {
			rows[i].Final = append(rows[i].Final, rng.Float64())
			rows[i].Overall = append(rows[i].Overall, rng.Float64())
			rows[i].LockedIn = append(rows[i].LockedIn, rng.Float64())
		}
	}
	p := &plan{points: make([]point, points), allocs: make([]string, allocs)}
	cpu := cputime.Seconds()
	for b.Loop() {
		for i := range rows {
			r := &rows[i]
			r.FinalStats = withCI(r.Final, statsSeed(1, 0, i))
			r.OverallStats = withCI(r.Overall, statsSeed(1, 1, i))
			r.LockedInStats = withCI(r.LockedIn, statsSeed(1, 2, i))
		}
		p.compare(rows)
	}
	if cputime.Available {
		b.ReportMetric((cputime.Seconds()-cpu)/float64(b.N), "cpu-s/op")
	}
}
