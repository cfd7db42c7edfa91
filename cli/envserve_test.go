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

// envServing runs `troupe env-serve args...` on a free loopback port until
// the returned stop is called; stop returns the exit code.
func envServing(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	return servingCommand(t, "env-serve", "troupe: environment server on ", args...)
}

// pythonCheck returns a command that runs python/tests/NAME with args under
// the pinned PettingZoo, Gymnasium and OpenEnv (pyenv.E2E), troupe_env
// importable, or skips (fails under TROUPE_REQUIRE_PYTHON=1) without them.
func pythonCheck(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	python := pyenv.Python(t, pyenv.E2E)
	cmd := exec.CommandContext(t.Context(), python, append([]string{filepath.Join(pyenv.PythonPath(), "tests", name)}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyenv.PythonPath())
	return cmd
}

// checkedEpisode is an episode the Python check played: its seeds and
// moves.
type checkedEpisode struct {
	Scenario  string              `json:"scenario"`
	Params    map[string]string   `json:"params"`
	Seed      uint64              `json:"seed"`
	RolloutID int64               `json:"rollout_id"`
	Moves     map[string][]string `json:"moves"`
}

// TestEnvServePettingZoo runs PettingZoo's own api_test and
// parallel_api_test on tic-tac-toe, El Farol and negotiation through
// python/troupe_env against `troupe env-serve`, then replays the episodes
// the random agents played through `troupe run --spec` with the replay
// policy: each record is the server's, byte for byte.
func TestEnvServePettingZoo(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served, "-o", filepath.Join(dir, "served.jsonl"))
	out := filepath.Join(dir, "check.json")
	cmd := pythonCheck(t, "pettingzoo_check.py", base, out)
	cmd.Env = append(cmd.Env, "CHECK_CYCLES=100", "CHECK_BENCH_EPISODES=20")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())
	t.Logf("%s", b)

	var check struct {
		API      []string         `json:"api_test"`
		Parallel []string         `json:"parallel_api_test"`
		Episodes []checkedEpisode `json:"episodes"`
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &check))
	assert.Equal(t, []string{"tictactoe", "elfarol", "negotiation"}, check.API)
	assert.Equal(t, check.API, check.Parallel)
	require.Len(t, check.Episodes, 9)

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
	for _, ep := range check.Episodes {
		spec := map[string]any{"format": "troupe.runspec/v1", "troupe_version": runspec.TroupeVersion, "scenario": ep.Scenario, "params": ep.Params, "episodes": 1, "seed": ep.Seed,
			"rollout_id_base": ep.RolloutID, "group_index_base": ep.RolloutID, "policies": map[string]any{}}
		for _, role := range rolesOf(ep.Scenario) {
			spec["policies"].(map[string]any)[role] = map[string]any{"name": "replay", "settings": map[string]any{"moves": ep.Moves}}
		}
		specFile := filepath.Join(dir, "spec-"+strconv.FormatInt(ep.RolloutID, 10)+".json")
		b, err := json.Marshal(spec)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(specFile, b, 0o644))
		replayed := filepath.Join(dir, "replayed-"+strconv.FormatInt(ep.RolloutID, 10)+".jsonl")
		var stderr strings.Builder
		app := New(io.Discard, &stderr)
		code := app.Main(t.Context(), []string{"run", "--spec", specFile, "-q", "-o", filepath.Join(dir, "samples.jsonl"), "--episodes-out", replayed})
		require.Equal(t, 0, code, stderr.String())
		got, err := os.ReadFile(replayed)
		require.NoError(t, err)
		require.NotEmpty(t, lines[ep.RolloutID], "the server wrote no episode %d", ep.RolloutID)
		assert.Equal(t, lines[ep.RolloutID], string(got), "episode %d of %s", ep.RolloutID, ep.Scenario)
	}
}

// rolesOf are the roles of a built-in scenario.
func rolesOf(scenario string) []string {
	switch scenario {
	case "tictactoe":
		return []string{"x", "o"}
	case "negotiation":
		return []string{"alice", "bob"}
	}
	return []string{"patron"}
}

// TestEnvServeOpenEnv plays single-seat tic-tac-toe games against the
// house's minimax with OpenEnv's own client code (GenericEnvClient, over
// its WebSocket session), an illegal move included.
func TestEnvServeOpenEnv(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served)
	cmd := pythonCheck(t, "openenv_check.py", base)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())
	var summary struct {
		Games []struct {
			Moves  []string `json:"moves"`
			Reward float64  `json:"reward"`
			Status string   `json:"status"`
		} `json:"games"`
		Illegal string `json:"illegal"`
	}
	require.NoError(t, json.Unmarshal(b, &summary), "%s", b)
	require.Len(t, summary.Games, 3)
	for _, g := range summary.Games {
		assert.Equal(t, "completed", g.Status)
		assert.LessOrEqual(t, g.Reward, 0.0, "minimax never loses")
	}
	assert.Contains(t, summary.Illegal, "illegal_action")
	records, err := os.ReadFile(served)
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(records), "\n"), "three episodes written")
}

// TestEnvServePythonClient runs python/troupe_env's protocol client with
// the standard library alone (python -S: no site-packages): two players
// on their own threads share one episode, and refused moves come back as
// ServerError with their codes. It needs only a Python 3: pyenv.E2E's,
// else python3 on PATH.
func TestEnvServePythonClient(t *testing.T) {
	python, err := pyenv.Find(pyenv.E2E)
	if err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Skip("no Python 3 (pyenv-e2e, or python3 on PATH): the Python client is not run")
		}
	}
	base, stop := envServing(t)
	cmd := exec.CommandContext(t.Context(), python, "-S", filepath.Join(pyenv.PythonPath(), "tests", "client_check.py"), base)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyenv.PythonPath())
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())
	var got struct {
		UnknownField []any              `json:"unknown_field"`
		Illegal      []any              `json:"illegal"`
		X            []string           `json:"x"`
		O            []string           `json:"o"`
		Status       string             `json:"status"`
		Scores       map[string]float64 `json:"scores"`
		ODone        bool               `json:"o_done"`
	}
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)
	assert.Equal(t, []any{400.0, "bad_request", `malformed JSON: json: unknown field "bogus"`}, got.UnknownField)
	assert.Equal(t, []any{422.0, "illegal_action"}, got.Illegal)
	assert.Equal(t, "completed", got.Status)
	assert.Equal(t, map[string]float64{"x": 1, "o": -1}, got.Scores)
	assert.True(t, got.ODone)
	assert.Equal(t, []string{"a1", "b1", "c1"}, got.X, "x plays the first legal cell")
	assert.Equal(t, []string{"c3", "b3"}, got.O, "o the last")
}
