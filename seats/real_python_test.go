package seats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// TestPythonAgentsSDKPlaysASeat: an agent written with the OpenAI Agents
// SDK for Python, from PyPI (pyenv.Agents), plays alice in a negotiation
// against troupe's fair policy, through alice's seat: its model calls go
// over the Responses API, streamed (Runner.run_streamed), through the seat
// to a real llama-server, its moves through the seat's act tool. The seat
// asks for its role's own model and temperature (Options.LLM). Every one
// of alice's samples must carry the server's tokens: its prompt ids are
// the server's /apply-template then /tokenize of the chat request the
// seat forwarded, its response ids the answer's, detokenising to the
// recorded response.
func TestPythonAgentsSDKPlaysASeat(t *testing.T) {
	if testing.Short() {
		t.Skip("a real llama-server and Python: not in -short")
	}
	py := pyenv.Python(t, pyenv.Agents)
	srv := llamatest.New(t, llamatest.Options{ToolTemplate: true})
	rec := &recorder{}
	proxy := rec.proxy(t, srv.URL)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model, cfg.Tokenize = proxy.URL+"/v1", llm.KindLlamaCpp, llamatest.ModelAlias, true
	// llama-server answers a tool call it cannot parse (a random model cut
	// off at max_tokens) with a 500: relay it at once, and let the harness
	// ask again.
	cfg.Timeout, cfg.Retries = time.Minute, 0
	client, err := llm.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	role := client.Config()
	role.Model, role.Temperature = "alice-model", new(0.9)

	// Seed 11: the model's first moves are refused, so that the harness
	// asks again after its conversation so far (function_call and
	// function_call_output items); the test does not depend on it. The
	// second run plays through troupe env-serve's server (envserver, over
	// HTTP, behind its token; the server's output stage writes the
	// samples).
	for _, served := range []bool{false, true} {
		name := "seat"
		if served {
			name = "env-serve"
		}
		t.Run(name, func(t *testing.T) {
			rec.mu.Lock()
			rec.chat = nil
			rec.mu.Unlock()
			playPython(t, py, srv, client, &role, rec, served)
		})
	}
}

// playPython plays a negotiation (run seed 11) with the Python harness
// in alice's seat, asking for role's model, straight or through an
// environment server, and checks alice's samples against the server.
func playPython(t *testing.T, py string, srv *llamatest.Server, client *llm.Client, role *llm.Config, rec *recorder, served bool) {
	const seed = 11
	setup, res := negotiation(t, seed)
	var (
		h    *harness
		ss   *servedSeat
		url  string
		envs []string
	)
	if served {
		ss = serveSeatLLM(t, client, role, seed)
		url, envs = ss.url, []string{"SEAT_TOKEN=" + servedToken}
	} else {
		h = seatFor(t, client, table.Config{Setup: setup, Open: []int{0}}, seats.Options{LLM: role})
		url = h.url
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "harness_agents.py"))
	cmd.Env = append(append(cmd.Environ(), "SEAT_URL="+url, "OPENAI_AGENTS_DISABLE_TRACING=1"), envs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "harness: %s\n%s", stdout.String(), stderr.String())
	var sum struct {
		Runs, ModelMoves, Refused, ScriptedMoves, MaxTurns, Turns, ServerErrors, Incomplete, Replayed int
		Events                                                                                        map[string]int
		End                                                                                           string
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
	t.Logf("harness: %s", strings.TrimSpace(stdout.String()))
	require.Contains(t, sum.End, "The episode is over", stderr.String())
	require.Positive(t, sum.Runs)
	require.Positive(t, sum.Events["response.created"], "the SDK read a stream")
	require.Equal(t, sum.Events["response.created"], sum.Events["response.completed"]+sum.Events["response.incomplete"],
		"every stream the SDK read ended in a terminal event")

	var all []protocol.Sample
	if served {
		all = ss.samples(t)
	} else {
		<-h.tb.Done()
		record := h.tb.Record()
		require.Equal(t, protocol.StatusCompleted, record.Status, record.Err)
		all = samples(t, res, record)
	}
	var alice []protocol.Sample
	for _, s := range all {
		if s.Metadata.Agent == "alice" {
			alice = append(alice, s)
		}
	}
	require.Len(t, alice, sum.ModelMoves+sum.ScriptedMoves)

	rec.mu.Lock()
	var chat []exchange // the answered ones
	replayed := 0
	for _, ex := range rec.chat {
		var body struct {
			Model       string   `json:"model"`
			Temperature *float64 `json:"temperature"`
			Messages    []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(ex.request, &body))
		require.Equal(t, "alice-model", body.Model, "the seat asks for its role's model")
		require.Equal(t, 0.9, *body.Temperature)
		for _, m := range body.Messages {
			if m.Role == "tool" {
				replayed++
				break
			}
		}
		if ex.status == 200 {
			chat = append(chat, ex)
		}
	}
	rec.mu.Unlock()
	if sum.Replayed > 0 {
		require.Positive(t, replayed, "a function_call_output went to the server as a tool message")
	}
	st := seats.Stats{Calls: len(chat)} // the server's seat is its own: its calls are the answered ones
	if h != nil {
		st = h.seat.Stats()
		require.Equal(t, len(chat), st.Calls, "every model call went through the seat")
		require.Equal(t, st.Calls, st.Trainable, "llama-server returns token ids for every call")
		require.Zero(t, st.Dropped, "the SDK reads every stream to its end")
	}
	require.Positive(t, st.Calls)

	calls := 0
	for _, s := range alice {
		n := count(s.Metadata.Extra[seats.NoteCalls])
		calls += n
		require.False(t, s.Metadata.TextOnly, s.Metadata.Extra["llm_text_only"])
		checkAgainstServer(t, srv.URL, chat, &s)
		t.Logf("alice turn %d: %d calls, %d merged, %d prompt + %d response tokens, move %s, response %q",
			s.Metadata.Turn, n, count(s.Metadata.Extra[seats.NoteMerged]), len(s.Tokens)-s.ResponseLength, s.ResponseLength, s.Metadata.Action, s.Response)
	}
	require.Equal(t, st.Calls-st.Orphaned, calls, "each call belongs to the turn its next move ended")
}

// TestPythonSDKReadsEveryPath: the OpenAI SDK and the Agents SDK for
// Python, from PyPI, read a seat's text answer (long, not ASCII, so that
// a stream cuts it in pieces) the same through the Responses API,
// streamed and not, and chat completions, streamed and not. The model
// server is the fake (llmtest).
func TestPythonSDKReadsEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("Python: not in -short")
	}
	py := pyenv.Python(t, pyenv.Agents)
	text := strings.Repeat("Héllo, wörld: a long answer. ", 12)
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp, Brain: llmtest.Fixed(text)})
	setup, _ := negotiation(t, 3)
	h := seatOn(t, srv, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "sdk_paths.py"))
	cmd.Env = append(cmd.Environ(), "SEAT_URL="+h.url, "OPENAI_AGENTS_DISABLE_TRACING=1")
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, stderr)
	var got map[string]struct {
		Final, Deltas string
		Pieces, Usage int
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	require.Len(t, got, 4)
	var usage int
	for path, g := range got {
		require.Equal(t, text, g.Final, path)
		require.Positive(t, g.Usage, path)
		if usage == 0 {
			usage = g.Usage
		}
		require.Equal(t, usage, g.Usage, "%s: the server's count", path)
	}
	require.Equal(t, text, got["responses_stream"].Deltas)
	require.Greater(t, got["responses_stream"].Pieces, 1, "the text came in pieces")
	require.Equal(t, seats.Stats{Calls: 4, Trainable: 4}, h.seat.Stats())
}
