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
	Groups           []GroupStat
	GroupChart       Chart
	// GroupsShown is how many groups the tables list (the first ones).
	GroupsShown int
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

// Overview computes the overview of the file.
func (x *File) Overview() *Overview {
	o := &Overview{File: x, Episodes: len(x.Episodes)}
	layouts, scenarios, statuses, ends := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	allocs := map[string]*AllocStat{}
	var allocOrder []string
	roles := map[string]*RoleStat{}
	groups := map[int64]*GroupStat{}
	var groupOrder []int64
	var teams []float64
	for i := range x.Episodes {
		e := &x.Episodes[i]
		layouts[e.Layout.String()]++
		scenarios[e.Scenario]++
		statuses[e.Status]++
		ends[e.End]++
		o.Samples += e.Samples
		o.Turns += e.Turns
		g, ok := groups[e.GroupIndex]
		if !ok {
			g = &GroupStat{Group: e.GroupIndex}
			groups[e.GroupIndex] = g
			groupOrder = append(groupOrder, e.GroupIndex)
		}
		g.Episodes++
		if e.Scored() {
			o.Scored++
			o.Team.add(e.Team)
			teams = append(teams, e.Team)
			g.Team.add(e.Team)
		}
		for a, name := range e.Allocators {
			s, ok := allocs[name]
			if !ok {
				s = &AllocStat{Name: name}
				allocs[name] = s
				allocOrder = append(allocOrder, name)
			}
			if !math.IsNaN(e.Alloc[a]) {
				s.Episodes.add(e.Alloc[a])
			}
		}
		for _, rf := range e.Roles {
			r, ok := roles[rf.Role]
			if !ok {
				r = &RoleStat{Role: rf.Role}
				roles[rf.Role] = r
			}
			r.Agents += rf.Agents
			r.Samples += rf.Samples
			r.Scored += rf.Scored
			r.ScoreSum += rf.ScoreSum
			for a, v := range rf.AllocSum {
				s := allocs[e.Allocators[a]]
				s.sum += v
				s.samples += rf.Samples
				k := slices.Index(allocOrder, e.Allocators[a])
				for len(r.allocSum) <= k {
					r.allocSum, r.allocN = append(r.allocSum, 0), append(r.allocN, 0)
				}
				r.allocSum[k] += v
				r.allocN[k] += rf.Samples
			}
		}
	}
	o.Layouts, o.Scenarios, o.Statuses, o.Ends = counts(layouts), counts(scenarios), counts(statuses), counts(ends)
	for _, name := range allocOrder {
		s := allocs[name]
		if s.samples > 0 {
			s.PerSample = s.sum / float64(s.samples)
		}
		o.Allocators = append(o.Allocators, *s)
	}
	for _, name := range slices.Sorted(maps.Keys(roles)) {
		r := roles[name]
		r.Alloc = make([]float64, len(allocOrder))
		for k := range r.Alloc {
			r.Alloc[k] = math.NaN()
			if k < len(r.allocN) && r.allocN[k] > 0 {
				r.Alloc[k] = r.allocSum[k] / float64(r.allocN[k])
			}
		}
		o.Roles = append(o.Roles, *r)
	}
	slices.SortFunc(groupOrder, cmp.Compare)
	for _, g := range groupOrder {
		o.Groups = append(o.Groups, *groups[g])
	}
	o.GroupsShown = min(len(o.Groups), maxGroupsShown)
	o.TeamHist = histogram(teams, o.Team.Min, o.Team.Max, "team-hist", "team reward")
	o.AllocChart = allocHistograms(x, o.Allocators)
	o.GroupChart = groupChart(o.Groups[:o.GroupsShown])
	return o
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
