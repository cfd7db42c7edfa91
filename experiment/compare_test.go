package experiment_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// compareArms runs, in the working directory, the three experiments of a
// comparison at equal cost on a tiny El Farol (4 patrons, 2 nights):
// difference rewards without groups, grpo in groups of 4 (twice the
// episodes), at-grpo with two candidates per turn. It returns their
// cells by directory.
func compareArms(t *testing.T) map[string][]*experiment.Cell {
	t.Helper()
	spec, err := learn.Parse("reinforce:rate=0.3")
	require.NoError(t, err)
	base := experiment.Config{
		Scenario: elfarol.New(),
		Params:   map[string]string{"agents": "4", "nights": "2", "capacity": "2"},
		Learners: []learn.Spec{spec},
		Seeds:    3,
		Seed:     11,
		Episodes: 20,
	}
	cells := map[string][]*experiment.Cell{}
	for dir, set := range map[string]func(*experiment.Config){
		"difference": func(c *experiment.Config) { c.Allocators = []string{"difference"} },
		"grpo":       func(c *experiment.Config) { c.Allocators, c.Group, c.Episodes = []string{"grpo"}, 4, 40 },
		"at-grpo":    func(c *experiment.Config) { c.Allocators, c.Tree = []string{"at-grpo"}, &episode.Tree{K: 2, Alpha: 1} },
	} {
		cfg := base
		set(&cfg)
		cfg.Out = dir
		res, err := experiment.Run(context.Background(), cfg)
		require.NoError(t, err, dir)
		cells[dir] = res.Cells
	}
	return cells
}

// byHand is a cell's metric at budget over the last tenth of it,
// recomputed from its per-episode metric and cost one unit of cost at a
// time: unit (k−1, k] is spent by the episode whose cost reaches k.
func byHand(c *experiment.Cell, budget float64) float64 {
	lo := 0.9 * budget
	sum, span := 0.0, 0.0
	e := 0
	for k := 1; float64(k-1) < budget; k++ {
		for e < len(c.Cost)-1 && c.Cost[e] < int64(k) {
			e++
		}
		w := min(float64(k), budget) - max(float64(k-1), lo)
		if w > 0 {
			sum += w * c.Team[e] / *c.Optimum
			span += w
		}
	}
	return sum / span
}

func TestCompareAtEqualCost(t *testing.T) {
	testdata, err := filepath.Abs("testdata")
	require.NoError(t, err)
	t.Chdir(t.TempDir()) // the directories are named as given, in the outputs
	cells := compareArms(t)
	cfg := experiment.CompareConfig{
		Sources: []experiment.CompareSource{{Dir: "difference"}, {Dir: "grpo"}, {Dir: "at-grpo", Label: "AT-GRPO, K=2"}},
		Out:     "cmp",
		Command: "troupe experiment compare difference grpo at-grpo='AT-GRPO, K=2' --out cmp",
	}
	res, err := experiment.Compare(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, res.Arms, 3)
	require.Equal(t, []string{"difference", "grpo (group 4)", "AT-GRPO, K=2"}, []string{res.Arms[0].Label, res.Arms[1].Label, res.Arms[2].Label})
	assert.Equal(t, "difference", res.Reference)

	// By hand: a week is one step (the patrons choose at once);
	// difference replays it once per patron.
	for _, c := range cells["difference"] {
		assert.Equal(t, int64(20*(1+4)), c.Cost[19])
	}
	for _, c := range cells["grpo"] {
		assert.Equal(t, int64(40), c.Cost[39])
	}
	budget := math.Inf(1)
	for _, cs := range cells {
		for _, c := range cs {
			budget = min(budget, float64(c.Cost[len(c.Cost)-1]))
		}
	}
	assert.Equal(t, 40.0, budget, "grpo spends the least")
	arms := map[string]string{"difference": "difference", "grpo (group 4)": "grpo", "AT-GRPO, K=2": "at-grpo"}
	views := 0
	for _, r := range res.Rows {
		cs := cells[arms[r.Arm]]
		require.Len(t, r.Values, 3)
		switch r.View {
		case experiment.ViewCost:
			views++
			assert.Equal(t, budget, r.Budget)
			for s, c := range cs {
				assert.InDelta(t, byHand(c, budget), r.Values[s], 1e-12, "%s seed %d at B", r.Arm, s)
			}
		case experiment.ViewEpisodes:
			views++
			assert.Equal(t, 20.0, r.Budget, "the fewest episodes")
			for s, c := range cs {
				want := (c.Team[18] + c.Team[19]) / 2 / *c.Optimum // the last tenth of 20
				assert.InDelta(t, want, r.Values[s], 1e-12, "%s seed %d at E", r.Arm, s)
			}
		}
	}
	assert.Equal(t, 6, views)
	require.Len(t, res.Tests, 2*len(res.Rows)/3, "every arm but the reference, in every view")
	for _, tt := range res.Tests {
		assert.Equal(t, "difference", tt.B)
		assert.GreaterOrEqual(t, tt.PHolm, tt.PSign)
	}

	for _, file := range []string{experiment.CompareCSV, experiment.CompareTestsCSV, experiment.ReportMD} {
		got, err := os.ReadFile(filepath.Join("cmp", file))
		require.NoError(t, err)
		checkGolden(t, filepath.Join(testdata, "compare", file), got)
	}
	first := readAll(t, "cmp")
	cfg.Out = "cmp2"
	_, err = experiment.Compare(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, first, readAll(t, "cmp2"), "the same bytes again")
	require.Contains(t, first, "cost_curves.svg")

	rows := readCSV(t, filepath.Join("cmp", experiment.CompareCSV))
	assert.Equal(t, "budget", rows[0][9])
	assert.Equal(t, strconv.FormatFloat(budget, 'g', -1, 64), rows[1][9])
}

// Directories whose seeds are not paired are refused, naming the
// directory and what differs.
func TestCompareRefusesUnpairedExperiments(t *testing.T) {
	t.Chdir(t.TempDir())
	compareArms(t)
	edit := func(from, to string, change func(map[string]any)) {
		t.Helper()
		require.NoError(t, os.CopyFS(to, os.DirFS(from)))
		path := filepath.Join(to, experiment.ManifestJSON)
		if change == nil {
			return
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m))
		change(m)
		data, err = json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, data, 0o644))
	}
	edit("grpo", "other-nights", func(m map[string]any) { m["params"].(map[string]any)["nights"] = "3" })
	edit("grpo", "other-seed", func(m map[string]any) { m["seed"] = 12 })
	edit("grpo", "other-scenario", func(m map[string]any) { m["scenario"] = "committee" })
	edit("grpo", "other-run-seed", nil)
	entries, err := os.ReadDir("other-run-seed/cells")
	require.NoError(t, err)
	cellPath := filepath.Join("other-run-seed/cells", entries[0].Name())
	data, err := os.ReadFile(cellPath)
	require.NoError(t, err)
	var cell map[string]any
	require.NoError(t, json.Unmarshal(data, &cell))
	cell["run_seed"] = 1
	data, err = json.Marshal(cell)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cellPath, data, 0o644))
	edit("grpo", "unfinished", nil)
	require.NoError(t, os.Remove(filepath.Join("unfinished/cells", entries[1].Name())))

	for dir, want := range map[string][]string{
		"other-nights":   {"other-nights/experiment.json", "params", `"nights":"3"`},
		"other-seed":     {"other-seed/experiment.json", "seed 12, not 11"},
		"other-scenario": {"other-scenario/experiment.json", `scenario "committee", not "elfarol"`},
		"other-run-seed": {"other-run-seed", "unpaired seeds", "ran from 1"},
		"unfinished":     {"unfinished is unfinished", "seed"},
		"nowhere":        {"nowhere holds no experiment"},
	} {
		_, err := experiment.Compare(context.Background(), experiment.CompareConfig{
			Sources: []experiment.CompareSource{{Dir: "difference"}, {Dir: dir}}, Out: "cmp-" + dir,
		})
		require.ErrorIs(t, err, experiment.ErrIncomparable, dir)
		for _, w := range want {
			assert.Contains(t, err.Error(), w, dir)
		}
	}
	_, err = experiment.Compare(context.Background(), experiment.CompareConfig{
		Sources: []experiment.CompareSource{{Dir: "grpo"}, {Dir: "other-run-seed"}}, Out: "cmp",
	})
	require.ErrorIs(t, err, experiment.ErrBadConfig, "two arms labelled alike")
	assert.Contains(t, err.Error(), `labelled "grpo (group 4)"`)
	_, err = experiment.Compare(context.Background(), experiment.CompareConfig{
		Sources: []experiment.CompareSource{{Dir: "difference"}, {Dir: "grpo"}}, Out: "cmp", Reference: "rloo",
	})
	require.ErrorIs(t, err, experiment.ErrBadConfig)
	assert.Contains(t, err.Error(), `reference "rloo" is no arm; the arms are "difference", "grpo (group 4)"`)
}

func TestParseCompareSource(t *testing.T) {
	s, err := experiment.ParseCompareSource("out/a=grpo, 8")
	require.NoError(t, err)
	assert.Equal(t, experiment.CompareSource{Dir: "out/a", Label: "grpo, 8"}, s)
	s, err = experiment.ParseCompareSource("out/a")
	require.NoError(t, err)
	assert.Equal(t, experiment.CompareSource{Dir: "out/a"}, s)
	for _, bad := range []string{"", "=x", "out/a="} {
		_, err := experiment.ParseCompareSource(bad)
		assert.Error(t, err, bad)
	}
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, data := range outputs(t, dir) {
		out[name] = string(data)
	}
	return out
}

// A value each cell holds for its end (here the learnt policy's NashConv)
// is compared too, per seed, when every arm's cells hold it.
func TestCompareFinalValues(t *testing.T) {
	t.Chdir(t.TempDir())
	spec, err := learn.Parse("egreedy:alpha=0.2,epsilon=0.2")
	require.NoError(t, err)
	cells := map[string][]*experiment.Cell{}
	for _, arm := range []struct {
		dir      string
		episodes int
	}{{"team", 30}, {"individual", 60}} {
		cfg := experiment.Config{
			Scenario: blotto.New(), Params: map[string]string{"n": "2", "fields": "3"},
			Allocators: []string{arm.dir}, Learners: []learn.Spec{spec},
			Seeds: 2, Seed: 5, Episodes: arm.episodes, NashConv: &experiment.NashConv{}, Out: arm.dir,
		}
		res, err := experiment.Run(context.Background(), cfg)
		require.NoError(t, err)
		cells[arm.dir] = res.Cells
	}
	res, err := experiment.Compare(context.Background(), experiment.CompareConfig{
		Sources: []experiment.CompareSource{{Dir: "team"}, {Dir: "individual"}}, Out: "cmp",
	})
	require.NoError(t, err)
	seen := 0
	for _, r := range res.Rows {
		if r.View != "nashconv" {
			continue
		}
		seen++
		for s, c := range cells[r.Arm] {
			require.NotNil(t, c.NashConv.Measure)
			assert.Equal(t, c.NashConv.Measure.NashConv, r.Values[s], "%s seed %d", r.Arm, s)
		}
	}
	assert.Equal(t, 2, seen)
	assert.True(t, slices.ContainsFunc(res.Tests, func(c experiment.CompareTest) bool { return c.View == "nashconv" && c.A == "individual" }))
}

// A source that parses names a directory, and reads back the same from
// DIR=LABEL.
func FuzzParseCompareSource(f *testing.F) {
	for _, s := range []string{"out/a", "out/a=grpo (group 8)", "=x", "a=", "a=b=c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := experiment.ParseCompareSource(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, src.Dir)
		text := src.Dir
		if src.Label != "" {
			text += "=" + src.Label
		}
		again, err := experiment.ParseCompareSource(text)
		require.NoError(t, err)
		require.Equal(t, src, again)
	})
}
