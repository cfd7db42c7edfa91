package seats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
	"github.com/troupe-rl/troupe/trajectories"
)

// Environment of the harness test: where tools/agentsjs/install.sh put the
// Agents SDK, whether CI requires it, and a checkout of THUDM/slime whose
// Sample loads the samples (optional: the test cannot fetch it).
const (
	envAgentsJS        = "TROUPE_AGENTSJS_DIR"
	envRequireAgentsJS = "TROUPE_REQUIRE_AGENTSJS"
	envSlime           = "TROUPE_SLIME_DIR"
)

// agentsJS returns the directory whose node_modules holds the Agents SDK,
// skipping the test (failing it under TROUPE_REQUIRE_AGENTSJS=1) when node
// or the cache is missing.
func agentsJS(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envAgentsJS)
	if dir == "" {
		cache := os.Getenv("TROUPE_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "troupe")
		}
		dir = filepath.Join(cache, "agentsjs")
	}
	missing := func(why string) {
		if os.Getenv(envRequireAgentsJS) == "1" {
			t.Fatalf("%s, and %s=1 requires the Agents SDK test: run make agentsjs", why, envRequireAgentsJS)
		}
		t.Skipf("%s: run make agentsjs (tools/agentsjs/install.sh) to test a real OpenAI Agents SDK harness", why)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@openai", "agents", "package.json")); err != nil {
		missing("the Agents SDK is not installed in " + dir)
	}
	return dir
}

// exchange is one chat completion the seat forwarded to the real server.
type exchange struct {
	request, answer []byte
	status          int
}

// recorder is a reverse proxy in front of llama-server that keeps every
// chat completion the seat forwards, to check the samples against.
type recorder struct {
	mu   sync.Mutex
	chat []exchange
}

func (r *recorder) proxy(t *testing.T, target string) *httptest.Server {
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/chat/completions" {
			rp.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, req)
		r.mu.Lock()
		r.chat = append(r.chat, exchange{body, rec.Body.Bytes(), rec.Code})
		r.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(hs.Close)
	return hs
}

// llamaPost posts body to one of llama-server's own endpoints.
func llamaPost(t *testing.T, root, path string, body any) []byte {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	if raw, ok := body.(json.RawMessage); ok {
		b = raw
	}
	resp, err := http.Post(root+path, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, string(out))
	return out
}

// TestAgentsSDKHarnessPlaysASeat: an agent written with the official
// OpenAI Agents SDK for JavaScript plays alice in a negotiation against
// troupe's fair policy in bob's seat, through alice's seat: its model
// calls go through the seat's endpoint to a real llama-server, its
// observations and moves through the seat's tools (over MCP, then as
// function tools). Alice's samples must carry the server's tokens: their
// prompt ids are the server's /apply-template then /tokenize of the
// forwarded request, their response ids the answer's, detokenising to the
// recorded response; and they load with slime's own Sample when a slime
// checkout is given.
func TestAgentsSDKHarnessPlaysASeat(t *testing.T) {
	if testing.Short() {
		t.Skip("a real llama-server and node: not in -short")
	}
	js := agentsJS(t)
	srv := llamatest.New(t, llamatest.Options{ToolTemplate: true})
	// The run seeds: under 12 the model's first call is a legal move (a
	// walk); under 11 its first three are refused and the harness moves
	// itself, so that one turn holds several real calls. (llama.cpp samples
	// the same under the same seed, threads and binary; the test does not
	// depend on which happens.)
	// The third plays through troupe env-serve's server (envserver,
	// over HTTP): a reset seats the harness and answers the seat's URLs,
	// behind the server's token, and the server's output stage writes
	// the samples.
	for _, tc := range []struct {
		mode   string
		seed   uint64
		served bool
	}{{"mcp", 12, false}, {"function", 11, false}, {"mcp", 12, true}} {
		mode := tc.mode
		name := mode
		if tc.served {
			name = "env-serve"
		}
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			proxy := rec.proxy(t, srv.URL)
			cfg := llm.DefaultConfig()
			cfg.BaseURL, cfg.Kind, cfg.Model, cfg.Tokenize = proxy.URL+"/v1", llm.KindLlamaCpp, llamatest.ModelAlias, true
			// llama-server answers a tool call it cannot parse (a random
			// model cut off at max_tokens) with a 500, the same for the same
			// seed: relay it at once, and let the harness ask again.
			cfg.Timeout, cfg.Retries = time.Minute, 0
			client, err := llm.NewClient(cfg)
			require.NoError(t, err)
			t.Cleanup(client.Close)

			setup, res := negotiation(t, tc.seed)
			var (
				tb      *table.Table
				seat    *seats.Seat
				seatURL string
				served  *servedSeat
			)
			if tc.served {
				served = serveSeat(t, client, tc.seed)
				seatURL = served.url
			} else {
				h := seatFor(t, client, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
				tb, seat, seatURL = h.tb, h.seat, h.url
			}

			// The harness runs from a directory whose node_modules is the
			// cache's, where node resolves its imports.
			dir := t.TempDir()
			script, err := os.ReadFile(filepath.Join("testdata", "harness.mjs"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "harness.mjs"), script, 0o644))
			require.NoError(t, os.Symlink(filepath.Join(js, "node_modules"), filepath.Join(dir, "node_modules")))
			// Grammar-constrained sampling over the tiny model's 151,936
			// tokens runs at a few tokens a second on a loaded 2-core
			// machine: a harness turn can take a minute.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "harness.mjs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SEAT_URL="+seatURL, "SEAT_TOOLS="+mode)
			if served != nil {
				cmd.Env = append(cmd.Env, "SEAT_TOKEN="+servedToken)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			rec.mu.Lock()
			if len(rec.chat) > 0 {
				var first struct {
					Tools json.RawMessage `json:"tools"`
				}
				_ = json.Unmarshal(rec.chat[0].request, &first)
				t.Logf("the tools the harness sent: %s", first.Tools)
			}
			rec.mu.Unlock()
			require.NoError(t, err, "harness: %s\n%s", stdout.String(), stderr.String())
			var sum struct {
				Runs, ModelMoves, Refused, ScriptedMoves, MaxTurns, Turns, Ms int
				End                                                           string
			}
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
			t.Logf("harness (%s): %s", mode, strings.TrimSpace(stdout.String()))
			require.Contains(t, sum.End, "The episode is over", stderr.String())
			require.Positive(t, sum.Runs)

			var all []protocol.Sample
			if served != nil {
				all = served.samples(t)
			} else {
				<-tb.Done()
				record := tb.Record()
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
			for _, ex := range rec.chat {
				if ex.status == 200 {
					chat = append(chat, ex)
				}
			}
			rec.mu.Unlock()
			var st seats.Stats
			if seat != nil {
				st = seat.Stats()
				require.Equal(t, len(chat), st.Calls, "every model call went through the seat")
				require.Equal(t, st.Calls, st.Trainable, "llama-server returns token ids for every call")
				require.Positive(t, st.Calls)
			} else {
				// The server's seat is its own: its calls are the answered
				// ones, none orphaned (the harness stops at the end).
				st = seats.Stats{Calls: len(chat)}
			}

			calls := 0
			for _, s := range alice {
				n := count(s.Metadata.Extra[seats.NoteCalls])
				calls += n
				require.Positive(t, n, "the harness called the model before every move")
				require.Contains(t, []string{"act/" + mode, "act/function"}, s.Metadata.Extra[seats.NoteTool])
				require.False(t, s.Metadata.TextOnly, s.Metadata.Extra["llm_text_only"])
				checkAgainstServer(t, srv.URL, chat, &s)
				t.Logf("alice turn %d: %d calls, %d merged, %d prompt + %d response tokens, move %s, response %q",
					s.Metadata.Turn, n, count(s.Metadata.Extra[seats.NoteMerged]), len(s.Tokens)-s.ResponseLength, s.ResponseLength, s.Metadata.Action, s.Response)
			}
			require.Equal(t, st.Calls-st.Orphaned, calls, "each call belongs to the turn its next move ended")
			loadWithSlime(t, all)
		})
	}
}

// checkAgainstServer checks a seat's sample against the real server: its
// last call is one the server answered; its prompt ids are the server's
// /apply-template then /tokenize of the first merged call's request; its
// response ids end with the last call's completion ids, with their
// log-probs; and the server's /detokenize of them is its response.
func checkAgainstServer(t *testing.T, root string, chat []exchange, s *protocol.Sample) {
	t.Helper()
	type answer struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Logprobs     struct {
				Content []struct {
					ID      int     `json:"id"`
					Token   string  `json:"token"`
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	prompt := s.Tokens[:len(s.Tokens)-s.ResponseLength]
	resp := s.Tokens[len(prompt):]
	merged := count(s.Metadata.Extra[seats.NoteMerged])
	var last, first = -1, -1
	for i, ex := range chat {
		var a answer
		require.NoError(t, json.Unmarshal(ex.answer, &a))
		lps := a.Choices[0].Logprobs.Content
		ids := make([]int, len(lps))
		for j, e := range lps {
			ids[j] = e.ID
		}
		if len(ids) > 0 && len(ids) <= len(resp) && slices.Equal(resp[len(resp)-len(ids):], ids) {
			last = i
			for j, e := range lps {
				require.Equal(t, e.Logprob, s.RolloutLogProbs[len(resp)-len(ids)+j])
			}
		}
	}
	require.GreaterOrEqual(t, last, 0, "the sample's response ids end with a call the server answered")
	first = last - merged + 1
	if merged > 1 {
		require.GreaterOrEqual(t, first, 0)
	}
	// The prompt ids: the server's own rendering and tokenization of the
	// request the seat forwarded.
	var tmpl struct {
		Prompt string `json:"prompt"`
	}
	require.NoError(t, json.Unmarshal(llamaPost(t, root, "/apply-template", json.RawMessage(chat[first].request)), &tmpl))
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	require.NoError(t, json.Unmarshal(llamaPost(t, root, "/tokenize", map[string]any{"content": tmpl.Prompt, "add_special": true, "parse_special": true}), &tok))
	require.Equal(t, tok.Tokens, prompt, "prompt ids = /apply-template + /tokenize")
	// The response text: the server's text of the response ids, less a
	// trailing end-of-generation token, which it writes as "".
	ids := resp
	if len(ids) > 0 && slices.Contains(llamatest.EndOfGeneration, ids[len(ids)-1]) {
		ids = ids[:len(ids)-1]
	}
	var detok struct {
		Content string `json:"content"`
	}
	require.NoError(t, json.Unmarshal(llamaPost(t, root, "/detokenize", map[string]any{"tokens": ids}), &detok))
	require.Equal(t, detok.Content, s.Response, "the response ids detokenise to the recorded response")
}

// loadWithSlime loads the samples with slime's own Sample class
// (slime/utils/types.py of the checkout TROUPE_SLIME_DIR names) and checks
// they survive its from_dict and to_dict. slime imports torch at the top of
// the module, for type annotations that from_dict and to_dict never use: the
// loader stubs torch (and slime.utils.misc, which types.py imports a helper
// from) when they are not installed.
func loadWithSlime(t *testing.T, samples []protocol.Sample) {
	t.Helper()
	dir := os.Getenv(envSlime)
	if dir == "" {
		t.Logf("%s is not set: the samples were not loaded with slime's Sample (set it to a checkout of THUDM/slime)", envSlime)
		return
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	var buf bytes.Buffer
	for i := range samples {
		b, err := json.Marshal(&samples[i])
		require.NoError(t, err)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f := filepath.Join(t.TempDir(), "samples.jsonl")
	require.NoError(t, os.WriteFile(f, buf.Bytes(), 0o644))
	out, err := exec.Command(py, filepath.Join("testdata", "load_slime.py"), dir, f).CombinedOutput()
	require.NoError(t, err, string(out))
	t.Logf("slime: %s", strings.TrimSpace(string(out)))
}

// servedToken is the bearer token of the environment server the harness
// plays through.
const servedToken = "harness-test-token"

// servedSeat is alice's seat of a negotiation an environment server
// (envserver, what troupe env-serve serves) seated for a harness.
type servedSeat struct {
	url     string // the seat's root: the reset's openai_base_url less /v1
	episode string
	client  *envclient.Client
	server  *envserver.Server
	out     *syncBuffer
}

// syncBuffer is the server's samples file.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serveSeat starts an environment server whose harness seats play on
// client, and resets the negotiation of negotiation(t, seed) with alice
// the harness's and bob the fair policy's.
func serveSeat(t *testing.T, client *llm.Client, seed uint64) *servedSeat {
	t.Helper()
	return serveSeatLLM(t, client, nil, seed)
}

// serveSeatLLM is serveSeat with the harness seats asking for role's
// model and sampling (envserver.Config.HarnessLLM); nil: the client's.
func serveSeatLLM(t *testing.T, client *llm.Client, role *llm.Config, seed uint64) *servedSeat {
	t.Helper()
	out := &syncBuffer{}
	s, err := envserver.New(envserver.Config{Token: servedToken, Sink: trajectories.NewJSONLWriter(out, trajectories.Flat),
		HarnessModel: func(string) (*llm.Client, error) { return client, nil },
		HarnessLLM:   func(string) *llm.Config { return role }})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	t.Cleanup(s.Shutdown)
	ec := envclient.New(hs.URL, servedToken, hs.Client())
	_, res, err := ec.Reset(t.Context(), envclient.ResetRequest{Scenario: "negotiation", Seed: &seed, Open: []string{"alice"}, Harness: []string{"alice"},
		Policies: map[string]string{"bob": "fair"}, Allocators: []string{"team", "individual"}, RewardFormat: "dict"})
	require.NoError(t, err)
	h := res.Observation.Seats[0].Harness
	require.NotNil(t, h, "the reset answers alice's URLs")
	return &servedSeat{url: strings.TrimSuffix(h.OpenAIBaseURL, "/v1"), episode: res.Observation.EpisodeID, client: ec, server: s, out: out}
}

// samples waits for the server to write the episode, which it does when
// it ends, and returns its samples.
func (ss *servedSeat) samples(t *testing.T) []protocol.Sample {
	t.Helper()
	var rec []byte
	require.Eventually(t, func() bool {
		var err error
		rec, err = ss.client.Record(t.Context(), ss.episode)
		return err == nil
	}, time.Minute, 10*time.Millisecond, "the episode ends once the harness saw it over")
	require.Contains(t, string(rec), `"completed"`)
	// Shutdown returns once every episode over is written.
	ss.server.Shutdown()
	var all []protocol.Sample
	for line := range strings.Lines(ss.out.String()) {
		var s protocol.Sample
		require.NoError(t, json.Unmarshal([]byte(line), &s))
		all = append(all, s)
	}
	require.NoError(t, protocol.ValidateRollout(all))
	return all
}

// count is a metadata count: an int in a record's samples, a float64 in
// samples read back from JSON.
func count(v any) int {
	if f, ok := v.(float64); ok {
		return int(f)
	}
	n, _ := v.(int)
	return n
}
