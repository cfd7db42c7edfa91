//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/viewer"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// mixedRun concatenates runs of three scenarios (one truncated by a turn
// limit) into one file of samples and one of records, with distinct
// rollout ids: a file whose every filter and sort has something to select.
func mixedRun(t *testing.T) (samples, records string) {
	t.Helper()
	dir := t.TempDir()
	runs := [][]string{
		{"elfarol", "-n", "200", "-g", "4", "-p", "agents=5", "-a", "team,difference,equal-split", "--reward-format", "dict", "--rollout-id-base", "0"},
		{"tictactoe", "-n", "50", "-P", "x=minimax", "-a", "individual,team", "--reward-format", "dict", "--rollout-id-base", "1000"},
		{"committee", "-n", "30", "-a", "team,shapley", "--reward-format", "dict", "--rollout-id-base", "2000"},
		{"elfarol", "-n", "40", "-g", "2", "--max-turns", "5", "--rollout-id-base", "3000"},
	}
	samples, records = filepath.Join(dir, "mixed.jsonl"), filepath.Join(dir, "mixed.episodes.jsonl")
	var s, r []byte
	for k, args := range runs {
		o, e := filepath.Join(dir, fmt.Sprintf("%d.jsonl", k)), filepath.Join(dir, fmt.Sprintf("%d.episodes.jsonl", k))
		troupe(t, append([]string{"run", args[0], "-q", "-c", "2", "-o", o, "--episodes-out", e}, args[1:]...)...)
		for _, p := range []struct {
			dst  *[]byte
			path string
		}{{&s, o}, {&r, e}} {
			b, err := os.ReadFile(p.path)
			require.NoError(t, err)
			*p.dst = append(*p.dst, b...)
		}
	}
	require.NoError(t, os.WriteFile(samples, s, 0o644))
	require.NoError(t, os.WriteFile(records, r, 0o644))
	return samples, records
}

// listQueries are queries of every filter and every sort, alone and
// together, made from the names and values of x.
func listQueries(x *viewer.File) []string {
	allocs, roles, scenarios, statuses := viewer.ListNames(x)
	qs := []string{""}
	for _, s := range statuses {
		qs = append(qs, "status="+url.QueryEscape(s))
	}
	for _, s := range scenarios {
		qs = append(qs, "scenario="+url.QueryEscape(s))
	}
	for _, r := range roles {
		qs = append(qs, "role="+url.QueryEscape(r))
	}
	for _, g := range []int{0, 1, 3, 7, 49} {
		qs = append(qs, "group="+strconv.Itoa(g))
	}
	for _, b := range []string{"-1", "0", "0.5", "1", "2", "3.5", "7"} {
		qs = append(qs, "team_min="+b, "team_max="+b, "team_min="+b+"&team_max=10")
	}
	for _, a := range allocs {
		qs = append(qs, "alloc="+url.QueryEscape(a))
		for _, b := range []string{"-0.5", "0", "0.25", "1"} {
			qs = append(qs, "alloc="+url.QueryEscape(a)+"&alloc_min="+b, "alloc="+url.QueryEscape(a)+"&alloc_max="+b)
		}
	}
	var filters []string
	if len(statuses) > 0 && len(roles) > 0 {
		filters = append(filters, "status="+url.QueryEscape(statuses[0])+"&role="+url.QueryEscape(roles[len(roles)-1]))
	}
	if len(allocs) > 0 {
		filters = append(filters, "team_min=0.5&alloc="+url.QueryEscape(allocs[len(allocs)-1])+"&alloc_max=1")
	}
	for _, key := range viewer.ColumnKeys(x) {
		for _, dir := range []string{"asc", "desc"} {
			sort := "sort=" + url.QueryEscape(key) + "&dir=" + dir
			qs = append(qs, sort)
			for _, f := range filters {
				qs = append(qs, f+"&"+sort)
			}
		}
	}
	return qs
}

// TestListResultsAreTheGoldenOnes: every filter and sort of the list, on
// a made-up run and on a mixed run of real episodes in both forms, selects
// the episodes it selected when the golden file was written (by the index
// of one struct per episode that the columnar one replaced), and the
// overview and the export's index are the same.
func TestListResultsAreTheGoldenOnes(t *testing.T) {
	samples, records := mixedRun(t)
	synth := viewer.Synthesized("synth.jsonl", 5000)
	files := []struct {
		name string
		x    *viewer.File
	}{{"synthesized", synth}, {"mixed samples", openFiles(t, samples)[0]}, {"mixed records", openFiles(t, records)[0]}}
	var out strings.Builder
	for _, f := range files {
		allocs, roles, scenarios, statuses := viewer.ListNames(f.x)
		fmt.Fprintf(&out, "# %s: %d episodes, %d problems\nallocators %q\nroles %q\nscenarios %q\nstatuses %q\ncolumns %q\n",
			f.name, f.x.Len(), f.x.ProblemCount, allocs, roles, scenarios, statuses, viewer.ColumnKeys(f.x))
		fmt.Fprintf(&out, "index.js %s\n", viewer.IndexJSDigest(f.x))
		o := f.x.Overview()
		fmt.Fprintf(&out, "overview %d %d %d %d %v %v %v %v\n", o.Episodes, o.Scored, o.Samples, o.Turns, o.Layouts, o.Scenarios, o.Statuses, o.Ends)
		fmt.Fprintf(&out, "team %v %v %v %v %v\n", o.Team.N, o.Team.Mean, o.Team.Std, o.Team.Min, o.Team.Max)
		for _, a := range o.Allocators {
			fmt.Fprintf(&out, "allocator %s %v %v %v %v %v %v\n", a.Name, a.Episodes.N, a.Episodes.Mean, a.Episodes.Std, a.Episodes.Min, a.Episodes.Max, a.PerSample)
		}
		for _, r := range o.Roles {
			fmt.Fprintf(&out, "role %s %d %d %v %d %v\n", r.Role, r.Agents, r.Scored, r.ScoreSum, r.Samples, r.Alloc)
		}
		fmt.Fprintf(&out, "groups %d\n", o.GroupCount)
		for _, g := range o.Groups[:min(len(o.Groups), 200)] {
			fmt.Fprintf(&out, "group %d %d %v %v %v %v %v\n", g.Group, g.Episodes, g.Team.N, g.Team.Mean, g.Team.Std, g.Team.Min, g.Team.Max)
		}
		qs := listQueries(f.x)
		slices.Sort(qs)
		qs = slices.Compact(qs)
		for _, q := range qs {
			v, err := url.ParseQuery(q)
			require.NoError(t, err)
			d, err := viewer.ListDigest(f.x, v)
			require.NoError(t, err, q)
			fmt.Fprintf(&out, "%s => %s\n", q, d)
		}
	}
	golden := filepath.Join("testdata", "list-results.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(out.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "go test ./viewer -run TestListResultsAreTheGoldenOnes -update writes it")
	assert.Equal(t, string(want), out.String())
}
