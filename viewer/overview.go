package viewer

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// Overview is a file's run at a glance: its episodes by status and end
// reason, the team reward's distribution, each role's scores and each
// allocator's rewards, and its groups.
type Overview struct {
	File             *File
	Episodes, Scored int
	Samples, Turns   int
	Layouts          []Count
	Scenarios        []Count
	Statuses, Ends   []Count
	Team             Stat
	TeamHist         Chart
	Allocators       []AllocStat
	AllocChart       Chart // per allocator, the distribution of episode means, on one scale
	Roles            []RoleStat
	// Groups are the first groups (by group_index), at most
	// maxGroupsShown; GroupCount counts them all.
	Groups     []GroupStat
	GroupCount int
	GroupChart Chart
}

// Count is a named number.
type Count struct {
	Name string
	N    int
}

// Stat summarises values.
type Stat struct {
	N                   int
	Mean, Std, Min, Max float64
	sum, sumSq          float64
}

func (s *Stat) add(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if s.N == 0 || v < s.Min {
		s.Min = v
	}
	if s.N == 0 || v > s.Max {
		s.Max = v
	}
	s.N++
	s.sum += v
	s.sumSq += v * v
	s.Mean = s.sum / float64(s.N)
	s.Std = math.Sqrt(max(s.sumSq/float64(s.N)-s.Mean*s.Mean, 0))
}

// AllocStat is one allocator over the run.
type AllocStat struct {
	Name      string
	Episodes  Stat    // the episodes' mean values
	PerSample float64 // the mean over every sample
	samples   int
	sum       float64
}

// RoleStat is one role over the run.
type RoleStat struct {
	Role     string
	Agents   int // agent-episodes
	Scored   int // of them, with a score
	ScoreSum float64
	Samples  int
	Alloc    []float64 // per allocator of the overview, the mean per sample of the role
	allocSum []float64
	allocN   []int
}

// ScoreMean is the role's mean agent score, per agent-episode.
func (r *RoleStat) ScoreMean() float64 {
	if r.Scored == 0 {
		return 0
	}
	return r.ScoreSum / float64(r.Scored)
}

// GroupStat is one group_index over the run.
type GroupStat struct {
	Group    int64
	Episodes int
	Team     Stat
}

// maxGroupsShown bounds the groups listed on the overview.
const maxGroupsShown = 200

// Overview computes the overview of the file: the counts and statistics
// from the index's columns, the roles' from the sums the index added up.
func (x *File) Overview() *Overview {
	o := &Overview{File: x, Episodes: x.n}
	// Counted per kind, then by name.
	perKind := make([]int, len(x.kinds))
	allocs := make([]AllocStat, len(x.allocNames))
	groups := x.groupStats()
	for k := range x.n {
		kd := int(x.kindOf.get(k))
		kn := &x.kinds[kd]
		perKind[kd]++
		o.Samples += int(x.samples.get(k))
		o.Turns += int(x.turns.get(k))
		g := groups.at(x.group.get(k))
		if g != nil {
			g.Episodes++
		}
		if kn.scored {
			t := x.team.get(k)
			o.Scored++
			o.Team.add(t)
			if g != nil {
				g.Team.add(t)
			}
		}
		for _, c := range kn.allocCols {
			if v, ok := x.allocValue(k, c); ok {
				allocs[c].Episodes.add(v)
			}
		}
	}
	layouts, scenarios, statuses, ends := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for i, n := range perKind {
		if n == 0 {
			continue
		}
		kn := &x.kinds[i]
		layouts[kn.layout.String()] += n
		scenarios[kn.scenario] += n
		statuses[kn.status] += n
		ends[kn.end] += n
	}
	o.Layouts, o.Scenarios, o.Statuses, o.Ends = counts(layouts), counts(scenarios), counts(statuses), counts(ends)
	for c, name := range x.allocNames {
		s := allocs[c]
		s.Name = name
		if t := x.allocTotals[c]; t.samples > 0 {
			s.PerSample = t.sum / float64(t.samples)
		}
		o.Allocators = append(o.Allocators, s)
	}
	for _, name := range slices.Sorted(maps.Keys(x.roleTotals)) {
		r := *x.roleTotals[name]
		r.Alloc = make([]float64, len(x.allocNames))
		for k := range r.Alloc {
			r.Alloc[k] = math.NaN()
			if k < len(r.allocN) && r.allocN[k] > 0 {
				r.Alloc[k] = r.allocSum[k] / float64(r.allocN[k])
			}
		}
		o.Roles = append(o.Roles, r)
	}
	o.Groups, o.GroupCount = groups.shown, groups.count
	teams := func(yield func(float64) bool) {
		for k := range x.n {
			if x.scored(k) && !yield(x.team.get(k)) {
				return
			}
		}
	}
	o.TeamHist = histogramOf(o.Scored, teams, o.Team.Min, o.Team.Max, "team-hist", "team reward")
	o.AllocChart = allocHistograms(x, o.Allocators)
	o.GroupChart = groupChart(o.Groups)
	return o
}

// groupTable is the groups the overview lists: the maxGroupsShown lowest
// group_index values, and how many there are.
type groupTable struct {
	shown []GroupStat // sorted by group
	pos   map[int64]int
	count int
}

// groupStats finds the file's groups: their number, and the first
// maxGroupsShown, whose statistics the overview then adds up (a run of a
// million groups keeps 200). Groups that rise through the file, as troupe
// writes them, are counted without a set.
func (x *File) groupStats() *groupTable {
	t := &groupTable{}
	rising := true
	for k := 1; k < x.n && rising; k++ {
		rising = x.group.get(k) >= x.group.get(k-1)
	}
	var low []int64
	if rising {
		for k := range x.n {
			if g := x.group.get(k); k == 0 || g != x.group.get(k-1) {
				t.count++
				if len(low) < maxGroupsShown {
					low = append(low, g)
				}
			}
		}
	} else {
		seen := map[int64]struct{}{}
		for k := range x.n {
			seen[x.group.get(k)] = struct{}{}
		}
		t.count = len(seen)
		low = slices.Sorted(maps.Keys(seen))
		low = low[:min(len(low), maxGroupsShown)]
	}
	t.pos = make(map[int64]int, len(low))
	for i, g := range low {
		t.shown = append(t.shown, GroupStat{Group: g})
		t.pos[g] = i
	}
	return t
}

// at returns the statistics of group g, nil for a group not shown.
func (t *groupTable) at(g int64) *GroupStat {
	if i, ok := t.pos[g]; ok {
		return &t.shown[i]
	}
	return nil
}

// counts sorts a tally by count, then name.
func counts(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{k, n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		if c := cmp.Compare(b.N, a.N); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return out
}
