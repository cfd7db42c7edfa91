package experiment

import (
	"math"
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
}

// Stats summarise one number across seeds.
type Stats struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"` // the sample standard deviation; 0 for one seed
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
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
	}
	for i := range rows {
		rows[i].FinalStats = summarise(rows[i].Final)
		rows[i].OverallStats = summarise(rows[i].Overall)
	}
	return rows
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
