package slime_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// EnvSlimeDir names a checkout of github.com/THUDM/slime for
// TestSlimeRealRollout.
const EnvSlimeDir = "TROUPE_SLIME_DIR"

// proposal is a llama.cpp grammar for negotiation proposals over pools of
// one item each: the random tiny model's answers are then always legal,
// and every episode plays all its rounds.
const proposal = `root ::= "{\"type\":\"propose\",\"take\":{\"book\":" [01] ",\"hat\":" [01] ",\"ball\":" [01] "}}"`

// harnessResult is slime_real_check.py's line for one file.
type harnessResult struct {
	File             string    `json:"file"`
	Episodes         int       `json:"episodes"`
	Samples          int       `json:"samples"`
	Rollouts         int       `json:"rollouts"`
	TrainedTokens    int       `json:"trained_tokens"`
	ResponseTokens   int       `json:"response_tokens"`
	RolloutLogProbs  bool      `json:"rollout_log_probs"`
	DPPartitionSizes []int     `json:"dp_partition_sizes"`
	GlobalBatchSizes []int     `json:"global_batch_sizes"`
	NumMicrobatches  []int     `json:"num_microbatches"`
	RawRewards       []float64 `json:"raw_rewards"`
}

// TestSlimeRealRollout runs LLM negotiations against the real llama-server
// in both layouts, per turn and merged (--merge-turns), and hands the
// samples to slime's own rollout code (slime_real_check.py: its
// generate_rollout with a custom generate function that returns them,
// _convert_samples_to_train_data, build_dp_schedule), with slime's
// default flags. It needs a slime checkout ($TROUPE_SLIME_DIR) and a
// python3 with numpy and PyYAML; it skips without them.
func TestSlimeRealRollout(t *testing.T) {
	slime, python, llama, bin, grammar := realSetup(t)
	dir := t.TempDir()
	files := map[string]string{}
	for _, layout := range []string{"turns", "merged"} {
		files[layout] = filepath.Join(dir, layout+".jsonl")
		args := []string{"run", "negotiation", "-n", "2", "-c", "2", "-p", "rounds=2", "-p", "max_count=1",
			"--policy", "llm", "--llm-base-url", llama.URL + "/v1", "--llm-kind", "llamacpp", "--llm-model", llamatest.ModelAlias,
			"--llm-format", "text", "--llm-max-tokens", "40", "--llm-extra", "grammar=" + grammar,
			"--layout", "nested", "-o", files[layout]}
		if layout == "merged" {
			args = append(args, "--merge-turns")
		}
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		require.NoError(t, err, "troupe %v: %s", args, out)
	}
	checkLayouts(t, slimeCheck(t, slime, python, files["turns"], files["merged"]))
}

// realSetup returns what the real-slime tests need: the slime checkout and
// python (or skips), a llama-server, troupe built, and the proposal
// grammar as JSON text.
func realSetup(t *testing.T) (slime, python string, llama *llamatest.Server, bin, grammar string) {
	t.Helper()
	slime, python = slimePython(t)
	llama = llamatest.New(t, llamatest.Options{})
	bin = buildTroupe(t)
	g, err := json.Marshal(proposal)
	require.NoError(t, err)
	return slime, python, llama, bin, string(g)
}

// checkLayouts checks what slime made of two episodes played per turn
// (got[0]) and merged (got[1]), and returns both.
func checkLayouts(t *testing.T, got []harnessResult) (turns, merged harnessResult) {
	t.Helper()
	turns, merged = got[0], got[1]
	for _, r := range got {
		assert.Equal(t, 2, r.Episodes)
		assert.Equal(t, 2, r.Rollouts, "%s: one rollout per episode", r.File)
		assert.Positive(t, r.TrainedTokens)
		assert.True(t, r.RolloutLogProbs)
		assert.Equal(t, r.Samples, r.DPPartitionSizes[0]+r.DPPartitionSizes[1], "%s: the schedule places every sample", r.File)
	}
	assert.Equal(t, turns.TrainedTokens, turns.ResponseTokens, "per turn, every response token is trained")
	assert.Less(t, merged.Samples, turns.Samples, "merged, an agent's turns are one sample")
	assert.Less(t, merged.TrainedTokens, merged.ResponseTokens, "merged, the other negotiator's and the environment's tokens are not trained")
	return turns, merged
}

// slimePython returns $TROUPE_SLIME_DIR and a python3 with numpy and
// PyYAML, and skips the test without them.
func slimePython(t *testing.T) (slime, python string) {
	t.Helper()
	slime = os.Getenv(EnvSlimeDir)
	if slime == "" {
		t.Skipf("set %s to a checkout of github.com/THUDM/slime to run its rollout code on troupe's samples", EnvSlimeDir)
	}
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import numpy, yaml").Run() == nil {
			return slime, p
		}
	}
	t.Skip("no python3 with numpy and PyYAML: slime's rollout code cannot be imported")
	return "", ""
}

// slimeCheck runs slime_real_check.py on files (nested layout) and
// returns its line for each, in order.
func slimeCheck(t *testing.T, slime, python string, files ...string) []harnessResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), python, append([]string{"-B", "slime_real_check.py"}, files...)...)
	cmd.Env = append(os.Environ(), "SLIME_DIR="+slime, "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "slime_real_check.py: %s", stderr.String())
	var got []harnessResult
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		var r harnessResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		got = append(got, r)
		t.Logf("slime took %s: %s", r.File, sc.Text())
	}
	require.Len(t, got, len(files))
	return got
}
