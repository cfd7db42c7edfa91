package experiment

import (
	"encoding/json"
	"math"
	"slices"
)

// Row is the result of one grid point, learner and allocator, across
// seeds.
type Row struct {
	Point   []string // the axis values, in axis order
	Learner string   // the learner's spec, in full
	// LearnerLabel is the short name the tables give the learner: in a
	// sweep, what differs from the others ("alpha=0.3").
	LearnerLabel string
	Allocator    string
	// Final is, per seed, the mean of the metric (G/G*, or G) over the
	// last Window episodes; Overall its mean over every episode, which
	// rewards learning fast as well as well.
	Final, Overall []float64
	FinalStats     Stats
	OverallStats   Stats
	// Modes are the clusters of the seeds' final results (FindModes with
	// Config.Modes): one for a unimodal outcome, two or more where the
	// seeds ended in distinct places, which a mean alone hides; none
	// where no cluster holds enough seeds.
	Modes []Mode
	// LockedIn is, per seed, the share of the learner's rows (agent and
	// state) whose greedy action never changed after their first update
	// (learn.Lock); nil for a learner that does not say.
	LockedIn      []float64
	LockedInStats Stats
	// Diagnostics summarise the cells' credit diagnostics across seeds;
	// nil when none were measured.
	Diagnostics *RowDiagnostics
	// Signal summarises, across seeds, the standard deviation of the
	// rewards of the final window's samples (Signal), and the standard
	// deviation across agents of each agent's mean reward there (Spread):
	// how unequally the allocator shares the credit.
	Signal, Spread Stats
	// MetricNames are the scenario's episode metrics; FinalMetrics their
	// final values (the mean over the final window), mean over seeds.
	MetricNames  []string
	FinalMetrics []float64
}

// RowDiagnostics are the per-seed factoredness and learnability of a row's
// cells (see Diagnose) and their summaries.
type RowDiagnostics struct {
	Factoredness Stats `json:"factoredness"`
	Learnability Stats `json:"learnability"`
	// Unbounded summarises the per-seed share of the states whose
	// learnability is unbounded (only the agent's own changes moved its
	// reward), which the learnability's mean leaves out.
	Unbounded Stats `json:"learnability_unbounded_share"`
	// Per seed, in seed order; null (NaN) where a seed had no sample,
	// and for learnability +Inf, written null too, where the others never
	// moved the agent's reward at any state.
	PerSeedF []Number `json:"factoredness_per_seed"`
	PerSeedL []Number `json:"learnability_per_seed"`
	PerSeedU []Number `json:"learnability_unbounded_share_per_seed"`
	// PerSeedLInterval is, per seed, the 95% interval of its learnability
	// over the counterfactuals drawn (Diagnostics.LearnabilityInterval):
	// how far sampling may have put it from the exact value at the states
	// that seed measured.
	PerSeedLInterval [][2]Number `json:"learnability_interval_per_seed"`
}

// Number is a float64 that JSON writes as null when it is not finite.
type Number float64

// MarshalJSON implements json.Marshaler.
func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
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
	sig, spread := map[int][]float64{}, map[int][]float64{}
	for _, c := range p.cells {
		if c.seed == 0 {
			rows = append(rows, Row{Point: p.points[c.point].values, Learner: p.specNames[c.spec], LearnerLabel: p.specLabels[c.spec], Allocator: p.allocs[c.alloc]})
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
		if cell.Diagnostics != nil {
			if r.Diagnostics == nil {
				r.Diagnostics = &RowDiagnostics{}
			}
			r.Diagnostics.PerSeedF = append(r.Diagnostics.PerSeedF, Number(cell.Diagnostics.Factoredness()))
			r.Diagnostics.PerSeedL = append(r.Diagnostics.PerSeedL, Number(cell.Diagnostics.Learnability()))
			r.Diagnostics.PerSeedU = append(r.Diagnostics.PerSeedU, Number(cell.Diagnostics.UnboundedShare()))
			lo, hi := cell.Diagnostics.LearnabilityInterval()
			r.Diagnostics.PerSeedLInterval = append(r.Diagnostics.PerSeedLInterval, [2]Number{Number(lo), Number(hi)})
		}
		if cell.Credit != nil {
			sig[len(rows)-1] = append(sig[len(rows)-1], cell.Credit.Std)
			spread[len(rows)-1] = append(spread[len(rows)-1], summarise(cell.Credit.Mean).Std)
		}
		if len(cell.MetricNames) > 0 {
			if r.MetricNames == nil {
				r.MetricNames = cell.MetricNames
				r.FinalMetrics = make([]float64, len(cell.MetricNames))
			}
			for m, series := range cell.Metrics {
				r.FinalMetrics[m] += mean(series[max(0, len(series)-p.window):]) / float64(p.cfg.Seeds)
			}
		}
	}
	for i := range rows {
		r := &rows[i]
		r.FinalStats = withCI(r.Final, statsSeed(p.cfg.Seed, 0, i))
		r.OverallStats = withCI(r.Overall, statsSeed(p.cfg.Seed, 1, i))
		r.Modes = FindModes(r.Final, p.cfg.Modes)
		if len(r.LockedIn) != len(r.Final) {
			r.LockedIn = nil // some cells' learners do not say
		}
		r.LockedInStats = withCI(r.LockedIn, statsSeed(p.cfg.Seed, 2, i))
		if d := r.Diagnostics; d != nil {
			d.Factoredness = withCI(finite(d.PerSeedF), statsSeed(p.cfg.Seed, 4, i))
			d.Learnability = withCI(finite(d.PerSeedL), statsSeed(p.cfg.Seed, 5, i))
			d.Unbounded = summarise(finite(d.PerSeedU))
		}
		r.Signal, r.Spread = summarise(sig[i]), summarise(spread[i])
	}
	return rows
}

// finite returns the finite values of xs: a seed whose diagnostics had no
// sample (NaN) or never saw the others move its reward (+Inf) is left out
// of the summary, and still listed per seed.
func finite(xs []Number) []float64 {
	var out []float64
	for _, n := range xs {
		if x := float64(n); !math.IsNaN(x) && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

// compare makes the paired comparisons of every two allocators at every
// point and learner, over their seeds' final results, rows in grid order.
func (p *plan) compare(rows []Row) []Comparison {
	var out []Comparison
	k := len(p.allocs)
	for pi := range p.points {
		for li := range p.specs {
			for a := range k {
				for b := a + 1; b < k; b++ {
					ra, rb := rows[p.row(pi, li, a)], rows[p.row(pi, li, b)]
					c := compare(ra.Final, rb.Final, statsSeed(p.cfg.Seed, 3, len(out)))
					c.Point, c.Learner, c.A, c.B = ra.Point, ra.Learner, ra.Allocator, rb.Allocator
					out = append(out, c)
				}
			}
		}
	}
	holm(out)
	return out
}

// row is the index in Result.Rows of point pi, learner li and allocator
// ai.
func (p *plan) row(pi, li, ai int) int { return (pi*len(p.specs)+li)*len(p.allocs) + ai }

// rowAt is row's inverse: the point, learner and allocator of row i.
func (p *plan) rowAt(i int) (pi, li, ai int) {
	ai = i % len(p.allocs)
	i /= len(p.allocs)
	return i / len(p.specs), i % len(p.specs), ai
}

// curveOf is one cell's metric averaged in bins of episodes: at most
// maxPoints points, so plots stay light whatever the run's length.
func curveOf(cell *Cell) (x, y []float64) {
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
