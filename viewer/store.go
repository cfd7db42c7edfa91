package viewer

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// File is the index of one file: every episode's place and facts, built by
// one streaming pass and kept column by column (columns.go); episodes are
// decoded when a page asks for them.
type File struct {
	Path     string
	Name     string // the base name, shown on pages
	Size     int64
	Lines    int
	Problems []Problem
	// ProblemCount counts every problem, also those past maxProblems.
	ProblemCount int

	n                int
	bytesAt, linesAt spans // each episode's bytes and lines in the file
	rollout, index   ints  // predicted to count up with the ordinal
	group, seed      ints
	// kindOf is the position in kinds of the episode's layout, scenario,
	// status, end, allocators and roles: a run has few such kinds.
	kindOf, samples, turns, messages, invalid, agents ints
	kinds                                             []kind
	team                                              floats
	// alloc is, per allocator of allocNames, every episode's mean value
	// (NaN where the episode has none).
	alloc    []floats
	allocPos map[string]int

	// The names the list's filters offer, in order of first use (roles
	// sorted).
	allocNames, roleNames, scenarioNames, statusNames, endNames []string

	// The run's sums per role and allocator, for the overview, added up in
	// file order as the episodes are added.
	roleTotals  map[string]*RoleStat
	allocTotals []allocTotal

	// rising holds while every rollout_id is above the one before: Lookup
	// searches the column. Otherwise byRollout is the ordinals sorted by
	// rollout_id (then ordinal).
	rising    bool
	byRollout []int32

	// While adding: the kinds by key, and the last one used.
	kindPos  map[string]int
	lastKind int
	scratch  []float64

	f *os.File
}

// kind is what many episodes of a file share.
type kind struct {
	layout                Layout
	scenario, status, end string
	scored                bool
	allocs                []string // the episode's allocators, in order
	allocCols             []int    // for each, its column in File.alloc
	roles                 []string // sorted
	roleList              string   // roles joined by spaces, as the list shows them
}

type allocTotal struct {
	sum     float64
	samples int
}

func newFile(path, name string) *File {
	x := &File{Path: path, Name: name, rising: true, allocPos: map[string]int{}, roleTotals: map[string]*RoleStat{},
		kindPos: map[string]int{}, lastKind: -1}
	x.rollout.slope, x.index.slope = 1, 1
	return x
}

// Len is how many episodes the file holds.
func (x *File) Len() int { return x.n }

// add appends an episode to the index: e's facts, and its roles' sums
// (sorted by role) into the run's totals.
func (x *File) add(e *EpisodeInfo, roles []RoleFacts) {
	k := x.n
	x.bytesAt.add(e.Offset, e.Size)
	x.linesAt.add(int64(e.Line), int64(e.Lines))
	if k > 0 && e.RolloutID <= x.rollout.get(k-1) {
		x.rising = false
	}
	x.rollout.add(e.RolloutID)
	x.index.add(e.Index)
	x.group.add(e.GroupIndex)
	x.seed.add(int64(e.Seed))
	kd := x.kindFor(e, roles)
	x.kindOf.add(int64(kd))
	x.team.add(e.Team)
	x.samples.add(int64(e.Samples))
	x.turns.add(int64(e.Turns))
	x.messages.add(int64(e.Messages))
	x.invalid.add(int64(e.Invalid))
	x.agents.add(int64(e.Agents))
	kn := &x.kinds[kd]
	vals := x.scratch[:0]
	for range x.alloc {
		vals = append(vals, math.NaN())
	}
	for i, c := range kn.allocCols {
		vals[c] = e.Alloc[i]
	}
	for c := range x.alloc {
		x.alloc[c].add(vals[c])
	}
	x.scratch = vals
	// The overview's sums, in the order it once made them from a struct
	// per episode: the same floating-point results.
	for _, rf := range roles {
		r, ok := x.roleTotals[rf.Role]
		if !ok {
			r = &RoleStat{Role: rf.Role}
			x.roleTotals[rf.Role] = r
		}
		r.Agents += rf.Agents
		r.Samples += rf.Samples
		r.Scored += rf.Scored
		r.ScoreSum += rf.ScoreSum
		for a, v := range rf.AllocSum {
			c := kn.allocCols[a]
			x.allocTotals[c].sum += v
			x.allocTotals[c].samples += rf.Samples
			for len(r.allocSum) <= c {
				r.allocSum, r.allocN = append(r.allocSum, 0), append(r.allocN, 0)
			}
			r.allocSum[c] += v
			r.allocN[c] += rf.Samples
		}
	}
	x.n++
}

// kindFor returns the position of e's kind, added if new.
func (x *File) kindFor(e *EpisodeInfo, roles []RoleFacts) int {
	same := func(kn *kind) bool {
		if kn.layout != e.Layout || kn.scenario != e.Scenario || kn.status != e.Status || kn.end != e.End ||
			!slices.Equal(kn.allocs, e.Allocators) || len(kn.roles) != len(roles) {
			return false
		}
		for i, r := range roles {
			if kn.roles[i] != r.Role {
				return false
			}
		}
		return true
	}
	if x.lastKind >= 0 && same(&x.kinds[x.lastKind]) {
		return x.lastKind
	}
	var key strings.Builder
	key.WriteString(strconv.Itoa(int(e.Layout)))
	for _, s := range []string{e.Scenario, e.Status, e.End} {
		key.WriteString("\x00" + s)
	}
	key.WriteString("\x01" + strings.Join(e.Allocators, "\x00") + "\x01")
	for _, r := range roles {
		key.WriteString(r.Role + "\x00")
	}
	if p, ok := x.kindPos[key.String()]; ok {
		x.lastKind = p
		return p
	}
	kn := kind{layout: e.Layout, scenario: e.Scenario, status: e.Status, end: e.End, scored: scored(e.Status), allocs: slices.Clone(e.Allocators)}
	for _, r := range roles {
		kn.roles = append(kn.roles, r.Role)
		x.roleNames = appendNew(x.roleNames, r.Role)
	}
	kn.roleList = strings.Join(kn.roles, " ")
	for _, a := range kn.allocs {
		c, ok := x.allocPos[a]
		if !ok {
			c = len(x.alloc)
			x.allocPos[a] = c
			x.allocNames = append(x.allocNames, a)
			var col floats
			for range x.n {
				col.add(math.NaN())
			}
			x.alloc = append(x.alloc, col)
			x.allocTotals = append(x.allocTotals, allocTotal{})
		}
		kn.allocCols = append(kn.allocCols, c)
	}
	x.scenarioNames = appendNew(x.scenarioNames, e.Scenario)
	x.statusNames = appendNew(x.statusNames, e.Status)
	x.endNames = appendNew(x.endNames, e.End)
	x.kinds = append(x.kinds, kn)
	x.lastKind = len(x.kinds) - 1
	x.kindPos[key.String()] = x.lastKind
	return x.lastKind
}

// seal ends adding: it gives back the room the columns kept, finds the
// rollout_ids used again (problems naming their lines) and sorts the
// problems by line, the first maxProblems kept.
func (x *File) seal() {
	for _, c := range []*ints{&x.rollout, &x.index, &x.group, &x.seed, &x.kindOf, &x.samples, &x.turns, &x.messages, &x.invalid, &x.agents} {
		c.seal()
	}
	x.bytesAt.seal()
	x.linesAt.seal()
	x.team.seal()
	for c := range x.alloc {
		x.alloc[c].seal()
	}
	x.kindPos, x.scratch, x.lastKind = nil, nil, -1
	slices.Sort(x.roleNames)
	if !x.rising {
		x.byRollout = make([]int32, x.n)
		for k := range x.byRollout {
			x.byRollout[k] = int32(k)
		}
		slices.SortFunc(x.byRollout, func(a, b int32) int {
			if c := cmp.Compare(x.rollout.get(int(a)), x.rollout.get(int(b))); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		// Each use after the first is a problem: kept as (ordinal, first)
		// pairs, the first maxProblems by line formatted.
		var again [][2]int32
		first := 0
		for i := 1; i < len(x.byRollout); i++ {
			if x.rollout.get(int(x.byRollout[i])) != x.rollout.get(int(x.byRollout[first])) {
				first = i
				continue
			}
			again = append(again, [2]int32{x.byRollout[i], x.byRollout[first]})
		}
		x.ProblemCount += len(again)
		slices.SortFunc(again, func(a, b [2]int32) int { return cmp.Compare(a[0], b[0]) })
		for _, p := range again[:min(len(again), maxProblems)] {
			line, _ := x.linesAt.at(int(p[0]))
			first, _ := x.linesAt.at(int(p[1]))
			x.Problems = append(x.Problems, Problem{Line: int(line), Err: fmt.Sprintf("rollout_id %d is used again (first at line %d): the two are shown as separate episodes", x.rollout.get(int(p[0])), first)})
		}
	}
	slices.SortStableFunc(x.Problems, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	x.Problems = fit(x.Problems[:min(len(x.Problems), maxProblems)])
}

// Lookup returns the ordinals of the episodes with rollout_id id, in file
// order (more than one only in a file that repeats an id).
func (x *File) Lookup(id int64) []int {
	if x.rising {
		k := sort.Search(x.n, func(k int) bool { return x.rollout.get(k) >= id })
		if k < x.n && x.rollout.get(k) == id {
			return []int{k}
		}
		return nil
	}
	i := sort.Search(len(x.byRollout), func(i int) bool { return x.rollout.get(int(x.byRollout[i])) >= id })
	var out []int
	for ; i < len(x.byRollout) && x.rollout.get(int(x.byRollout[i])) == id; i++ {
		out = append(out, int(x.byRollout[i]))
	}
	return out
}

// Info puts episode k's facts back together from the columns.
func (x *File) Info(k int) EpisodeInfo {
	kn := x.kind(k)
	off, size := x.bytesAt.at(k)
	line, lines := x.linesAt.at(k)
	e := EpisodeInfo{Ordinal: k, Offset: off, Size: size, Line: int(line), Lines: int(lines), Layout: kn.layout,
		RolloutID: x.rollout.get(k), Index: x.index.get(k), GroupIndex: x.group.get(k), Seed: uint64(x.seed.get(k)),
		Scenario: kn.scenario, Status: kn.status, End: kn.end, Team: x.team.get(k),
		Samples: int(x.samples.get(k)), Turns: int(x.turns.get(k)), Messages: int(x.messages.get(k)),
		Invalid: int(x.invalid.get(k)), Agents: int(x.agents.get(k)),
		Allocators: kn.allocs, Alloc: make([]float64, len(kn.allocs)), Roles: kn.roles}
	for i, c := range kn.allocCols {
		e.Alloc[i] = x.alloc[c].get(k)
	}
	return e
}

// kind returns episode k's kind.
func (x *File) kind(k int) *kind { return &x.kinds[x.kindOf.get(k)] }

// scored reports whether episode k has an outcome.
func (x *File) scored(k int) bool { return x.kind(k).scored }

// allocValue returns episode k's mean under allocator column c (false
// where it has none).
func (x *File) allocValue(k, c int) (float64, bool) {
	v := x.alloc[c].get(k)
	return v, !math.IsNaN(v)
}

// allocColumn is the column of the named allocator, -1 if none.
func (x *File) allocColumn(name string) int {
	if c, ok := x.allocPos[name]; ok {
		return c
	}
	return -1
}

// IndexBytes is what the index's columns cost in memory, for the
// measures of docs/viewer.md.
func (x *File) IndexBytes() int {
	n := x.bytesAt.bytes() + x.linesAt.bytes() + x.team.bytes() + 4*cap(x.byRollout)
	for _, c := range []*ints{&x.rollout, &x.index, &x.group, &x.seed, &x.kindOf, &x.samples, &x.turns, &x.messages, &x.invalid, &x.agents} {
		n += c.bytes()
	}
	for c := range x.alloc {
		n += x.alloc[c].bytes()
	}
	return n
}
