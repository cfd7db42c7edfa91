package credit_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// treeRun plays episodes of tic-tac-toe (random players) with tree
// sampling of k candidates and the given alpha, writes their samples with
// the at-grpo and magrpo:std=true rewards to a file, and returns the path
// and the episodes.
func treeRun(t *testing.T, episodes, k int, alpha float64) (string, []*trajectories.Episode) {
	t.Helper()
	sc := tictactoe.New()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	var allocs []trajectories.Allocator
	for _, spec := range []string{"at-grpo", "magrpo:std=true"} {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err)
		allocs = append(allocs, a)
	}
	path := filepath.Join(t.TempDir(), "samples.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	var eps []*trajectories.Episode
	out := &trajectories.Output{
		Sink: trajectories.NewJSONLWriter(f, trajectories.Flat), Allocators: allocs, Format: trajectories.RewardDict,
		Observe: func(ep *trajectories.Episode) {
			c := *ep
			eps = append(eps, &c)
		},
	}
	cfg := play.Config{
		Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}, Drive: env.Drive{Tree: &episode.Tree{K: k, Alpha: alpha}},
		Episodes: episodes, Seed: 3, Concurrency: 2,
	}
	_, err = play.Run(t.Context(), cfg, out)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path, eps
}

// AT-GRPO on tic-tac-toe, tree sampled: every group's K candidates share
// their prompt exactly (the turn's, read from the record), and the
// advantages troupe wrote equal the paper's equation recomputed in Python
// from the samples alone (testdata/atgrpo.py).
func TestATGRPOOnTreeSampledEpisodes(t *testing.T) {
	const k, alpha = 4, 0.5
	path, eps := treeRun(t, 6, k, alpha)
	require.Len(t, eps, 6)
	groups := 0
	for _, ep := range eps {
		require.True(t, ep.Finished(), ep.Err)
		refs := ep.SampleRefs(nil)
		require.Len(t, ep.Samples, len(refs))
		for s, ref := range refs {
			require.GreaterOrEqual(t, ref.Candidate, 0, "every turn of both players is sampled")
			sm := ep.Samples[s]
			turn := &ep.Turns[ref.Turn]
			assert.Equal(t, ep.TextPrompt(turn), sm.Prompt.Text, "candidate %d of turn %d: the turn's prompt", ref.Candidate, ref.Turn)
			assert.Equal(t, ep.Candidates[ref.Candidate].Action, sm.Response)
			if ep.Candidates[ref.Candidate].Index == 0 {
				groups++
			}
		}
	}
	assert.Greater(t, groups, 20)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, groups*k, bytes.Count(data, []byte("\n")), "K samples a group, nothing else")
	recompute(t, path, alpha, k)
}

// recompute runs testdata/atgrpo.py over a sample file.
func recompute(t *testing.T, path string, alpha float64, k int) {
	t.Helper()
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("TROUPE_REQUIRE_PYTHON") != "" {
			t.Fatalf("%s is required (TROUPE_REQUIRE_PYTHON) to recompute AT-GRPO's advantages: %v", python, err)
		}
		t.Skipf("%s is absent: AT-GRPO's advantages are not recomputed in Python", python)
	}
	cmd := exec.CommandContext(t.Context(), python, "-B", "testdata/atgrpo.py", path, strconv.FormatFloat(alpha, 'g', -1, 64), strconv.Itoa(k))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "atgrpo.py:\n%s", out)
	t.Logf("atgrpo.py: %s", out)
}

// The same seeds give the same samples byte for byte, whatever the
// concurrency, tree sampling included.
func TestTreeSamplesAreDeterministic(t *testing.T) {
	a, _ := treeRun(t, 4, 3, 1)
	b, _ := treeRun(t, 4, 3, 1)
	da, err := os.ReadFile(a)
	require.NoError(t, err)
	db, err := os.ReadFile(b)
	require.NoError(t, err)
	assert.Equal(t, string(da), string(db))
}
