package experiment

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/policies/learn"
)

// ParseLearners reads a learner spec that may sweep its parameters: each
// value may list alternatives separated by '/', and the spec stands for
// every combination, the first parameter varying slowest. So
// "egreedy:alpha=0.05/0.1,epsilon=0.02/0.05" is four learners, alpha=0.05
// with both epsilons first. A spec without '/' is one learner
// (learn.Parse). Each learner is checked as learn.Parse checks it.
func ParseLearners(spec string) ([]learn.Spec, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(spec), ":")
	if !ok || !strings.Contains(rest, "/") {
		l, err := learn.Parse(spec)
		if err != nil {
			return nil, err
		}
		return []learn.Spec{l}, nil
	}
	combos := []string{""}
	for piece := range strings.SplitSeq(rest, ",") {
		k, list, ok := strings.Cut(piece, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("%w: learner sweep %q: %q is not key=value[/value...]", ErrBadConfig, spec, piece)
		}
		var values []string
		for v := range strings.SplitSeq(list, "/") {
			v = strings.TrimSpace(v)
			if v == "" {
				return nil, fmt.Errorf("%w: learner sweep %q: %s has an empty value", ErrBadConfig, spec, k)
			}
			if slices.Contains(values, v) {
				return nil, fmt.Errorf("%w: learner sweep %q: %s=%s given twice", ErrBadConfig, spec, k, v)
			}
			values = append(values, v)
		}
		var next []string
		for _, c := range combos {
			for _, v := range values {
				sep := ","
				if c == "" {
					sep = ""
				}
				next = append(next, c+sep+k+"="+v)
			}
		}
		combos = next
	}
	out := make([]learn.Spec, len(combos))
	for i, c := range combos {
		l, err := learn.Parse(strings.TrimSpace(name) + ":" + c)
		if err != nil {
			return nil, fmt.Errorf("learner sweep %q: %w", spec, err)
		}
		out[i] = l
	}
	return out, nil
}

// learnerLabels are short names of the learners names lists (specs in
// full, as learn.Spec.String writes them, all different): with one, its
// spec; with more, the learner's name where the names differ, and the
// parameters whose values differ among the learners of that name, less
// those at their default ("egreedy:alpha=0.3" beside "egreedy", which
// runs the default alpha), unless nothing would be left to name it. A
// sweep of alpha alone reads "alpha=0.05", "alpha=0.1", "alpha=0.3".
// Labels that would coincide fall back to the specs in full.
func learnerLabels(names []string) []string {
	if len(names) == 1 {
		return slices.Clone(names)
	}
	type parsed struct {
		name string
		keys []string
		vals map[string]string
	}
	ps := make([]parsed, len(names))
	first := map[string]string{} // "name.key" → the first value seen
	varies := map[string]bool{}  // "name.key" → values differ within the name
	sameName := true
	for i, n := range names {
		name, rest, _ := strings.Cut(n, ":")
		ps[i] = parsed{name: name, vals: map[string]string{}}
		sameName = sameName && name == ps[0].name
		if rest == "" {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			ps[i].keys = append(ps[i].keys, k)
			ps[i].vals[k] = v
			if f, seen := first[name+"."+k]; !seen {
				first[name+"."+k] = v
			} else if f != v {
				varies[name+"."+k] = true
			}
		}
	}
	defaults := func(name string) map[string]string {
		d := map[string]string{}
		if l, err := learn.Parse(name); err == nil {
			_, rest, _ := strings.Cut(l.String(), ":")
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				d[k] = v
			}
		}
		return d
	}
	labels := make([]string, len(names))
	seen := map[string]bool{}
	for i, pl := range ps {
		def := defaults(pl.name)
		var all, changed []string
		for _, k := range pl.keys {
			if varies[pl.name+"."+k] {
				all = append(all, k+"="+pl.vals[k])
				if def[k] != pl.vals[k] {
					changed = append(changed, k+"="+pl.vals[k])
				}
			}
		}
		kv := changed
		if len(kv) == 0 && sameName {
			kv = all
		}
		switch {
		case !sameName && len(kv) > 0:
			labels[i] = pl.name + ":" + strings.Join(kv, ",")
		case !sameName:
			labels[i] = pl.name
		default:
			labels[i] = strings.Join(kv, ",")
		}
		if labels[i] == "" || seen[labels[i]] {
			return slices.Clone(names)
		}
		seen[labels[i]] = true
	}
	return labels
}

// learnerSlug names learner li in the names of figures: empty with a
// single learner, whose figures keep the names they had before sweeps.
func (p *plan) learnerSlug(li int) string {
	if len(p.specs) < 2 {
		return ""
	}
	return slug(p.specLabels[li])
}

// SweepRow summarises one point and allocator over the learners of a
// sweep: how well the reward does with the best learner, and with a
// typical one.
type SweepRow struct {
	Point     []string `json:"-"`
	Allocator string   `json:"allocator"`
	// Means are the mean final results over seeds, one per learner in
	// Config.Learners order.
	Means []float64 `json:"means"`
	// Best is the highest of Means, reached with BestLearner (the first
	// such), whose bootstrap 95% interval is [BestCILow, BestCIHigh] and
	// whose seeds' modes are BestModes. Worst is the lowest.
	Best         float64 `json:"best"`
	BestLearner  string  `json:"best_learner"`
	BestCILow    float64 `json:"best_ci_low"`
	BestCIHigh   float64 `json:"best_ci_high"`
	BestModes    []Mode  `json:"best_modes"`
	Worst        float64 `json:"worst"`
	WorstLearner string  `json:"worst_learner"`
	// Median is the median of Means: the reward with a typical learner
	// of the sweep.
	Median float64 `json:"median"`
	// Ranks are the allocator's rank among the allocators at each
	// learner, by mean final result (1: the highest; equal means share a
	// rank); Top counts the learners at which it ranks first.
	Ranks []int `json:"ranks"`
	Top   int   `json:"top"`
}

// Ordering is one ordering of the allocators at a point, and the learners
// of the sweep that give it.
type Ordering struct {
	Point []string `json:"-"`
	// Order lists the allocators by mean final result, highest first,
	// "a > b" where the paired comparison of the neighbours is
	// significant (p(Holm) < 0.05) and "a ≈ b" where it is not; a run of
	// allocators none of which differs significantly from another is a
	// tie, written in Config.Allocators order.
	Order string `json:"order"`
	// Learners are the learners that give it (their labels, in
	// Config.Learners order).
	Learners []string `json:"learners"`
}

// sweep summarises each point and allocator over the learners (nil for a
// single learner).
func (p *plan) sweep(rows []Row) []SweepRow {
	if len(p.specs) < 2 {
		return nil
	}
	var out []SweepRow
	for pi := range p.points {
		ranks := make([][]int, len(p.allocs)) // per allocator, per learner
		for li := range p.specs {
			for ai := range p.allocs {
				m := rows[p.row(pi, li, ai)].FinalStats.Mean
				rank := 1
				for bi := range p.allocs {
					if rows[p.row(pi, li, bi)].FinalStats.Mean > m {
						rank++
					}
				}
				ranks[ai] = append(ranks[ai], rank)
			}
		}
		for ai, alloc := range p.allocs {
			s := SweepRow{Point: p.points[pi].values, Allocator: alloc, Ranks: ranks[ai]}
			best, worst := 0, 0
			for li := range p.specs {
				m := rows[p.row(pi, li, ai)].FinalStats.Mean
				s.Means = append(s.Means, m)
				if m > s.Means[best] {
					best = li
				}
				if m < s.Means[worst] {
					worst = li
				}
				if ranks[ai][li] == 1 {
					s.Top++
				}
			}
			b := rows[p.row(pi, best, ai)]
			s.Best, s.BestLearner, s.BestCILow, s.BestCIHigh, s.BestModes = b.FinalStats.Mean, b.Learner, b.FinalStats.CILow, b.FinalStats.CIHigh, b.Modes
			s.Worst, s.WorstLearner = s.Means[worst], p.specNames[worst]
			sorted := slices.Clone(s.Means)
			slices.Sort(sorted)
			s.Median = quantile(sorted, 0.5)
			out = append(out, s)
		}
	}
	return out
}

// orderings groups the learners of each point by the ordering of the
// allocators they give, the most frequent ordering first.
func (p *plan) orderings(rows []Row, comps []Comparison) []Ordering {
	if len(p.specs) < 2 {
		return nil
	}
	// significant[(pi, li, a, b)] from the comparisons, in the order
	// compare makes them.
	pairs := len(p.allocs) * (len(p.allocs) - 1) / 2
	sig := func(pi, li, a, b int) bool {
		if a > b {
			a, b = b, a
		}
		k := 0 // the index of (a, b) among the pairs of one point and learner
		for x := range a {
			k += len(p.allocs) - 1 - x
		}
		k += b - a - 1
		c := comps[(pi*len(p.specs)+li)*pairs+k]
		return c.PHolm < 0.05
	}
	var out []Ordering
	for pi := range p.points {
		var here []Ordering
		for li := range p.specs {
			order := make([]int, len(p.allocs))
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int {
				return cmp.Compare(rows[p.row(pi, li, b)].FinalStats.Mean, rows[p.row(pi, li, a)].FinalStats.Mean)
			})
			// A run of neighbours none of which differ significantly from
			// each other is a tie: written in the allocators' order, so that
			// noise does not make two orderings of one.
			for i := 0; i < len(order); {
				j := i + 1
				for j < len(order) && !sig(pi, li, order[j-1], order[j]) {
					j++
				}
				tie := true
				for x := i; x < j && tie; x++ {
					for y := x + 1; y < j && tie; y++ {
						tie = !sig(pi, li, order[x], order[y])
					}
				}
				if tie {
					slices.Sort(order[i:j])
				}
				i = j
			}
			var b strings.Builder
			for i, ai := range order {
				if i > 0 {
					if sig(pi, li, order[i-1], ai) {
						b.WriteString(" > ")
					} else {
						b.WriteString(" ≈ ")
					}
				}
				b.WriteString(p.allocs[ai])
			}
			k := slices.IndexFunc(here, func(o Ordering) bool { return o.Order == b.String() })
			if k < 0 {
				here = append(here, Ordering{Point: p.points[pi].values, Order: b.String()})
				k = len(here) - 1
			}
			here[k].Learners = append(here[k].Learners, p.specLabels[li])
		}
		slices.SortStableFunc(here, func(a, b Ordering) int { return cmp.Compare(len(b.Learners), len(a.Learners)) })
		out = append(out, here...)
	}
	return out
}
