package cli

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/runspec"
)

// Environment variables of the tests against outside Python packages.
const (
	// EnvPettingZoo is a directory that makes pettingzoo and gymnasium
	// importable (snapshots of Farama-Foundation/PettingZoo and Gymnasium,
	// each package directory at its top); numpy comes from the Python.
	EnvPettingZoo = "TROUPE_PETTINGZOO_PATH"
	// EnvRequirePettingZoo=1 fails the PettingZoo test when EnvPettingZoo
	// is unset, where it otherwise skips.
	EnvRequirePettingZoo = "TROUPE_REQUIRE_PETTINGZOO"
	// EnvPython is the Python to run them with; default /usr/bin/python3
	// (Debian's, which has numpy).
	EnvPython = "TROUPE_PYTHON"
)

// envServing runs `troupe env-serve args...` on a free loopback port until
// the returned stop is called; stop returns the exit code.
func envServing(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	return servingCommand(t, "env-serve", "troupe: environment server on ", args...)
}

// pythonWith returns the Python to run and the PYTHONPATH that makes
// troupe_env and pettingzoo importable, or skips.
func pythonWith(t *testing.T) (python, path string) {
	t.Helper()
	dir := os.Getenv(EnvPettingZoo)
	if dir == "" {
		if os.Getenv(EnvRequirePettingZoo) == "1" {
			t.Fatalf("%s is unset and %s=1: point it at a directory holding pettingzoo/ and gymnasium/", EnvPettingZoo, EnvRequirePettingZoo)
		}
		t.Skipf("%s is unset: PettingZoo's api_test is not run (point it at a directory holding snapshots' pettingzoo/ and gymnasium/; %s=1 makes this a failure)", EnvPettingZoo, EnvRequirePettingZoo)
	}
	python = os.Getenv(EnvPython)
	if python == "" {
		python = "/usr/bin/python3"
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	return python, filepath.Join(root, "python") + string(os.PathListSeparator) + dir
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
	python, path := pythonWith(t)
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served, "-o", filepath.Join(dir, "served.jsonl"))
	out := filepath.Join(dir, "check.json")
	root := filepath.Dir(strings.Split(path, string(os.PathListSeparator))[0])
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(root, "python", "tests", "pettingzoo_check.py"), base, out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path, "CHECK_CYCLES=100", "CHECK_BENCH_EPISODES=20")
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

// TestEnvServePythonClient runs python/troupe_env's protocol client with
// the standard library alone (python -S: no site-packages): two players
// on their own threads share one episode, and refused moves come back as
// ServerError with their codes. It needs only a Python 3.
func TestEnvServePythonClient(t *testing.T) {
	python := os.Getenv(EnvPython)
	if python == "" {
		python = "/usr/bin/python3"
	}
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("no %s: the Python client is not run (%s names another)", python, EnvPython)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	base, stop := envServing(t)
	cmd := exec.CommandContext(t.Context(), python, "-S", filepath.Join(root, "python", "tests", "client_check.py"), base)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
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
