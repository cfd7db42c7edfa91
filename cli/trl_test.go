package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
)

// trlServeArgs are examples/trl/troupe_grpo.py's SERVE_ARGS: El Farol, the
// learner at patron-0, troupe's first-night policy at patron-1.
var trlServeArgs = []string{"--scenario", "elfarol", "--param", "agents=2", "--param", "nights=10", "--param", "capacity=1",
	"--open", "patron-0", "--policy", "patron=first-night"}

// TestTRLGRPO runs TRL's GRPOTrainer (pyenv-llm: trl, transformers, torch
// and openenv-core from PyPI) for two optimisation steps on a tiny model
// built by the script, through OpenEnv's client against a real `troupe
// env-serve`; then the server's samples are compared with the trainer's
// rollouts: each sample's tokens are the rollout's prompt and completion
// ids, its reward the rollout's, and their tokens add up to TRL's own
// num_input_tokens_seen. make trl-grpo runs the full loop.
func TestTRLGRPO(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TRL's trainer is not run")
	}
	python := pyenv.Python(t, pyenv.LLM)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	dir := t.TempDir()
	samples := filepath.Join(dir, "samples.jsonl")
	base, stop := envServing(t, append([]string{"-o", samples}, trlServeArgs...)...)
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(root, "examples", "trl", "troupe_grpo.py"),
		"--url", base, "--steps", "2", "--groups", "1", "--generations", "4", "--out", dir)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())

	var summary struct {
		Steps int `json:"steps"`
		Log   []struct {
			Loss   *float64 `json:"loss"`
			Reward *float64 `json:"reward"`
		} `json:"log"`
		Check struct {
			TokensSeen int `json:"trainer_num_input_tokens_seen"`
		} `json:"check"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &summary))
	assert.Equal(t, 2, summary.Steps)
	for _, row := range summary.Log {
		assert.NotNil(t, row.Loss)
		assert.NotNil(t, row.Reward)
	}

	type rollout struct {
		RolloutID     int64   `json:"rollout_id"`
		PromptIDs     []int   `json:"prompt_ids"`
		CompletionIDs []int   `json:"completion_ids"`
		Move          string  `json:"move"`
		Reward        float64 `json:"reward"`
	}
	var rollouts []rollout
	for line := range lines(t, filepath.Join(dir, "rollouts.jsonl")) {
		var r rollout
		require.NoError(t, json.Unmarshal(line, &r))
		rollouts = append(rollouts, r)
	}
	require.Len(t, rollouts, 8, "2 steps of 4")
	type sample struct {
		RolloutID      int64   `json:"rollout_id"`
		Tokens         []int   `json:"tokens"`
		ResponseLength int     `json:"response_length"`
		Response       string  `json:"response"`
		Reward         float64 `json:"reward"`
		Metadata       struct {
			Agent    string `json:"agent"`
			TextOnly bool   `json:"text_only"`
		} `json:"metadata"`
	}
	byID := map[int64]sample{}
	for line := range lines(t, samples) {
		var s sample
		require.NoError(t, json.Unmarshal(line, &s))
		if s.Metadata.Agent == "patron-0" && s.RolloutID >= 1000 {
			byID[s.RolloutID] = s
		}
	}
	tokens := 0
	for _, r := range rollouts {
		s, ok := byID[r.RolloutID]
		require.True(t, ok, "no sample of rollout %d", r.RolloutID)
		assert.False(t, s.Metadata.TextOnly)
		assert.Equal(t, append(append([]int{}, r.PromptIDs...), r.CompletionIDs...), s.Tokens, "rollout %d", r.RolloutID)
		assert.Equal(t, len(r.CompletionIDs), s.ResponseLength)
		assert.Equal(t, r.Move, s.Response)
		assert.Equal(t, r.Reward, s.Reward)
		tokens += len(s.Tokens)
	}
	assert.Len(t, byID, len(rollouts))
	assert.Equal(t, summary.Check.TokensSeen, tokens, "TRL's num_input_tokens_seen is the samples' tokens")
}

// lines yields the lines of a JSONL file.
func lines(t *testing.T, path string) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			if len(sc.Bytes()) > 0 && !yield(sc.Bytes()) {
				return
			}
		}
		require.NoError(t, sc.Err())
	}
}
