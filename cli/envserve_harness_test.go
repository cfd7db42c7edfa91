package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
)

// harnessCall is one call of a harness (or of its creator) to the server.
func harnessCall(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestEnvServeHarness seats a harness at x of a tic-tac-toe game through
// `troupe env-serve --llm-base-url`, the llm house policy playing o on the
// same model server (llmtest, llama.cpp's shape): the samples --out gets
// hold x's turns with the token ids of the harness's calls and o's of the
// policy's.
func TestEnvServeHarness(t *testing.T) {
	model := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp})
	dir := t.TempDir()
	out := filepath.Join(dir, "samples.jsonl")
	base, stop := envServing(t, "--token", "tok-0123456789abcdef", "--llm-base-url", model.URL(), "--llm-kind", "llamacpp", "-o", out)
	code, b := harnessCall(t, "POST", base+"/reset", `{"scenario":"tictactoe","seed":7,"open":["x"],"harness":["x"],"policies":{"o":"llm"}}`)
	require.Equal(t, http.StatusOK, code, string(b))
	var res envclient.Result
	require.NoError(t, json.Unmarshal(b, &res))
	require.Empty(t, res.Observation.SessionID)
	h := res.Observation.Seats[0].Harness
	require.NotNil(t, h, string(b))

	calls := 0
	for {
		code, b := harnessCall(t, "POST", h.ToolsURL+"/observe", `{}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var obs seats.ToolResult
		require.NoError(t, json.Unmarshal(b, &obs))
		if obs.Observation.Done {
			break
		}
		require.True(t, obs.Observation.Turn, obs.Content)
		code, b = harnessCall(t, "POST", h.OpenAIBaseURL+"/chat/completions", `{"model":"any","messages":[{"role":"user","content":`+jsonString(obs.Content)+`}]}`)
		require.Equal(t, http.StatusOK, code, string(b))
		calls++
		code, b = harnessCall(t, "POST", h.ToolsURL+"/act", `{"action":"`+obs.Observation.Legal[0]+`"}`)
		require.Equal(t, http.StatusOK, code, string(b))
	}
	require.Zero(t, stop())

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	var x, o int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var s protocol.Sample
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s))
		require.False(t, s.Metadata.TextOnly, "both seats play on the model server: %s", s.Metadata.Agent)
		require.NotEmpty(t, s.Tokens)
		switch s.Metadata.Agent {
		case "x":
			x++
		case "o":
			o++
		}
	}
	require.Equal(t, calls, x, "one sample per harness turn")
	require.Positive(t, o, "the llm house policy's turns")
}

// TestEnvServeHarnessNeedsModel: without --llm-base-url a reset naming a
// harness seat is refused by name.
func TestEnvServeHarnessNeedsModel(t *testing.T) {
	t.Setenv(llm.EnvBaseURL, "")
	base, stop := envServing(t, "--token", "tok-0123456789abcdef")
	defer stop()
	code, b := harnessCall(t, "POST", base+"/reset", `{"scenario":"tictactoe","harness":["x"]}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(b), "--llm-base-url")
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestEnvServeHarnessPerRole: --harness-llm gives x's harness seats an
// endpoint and model of their own; o's harness seats play on the default
// endpoint's flags.
func TestEnvServeHarnessPerRole(t *testing.T) {
	def := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp, Record: true})
	other := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp, Record: true})
	base, stop := envServing(t, "--token", "tok-0123456789abcdef", "--llm-base-url", def.URL(), "--llm-kind", "llamacpp", "--llm-model", "default-model",
		"--llm-endpoint", "other="+other.URL(), "--harness-llm", "x=endpoint=other,model=x-model,temperature=0.25")
	defer stop()
	code, b := harnessCall(t, "POST", base+"/reset", `{"scenario":"tictactoe","seed":7,"harness":["x","o"]}`)
	require.Equal(t, http.StatusOK, code, string(b))
	var res envclient.Result
	require.NoError(t, json.Unmarshal(b, &res))
	for i, want := range []struct {
		srv   *llmtest.Server
		model string
	}{{other, "x-model"}, {def, "default-model"}} {
		h := res.Observation.Seats[i].Harness
		code, b := harnessCall(t, "POST", h.OpenAIBaseURL+"/responses", `{"model":"any","input":"Your move?"}`)
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"model":"`+want.model+`"`)
		reqs := want.srv.Requests()
		require.Len(t, reqs, 1, "the role's endpoint got its call")
		require.Equal(t, want.model, reqs[0].Model)
		if i == 0 {
			require.Equal(t, 0.25, *reqs[0].Temperature)
		}
	}
}

// TestEnvServeHarnessLLMUsage: a --harness-llm that cannot be honoured is
// refused before the server starts, by name.
func TestEnvServeHarnessLLMUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--harness-llm", "x=model=m"}, "--harness-llm: give the default model server too"},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--harness-llm", "nobody=model=m"}, `no scenario served here has a role "nobody"`},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--harness-llm", "x=frozen"}, "frozen"},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--harness-llm", "x=endpoint=nope"}, `endpoint "nope" is not defined here`},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--harness-llm", "x=colour=red"}, `--harness-llm "x=colour=red": role x: unknown key "colour"`},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--harness-llm", "x=model=a", "--harness-llm", "x=model=b"}, "role x was given settings already"},
	} {
		r := troupe(t, append([]string{"env-serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		require.Equal(t, 2, r.code, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
}
