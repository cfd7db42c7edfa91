package experiment

import (
	"math"
	"slices"
)

// Row is the result of one grid point and allocator, across seeds.
type Row struct {
	Point     []string // the axis values, in axis order
	Allocator string
	// Final is, per seed, the mean of the metric (G/G*, or G) over the
	// last Window episodes; Overall its mean over every episode, which
	// rewards learning fast as well as well.
	Final, Overall []float64
	FinalStats     Stats
	OverallStats   Stats
	// LockedIn is, per seed, the share of the learner's rows (agent and
	// state) whose greedy action never changed after their first update
	// (learn.Lock); nil for a learner that does not say.
	LockedIn      []float64
	LockedInStats Stats
}

// Stats summarise one number across seeds.
type Stats struct {
	Mean float64 `json:"mean"`
	// CILow and CIHigh bound the percentile bootstrap 95% confidence
	// interval of the mean (Confidence; bootstrapCI): [mean, mean] for
	// one seed.
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
	Std    float64 `json:"std"` // the sample standard deviation; 0 for one seed
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// withCI is summarise(xs) with the bootstrap interval of its mean.
func withCI(xs []float64, seed uint64) Stats {
	s := summarise(xs)
	s.CILow, s.CIHigh = bootstrapCI(xs, seed)
	return s
}

func summarise(xs []float64) Stats {
	s := Stats{N: len(xs), Min: math.Inf(1), Max: math.Inf(-1)}
	if len(xs) == 0 {
		return Stats{}
	}
	for _, x := range xs {
		s.Mean += x
		s.Min = min(s.Min, x)
		s.Max = max(s.Max, x)
	}
	s.Mean /= float64(len(xs))
	if len(xs) > 1 {
		ss := 0.0
		for _, x := range xs {
			ss += (x - s.Mean) * (x - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(len(xs)-1))
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	s.Median = quantile(sorted, 0.5)
	return s
}

// aggregate makes one row per point and allocator, from cells in grid
// order.
func (p *plan) aggregate(cells []*Cell) []Row {
	var rows []Row
	for _, c := range p.cells {
		if c.seed == 0 {
			rows = append(rows, Row{Point: p.points[c.point].values, Allocator: p.allocs[c.alloc]})
		}
		r := &rows[len(rows)-1]
		cell := cells[c.index]
		n := len(cell.Team)
		final, overall := 0.0, 0.0
		for e := range n {
			v := cell.Ratio(e)
			overall += v
			if e >= n-p.window {
				final += v
			}
		}
		r.Final = append(r.Final, final/float64(p.window))
		r.Overall = append(r.Overall, overall/float64(n))
		if cell.Lock != nil {
			r.LockedIn = append(r.LockedIn, cell.Lock.LockedIn())
		}
	}
	for i := range rows {
		r := &rows[i]
		r.FinalStats = withCI(r.Final, statsSeed(p.cfg.Seed, 0, i))
		r.OverallStats = withCI(r.Overall, statsSeed(p.cfg.Seed, 1, i))
		if len(r.LockedIn) != len(r.Final) {
			r.LockedIn = nil // some cells' learners do not say
		}
		r.LockedInStats = withCI(r.LockedIn, statsSeed(p.cfg.Seed, 2, i))
	}
	return rows
}

// compare makes the paired comparisons of every two allocators at every
// point, over their seeds' final results, rows in grid order.
func (p *plan) compare(rows []Row) []Comparison {
	var out []Comparison
	k := len(p.allocs)
	for pi := range p.points {
		for a := range k {
			for b := a + 1; b < k; b++ {
				ra, rb := rows[pi*k+a], rows[pi*k+b]
				c := compare(ra.Final, rb.Final, statsSeed(p.cfg.Seed, 3, len(out)))
				c.Point, c.A, c.B = ra.Point, ra.Allocator, rb.Allocator
				out = append(out, c)
			}
		}
	}
	holm(out)
	return out
}

// curve is one cell's metric averaged in bins of episodes: at most
// maxPoints points, so plots stay light whatever the run's length.
func (p *plan) curve(cell *Cell) (x, y []float64) {
	n := len(cell.Team)
	bin := max(1, (n+maxPoints-1)/maxPoints)
	for lo := 0; lo < n; lo += bin {
		hi := min(lo+bin, n)
		sum := 0.0
		for e := lo; e < hi; e++ {
			sum += cell.Ratio(e)
		}
		x = append(x, float64(hi)) // the episode count at the bin's end
		y = append(y, sum/float64(hi-lo))
	}
	return x, y
}

// maxPoints bounds the points of a learning curve.
const maxPoints = 100
