package experiment_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// smallBar is a quick El Farol grid: two sizes, two rewards, two seeds.
func smallBar(t testing.TB, out string) experiment.Config {
	t.Helper()
	spec, err := learn.Parse("egreedy:alpha=0.2,epsilon=0.05")
	require.NoError(t, err)
	return experiment.Config{
		Scenario:   elfarol.New(),
		Params:     map[string]string{"nights": "3", "capacity": "2"},
		Axes:       []experiment.Axis{{Param: "agents", Values: []string{"6", "12"}}},
		Allocators: []string{"team", "difference"},
		Learners:   []learn.Spec{spec},
		Seeds:      2,
		Seed:       5,
		Episodes:   80,
		Out:        out,
		Title:      "Small bar",
		Command:    "troupe experiment elfarol --grid agents=6,12",
	}
}

// outputs reads every file Run wrote, cells included, by relative name.
func outputs(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[rel], err = os.ReadFile(path)
		return err
	}))
	return files
}

func TestRunWritesEveryOutput(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	dir := t.TempDir()
	cfg := smallBar(t, dir)
	cfg.PNG = true
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, "G/G*", res.Metric)
	require.Len(t, res.Cells, 2*2*2)
	require.Len(t, res.Rows, 2*2)
	assert.Zero(t, res.Resumed)

	files := outputs(t, dir)
	for _, name := range []string{"episodes.csv", "episodes.json", "results.csv", "results.json", "finals.csv", "comparisons.csv", "report.md",
		"curves_agents-6.png", "curves_agents-6.svg", "curves_agents-12.png", "curves_agents-12.svg", "final.png", "final.svg", "seeds.png", "seeds.svg"} {
		assert.Contains(t, files, name)
		assert.Contains(t, res.Files, name)
	}
	cells := 0
	for name := range files {
		if strings.HasPrefix(name, "cells"+string(filepath.Separator)) {
			cells++
		}
	}
	assert.Equal(t, 8, cells)
	for name, data := range files {
		if strings.HasSuffix(name, ".png") {
			img, err := png.DecodeConfig(bytes.NewReader(data))
			require.NoError(t, err, name)
			assert.GreaterOrEqual(t, img.Width, 1200, "%s is %d px wide", name, img.Width)
		}
		if strings.HasSuffix(name, ".json") {
			assertSnakeCase(t, name, data)
		}
	}
	assert.Contains(t, string(files["final.svg"]), "<svg")
	// episodes.json splices in the cells' own encodings: the bytes are
	// those of encoding the whole document.
	whole, err := json.Marshal(struct {
		Scenario string             `json:"scenario"`
		Metric   string             `json:"metric"`
		Axes     []string           `json:"axes"`
		Cells    []*experiment.Cell `json:"cells"`
	}{"elfarol", res.Metric, []string{"agents"}, res.Cells})
	require.NoError(t, err)
	assert.Equal(t, string(whole)+"\n", string(files["episodes.json"]))

	rows, err := csv.NewReader(bytes.NewReader(files["episodes.csv"])).ReadAll()
	require.NoError(t, err)
	lead := []string{"scenario", "agents", "capacity", "nights", "learner", "episodes", "group", "window", "root_seed", "allocator"}
	assert.Equal(t, append(lead, "seed", "episode", "team", "g_star", "ratio", "reward", "attendance_rank_1", "attendance_rank_2", "attendance_rank_3", "home"), rows[0])
	assert.Len(t, rows, 1+8*80)
	assert.Equal(t, []string{"elfarol", "6", "2", "3", "egreedy:alpha=0.2,epsilon=0.05,init=0,unbiased=1", "80", "1", "8", "5", "team", "0", "0"}, rows[1][:12])
	for _, name := range []string{"results.csv", "finals.csv", "comparisons.csv"} {
		rows, err := csv.NewReader(bytes.NewReader(files[name])).ReadAll()
		require.NoError(t, err, name)
		for _, col := range []string{"scenario", "agents", "capacity", "nights", "learner", "episodes", "root_seed"} {
			assert.Contains(t, rows[0], col, "%s carries every parameter", name)
		}
		for _, col := range rows[0] {
			assert.Regexp(t, `^[a-z][a-z0-9_]*$`, col, "%s: column names are snake_case", name)
		}
	}
	results, err := csv.NewReader(bytes.NewReader(files["results.csv"])).ReadAll()
	require.NoError(t, err)
	assert.Contains(t, results[0], "g_star")
	assert.Contains(t, results[0], "final_ci_low")
	assert.Len(t, results, 1+4)

	var resultsDoc struct {
		Metric string `json:"metric"`
		Rows   []struct {
			Point     map[string]string `json:"point"`
			Allocator string            `json:"allocator"`
			Final     []float64         `json:"final"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(files["results.json"], &resultsDoc))
	require.Len(t, resultsDoc.Rows, 4)
	assert.Equal(t, map[string]string{"agents": "12"}, resultsDoc.Rows[2].Point)
	assert.Equal(t, "team", resultsDoc.Rows[2].Allocator)
	assert.Len(t, resultsDoc.Rows[2].Final, 2)

	report := string(files["report.md"])
	for _, want := range []string{"# Small bar", "troupe experiment elfarol --grid agents=6,12", "| agents | G* | reward | final G/G* mean [95% CI] |",
		"### Paired comparisons", "What the numbers are", "locked in", "![Final G/G* of every seed](seeds.png)",
		"![Final G/G* against agents](final.png)", "(curves_agents-12.svg)", "`difference`"} {
		assert.Contains(t, report, want)
	}
	// G/G* is G over the optimum: the table's first G* is that of 6
	// patrons on 3 nights of capacity 2.
	opt, err := experiment.ElFarolOptimum(6, 3, 2)
	require.NoError(t, err)
	c := res.Cells[0]
	assert.InDelta(t, c.Team[3]/opt, c.Ratio(3), 1e-15)
}

// assertSnakeCase checks that every object key of a JSON document is
// snake_case.
func assertSnakeCase(t *testing.T, name string, data []byte) {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal(data, &doc), name)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(k) {
					t.Errorf("%s: key %q is not snake_case", name, k)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
}

// sameBytesInSerial runs cfg into a new directory, then one cell at a
// time into another, checks that both hold the same bytes, and returns
// them and cfg as it ran the second time.
func sameBytesInSerial(t *testing.T, cfg experiment.Config) (map[string][]byte, experiment.Config) {
	t.Helper()
	cfg.Out = t.TempDir()
	_, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	want := outputs(t, cfg.Out)
	cfg.Out, cfg.Parallel = t.TempDir(), 1
	_, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, want, outputs(t, cfg.Out))
	return want, cfg
}

func TestRunIsDeterministicAndResumes(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	want, cfg := sameBytesInSerial(t, smallBar(t, ""))
	second := cfg.Out

	// Lose three cells, as an interrupted run would; the rest is read back.
	var names []string
	for name := range want {
		if strings.HasPrefix(name, "cells") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names[:3] {
		require.NoError(t, os.Remove(filepath.Join(second, name)))
	}
	// Without Resume, a directory that holds an experiment is refused.
	_, err := experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrExists)
	cfg.Resume = true
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 5, res.Resumed)
	assert.Equal(t, want, outputs(t, second))

	// A damaged cell file is played again, not trusted.
	require.NoError(t, os.WriteFile(filepath.Join(second, names[4]), []byte(`{"version":1,"team":[`), 0o644))
	res, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 7, res.Resumed)
	assert.Equal(t, want, outputs(t, second))

	// Another configuration is refused, every difference named, and
	// nothing written.
	cfg.Episodes = 40
	cfg.Allocators = []string{"team", "individual"}
	_, err = experiment.Run(context.Background(), cfg)
	var mismatch *experiment.MismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorIs(t, err, experiment.ErrOtherExperiment)
	assert.ErrorContains(t, err, "episodes: 80, now 40")
	assert.ErrorContains(t, err, `allocators: ["team","difference"], now ["team","individual"]`)
	assert.Len(t, mismatch.Diffs, 3, "and the window, a tenth of the episodes")
	assert.Equal(t, want, outputs(t, second))

	// Resume into a directory without an experiment is refused.
	cfg = smallBar(t, t.TempDir())
	cfg.Resume = true
	_, err = experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrNothingToResume)
}

func TestAnInterruptedRunKeepsItsFinishedCells(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	dir := t.TempDir()
	cfg := smallBar(t, dir)
	cfg.Parallel = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last experiment.Progress
	cfg.Progress = func(p experiment.Progress) {
		last = p
		if p.CellsDone == 3 {
			cancel()
		}
	}
	_, err := experiment.Run(ctx, cfg)
	require.ErrorIs(t, err, experiment.ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 8, last.Cells)
	assert.Equal(t, int64(8*80), last.Episodes)
	entries, err := os.ReadDir(filepath.Join(dir, "cells"))
	require.NoError(t, err)
	finished := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			finished++
		}
	}
	assert.Equal(t, 3, finished, "the cells finished before the interruption, and no other")
	_, err = os.Stat(filepath.Join(dir, "report.md"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	cfg.Progress = nil
	cfg.Resume = true
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, 3, res.Resumed)
	cfg.Resume = false
	uninterrupted := t.TempDir()
	cfg.Out = uninterrupted
	_, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, outputs(t, uninterrupted), outputs(t, dir))
}

// A run cancelled in the middle of a cell stops the cell there: it is not
// saved, and the run says it was interrupted, by ctx's cause.
func TestARunCancelledMidCellSavesNoHalfCell(t *testing.T) {
	dir := t.TempDir()
	cfg := smallBar(t, dir)
	cfg.Parallel = 1
	stop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var last experiment.Progress
	cfg.Progress = func(p experiment.Progress) {
		last = p
		if p.EpisodesDone == 50 {
			cancel(stop)
		}
	}
	_, err := experiment.Run(ctx, cfg)
	require.ErrorIs(t, err, experiment.ErrInterrupted)
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 0, last.CellsDone)
	assert.Less(t, last.EpisodesDone, int64(80), "the cell stopped where it was")
	entries, err := os.ReadDir(filepath.Join(dir, "cells"))
	if !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
		for _, e := range entries {
			assert.True(t, strings.HasPrefix(e.Name(), "."), "a cell file: %s", e.Name())
		}
	}
}

func TestProgressCountsEveryEpisode(t *testing.T) {
	cfg := smallBar(t, "")
	var seen []experiment.Progress
	cfg.Progress = func(p experiment.Progress) { seen = append(seen, p) }
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	last := seen[len(seen)-1]
	assert.Equal(t, last.Cells, last.CellsDone)
	assert.Equal(t, last.Episodes, last.EpisodesDone)
	assert.Equal(t, res.Turns, last.Turns)
	assert.Equal(t, int64(2*2*80*(6+12)), res.Turns)
	assert.Equal(t, res.Turns, res.Updates, "every patron learns")
	for i := 1; i < len(seen); i++ {
		assert.GreaterOrEqual(t, seen[i].EpisodesDone, seen[i-1].EpisodesDone)
	}
	assert.Empty(t, res.Files, "no Out, no files")
}

func TestDifferenceRewardsLearnTheBar(t *testing.T) {
	// 12 patrons, 3 nights of capacity 4: the optimum fills every night.
	spec, err := learn.Parse("egreedy:alpha=0.1,epsilon=0.05")
	require.NoError(t, err)
	res, err := experiment.Run(context.Background(), experiment.Config{
		Scenario:   elfarol.New(),
		Params:     map[string]string{"agents": "12", "nights": "3", "capacity": "4"},
		Allocators: []string{"difference"},
		Learners:   []learn.Spec{spec},
		Seeds:      2,
		Episodes:   400,
	})
	require.NoError(t, err)
	require.Len(t, res.Rows, 1)
	assert.Greater(t, res.Rows[0].FinalStats.Min, 0.95, "difference rewards spread the patrons: %+v", res.Rows[0].FinalStats)
	assert.Greater(t, res.Rows[0].FinalStats.Mean, res.Rows[0].OverallStats.Mean-1e-9, "the end is no worse than the average")
}

func TestCommitteeWithCounterfactualAllocators(t *testing.T) {
	// Advisers learn, the decider follows the plurality; counterfactual
	// allocators re-simulate the decider, asking the learner again from
	// several goroutines: the race detector watches.
	spec, err := learn.Parse("egreedy:alpha=0.2,epsilon=0.1")
	require.NoError(t, err)
	cfg := experiment.Config{
		Scenario:   committee.New(),
		Params:     map[string]string{"informed": "1", "options": "3"},
		Axes:       []experiment.Axis{{Param: "uninformed", Values: []string{"1", "3"}}},
		Allocators: []string{"team", "difference", "shapley", "leave-one-out"},
		Learners:   []learn.Spec{spec},
		Learn:      []string{committee.RoleAdviser},
		Policies:   map[string]string{committee.RoleDecider: "scripted"},
		Seeds:      2,
		Episodes:   60,
	}
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, "G/G*", res.Metric)
	// The advisers learn, the decider does not: one turn per episode is
	// its (2 points × 4 allocators × 2 seeds × 60 episodes).
	assert.Equal(t, res.Turns-2*4*2*60, res.Updates)
	// The committee's decider answers the advice: the counterfactual
	// allocators take its re-simulation mode, under the names typed.
	var names []string
	for _, r := range res.Rows[:4] {
		names = append(names, r.Allocator)
	}
	assert.Equal(t, []string{"team", "difference", "shapley", "leave-one-out"}, names, "the names typed: the scenario re-simulates by default")
	for _, c := range res.Cells {
		require.Len(t, c.Team, 60)
		for _, g := range c.Team {
			assert.Contains(t, []float64{0, 1}, g)
		}
		// Frozen, every counterfactual credit would be 0.
		assert.True(t, slices.ContainsFunc(c.Reward, func(r float64) bool { return r != 0 }), "cell %s seed %d", c.Allocator, c.Seed)
	}
	// Leave-one-out with an absent adviser is the difference reward with
	// it abstaining: the same numbers, the same learning.
	for s := range 2 {
		assert.Equal(t, res.Cells[s+2].Team, res.Cells[s+6].Team)
		assert.Equal(t, res.Cells[s+2].Reward, res.Cells[s+6].Reward)
	}
	frozen := cfg
	frozen.Allocators = []string{"difference:sim=frozen"}
	still, err := experiment.Run(context.Background(), frozen)
	require.NoError(t, err)
	assert.Equal(t, "difference:sim=frozen", still.Rows[0].Allocator, "an explicit mode is kept, and named as typed against the scenario's")
	cfg.Parallel = 1
	again, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, res.Rows, again.Rows)
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	base := smallBar(t, "")
	for name, tc := range map[string]struct {
		edit func(*experiment.Config)
		want string
	}{
		"no allocator":     {func(c *experiment.Config) { c.Allocators = nil }, "no allocator"},
		"bad allocator":    {func(c *experiment.Config) { c.Allocators = []string{"team", "bogus"} }, `allocator "bogus"`},
		"twice":            {func(c *experiment.Config) { c.Allocators = []string{"team", "team"} }, `"team" given twice`},
		"no seeds":         {func(c *experiment.Config) { c.Seeds = 0 }, "seeds 0"},
		"no episodes":      {func(c *experiment.Config) { c.Episodes = 0 }, "episodes 0"},
		"window":           {func(c *experiment.Config) { c.Window = 81 }, "window 81"},
		"no learner":       {func(c *experiment.Config) { c.Learners = nil }, "no learner"},
		"unknown param":    {func(c *experiment.Config) { c.Axes = []experiment.Axis{{Param: "bars", Values: []string{"1"}}} }, "grid point bars=1"},
		"bad value":        {func(c *experiment.Config) { c.Axes[0].Values = []string{"6", "many"} }, "grid point agents=many"},
		"fixed and axis":   {func(c *experiment.Config) { c.Params = map[string]string{"agents": "5"} }, "both fixed (5) and a grid axis"},
		"unknown role":     {func(c *experiment.Config) { c.Learn = []string{"bartender"} }, `learning role "bartender"`},
		"learns and plays": {func(c *experiment.Config) { c.Policies = map[string]string{"patron": "first-night"} }, `role "patron" both learns`},
		"unknown policy": {func(c *experiment.Config) {
			c.Scenario = committee.New()
			c.Params, c.Axes, c.Allocators = nil, nil, []string{"team"}
			c.Learn = []string{committee.RoleAdviser}
			c.Policies = map[string]string{committee.RoleDecider: "oracle"}
		}, `role decider: unknown policy "oracle"`},
		"no null action": {func(c *experiment.Config) {
			c.Scenario = committee.New()
			c.Params = nil
			c.Axes = nil
			c.Allocators = []string{"difference"}
		}, `declares no null action for role "decider"`},
	} {
		cfg := base
		cfg.Axes = []experiment.Axis{{Param: "agents", Values: []string{"6", "12"}}}
		tc.edit(&cfg)
		_, err := experiment.Run(context.Background(), cfg)
		require.ErrorIs(t, err, experiment.ErrBadConfig, name)
		assert.ErrorContains(t, err, tc.want, name)
	}
}

func TestACellThatFailsNamesItself(t *testing.T) {
	cfg := smallBar(t, t.TempDir())
	cfg.Allocators = []string{"team", "shapley:max-agents=8"}
	_, err := experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, credit.ErrTooManyAgents)
	assert.ErrorContains(t, err, "agents=12 allocator=shapley:max-agents=8 seed=")
}

func TestParseAxis(t *testing.T) {
	a, err := experiment.ParseAxis("agents = 20, 60,100")
	require.NoError(t, err)
	assert.Equal(t, experiment.Axis{Param: "agents", Values: []string{"20", "60", "100"}}, a)
	for _, bad := range []string{"agents", "=1,2", "agents=", "agents=1,,2", "agents=1,1"} {
		_, err := experiment.ParseAxis(bad)
		assert.ErrorIs(t, err, experiment.ErrBadConfig, bad)
	}
}

// TestRunWritesResultsOfSeedsThatAllDifferAlike: two allocators whose
// seeds all differ by the same amount have an infinite Cohen's d_z, which
// used to make results.json unwritable ("json: unsupported value: -Inf")
// and the whole experiment fail at its end. It is written null there, and
// as -Inf in the CSV and the report.
func TestRunWritesResultsOfSeedsThatAllDifferAlike(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	dir := t.TempDir()
	spec, err := learn.Parse("egreedy")
	require.NoError(t, err)
	res, err := experiment.Run(context.Background(), experiment.Config{
		Scenario:   committee.New(),
		Axes:       []experiment.Axis{{Param: "uninformed", Values: []string{"1"}}},
		Allocators: []string{"team", "difference"},
		Learners:   []learn.Spec{spec},
		Learn:      []string{committee.RoleAdviser},
		Policies:   map[string]string{committee.RoleDecider: "scripted"},
		Seeds:      2,
		Seed:       1,
		Episodes:   100,
		Parallel:   1,
		Out:        dir,
	})
	require.NoError(t, err)
	require.Len(t, res.Comparisons, 1)
	require.True(t, math.IsInf(float64(res.Comparisons[0].D), 0), "this grid's seeds differ alike: d_z %v", res.Comparisons[0].D)
	files := outputs(t, dir)
	assert.Contains(t, string(files["results.json"]), `"cohen_dz": null`)
	assert.Contains(t, string(files["comparisons.csv"]), "Inf")
}
