package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestRunOnEmbeddedNATSMatchesALocalRun plays a run through an embedded
// NATS JetStream server and its in-process workers: the output is the same
// bytes as a local run, and running it again re-attaches to the finished
// run instead of playing it twice.
func TestRunOnEmbeddedNATSMatchesALocalRun(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	args := []string{"run", "elfarol", "-n", "40", "-g", "2", "-p", "agents=6", "-a", "team,difference", "--reward-format", "dict"}
	local := troupe(t, append(args, "-o", filepath.Join(dir, "local.jsonl"), "--episodes-out", filepath.Join(dir, "local.episodes.jsonl"))...)
	require.Equal(t, ExitOK, local.code, local.stderr)
	natsArgs := append(args, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"))
	remote := troupe(t, append(natsArgs, "-o", filepath.Join(dir, "nats.jsonl"), "--episodes-out", filepath.Join(dir, "nats.episodes.jsonl"))...)
	require.Equal(t, ExitOK, remote.code, remote.stderr)
	assert.Contains(t, remote.stderr, "troupe: run ")
	assert.Equal(t, string(readFile(t, filepath.Join(dir, "local.jsonl"))), string(readFile(t, filepath.Join(dir, "nats.jsonl"))))
	episodes := string(readFile(t, filepath.Join(dir, "local.episodes.jsonl")))
	assert.Equal(t, 40, strings.Count(episodes, "\n"))
	assert.Equal(t, episodes, string(readFile(t, filepath.Join(dir, "nats.episodes.jsonl"))), "the episode records are the same bytes too")
}

func TestWorkerNeedsAServer(t *testing.T) {
	r := troupe(t, "worker")
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nats")
}

// TestLLMRunOnEmbeddedNATS plays LLM episodes through the embedded
// server's worker: it plays the run's own llm policy, and the samples
// carry the server's token ids as in a local run.
func TestLLMRunOnEmbeddedNATS(t *testing.T) {
	skipShort(t)
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "6", "--policy", "llm", "--llm-base-url", srv.URL()}
	r, local := llmRun(t, append(args, "--episodes-out", filepath.Join(dir, "local.episodes.jsonl"))...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r, remote := llmRun(t, append(args, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"), "--episodes-out", filepath.Join(dir, "nats.episodes.jsonl"))...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, local, remote)
	// The records keep the turns' chat prompts, token ids and notes across
	// the wire.
	episodes := string(readFile(t, filepath.Join(dir, "local.episodes.jsonl")))
	assert.Contains(t, episodes, `"tokens":{"prompt":[`)
	assert.Contains(t, episodes, `"llm_attempts"`)
	assert.Equal(t, episodes, string(readFile(t, filepath.Join(dir, "nats.episodes.jsonl"))))
	for _, ro := range remote {
		for _, s := range ro {
			assert.False(t, s.Metadata.TextOnly)
		}
	}
}

// TestServeOnNATSAnswersAsLocally hands a rollout service's episodes to a
// NATS worker (here the embedded server's): the answer is the same bytes
// as when the service plays them itself, counterfactual credit and tree
// sampling included.
func TestServeOnNATSAnswersAsLocally(t *testing.T) {
	skipShort(t)
	nf := natsrun.DefaultFlags()
	nf.Conn.URL, nf.Dir = natsrun.EmbeddedURL, filepath.Join(t.TempDir(), "js")
	d, err := nf.OpenRun(t.Context(), scenarios.Builtin(), nil, 4, nil)
	require.NoError(t, err)
	defer d.Close()
	remote, err := newNATSRemote(d.Client, "")
	require.NoError(t, err)

	answer := func(r server.Remote, body string) string {
		cfg := server.Config{Scenarios: scenarios.Builtin(), Allocators: credit.Builtin(), Remote: r}
		if r != nil {
			cfg.ExtraMetrics = func(ctx context.Context, w io.Writer) {
				st, err := d.Client.Stats(ctx)
				require.NoError(t, err)
				natsrun.WriteMetrics(w, st.Metrics())
			}
		}
		srv, err := server.New(cfg)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/rollouts", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		srv.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		if r != nil {
			m := httptest.NewRecorder()
			srv.ServeHTTP(m, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			assert.Contains(t, m.Body.String(), "troupe_nats_workers 1\n", "the service's metrics show the deployment's")
		}
		return rec.Body.String()
	}
	body := `{"scenario":"elfarol","params":{"agents":5},"n":3,"rollout_id":40,"group_index":7,"index":100,"allocators":["team","difference"],"reward_format":"dict"}`
	local := answer(nil, body)
	assert.Contains(t, local, `"rollout_id":42`)
	assert.Equal(t, local, answer(remote, body))

	body = `{"scenario":"tictactoe","policy":"random","n":2,"rollout_id":50,"tree":{"k":3,"alpha":0.5},"allocators":["at-grpo"]}`
	local = answer(nil, body)
	assert.Contains(t, local, `"tree_candidate":2`)
	assert.Equal(t, local, answer(remote, body))
}

// skipShort skips a slow test (a NATS server and its workers) under
// go test -short; make test runs it.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("an embedded NATS server: skipped under -short")
	}
}

// TestRoleLLMRunOnEmbeddedNATS: the embedded server's worker plays each
// role on its own endpoint, as a local run does.
func TestRoleLLMRunOnEmbeddedNATS(t *testing.T) {
	skipShort(t)
	a := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	b := llmtest.Start(t, llmtest.Options{Kind: llmtest.SGLang})
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "4", "--llm-base-url", a.URL(), "--llm-endpoint", "bsrv=" + b.URL() + ",kind=sglang",
		"--role-llm", "x=model=mx,top_k=3", "--role-llm", "o=endpoint=bsrv,model=mo,frozen"}
	r, local := llmRun(t, args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r, remote := llmRun(t, append(args, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"))...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, local, remote)
	for _, ro := range remote {
		for _, s := range ro {
			assert.Equal(t, "mx", s.Metadata.Extra["llm_model"])
		}
	}
}

// TestNATSRunIDHasEveryLLMSetting: a distributed run's default id is its
// spec's hash, which every LLM setting changes: the same command with
// another setting is another run, never a re-attach to the first.
func TestNATSRunIDHasEveryLLMSetting(t *testing.T) {
	skipShort(t)
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "2", "-P", "x=llm", "--llm-base-url", srv.URL(), "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js")}
	ids := map[string]string{}
	for i, extra := range [][]string{nil, {"--llm-max-context", "4096"}, {"--llm-no-memory"}, {"--merge-turns"}} {
		r := invokeWithEnv(t, noEnv, append(append(args, extra...), "-o", filepath.Join(dir, fmt.Sprintf("%d.jsonl", i)))...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		id := regexp.MustCompile(`troupe: run (\S+)`).FindStringSubmatch(r.stderr)
		require.NotNil(t, id, r.stderr)
		assert.NotContains(t, ids, id[1], "%v has the run id of %s", extra, ids[id[1]])
		ids[id[1]] = fmt.Sprint(extra)
		assert.NotContains(t, r.stderr, "re-attached")
	}
}
