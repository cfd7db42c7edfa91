package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// servingVerifiers runs `troupe serve --verifiers-addr tcp://127.0.0.1:0
// args...` and returns the HTTP service's base URL and the verifiers
// endpoint it printed.
func servingVerifiers(t *testing.T, args ...string) (httpBase, zmqAddr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	app := New(io.Discard, pw)
	app.LookupEnv = noEnv
	code := make(chan int, 1)
	go func() {
		code <- app.Main(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--verifiers-addr", "tcp://127.0.0.1:0"}, args...))
		_ = pw.Close()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for httpBase == "" || zmqAddr == "" {
		line, ok := <-lines
		require.True(t, ok, "troupe serve did not start")
		if a, ok := strings.CutPrefix(line, "troupe: serving on "); ok {
			httpBase = a
		}
		if a, ok := strings.CutPrefix(line, "troupe: serving verifiers' env-server protocol on "); ok {
			zmqAddr = a
		}
	}
	go func() {
		for range lines { // drain the log
		}
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, ExitOK, <-code, "troupe serve drains and exits 0")
	})
	return httpBase, zmqAddr
}

// verifiersClient runs verifiers' own EnvClient from PyPI
// (rollout/verifiers/testdata/verifiers_client.py) with spec.
func verifiersClient(t *testing.T, spec map[string]any) map[string]any {
	return pyenv.RunJSON(t, pyenv.E2E, filepath.Join("..", "rollout", "verifiers", "testdata", "verifiers_client.py"), spec, 5*time.Minute)
}

// troupeSamples asks the HTTP service of the same `troupe serve` for the
// episode a verifiers run of task plays: the same scenario, seeds,
// policies, model and sampling.
func troupeSamples(t *testing.T, base string, body string) []protocol.Sample {
	t.Helper()
	resp, err := http.Post(base+rollout.PathRollouts, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var res rollout.Response
	require.NoError(t, json.Unmarshal(b, &res))
	require.Len(t, res.Rollouts, 1)
	return res.Rollouts[0].Samples
}

// checkTracesAreSamples checks a verifiers episode against troupe's
// samples of the same episode: x's trace is trainable, and its branches
// are exactly the samples' token ids (a sample extended by the next turn
// is a prefix of a branch; every branch is a sample's ids whole), its
// sampled mask covering every response token; o, frozen, is untrainable.
func checkTracesAreSamples(t *testing.T, ep map[string]any, samples []protocol.Sample) {
	t.Helper()
	require.NotContains(t, ep, "error")
	traces := ep["traces"].([]any)
	require.Len(t, traces, 2)
	x, o := traces[0].(map[string]any), traces[1].(map[string]any)
	assert.Equal(t, "x", x["agent"])
	assert.Equal(t, true, x["trainable"])
	assert.Equal(t, false, o["trainable"], "o is frozen")
	stamp := x["info"].(map[string]any)["troupe"].(map[string]any)["episode"]
	assert.Equal(t, ep["id"], stamp)
	assert.Equal(t, ep["id"], o["info"].(map[string]any)["troupe"].(map[string]any)["episode"], "both traces carry the episode stamp")

	var branches [][]int
	sampled := 0
	for _, b := range x["branches"].([]any) {
		bm := b.(map[string]any)
		var ids []int
		for _, v := range bm["token_ids"].([]any) {
			ids = append(ids, int(v.(float64)))
		}
		branches = append(branches, ids)
		for _, m := range bm["sampled_mask"].([]any) {
			if m.(bool) {
				sampled++
			}
		}
	}
	require.NotEmpty(t, samples)
	responses := 0
	for _, s := range samples {
		require.Equal(t, "x", s.Metadata.Role, "o is frozen: no samples")
		require.NotEmpty(t, s.Tokens, "the server's ids")
		responses += s.ResponseLength
		found := slices.ContainsFunc(branches, func(b []int) bool { return len(b) >= len(s.Tokens) && slices.Equal(b[:len(s.Tokens)], s.Tokens) })
		assert.True(t, found, "turn %d's ids are on a branch", s.Metadata.Turn)
	}
	for i, b := range branches {
		assert.True(t, slices.ContainsFunc(samples, func(s protocol.Sample) bool { return slices.Equal(s.Tokens, b) }), "branch %d is a sample's ids", i)
	}
	assert.Equal(t, responses, sampled, "every response token, and only those, is sampled")
	assert.Equal(t, float64(len(samples)), x["num_turns"])
	t.Logf("x: %d turns, %d response tokens, %d branches", len(samples), responses, len(branches))
}

// verifiersRun is the verifiers run of the tests and the rollout request
// of the same episode.
func verifiersRun(zmqAddr, baseURL string, sampling map[string]any) (map[string]any, string) {
	task := map[string]any{"scenario": "tictactoe", "seed": 17, "policy_seed": 23, "invalid": "forfeit",
		"roles": map[string]any{"o": map[string]any{"frozen": true}}}
	spec := map[string]any{"address": zmqAddr, "base_url": baseURL, "model": "learner", "sampling": sampling,
		"runs": []any{task, map[string]any{"scenario": "tictactoe", "seed": 1, "policies": map[string]any{"x": "minimax"}}}}
	sb, _ := json.Marshal(sampling)
	req := `{"scenario":"tictactoe","seed":17,"policy_seed":23,"invalid":"forfeit","policy":"llm","n":1,` +
		`"roles":{"x":{"model":"learner"},"o":{"model":"learner","frozen":true}},"sampling":` + string(sb) + `}`
	return spec, req
}

// TestServeVerifiersFakeLLM: verifiers' own client runs troupe episodes
// through `troupe serve --verifiers-addr`, the LLM seats on troupe's fake
// model server; the traces are the shape verifiers' trainer reads and
// their ids are troupe's samples'.
func TestServeVerifiersFakeLLM(t *testing.T) {
	fake := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp})
	base, zaddr := servingVerifiers(t, "--llm-base-url", fake.URL(), "--llm-kind", "llamacpp")
	spec, req := verifiersRun(zaddr, fake.URL()+"/", map[string]any{"temperature": 0.0, "max_tokens": 64})
	out := verifiersClient(t, spec)
	runs := out["runs"].([]any)
	require.Len(t, runs, 2)
	checkTracesAreSamples(t, runs[0].(map[string]any), troupeSamples(t, base, req))
	scripted := runs[1].(map[string]any)
	require.NotContains(t, scripted, "error")
	tr := scripted["traces"].([]any)
	assert.Equal(t, false, tr[0].(map[string]any)["trainable"], "a scripted seat is no model's: untrainable")
	assert.Equal(t, true, tr[1].(map[string]any)["trainable"], "o plays the model")

	// A base URL the service does not call is refused, naming the ones it does.
	spec["base_url"] = "http://127.0.0.1:1/v1"
	spec["runs"] = spec["runs"].([]any)[:1]
	out = verifiersClient(t, spec)
	assert.Contains(t, out["runs"].([]any)[0].(map[string]any)["error"], "is not an endpoint this service calls (it calls "+fake.URL())
}

// TestServeVerifiersWithAToken: with a bearer token, verifiers' runs
// still play: they reach the service in process, which asks every
// request for the token (each run answered 401 before).
func TestServeVerifiersWithAToken(t *testing.T) {
	fake := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp})
	_, zaddr := servingVerifiers(t, "--llm-base-url", fake.URL(), "--llm-kind", "llamacpp", "--token", "a-token-of-enough-bytes")
	spec, _ := verifiersRun(zaddr, fake.URL()+"/", map[string]any{"temperature": 0.0, "max_tokens": 64})
	out := verifiersClient(t, spec)
	runs := out["runs"].([]any)
	require.Len(t, runs, 2)
	for i, r := range runs {
		run := r.(map[string]any)
		require.NotContains(t, run, "error", "run %d", i)
		assert.Len(t, run["traces"], 2, "run %d", i)
	}
}

// TestServeVerifiersAgainstRealLlamaServer is the same run with the LLM
// seats on a real llama.cpp server: the ids in verifiers' traces are the
// server's, and equal troupe's samples of the same episode. It skips like
// TestRunAgainstRealLlamaServer (fails under TROUPE_REQUIRE_LLAMA=1).
func TestServeVerifiersAgainstRealLlamaServer(t *testing.T) {
	llama := sharedLlama.Get(t)
	base, zaddr := servingVerifiers(t, "--llm-base-url", llama.URL+"/v1", "--llm-kind", "llamacpp", "--llm-timeout", "60s")
	spec, req := verifiersRun(zaddr, llama.URL+"/v1", map[string]any{"temperature": 0.0, "max_tokens": 24})
	spec["runs"] = spec["runs"].([]any)[:1]
	out := verifiersClient(t, spec)
	checkTracesAreSamples(t, out["runs"].([]any)[0].(map[string]any), troupeSamples(t, base, req))
}

func TestServeVerifiersBadAddress(t *testing.T) {
	r := invokeWithEnv(t, noEnv, "serve", "--addr", "127.0.0.1:0", "--verifiers-addr", "localhost:5000")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, `--verifiers-addr: bad verifiers server configuration: address "localhost:5000": want tcp://HOST:PORT or ipc://PATH`)
}
