package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// barGrid is a quick El Farol experiment's command line.
func barGrid(out string) []string {
	return []string{"experiment", "elfarol", "--grid", "agents=4,8", "--param", "nights=2", "--param", "capacity=2",
		"--allocator", "team,difference", "--seeds", "2", "--episodes", "30", "--out", out}
}

// finishedBar is barGrid's experiment, finished: its --out directory and
// what it said. It is run once, on the first call (its plots take most of
// a minute to draw on a busy machine under -race), and shared by the
// tests that need a finished experiment and leave it as it was.
func finishedBar(t *testing.T) (string, result) {
	t.Helper()
	barFixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "troupe-bar-")
		if err != nil {
			barFixture.err = err
			return
		}
		RemoveAtExit(dir)
		barFixture.out = filepath.Join(dir, "bar")
		barFixture.first = troupe(t, barGrid(barFixture.out)...)
	})
	require.NoError(t, barFixture.err)
	require.Equal(t, ExitOK, barFixture.first.code, barFixture.first.stderr)
	return barFixture.out, barFixture.first
}

var barFixture struct {
	once  sync.Once
	out   string
	first result
	err   error
}

func TestExperimentWritesTheReport(t *testing.T) {
	out, r := finishedBar(t)
	for _, want := range []string{"8 cells (0 read back", "agents=8", "difference", "report: " + out + "/report.md"} {
		assert.Contains(t, r.stderr, want)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	// The report names the command that reproduces it, every setting explicit.
	assert.Contains(t, string(report), "troupe experiment elfarol --param capacity=2 --param nights=2 --grid agents=4,8 "+
		"--allocator team --allocator difference --learner egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1 --seeds 2 --seed 1 --episodes 30 --out "+out)
	for _, f := range []string{"episodes.csv", "results.json", "final.svg", "curves_agents-4.svg"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	// Without --png the plots are SVG only, and the report shows those.
	assert.NoFileExists(t, filepath.Join(out, "final.png"))
	assert.Contains(t, string(report), "](final.svg)")

	refused := troupe(t, barGrid(out)...)
	assert.Equal(t, ExitUsage, refused.code, refused.stderr)
	assert.Contains(t, refused.stderr, "already holds an experiment")
	again := troupe(t, append(barGrid(out), "--resume")...)
	require.Equal(t, ExitOK, again.code, again.stderr)
	assert.Contains(t, again.stderr, "8 cells (8 read back")
	report2, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Equal(t, report, report2)
}

func TestExperimentUsageErrors(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"experiment"}, "experiment needs a scenario name"},
		{[]string{"experiment", "nowhere"}, "nowhere"},
		{append(barGrid(out), "--learner", "sarsa"), "--learner"},
		{append(barGrid(out), "--learner", "egreedy:alpha=0.1/0.1"), "alpha=0.1 given twice"},
		{append(barGrid(out), "--learner", "egreedy:alpha=0.1/0.2", "--learner", "egreedy:alpha=0.2"), "given twice"},
		{append(barGrid(out), "--grid", "agents"), "--grid"},
		{append(barGrid(out), "--allocator", "bogus"), `--allocator "bogus"`},
		{append(barGrid(out), "--learn", "bartender"), `learning role "bartender"`},
		{append(barGrid(out), "--policy", "patron"), `--policy "patron": want ROLE=NAME`},
		{append(barGrid(out), "--seeds", "0"), "seeds 0"},
		{append(barGrid(out), "--diagnose", "2", "--diagnose-samples", "1"), "diagnose samples 1: at least 2"},
		{append(barGrid(out), "--mode-min-share", "2"), "mode min share 2"},
		{[]string{"experiment", "committee", "--allocator", "difference", "--out", out}, `no null action for role "decider"`},
		{append(barGrid(out), "--tree", "1"), "--tree 1: want at least 2"},
		{append(barGrid(out), "--tree-joint"), "need --tree K"},
		{append(barGrid(out), "--tree", "2", "--allocator", "rloo", "--group", "2"), `allocator "rloo"`},
	} {
		r := troupe(t, tc.args...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, strings.Join(tc.args, " "))
	}
}

// TestExperimentInterruptedKeepsItsCells: an experiment interrupted
// before it finished says how to resume it, and resumes. (Of one point and
// one allocator, barGrid's settings otherwise: a grid adds nothing here but
// plots to draw.)
func TestExperimentInterruptedKeepsItsCells(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bar")
	args := []string{"experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--param", "capacity=2",
		"--allocator", "team", "--seeds", "2", "--episodes", "30", "--out", out}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := invoke(t, ctx, nil, false, args...)
	assert.Equal(t, ExitInterrupted, r.code, r.stderr)
	assert.Contains(t, r.stderr, "run the same command with --resume")
	r = troupe(t, append(args, "--resume")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "2 cells (0 read back")
}

func TestExperimentResumeRefusesAnotherExperiment(t *testing.T) {
	out, _ := finishedBar(t)
	before, err := os.ReadFile(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"--episodes", "40"}, []string{"episodes: 30, now 40 (--episodes)", "window: 3, now 4 (--window)"}},
		{nil, []string{`params.capacity: "2", now "3" (--param)`}}, // barGrid's capacity=2, changed below
		{[]string{"--allocator", "individual", "--seeds", "3"}, []string{`allocators: ["team","difference"], now ["team","difference","individual"] (--allocator)`, "seeds: 2, now 3 (--seeds)"}},
		{[]string{"--learner", "boltzmann"}, []string{"learners", "(--learner)"}},
	} {
		args := barGrid(out)
		if tc.args == nil {
			args[slices.Index(args, "capacity=2")] = "capacity=3"
		}
		r := troupe(t, append(append(args, "--resume"), tc.args...)...)
		assert.Equal(t, ExitUsage, r.code, r.stderr)
		assert.Contains(t, r.stderr, "holds another experiment")
		for _, s := range tc.says {
			assert.Contains(t, r.stderr, s)
		}
	}
	after, err := os.ReadFile(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused resume leaves the outputs alone")

	r := troupe(t, append(barGrid(filepath.Join(t.TempDir(), "empty")), "--resume")...)
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing to resume")
}

// TestExperimentSweepsLearners: --learner repeats and sweeps, each learner
// a dimension of the grid, and the report says how the rewards fare over
// the sweep.
func TestExperimentSweepsLearners(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sweep")
	args := []string{"experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--param", "capacity=2",
		"--allocator", "team,difference", "--learner", "egreedy:alpha=0.1/0.3", "--learner", "reinforce", "--seeds", "2", "--episodes", "20", "--out", out}
	r := troupe(t, args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "12 cells")
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "--learner egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1 --learner egreedy:alpha=0.3,epsilon=0.05,init=0,unbiased=1 --learner reinforce:baseline=0,rate=0.1 ")
	assert.Contains(t, string(report), "### Learner sweep")
	for _, f := range []string{"sweep.csv", "modes.csv", "final.svg", "curves_reinforce.svg"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	for _, want := range []string{"learner=egreedy:alpha=0.3", "learner=reinforce"} {
		assert.Contains(t, r.stderr, want, "the summary names each row's learner")
	}
	// The sweep resumes as any grid: every cell read back, the same report.
	again := troupe(t, append(args, "--resume")...)
	require.Equal(t, ExitOK, again.code, again.stderr)
	assert.Contains(t, again.stderr, "12 cells (12 read back")
	report2, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Equal(t, string(report), string(report2))
}

// TestExperimentComparesASide: --side names the team whose allocators
// are compared and whose own reward is the metric, --side-allocator the
// other teams' fixed ones; the report's command says both, a resume with
// another fixed allocator is refused naming the flag, and bad sides are
// usage errors.
func TestExperimentComparesASide(t *testing.T) {
	out := filepath.Join(t.TempDir(), "blotto")
	args := []string{"experiment", "blotto", "--grid", "n=3", "--side", "red", "--side-allocator", "blue=team",
		"--allocator", "team,difference", "--seeds", "2", "--episodes", "30", "--out", out}
	r := troupe(t, args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "troupe experiment blotto --grid n=3 --allocator team --allocator difference --side red --side-allocator blue=team --learner ")
	assert.Contains(t, string(report), "metric: G_red")

	other := slices.Clone(args)
	other[slices.Index(other, "blue=team")] = "blue=difference"
	r = troupe(t, append(other, "--resume")...)
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "(--side-allocator)")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--side", "green"}, `side "green": scenario blotto has the teams red, blue`},
		{[]string{"--side", "red", "--side-allocator", "blue"}, `--side-allocator: bad experiment configuration: side allocator "blue": want team=allocator`},
		{[]string{"--side", "red", "--side-allocator", "blue=team", "--side-allocator", "blue=difference"}, "team blue was already given an allocator"},
		{[]string{"--side", "red", "--side-allocator", "red=team"}, "red is the compared side"},
		{[]string{"--side-allocator", "blue=team"}, "without a compared side"},
	} {
		bad := append([]string{"experiment", "blotto", "--seeds", "2", "--episodes", "30", "--out", t.TempDir()}, tc.args...)
		r := troupe(t, bad...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, strings.Join(tc.args, " "))
	}
	r = troupe(t, "experiment", "elfarol", "--side", "red", "--seeds", "2", "--episodes", "30", "--out", t.TempDir())
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "scenario elfarol declares no teams")
}

// TestExperimentTreeSampling: --tree K plays the cells tree-sampled, the
// report names it in the command that reproduces it, and the cost of
// every cell, candidates' continuations included, is compared.
func TestExperimentTreeSampling(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tree")
	r := troupe(t, "experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--param", "capacity=2",
		"--allocator", "at-grpo,team", "--learner", "reinforce", "--tree", "2", "--seeds", "2", "--episodes", "20", "--out", out, "-q")
	require.Equal(t, ExitOK, r.code, r.stderr)
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "--tree 2 --tree-alpha 1 --out")
	assert.Contains(t, string(report), "### At equal cost")
	cost, err := os.ReadFile(filepath.Join(out, "cost.csv"))
	require.NoError(t, err)
	// 20 one-step weeks, each with two one-step continuations per patron.
	assert.Contains(t, string(cost), ",at-grpo,G/G*,2,180,180,180,180,")
	assert.FileExists(t, filepath.Join(out, "cost_curves.svg"))
}

// TestExperimentTrainsPolicyGradientLearners: the softmax learners train
// in a grid like the others, on a scenario's numeric observations, with a
// group-relative allocator's advantage taken as is, and --help lists
// them with their parameters.
func TestExperimentTrainsPolicyGradientLearners(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pg")
	r := troupe(t, "experiment", "signal", "--group", "4", "--allocator", "grpo",
		"--learner", "pg-linear:baseline=0,clip=0.2,epochs=2", "--learner", "pg-mlp:baseline=0,hidden=4", "--learner", "pg-table",
		"--seeds", "2", "--episodes", "24", "--out", out)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "6 cells")
	for _, want := range []string{"learner=pg-linear", "learner=pg-mlp", "learner=pg-table"} {
		assert.Contains(t, r.stderr, want)
	}
	h := troupe(t, "experiment", "--help")
	require.Equal(t, ExitOK, h.code, h.stderr)
	for _, want := range []string{"pg-table", "pg-linear", "pg-mlp", "clip=0", "epochs=1", "hidden=16", "entropy=0"} {
		assert.Contains(t, h.stdout, want)
	}
}

// --nashconv measures each cell's learnt joint policy; the report says so
// and its command line repeats the flag.
func TestExperimentMeasuresNashConv(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ttt")
	r := troupe(t, "experiment", "tictactoe", "--nashconv", "markov", "--seeds", "2", "--episodes", "40", "--out", out)
	require.Equal(t, ExitOK, r.code, r.stderr)
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "--nashconv markov --out")
	assert.Contains(t, string(report), "| gain of x | gain of o | not measured |")
	assert.Contains(t, string(report), "| 0 of 2 |")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nashconv", "exact"}, `--nashconv "exact": want full or markov`},
		{[]string{"--nashconv-max-nodes", "10"}, "no --nashconv to bound"},
		{[]string{"--nashconv", "full", "--nashconv-max-nodes", "-1"}, "want 0 (the default) or more"},
	} {
		bad := append([]string{"experiment", "blotto", "--seeds", "2", "--episodes", "30", "--out", t.TempDir()}, tc.args...)
		r := troupe(t, bad...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, strings.Join(tc.args, " "))
	}
}

// troupe experiment compare reads experiments that differ in --group and
// --episodes, compares them at equal cost, and refuses, naming the field,
// experiments whose seeds are not paired.
func TestExperimentCompare(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, extra ...string) string {
		out := filepath.Join(dir, name)
		args := append([]string{"experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--param", "capacity=2",
			"--learner", "reinforce:rate=0.3", "--seeds", "2", "--episodes", "16", "--quiet", "--out", out}, extra...)
		r := troupe(t, args...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		return out
	}
	diff := run("difference", "--allocator", "difference")
	grpo := run("grpo", "--allocator", "grpo", "--group", "4", "--episodes", "32")
	other := run("other-seed", "--allocator", "rloo", "--group", "4", "--seed", "2")
	out := filepath.Join(dir, "cmp")
	r := troupe(t, "experiment", "compare", diff, grpo+"=GRPO, 4", "--out", out, "--reference", "GRPO, 4")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "compared 2 arms over 2 seeds at 1 points (G/G*, mean ± std; reference GRPO, 4)")
	assert.Contains(t, r.stderr, "at 32 steps", "grpo's 32 one-step weeks are the least cost")
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), `troupe experiment compare `+diff+` "`+grpo+`=GRPO, 4" --out `+out+` --reference "GRPO, 4"`)
	for _, f := range []string{"compare.csv", "compare_tests.csv", "cost_curves.svg", "curves.svg"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	r = troupe(t, "experiment", "compare", diff, other, "--out", filepath.Join(dir, "cmp2"))
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "seed 2, not 1")
	r = troupe(t, "experiment", "compare", diff, grpo)
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--out")
}
