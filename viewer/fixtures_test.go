//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/cli"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/trajectories"
)

// troupe runs the troupe command line in this process.
func troupe(t testing.TB, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := cli.New(&stdout, &stderr)
	app.Terminal = func(io.Writer) bool { return false }
	code := app.Main(context.Background(), args)
	require.Equal(t, cli.ExitOK, code, "troupe %s: %s", strings.Join(args, " "), stderr.String())
}

// scenarioRun is a built-in scenario played by troupe itself, its samples
// and its episode records written side by side.
type scenarioRun struct {
	Name, Samples, Records string
}

// builtinRuns are the runs the tests view: every built-in scenario, with
// several allocators where the scenario supports them.
var builtinRuns = []struct {
	name string
	args []string
}{
	{"elfarol", []string{"-n", "12", "-g", "4", "-p", "agents=6", "-a", "team,difference,equal-split", "--reward-format", "dict"}},
	{"tictactoe", []string{"-n", "4", "-P", "x=minimax", "-a", "individual,team", "--reward-format", "dict"}},
	{"signal", []string{"-n", "4", "-a", "team,leave-one-out", "--reward-format", "dict"}},
	{"negotiation", []string{"-n", "3"}},
	{"committee", []string{"-n", "3", "-a", "team,shapley", "--reward-format", "dict"}},
	{"debate", []string{"-n", "3", "--layout", "nested"}},
}

var (
	fixturesOnce sync.Once
	fixturesDir  string
	fixturesErr  error
)

// fixtures plays every built-in run once per test binary.
func fixtures(t testing.TB) (string, []scenarioRun) {
	t.Helper()
	fixturesOnce.Do(func() {
		fixturesDir, fixturesErr = os.MkdirTemp("", "troupe-view-")
		if fixturesErr != nil {
			return
		}
		for _, r := range builtinRuns {
			args := append([]string{"run", r.name, "-q", "-c", "2",
				"-o", filepath.Join(fixturesDir, r.name+".jsonl"),
				"--episodes-out", filepath.Join(fixturesDir, r.name+".episodes.jsonl")}, r.args...)
			troupe(t, args...)
		}
	})
	require.NoError(t, fixturesErr)
	var out []scenarioRun
	for _, r := range builtinRuns {
		out = append(out, scenarioRun{r.name, filepath.Join(fixturesDir, r.name+".jsonl"), filepath.Join(fixturesDir, r.name+".episodes.jsonl")})
	}
	return fixturesDir, out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixturesDir != "" {
		os.RemoveAll(fixturesDir)
	}
	os.Exit(code)
}

// llmRun plays negotiation with an LLM negotiator against a fake
// OpenAI-compatible server that refuses every other answer, so the
// records hold chat prompts, token ids, log-probs, token counts and
// re-asks.
func llmRun(t testing.TB, dir string) string {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Brain: func(*llmtest.Request) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%2 == 1 {
			return llmtest.Reply{Text: `{"type":"propose"}`}
		}
		return llmtest.Reply{Text: `{"type":"walk"}`}
	}})
	path := filepath.Join(dir, "negotiation-llm.episodes.jsonl")
	troupe(t, "run", "negotiation", "-n", "2", "-c", "1", "-q", "--policy", "alice=llm", "--llm-base-url", srv.URL(),
		"-o", filepath.Join(dir, "negotiation-llm.jsonl"), "--episodes-out", path)
	return path
}

// readRecords reads an episode file with trajectories' strict reader: the
// truth the pages are checked against.
func readRecords(t testing.TB, path string) ([]*episode.Record, []*trajectories.Credit) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := trajectories.NewEpisodeReader(f)
	var recs []*episode.Record
	var credits []*trajectories.Credit
	for {
		rec, c, err := r.Next()
		if errors.Is(err, io.EOF) {
			return recs, credits
		}
		require.NoError(t, err)
		recs = append(recs, rec)
		credits = append(credits, c)
	}
}
