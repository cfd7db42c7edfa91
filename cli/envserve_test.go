package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// envServing runs `troupe env-serve args...` on a free loopback port until
// the returned stop is called; stop returns the exit code.
func envServing(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	return servingCommand(t, "env-serve", "troupe: environment server on ", args...)
}

// e2ePython returns the interpreter of the pinned PyPI environment that
// holds pettingzoo, gymnasium and openenv-core (internal/pyenv), and the
// PYTHONPATH that adds the repository's troupe_env; it skips, or fails
// under TROUPE_REQUIRE_PYTHON=1, when there is none.
func e2ePython(t *testing.T) (python, path string) {
	t.Helper()
	return pyenv.Python(t, pyenv.E2E), pyenv.PythonPath()
}

// checkedEpisode is an episode the Python check played: its seeds, moves
// and allocators, and what the environment gave each agent at the end.
type checkedEpisode struct {
	Scenario   string              `json:"scenario"`
	Params     map[string]string   `json:"params"`
	Seed       uint64              `json:"seed"`
	RolloutID  int64               `json:"rollout_id"`
	Allocators []string            `json:"allocators"`
	Reward     string              `json:"reward"`
	Moves      map[string][]string `json:"moves"`
	Final      map[string]struct {
		Reward float64 `json:"reward"`
		Info   struct {
			Status      string               `json:"status"`
			Team        *float64             `json:"team"`
			Sides       map[string]float64   `json:"sides"`
			Side        string               `json:"side"`
			SideReward  float64              `json:"side_reward"`
			Score       *float64             `json:"score"`
			Reward      float64              `json:"reward"`
			Credit      map[string]float64   `json:"credit"`
			CreditTurns map[string][]float64 `json:"credit_turns"`
			CreditSteps []int                `json:"credit_steps"`
		} `json:"info"`
	} `json:"final"`
}

// everyEnvironment are the scenarios that have an environment: every
// built-in one whose roles all declare action sets.
func everyEnvironment(t *testing.T) []string {
	t.Helper()
	reg := scenarios.Builtin()
	var out []string
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		as, ok := sc.(env.ActionSets)
		if !ok {
			continue
		}
		p, err := sc.Info().ParseParams(nil)
		require.NoError(t, err)
		all := true
		for _, r := range sc.Info().Roles {
			all = all && as.ActionSet(p, r.Name) != nil
		}
		if all {
			out = append(out, name)
		}
	}
	return out
}

// TestEnvServePettingZoo runs PettingZoo's own api_test,
// parallel_api_test, seed_test and parallel_seed_test (the pinned PyPI
// pettingzoo) on every scenario that has an environment, through
// python/troupe_env against `troupe env-serve`, and checks that reset()
// after reset(seed=s) repeats. Then it replays the episodes the random
// agents played through `troupe run --spec` with the replay policy (then
// the house policy, as the server's counterfactuals play a learner's seat):
// each record is the server's, byte for byte, credit included, and the
// credit, rewards and sides' rewards each agent's infos carried at the end
// are those of troupe run's episode, for every allocator, on both sides of
// bargain and werewolf.
func TestEnvServePettingZoo(t *testing.T) {
	python, path := e2ePython(t)
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served, "-o", filepath.Join(dir, "served.jsonl"))
	out := filepath.Join(dir, "check.json")
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(path, "tests", "pettingzoo_check.py"), base, out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path, "CHECK_CYCLES=100", "CHECK_BENCH_EPISODES=20")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())
	t.Logf("%s", b)

	var check struct {
		API          []string         `json:"api_test"`
		Parallel     []string         `json:"parallel_api_test"`
		Seed         []string         `json:"seed_test"`
		ParallelSeed []string         `json:"parallel_seed_test"`
		Episodes     []checkedEpisode `json:"episodes"`
		Reseeded     struct {
			Equal    bool `json:"equal"`
			Distinct int  `json:"distinct"`
		} `json:"reseeded"`
		ParallelCredit struct {
			Agents int `json:"agents"`
		} `json:"parallel_credit"`
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &check))
	every := everyEnvironment(t)
	assert.Len(t, every, 8)
	for _, passed := range [][]string{check.API, check.Parallel, check.Seed, check.ParallelSeed} {
		assert.ElementsMatch(t, every, passed)
	}
	assert.True(t, check.Reseeded.Equal, "two environments reset alike answer alike")
	assert.Equal(t, 4, check.Reseeded.Distinct, "reset() after reset(seed=s) plays new episodes")
	assert.Equal(t, 4, check.ParallelCredit.Agents, "the Parallel environment's credit is the AEC one's")
	require.Len(t, check.Episodes, 21)

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
		allocs := ep.Allocators
		if ep.Reward != "" && !slices.Contains(allocs, ep.Reward) {
			allocs = append(allocs, ep.Reward)
		}
		spec := map[string]any{"format": "troupe.runspec/v1", "troupe_version": runspec.TroupeVersion, "scenario": ep.Scenario, "params": ep.Params, "episodes": 1, "seed": ep.Seed,
			"rollout_id_base": ep.RolloutID, "group_index_base": ep.RolloutID, "policies": map[string]any{}}
		if allocs != nil {
			spec["allocators"] = allocs
		}
		sc, err := scenarios.Builtin().Lookup(ep.Scenario)
		require.NoError(t, err)
		house := cmp.Or(sc.Info().DefaultPolicy, "random")
		for _, r := range sc.Info().Roles {
			spec["policies"].(map[string]any)[r.Name] = map[string]any{"name": "replay", "settings": map[string]any{"moves": ep.Moves, "then": house}}
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
		checkCredit(t, ep, got)
	}
}

// checkCredit compares what the environment gave each agent of ep at the
// end with the episode troupe run wrote (line): its rewards, its sides'
// and every allocator's credit, per turn and whole.
func checkCredit(t *testing.T, ep checkedEpisode, line []byte) {
	t.Helper()
	rec, c, err := trajectories.DecodeEpisode(line)
	require.NoError(t, err)
	want, err := credit.SeatsOf(rec, c)
	require.NoError(t, err)
	require.Len(t, ep.Final, len(rec.Seats), "episode %d: every agent saw the end", ep.RolloutID)
	for _, seat := range want.Seats {
		got := ep.Final[seat.Agent]
		info := got.Info
		where := fmt.Sprintf("episode %d of %s, %s", ep.RolloutID, ep.Scenario, seat.Agent)
		require.Equal(t, string(rec.Status), info.Status, where)
		require.NotNil(t, info.Team, where)
		assert.Equal(t, rec.Score.Team, *info.Team, where)
		assert.Equal(t, seat.SideName, info.Side, where)
		assert.Equal(t, seat.Reward, info.SideReward, where)
		if rec.Teams != nil {
			for k, name := range rec.Teams {
				assert.Equal(t, rec.Score.Teams[k], info.Sides[name], where)
			}
		}
		if seat.HasScore {
			require.NotNil(t, info.Score, where)
			assert.Equal(t, seat.Score, *info.Score, where)
		}
		reward := seat.ScoreOr()
		if ep.Reward != "" {
			reward = 0 // a seat with no turn has no credit
			if a := want.Index(ep.Reward); seat.End != nil {
				reward = seat.End[a]
			}
		}
		assert.Equal(t, reward, got.Reward, "%s: the reward", where)
		assert.Equal(t, reward, info.Reward, "%s: infos' reward", where)
		if seat.Steps == nil {
			seat.Steps = []int{}
		}
		assert.Equal(t, seat.Steps, info.CreditSteps, where)
		assert.Len(t, info.CreditTurns, len(want.Allocators), where)
		for a, name := range want.Allocators {
			assert.Equal(t, seat.Turns[a], info.CreditTurns[name], "%s: %s per turn", where, name)
			if seat.End != nil {
				assert.Equal(t, seat.End[a], info.Credit[name], "%s: %s", where, name)
			}
		}
	}
}

// TestEnvServePythonClient runs python/troupe_env's protocol client with
// the standard library alone (python -S: no site-packages): two players
// on their own threads share one episode, and refused moves come back as
// ServerError with their codes. It needs only a Python 3.
func TestEnvServePythonClient(t *testing.T) {
	// Any Python 3 does (-S: none of its packages): the pinned
	// environment's, else the system's.
	python, err := pyenv.Find(pyenv.E2E)
	if err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			python = pyenv.Python(t, pyenv.E2E) // skips, or fails under TROUPE_REQUIRE_PYTHON=1
		}
	}
	path := pyenv.PythonPath()
	base, stop := envServing(t)
	cmd := exec.CommandContext(t.Context(), python, "-S", filepath.Join(path, "tests", "client_check.py"), base)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
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

// The serving commands refuse, exit 2, naming the way out: an address
// beyond loopback without a token, and a token shorter than 16 bytes.
func TestServersRefuseOpenAddressesAndShortTokens(t *testing.T) {
	for _, cmd := range []string{"serve", "env-serve"} {
		r := troupe(t, cmd, "--addr", "0.0.0.0:0")
		assert.Equal(t, 2, r.code, "%s: %s", cmd, r.stderr)
		assert.Contains(t, r.stderr, "needs a token", cmd)
		assert.Contains(t, r.stderr, "--insecure-open", cmd)
		r = troupe(t, cmd, "--token", "x")
		assert.Equal(t, 2, r.code, "%s: %s", cmd, r.stderr)
		assert.Contains(t, r.stderr, "too short", cmd)
	}
	r := troupe(t, "env-serve", "--addr", "0.0.0.0:0", "--insecure-open", "--llm-base-url", "http://127.0.0.1:1/v1")
	assert.Equal(t, 2, r.code, r.stderr)
	assert.Contains(t, r.stderr, "chat calls")
}
