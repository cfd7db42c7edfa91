package seats_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/trajectories"
)

// negotiation is episode 0 of a negotiation run with the fair policy in
// both roles, and the run's output stage (credit: team and individual,
// as a dict).
func negotiation(t testing.TB, seed uint64) (env.Setup, *runspec.Resolved) {
	t.Helper()
	spec := runspec.Spec{Scenario: "negotiation", Seed: seed, Episodes: 1, Allocators: []string{"team", "individual"}, RewardFormat: "dict",
		Policies: map[string]runspec.Policy{"alice": {Name: "fair"}, "bob": {Name: "fair"}}}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	require.NoError(t, err)
	req := res.Config.Request(0)
	return env.Setup{Play: res.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed, Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex}, res
}

// samples passes rec through the run's output stage and returns its
// samples, rewards set.
func samples(t testing.TB, res *runspec.Resolved, rec *episode.Record) []protocol.Sample {
	t.Helper()
	var col trajectories.Collector
	out := res.Output(&col)
	write, err := out.Finish(context.Background(), []*episode.Record{rec})
	require.NoError(t, err)
	_, err = write(0)
	require.NoError(t, err)
	require.NoError(t, out.Flush())
	eps := col.Episodes()
	require.Len(t, eps, 1)
	require.NoError(t, protocol.ValidateRollout(eps[0].Samples))
	return eps[0].Samples
}

// harness is a seat served on 127.0.0.1 and what a harness reaches it
// with.
type harness struct {
	seat *seats.Seat
	tb   *table.Table
	url  string // the seat's root: URL+"/v1" is its OpenAI base URL
}

func serve(t *testing.T, kind llmtest.Kind, cfg table.Config, opts seats.Options) (*harness, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(llmtest.Options{Kind: kind, Record: true})
	lc := llm.DefaultConfig()
	lc.BaseURL, lc.Kind, lc.Model = "http://llmtest.invalid/v1", llm.Kind(kind), "seat-model"
	lc.Temperature = new(float64)
	client, err := llm.NewClient(lc, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	return seatFor(t, client, cfg, opts), srv
}

// seatFor seats alice (seat 0) of cfg's table for a harness whose model
// calls go to client, and serves the seat under /seats/alice on 127.0.0.1.
func seatFor(t *testing.T, client *llm.Client, cfg table.Config, opts seats.Options) *harness {
	t.Helper()
	tb, err := table.New(t.Context(), cfg)
	require.NoError(t, err)
	s, err := seats.New(t.Context(), tb, 0, client, opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	mux := http.NewServeMux()
	mux.Handle("/seats/alice/", http.StripPrefix("/seats/alice", s.Handler()))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &harness{seat: s, tb: tb, url: hs.URL + "/seats/alice"}
}

func post(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// chatBody is a harness's chat request.
const chatBody = `{"model":"gpt-4o","messages":[{"role":"system","content":"You negotiate."},{"role":"user","content":"Your move?"}]}`

// TestSeatTurnsBecomeSamples plays alice from a harness (model calls
// through the seat's endpoint, moves through the function tools) against
// the fair policy in bob's seat, and checks that alice's samples carry
// the server's tokens of her calls, and credit.
func TestSeatTurnsBecomeSamples(t *testing.T) {
	setup, res := negotiation(t, 3)
	h, srv := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})

	// The tools, as OpenAI function tools.
	resp, err := http.Get(h.url + "/tools")
	require.NoError(t, err)
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tools))
	resp.Body.Close()
	require.Len(t, tools, 2)
	require.Equal(t, "observe", tools[0].Function.Name)
	require.Equal(t, "act", tools[1].Function.Name)
	require.Contains(t, string(tools[1].Function.Parameters), `"propose"`, "act's move is the scenario's JSON move")

	moves := []string{`{"type":"propose","take":{"book":0,"hat":0,"ball":0}}`, `{"type":"walk"}`}
	var answers [][]byte
	for turn := 0; ; turn++ {
		code, _, b := post(t, h.url+"/tools/observe", `{}`)
		require.Equal(t, 200, code, string(b))
		var obs seats.ToolResult
		require.NoError(t, json.Unmarshal(b, &obs))
		if obs.Observation.Done {
			require.Contains(t, obs.Content, "The episode is over")
			break
		}
		require.True(t, obs.Observation.Turn)
		require.Less(t, turn, len(moves))
		code, hdr, ans := post(t, h.url+"/v1/chat/completions", chatBody)
		require.Equal(t, 200, code, string(ans))
		require.Equal(t, "trainable", hdr.Get(seats.CaptureHeader))
		answers = append(answers, ans)
		code, _, b = post(t, h.url+"/tools/act", `{"move":`+moves[turn]+`}`)
		require.Equal(t, 200, code)
		var act seats.ToolResult
		require.NoError(t, json.Unmarshal(b, &act))
		require.False(t, act.IsError, act.Content)
	}
	<-h.tb.Done()
	rec := h.tb.Record()
	require.Equal(t, protocol.StatusCompleted, rec.Status)

	var alice []protocol.Sample
	for _, s := range samples(t, res, rec) {
		if s.Metadata.Agent == "alice" {
			alice = append(alice, s)
		} else {
			require.True(t, s.Metadata.TextOnly, "the house's fair policy has no tokens")
		}
		require.Equal(t, protocol.RewardDict, s.Reward.Kind, "credit from the run's allocators")
	}
	require.Len(t, alice, len(answers))
	reqs := srv.Requests()
	require.Len(t, reqs, len(answers))
	for i, s := range alice {
		require.False(t, s.Metadata.TextOnly)
		require.Equal(t, moves[i], s.Metadata.Action, "the move, beside the model's text")
		require.Equal(t, "ok", s.Response, "the model's text of its response ids")
		require.Equal(t, 1, s.Metadata.Extra[seats.NoteCalls])
		require.Equal(t, "act/function", s.Metadata.Extra[seats.NoteTool])
		require.Equal(t, "seat-model", reqs[i].Model)
		require.NotNil(t, reqs[i].Seed, "the seat seeds a call the harness did not")
		var ans struct {
			Choices []struct {
				Logprobs struct {
					Content []struct {
						ID      int     `json:"id"`
						Logprob float64 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				Prompt int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(answers[i], &ans))
		lps := ans.Choices[0].Logprobs.Content
		require.Equal(t, len(lps), s.ResponseLength)
		require.Len(t, s.Tokens, ans.Usage.Prompt+len(lps))
		for j, e := range lps {
			require.Equal(t, e.ID, s.Tokens[ans.Usage.Prompt+j])
			require.Equal(t, e.Logprob, s.RolloutLogProbs[j])
		}
		require.Equal(t, []protocol.ChatMessage{{Role: "system", Content: "You negotiate."}, {Role: "user", Content: "Your move?"}}, s.Prompt.Messages)
	}
	st := h.seat.Stats()
	n := len(answers)
	require.Equal(t, seats.Stats{Calls: n, Trainable: n, Moves: n}, st)
}

// TestSeatOverMCP drives the seat's tools with the official Go SDK's MCP
// client: an illegal move is a tool error that changes nothing, and the
// calls made before it stay with the turn the legal move then ends.
func TestSeatOverMCP(t *testing.T) {
	setup, res := negotiation(t, 4)
	h, _ := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	ctx := t.Context()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-harness", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 2)

	call := func(name string, args any) *mcp.CallToolResult {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return r
	}
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	obs := call("observe", map[string]any{})
	require.False(t, obs.IsError)
	require.Contains(t, text(obs), "It is your turn")
	require.Contains(t, text(obs), "values", "alice's briefing is in her inbox")

	code, _, _ := post(t, h.url+"/v1/chat/completions", chatBody)
	require.Equal(t, 200, code)
	bad := call("act", map[string]any{"move": map[string]any{"type": "accept"}})
	require.True(t, bad.IsError, "no standing offer to accept")
	require.Contains(t, text(bad), "Move refused")
	nomove := call("act", map[string]any{"action": "walk"})
	require.True(t, nomove.IsError)
	require.Contains(t, text(nomove), `no "move" argument`)
	code, _, _ = post(t, h.url+"/v1/chat/completions", chatBody)
	require.Equal(t, 200, code)
	ok := call("act", map[string]any{"move": map[string]any{"type": "walk"}})
	require.False(t, ok.IsError, text(ok))

	<-h.tb.Done()
	end := call("observe", map[string]any{})
	require.Contains(t, text(end), "The episode is over")
	ss := samples(t, res, h.tb.Record())
	require.Len(t, ss, 1)
	s := ss[0]
	require.Equal(t, 2, s.Metadata.Extra[seats.NoteCalls], "both calls belong to the turn the move ended")
	require.Equal(t, "act/mcp", s.Metadata.Extra[seats.NoteTool])
	// llmtest's prompts do not extend each other: the sample is the last
	// call, the first kept beside it.
	require.Equal(t, 1, s.Metadata.Extra[seats.NoteMerged])
	require.Len(t, s.Metadata.Extra[seats.NoteEarlier], 1)
	require.False(t, s.Metadata.TextOnly)
}

// TestSeatEvaluationOnly: a server that returns no token ids gives
// text-only samples, which say so and why.
func TestSeatEvaluationOnly(t *testing.T) {
	setup, res := negotiation(t, 3)
	h, _ := serve(t, llmtest.OpenAI, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	code, hdr, _ := post(t, h.url+"/v1/chat/completions", chatBody)
	require.Equal(t, 200, code)
	require.Contains(t, hdr.Get(seats.CaptureHeader), "evaluation-only; kind openai")
	code, _, b := post(t, h.url+"/tools/act", `{"move":{"type":"walk"}}`)
	require.Equal(t, 200, code, string(b))
	<-h.tb.Done()
	ss := samples(t, res, h.tb.Record())
	require.Len(t, ss, 1)
	s := ss[0]
	require.True(t, s.Metadata.TextOnly)
	require.Empty(t, s.Tokens)
	require.Equal(t, true, s.Metadata.Extra[seats.NoteEvalOnly])
	require.Contains(t, s.Metadata.Extra["llm_text_only"], "returns no token ids")
	require.Equal(t, seats.Stats{Calls: 1, EvalOnly: 1, Moves: 1}, h.seat.Stats())
}

// TestSeatBadRequests: what the seat's endpoint refuses, in the OpenAI
// API's error shape, without reaching the server or the episode.
func TestSeatBadRequests(t *testing.T) {
	setup, _ := negotiation(t, 3)
	h, srv := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{MaxBody: 1 << 10})
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "stream: want a boolean"},
		{`{"model":"m","messages":[]}`, 400, "must not be empty"},
		{`not json`, 400, "not a JSON object"},
		{`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<10) + `"}]}`, 413, "larger than 1024 bytes"},
	} {
		code, _, b := post(t, h.url+"/v1/chat/completions", tc.body)
		require.Equal(t, tc.code, code, string(b))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &e))
		require.Contains(t, e.Error.Message, tc.want)
	}
	require.Zero(t, srv.Stats().Chat)
	require.Equal(t, 4, h.seat.Stats().Refused)
	code, _, b := post(t, h.url+"/tools/nope", `{}`)
	require.Equal(t, 404, code, string(b))
	code, _, b = post(t, h.url+"/tools/act", `[1]`)
	require.Equal(t, 200, code)
	require.Contains(t, string(b), "not a JSON object")
	require.Nil(t, h.tb.Record(), "nothing reached the episode")
}

// TestSeatTimeout: a harness that never acts loses its seat after
// ActTimeout, to the table's fallback: the house policy, whose turns say
// so, or a forfeit.
func TestSeatTimeout(t *testing.T) {
	t.Run("policy", func(t *testing.T) {
		setup, _ := negotiation(t, 3)
		h, _ := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{ActTimeout: 20 * time.Millisecond})
		<-h.tb.Done()
		rec := h.tb.Record()
		require.Equal(t, protocol.StatusCompleted, rec.Status)
		why, _ := rec.Turns[0].Notes[table.NoteFallback].(string)
		require.Contains(t, why, "no move within 20ms")
	})
	t.Run("forfeit", func(t *testing.T) {
		setup, _ := negotiation(t, 3)
		h, _ := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}, Fallback: table.Forfeit}, seats.Options{ActTimeout: 20 * time.Millisecond})
		<-h.tb.Done()
		rec := h.tb.Record()
		require.Equal(t, protocol.StatusAborted, rec.Status)
		require.Equal(t, table.EndForfeit, rec.End)
		assert.Contains(t, rec.Err, "no move within")
		code, _, b := post(t, h.url+"/tools/act", `{"move":{"type":"walk"}}`)
		require.Equal(t, 200, code)
		require.Contains(t, string(b), "Move refused")
	})
}

// TestObserveWaitsForTheTurn: observe returns "not your turn yet" when
// its wait runs out, and the turn once it comes.
func TestObserveWaitsForTheTurn(t *testing.T) {
	setup, _ := negotiation(t, 3)
	// bob's seat: alice, the house, moves first, at once.
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp})
	lc := llm.DefaultConfig()
	lc.BaseURL, lc.Kind, lc.Model = "http://llmtest.invalid/v1", llm.KindLlamaCpp, "m"
	client, err := llm.NewClient(lc, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	tb, err := table.New(t.Context(), table.Config{Setup: setup, Open: []int{0, 1}})
	require.NoError(t, err)
	bob, err := seats.New(t.Context(), tb, 1, client, seats.Options{ObserveWait: 10 * time.Millisecond})
	require.NoError(t, err)
	defer bob.Close()
	o, err := bob.Observe(t.Context())
	require.NoError(t, err)
	require.False(t, o.Turn)
	require.False(t, o.Done)
	require.Contains(t, o.Text, "not your turn yet")

	alice, err := tb.Join(0)
	require.NoError(t, err)
	require.NoError(t, alice.Act(t.Context(), 0, agents.Action{Text: `{"type":"propose","take":{"book":1,"hat":0,"ball":0}}`}))
	o, err = bob.Observe(t.Context())
	require.NoError(t, err)
	require.True(t, o.Turn)
	require.Contains(t, strings.Join(o.Messages, "\n"), "propose")
	res, err := bob.CallTool(t.Context(), seats.ToolAct, json.RawMessage(`{"move":{"type":"accept"}}`), "function")
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content)
	<-tb.Done()
	rec := tb.Record()
	require.Len(t, rec.Turns, 2)
	require.Equal(t, `{"type":"accept"}`, rec.Turns[1].Action, "bob accepted")
}
