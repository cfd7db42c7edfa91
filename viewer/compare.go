package viewer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Comparison sets two runs side by side: their overviews, every
// allocator and role of either, and the episodes they have in common
// (the same episode number and scenario seed: the same seeds under two
// allocators or two policies), with the team reward's differences.
type Comparison struct {
	A, B         *Overview
	RunA, RunB   int
	Allocators   []CompareRow
	Roles        []CompareRow
	Statuses     []CompareRow
	Paired       int // episodes in both
	SameSeeds    bool
	Delta        Stat // team reward of B minus A, over pairs scored in both
	DeltaHist    Chart
	Largest      []Pair // the pairs that differ most
	ScatterChart Chart
	// Intervals are B − A with a 95% interval for the team reward, then
	// every allocator both runs have (its episodes' mean per sample):
	// paired by seed when every common episode has the same seed in both,
	// Welch's otherwise.
	Intervals []Interval
}

// CompareRow is one name's values in both runs.
type CompareRow struct {
	Name string
	A, B string
	Diff string
}

// Pair is one episode in both runs.
type Pair struct {
	Index              int64
	OrdA, OrdB         int
	RolloutA, RolloutB int64
	TeamA, TeamB       float64
	Delta              float64
}

// maxLargest is how many pairs the comparison lists.
const maxLargest = 25

// compare sets run a (numbered ra) and run b (rb) side by side.
func compare(a, b *Overview, ra, rb int) *Comparison {
	c := &Comparison{A: a, B: b, RunA: ra, RunB: rb}
	allocA := namesOf(a.Allocators, func(s AllocStat) string { return s.Name })
	allocB := namesOf(b.Allocators, func(s AllocStat) string { return s.Name })
	allocs := union(allocA, allocB)
	c.Allocators = append(c.Allocators, compareRow("team reward (mean over scored episodes)", a.Team.Mean, b.Team.Mean, a.Team.N > 0, b.Team.N > 0))
	for _, name := range allocs {
		sa, okA := byName(a.Allocators, name, func(s AllocStat) string { return s.Name })
		sb, okB := byName(b.Allocators, name, func(s AllocStat) string { return s.Name })
		c.Allocators = append(c.Allocators, compareRow(name+" (mean per sample)", sa.PerSample, sb.PerSample, okA, okB))
	}
	c.Roles = compareRoles(a, b, allocA, allocB, allocs)
	statusName := func(s Count) string { return s.Name }
	for _, s := range union(namesOf(a.Statuses, statusName), namesOf(b.Statuses, statusName)) {
		// A run without the status has none: byName's zero Count.
		na, _ := byName(a.Statuses, s, statusName)
		nb, _ := byName(b.Statuses, s, statusName)
		c.Statuses = append(c.Statuses, CompareRow{Name: s, A: fmt.Sprint(na.N), B: fmt.Sprint(nb.N), Diff: fmt.Sprintf("%+d", nb.N-na.N)})
	}
	byIndex, pairs, deltas := c.pair()
	c.Intervals = intervals(a.File, b.File, byIndex, c.Paired > 0 && c.SameSeeds, allocs)
	c.DeltaHist = histogram(deltas, c.Delta.Min, c.Delta.Max, "delta-hist", "team reward, B − A")
	slices.SortStableFunc(pairs, func(x, y Pair) int { return cmp.Compare(math.Abs(y.Delta), math.Abs(x.Delta)) })
	c.Largest = pairs[:min(len(pairs), maxLargest)]
	c.ScatterChart = scatter(pairs)
	return c
}

// compareRow is a value of both runs and B − A; "–" for one a run lacks.
func compareRow(name string, va, vb float64, okA, okB bool) CompareRow {
	r := CompareRow{Name: name, A: "–", B: "–", Diff: "–"}
	if okA {
		r.A = num(va)
	}
	if okB {
		r.B = num(vb)
	}
	if okA && okB {
		r.Diff = num(vb - va)
	}
	return r
}

// namesOf returns the name of each of xs.
func namesOf[T any](xs []T, name func(T) string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, name(x))
	}
	return out
}

// byName returns the first of xs named name, and whether there is one.
func byName[T any](xs []T, name string, nameOf func(T) string) (T, bool) {
	for _, x := range xs {
		if nameOf(x) == name {
			return x, true
		}
	}
	var zero T
	return zero, false
}

// compareRoles is the rows of every role of either run: its mean agent
// score, then each allocator's value per sample. allocA and allocB are
// the runs' allocators, in the order of their roles' values; allocs both.
func compareRoles(a, b *Overview, allocA, allocB, allocs []string) []CompareRow {
	var rows []CompareRow
	roleName := func(r RoleStat) string { return r.Role }
	for _, name := range union(namesOf(a.Roles, roleName), namesOf(b.Roles, roleName)) {
		ra, okA := byName(a.Roles, name, roleName)
		rb, okB := byName(b.Roles, name, roleName)
		rows = append(rows, compareRow(name+": mean agent score", ra.ScoreMean(), rb.ScoreMean(), okA && ra.Scored > 0, okB && rb.Scored > 0))
		for _, alloc := range allocs {
			ka, kb := slices.Index(allocA, alloc), slices.Index(allocB, alloc)
			va, vb := math.NaN(), math.NaN()
			if okA && ka >= 0 && ka < len(ra.Alloc) {
				va = ra.Alloc[ka]
			}
			if okB && kb >= 0 && kb < len(rb.Alloc) {
				vb = rb.Alloc[kb]
			}
			rows = append(rows, compareRow(fmt.Sprintf("%s: %s per sample", name, alloc), va, vb, !math.IsNaN(va), !math.IsNaN(vb)))
		}
	}
	return rows
}

// pair finds the episodes in both runs: the same episode number in both
// files (A's first of a number). It sets Paired, SameSeeds and Delta, and
// returns A's episode of each number, the pairs scored in both and their
// differences.
func (c *Comparison) pair() (byIndex map[int64]int, pairs []Pair, deltas []float64) {
	byIndex = map[int64]int{}
	fa, fb := c.A.File, c.B.File
	for k := range fa.n {
		if _, ok := byIndex[fa.index.get(k)]; !ok {
			byIndex[fa.index.get(k)] = k
		}
	}
	c.SameSeeds = true
	for k := range fb.n {
		index := fb.index.get(k)
		ka, ok := byIndex[index]
		if !ok {
			continue
		}
		c.Paired++
		if fa.seed.get(ka) != fb.seed.get(k) || fa.kind(ka).scenario != fb.kind(k).scenario {
			c.SameSeeds = false
		}
		if !fa.scored(ka) || !fb.scored(k) {
			continue
		}
		ta, tb := fa.team.get(ka), fb.team.get(k)
		p := Pair{Index: index, OrdA: ka, OrdB: k, RolloutA: fa.rollout.get(ka), RolloutB: fb.rollout.get(k), TeamA: ta, TeamB: tb, Delta: tb - ta}
		pairs = append(pairs, p)
		deltas = append(deltas, p.Delta)
		c.Delta.add(p.Delta)
	}
	return byIndex, pairs, deltas
}

// scatter plots each pair's team reward in B against A.
func scatter(pairs []Pair) Chart {
	if len(pairs) == 0 {
		return Chart{}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pairs {
		lo = math.Min(lo, math.Min(p.TeamA, p.TeamB))
		hi = math.Max(hi, math.Max(p.TeamA, p.TeamB))
	}
	if hi <= lo {
		lo, hi = lo-0.5, hi+0.5
	}
	const size, pad = 260.0, 34.0
	at := func(v float64) float64 { return (v - lo) / (hi - lo) * size }
	c := Chart{W: int(size + 2*pad), H: int(size + 2*pad)}
	c.Lines = append(c.Lines,
		Line{X1: pad, Y1: pad + size, X2: pad + size, Y2: pad + size, Class: "axis"},
		Line{X1: pad, Y1: pad, X2: pad, Y2: pad + size, Class: "axis"},
		Line{X1: pad, Y1: pad + size, X2: pad + size, Y2: pad, Class: "diagonal"},
	)
	// At most 5000 points: beyond that they only blacken the square.
	stride := max(1, len(pairs)/5000)
	for k := 0; k < len(pairs); k += stride {
		p := pairs[k]
		c.Bars = append(c.Bars, Bar{X: pad + at(p.TeamA) - 2, Y: pad + size - at(p.TeamB) - 2, W: 4, H: 4, Class: "point",
			Title: fmt.Sprintf("episode %d: A %s, B %s", p.Index, num(p.TeamA), num(p.TeamB))})
	}
	c.Texts = append(c.Texts,
		Text{X: pad, Y: pad + size + 14, Anchor: "start", Class: "tick", S: num(lo)},
		Text{X: pad + size, Y: pad + size + 14, Anchor: "end", Class: "tick", S: num(hi) + " (A)"},
		Text{X: pad - 4, Y: pad + 4, Anchor: "end", Class: "tick", S: num(hi)},
		Text{X: pad + 4, Y: pad - 6, Anchor: "start", Class: "tick", S: "B"},
	)
	return c
}

// union is a's names, then b's that a lacks.
func union(a, b []string) []string { return appendNew(slices.Clone(a), b...) }

// appendNew appends to s each of vs that it does not hold yet.
func appendNew[T comparable](s []T, vs ...T) []T {
	for _, v := range vs {
		if !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}

// intervals computes the comparison's intervals: the team reward's over
// scored episodes, then each allocator's over the episodes that have it.
func intervals(a, b *File, byIndex map[int64]int, paired bool, allocs []string) []Interval {
	// A value gives a file's episodes' values, by ordinal.
	type value func(x *File) func(k int) (float64, bool)
	team := func(x *File) func(k int) (float64, bool) {
		return func(k int) (float64, bool) { return x.team.get(k), x.scored(k) }
	}
	whats := []string{"team reward"}
	values := []value{team}
	for _, name := range allocs {
		whats = append(whats, name+" (episode mean per sample)")
		values = append(values, func(x *File) func(k int) (float64, bool) {
			c := x.allocColumn(name)
			return func(k int) (float64, bool) {
				if c < 0 {
					return 0, false
				}
				return x.allocValue(k, c)
			}
		})
	}
	out := make([]Interval, 0, len(values))
	for k, value := range values {
		valA, valB := value(a), value(b)
		if paired {
			var d moments
			for j := range b.n {
				i, ok := byIndex[b.index.get(j)]
				if !ok {
					continue
				}
				va, okA := valA(i)
				vb, okB := valB(j)
				if okA && okB {
					d.add(vb - va)
				}
			}
			if d.n == 0 {
				continue
			}
			out = append(out, pairedInterval(whats[k], d))
			continue
		}
		var ma, mb moments
		for i := range a.n {
			if v, ok := valA(i); ok {
				ma.add(v)
			}
		}
		for j := range b.n {
			if v, ok := valB(j); ok {
				mb.add(v)
			}
		}
		if ma.n == 0 || mb.n == 0 {
			continue
		}
		out = append(out, welchInterval(whats[k], ma, mb))
	}
	return out
}
