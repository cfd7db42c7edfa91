package viewer

import (
	"crypto/sha256"
	"fmt"
	"net/url"
)

// OpenWith indexes path with the given workers and segment size, for
// tests that check the parallel pass against a single worker.
func OpenWith(path string, workers int, segment int64) (*File, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	g := newFile(f.Path, f.Name)
	g.Size, g.f = f.Size, f.f
	return g, g.build(workers, segment)
}

// Synthesized returns the index of a made-up run of n episodes, without a
// file (its episodes cannot be opened): for the list's tests at sizes that
// playing would make too slow. Episode k has rollout_id and index k, group
// k/8; every 7th is truncated and every 13th failed (not scored); every
// 3rd is of scenario "other" with a second role; its team reward and
// allocator values are fixed functions of k.
func Synthesized(name string, n int) *File {
	return synthesized(name, n, SynthTeam)
}

// synthesized is Synthesized with episode k's team reward team(k).
func synthesized(name string, n int, team func(k int) float64) *File {
	x := newFile(name, name)
	allocs := []string{"team", "difference"}
	one := []RoleFacts{{Role: "patron", Agents: 3, Scored: 3, Samples: 3, AllocSum: []float64{0, 0}}}
	two := []RoleFacts{{Role: "dealer", Agents: 1, Scored: 1, Samples: 1, AllocSum: []float64{0, 0}}, one[0]}
	for k := range n {
		e := EpisodeInfo{Ordinal: k, Line: k + 1, Lines: 1, Layout: Record, RolloutID: int64(k), Index: int64(k), GroupIndex: int64(k / 8),
			Seed: uint64(k), Scenario: "elfarol", Status: "completed", End: "terminated", Samples: 3, Turns: 3, Agents: 3, Messages: k % 5,
			Invalid: k % 11 / 10, Allocators: allocs}
		roles := one
		switch {
		case k%13 == 0:
			e.Status, e.End = "failed", "error"
		case k%7 == 0:
			e.Status, e.End = "truncated", "max steps"
		}
		if k%3 == 0 {
			e.Scenario, roles, e.Agents = "other", two, 4
		}
		e.Team = team(k)
		e.Alloc = []float64{e.Team, SynthDiff(k)}
		x.add(&e, roles)
		x.Lines++
	}
	x.seal()
	return x
}

// SynthTeam is episode k's team reward in Synthesized: in [0, 10).
func SynthTeam(k int) float64 { return float64(k*7919%10007) / 1000.7 }

// SynthDiff is episode k's difference reward in Synthesized: in [-0.5, 0.5).
func SynthDiff(k int) float64 { return float64(k*104729%1009)/1009 - 0.5 }

// reset makes v the viewer of files, forgetting what it kept of others.
func (v *Viewer) reset(files []*File) {
	v.files, v.cache, v.overviews, v.lastList = files, newCache(cacheSize), map[int]*Overview{}, nil
}

// ListDigest runs the list's query q on x and describes its result: how
// many episodes it selects, the first of them, a digest of every ordinal
// in order and of the first page's cells as the list shows them.
func ListDigest(x *File, q url.Values) (string, error) {
	cols := x.columns()
	l, err := parseListQuery(q, cols)
	if err != nil {
		return "", err
	}
	ords := x.run(&l, cols)
	h := sha256.New()
	for _, o := range ords {
		fmt.Fprintf(h, "%d,", o)
	}
	cells := sha256.New()
	for _, o := range ords[:min(len(ords), listPageSize)] {
		for _, c := range cols {
			if c.num != nil {
				v, ok := c.num(int(o))
				if !ok {
					v = 0 // an empty cell: its value is not shown
				}
				fmt.Fprintf(cells, "%v %v|", v, ok)
			} else {
				fmt.Fprintf(cells, "%s|", c.str(x.kind(int(o))))
			}
		}
	}
	return fmt.Sprintf("%d first %v ords %x cells %x", len(ords), ords[:min(len(ords), 5)], h.Sum(nil)[:8], cells.Sum(nil)[:8]), nil
}

// ListNames are the names the list's filters offer for x.
func ListNames(x *File) (allocs, roles, scenarios, statuses []string) {
	return x.allocNames, x.roleNames, x.scenarioNames, x.statusNames
}

// ColumnKeys are the keys of the list's columns for x.
func ColumnKeys(x *File) []string {
	var out []string
	for _, c := range x.columns() {
		out = append(out, c.Key)
	}
	return out
}

// IndexJSDigest is a digest of x's export index.
func IndexJSDigest(x *File) string {
	return fmt.Sprintf("%x", sha256.Sum256(x.indexJS(0)))
}
