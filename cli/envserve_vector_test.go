package cli

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/runspec"
)

// TestEnvServeVector runs python/tests/vector_check.py against `troupe
// env-serve`: PettingZoo's own api_test and parallel_api_test on
// environments with feature observations and state(), then vector
// environments (python/troupe_env/vector.py, numpy) stepped with random
// agents over their masks. Every episode a vector finished is then replayed
// through `troupe run --spec` with the replay policy: each record (with
// its credit) is the server's, byte for byte, and the credit the Python
// side read in its rewards and infos is the record's.
func TestEnvServeVector(t *testing.T) {
	python := pyenv.Python(t, pyenv.E2E)
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served, "-o", filepath.Join(dir, "served.jsonl"))
	out := filepath.Join(dir, "check.json")
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(pyenv.PythonPath(), "tests", "vector_check.py"), base, out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyenv.PythonPath())
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())

	var check struct {
		API      []string `json:"api_test"`
		Parallel []string `json:"parallel_api_test"`
		Episodes []struct {
			checkedEpisode
			Allocators []string             `json:"allocators"`
			Credit     map[string][]float64 `json:"credit"`
		} `json:"episodes"`
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &check))
	assert.Equal(t, []string{"tictactoe", "elfarol", "blotto"}, check.API)
	assert.Equal(t, check.API, check.Parallel)
	require.NotEmpty(t, check.Episodes)

	lines := map[int64]string{}
	all, err := os.ReadFile(served)
	require.NoError(t, err)
	for _, line := range strings.SplitAfter(string(all), "\n") {
		var head struct {
			RolloutID int64 `json:"rollout_id"`
		}
		if line != "" && json.Unmarshal([]byte(line), &head) == nil {
			lines[head.RolloutID] = line
		}
	}
	credited := 0
	roles := map[string][]string{"tictactoe": {"x", "o"}, "negotiation": {"alice", "bob"}, "blotto": {"soldier"}, "elfarol": {"patron"}}
	for _, ep := range check.Episodes {
		spec := map[string]any{"format": "troupe.runspec/v1", "troupe_version": runspec.TroupeVersion, "scenario": ep.Scenario, "params": ep.Params, "episodes": 1, "seed": ep.Seed,
			"rollout_id_base": ep.RolloutID, "group_index_base": ep.RolloutID, "policies": map[string]any{}}
		if len(ep.Allocators) > 0 {
			spec["allocators"] = ep.Allocators
		}
		for _, role := range roles[ep.Scenario] {
			spec["policies"].(map[string]any)[role] = map[string]any{"name": "replay", "settings": map[string]any{"moves": ep.Moves}}
		}
		specFile := filepath.Join(dir, "spec-"+strconv.FormatInt(ep.RolloutID, 10)+".json")
		b, err := json.Marshal(spec)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(specFile, b, 0o644))
		replayed := filepath.Join(dir, "replayed-"+strconv.FormatInt(ep.RolloutID, 10)+".jsonl")
		var stderr strings.Builder
		code := New(io.Discard, &stderr).Main(t.Context(), []string{"run", "--spec", specFile, "-q", "-o", filepath.Join(dir, "samples.jsonl"), "--episodes-out", replayed})
		require.Equal(t, 0, code, stderr.String())
		got, err := os.ReadFile(replayed)
		require.NoError(t, err)
		require.NotEmpty(t, lines[ep.RolloutID], "the server wrote no episode %d", ep.RolloutID)
		assert.Equal(t, lines[ep.RolloutID], string(got), "episode %d of %s", ep.RolloutID, ep.Scenario)
		if ep.Credit != nil {
			// One turn a seat (El Farol): sample k is seat k's.
			var rec struct {
				Credit struct {
					Allocators []string    `json:"allocators"`
					Values     [][]float64 `json:"values"`
				} `json:"credit"`
			}
			require.NoError(t, json.Unmarshal(got, &rec))
			for a, name := range rec.Credit.Allocators {
				assert.Equal(t, rec.Credit.Values[a], ep.Credit[name], "episode %d: %s credit in the Python infos", ep.RolloutID, name)
			}
			credited++
		}
	}
	assert.NotZero(t, credited)
	t.Logf("%d vector episodes replayed by troupe run, byte for byte", len(check.Episodes))
}

// TestVectorStepNotResent runs python/tests/vector_retry_check.py: the
// Python vector environment sends a step once, failing when its answer is
// cut short, rather than sending it again (the server applied it), and
// still sends a request once more when the kept-alive connection was
// closed while idle.
func TestVectorStepNotResent(t *testing.T) {
	python := pyenv.Python(t, pyenv.E2E)
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(pyenv.PythonPath(), "tests", "vector_retry_check.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyenv.PythonPath())
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	t.Logf("%s", b)
}
