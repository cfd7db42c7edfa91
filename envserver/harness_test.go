package envserver_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/trajectories"
)

// harnessModel is a model server (llmtest, llama.cpp's shape) for harness
// seats, reached in memory.
func harnessModel(t *testing.T) (func(string) (*llm.Client, error), *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp, Record: true})
	lc := llm.DefaultConfig()
	lc.BaseURL, lc.Kind, lc.Model = "http://llmtest.invalid/v1", llm.KindLlamaCpp, "seat-model"
	client, err := llm.NewClient(lc, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return func(string) (*llm.Client, error) { return client, nil }, srv
}

// call is one harness request with the server's bearer token.
func call(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestHarnessSeat seats a harness at alice of a negotiation through a
// reset, the house's fair policy playing bob: the harness calls the
// seat's chat endpoint and acts through the function tool at the URLs the
// reset answered, and the episode's samples, written by the server's
// output stage, carry the model server's token ids of alice's calls.
func TestHarnessSeat(t *testing.T) {
	model, srv := harnessModel(t)
	samples := &lockedBuffer{}
	const token = "s3cret-0123456789"
	c, _, _, _ := start(t, envserver.Config{Token: token, HarnessModel: model, Sink: trajectories.NewJSONLWriter(samples, trajectories.Flat)})
	ctx := t.Context()
	seed := uint64(3)
	_, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "negotiation", Seed: &seed, Open: []string{"alice"}, Harness: []string{"alice"},
		Policies: map[string]string{"bob": "fair"}, Allocators: []string{"team", "individual"}, RewardFormat: "dict"})
	require.NoError(t, err)
	o := res.Observation
	require.Empty(t, o.SessionID, "every seat is the harness's or the house's: no session")
	require.Len(t, o.Seats, 2)
	h := o.Seats[0].Harness
	require.NotNil(t, h)
	require.Nil(t, o.Seats[1].Harness)
	require.True(t, o.Seats[1].House)
	require.True(t, strings.HasSuffix(h.OpenAIBaseURL, "/episodes/"+o.EpisodeID+"/seats/alice/v1"), h.OpenAIBaseURL)

	code, b := call(t, "GET", h.ToolsURL, "", "")
	require.Equal(t, http.StatusUnauthorized, code, "the server's token guards the seat: %s", b)
	code, b = call(t, "GET", h.ToolsURL, token, "")
	require.Equal(t, http.StatusOK, code, string(b))
	require.Contains(t, string(b), `"act"`)

	moves := []string{`{"type":"propose","take":{"book":0,"hat":0,"ball":0}}`, `{"type":"walk"}`}
	var answers [][]byte
	for turn := 0; ; turn++ {
		code, b := call(t, "POST", h.ToolsURL+"/observe", token, `{}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var obs seats.ToolResult
		require.NoError(t, json.Unmarshal(b, &obs))
		if obs.Observation.Done {
			break
		}
		require.True(t, obs.Observation.Turn, obs.Content)
		require.Less(t, turn, len(moves))
		code, ans := call(t, "POST", h.OpenAIBaseURL+"/chat/completions", token, `{"model":"gpt-4o","messages":[{"role":"user","content":"Your move?"}]}`)
		require.Equal(t, http.StatusOK, code, string(ans))
		answers = append(answers, ans)
		code, b = call(t, "POST", h.ToolsURL+"/act", token, `{"move":`+moves[turn]+`}`)
		require.Equal(t, http.StatusOK, code, string(b))
		var act seats.ToolResult
		require.NoError(t, json.Unmarshal(b, &act))
		require.False(t, act.IsError, act.Content)
	}
	require.Len(t, srv.Requests(), len(answers))

	// The server writes the episode when it ends, nobody stepping it.
	var out []protocol.Sample
	require.Eventually(t, func() bool { return strings.Count(samples.String(), "\n") > len(answers) }, 10*time.Second, 5*time.Millisecond)
	sc := bufio.NewScanner(strings.NewReader(samples.String()))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var s protocol.Sample
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s))
		out = append(out, s)
	}
	require.NoError(t, protocol.ValidateRollout(out))
	var alice []protocol.Sample
	for _, s := range out {
		require.Equal(t, protocol.RewardDict, s.Reward.Kind, "credit from the reset's allocators")
		if s.Metadata.Agent == "alice" {
			alice = append(alice, s)
		}
	}
	require.Len(t, alice, len(answers))
	for i, s := range alice {
		require.False(t, s.Metadata.TextOnly)
		require.Equal(t, moves[i], s.Metadata.Action)
		var ans struct {
			Choices []struct {
				Logprobs struct {
					Content []struct {
						ID int `json:"id"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				Prompt int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(answers[i], &ans))
		lps := ans.Choices[0].Logprobs.Content
		require.NotEmpty(t, lps)
		require.Len(t, s.Tokens, ans.Usage.Prompt+len(lps))
		for j, e := range lps {
			require.Equal(t, e.ID, s.Tokens[ans.Usage.Prompt+j], "the server's response ids, not re-tokenised")
		}
	}
	st, err := c.Record(ctx, o.EpisodeID)
	require.NoError(t, err)
	require.Contains(t, string(st), `"completed"`)
}

// TestHarnessSeatBesideSession: the creator's session holds bob while a
// harness plays alice; the session steps bob and sees the end.
func TestHarnessSeatBesideSession(t *testing.T) {
	model, _ := harnessModel(t)
	c, _, _, _ := start(t, envserver.Config{HarnessModel: model})
	ctx := t.Context()
	seed := uint64(5)
	sess, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "negotiation", Seed: &seed, Harness: []string{"alice"}})
	require.NoError(t, err)
	require.NotEmpty(t, sess.ID)
	require.True(t, res.Observation.Seats[1].Mine, "an empty seats field leaves the session every open seat but the harness's")
	require.False(t, res.Observation.Seats[0].Mine)
	require.Empty(t, res.Observation.Pending, "the reset answers at once: alice moves first")
	require.False(t, res.Done)
	h := res.Observation.Seats[0].Harness
	require.NotNil(t, h)

	done := make(chan error, 1)
	go func() {
		// The session walks away at its first turn.
		for {
			if len(res.Observation.Pending) > 0 {
				_, err := sess.Step(ctx, "", `{"type":"walk"}`)
				done <- err
				return
			}
			if res, err = sess.StepAction(ctx, envclient.Action{}); err != nil {
				done <- err
				return
			}
		}
	}()
	code, b := call(t, "POST", h.ToolsURL+"/observe", "", `{}`)
	require.Equal(t, http.StatusOK, code, string(b))
	code, b = call(t, "POST", h.ToolsURL+"/act", "", `{"move":{"type":"propose","take":{"book":1,"hat":0,"ball":0}}}`)
	require.Equal(t, http.StatusOK, code, string(b))
	require.NoError(t, <-done)
	rec, err := c.Record(ctx, sess.EpisodeID)
	require.NoError(t, err)
	require.Contains(t, string(rec), `"completed"`)
}

// TestHarnessBadInput: harness seats the server cannot seat are refused by
// name, nothing started.
func TestHarnessBadInput(t *testing.T) {
	model, _ := harnessModel(t)
	c, hs, _, _ := start(t, envserver.Config{HarnessModel: model})
	bare, _, _, _ := start(t, envserver.Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		c    *envclient.Client
		req  envclient.ResetRequest
		want string
	}{
		{"unknown seat", c, envclient.ResetRequest{Scenario: "negotiation", Harness: []string{"carol"}}, "harness: "},
		{"no model server", bare, envclient.ResetRequest{Scenario: "negotiation", Harness: []string{"alice"}}, "no model server"},
		{"seat and harness", c, envclient.ResetRequest{Scenario: "negotiation", Harness: []string{"alice"}, Seats: []string{"alice"}}, "not both"},
		{"twice", c, envclient.ResetRequest{Scenario: "negotiation", Harness: []string{"alice", "alice"}}, "named twice"},
		{"house seat", c, envclient.ResetRequest{Scenario: "negotiation", Open: []string{"bob"}, Harness: []string{"alice"}}, "played by the house"},
		{"join", c, envclient.ResetRequest{Join: "e-x", Harness: []string{"alice"}}, "harness"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.c.Reset(ctx, tc.req)
			var ae *envclient.APIError
			require.True(t, errors.As(err, &ae), "%v", err)
			require.Equal(t, http.StatusBadRequest, ae.Status)
			require.Contains(t, ae.Body.Message, tc.want)
		})
	}
	code, b := call(t, "GET", hs.URL+"/episodes/e-none/seats/alice/tools", "", "")
	require.Equal(t, http.StatusNotFound, code, string(b))
}

// TestHarnessNeverActs: a harness that never moves gives its seat up after
// the seat's act timeout, and the reset's fallback (the house policy)
// plays it to the end, which the server writes.
func TestHarnessNeverActs(t *testing.T) {
	model, srv := harnessModel(t)
	eps := &lockedBuffer{}
	c, _, _, _ := start(t, envserver.Config{HarnessModel: model, HarnessSeat: seats.Options{ActTimeout: 20 * time.Millisecond}, Sink: trajectories.NewEpisodeWriter(eps)})
	seed := uint64(2)
	_, res, err := c.Reset(t.Context(), envclient.ResetRequest{Scenario: "tictactoe", Seed: &seed, Open: []string{"x"}, Harness: []string{"x"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(eps.String(), "\n") }, 10*time.Second, 5*time.Millisecond)
	rec, err := c.Record(t.Context(), res.Observation.EpisodeID)
	require.NoError(t, err)
	require.Contains(t, string(rec), `"completed"`)
	require.Contains(t, string(rec), "no move in time", "the fallback's turns say why")
	require.Empty(t, srv.Requests())
}

// TestHarnessOverWebSocket: a WebSocket session's reset seats a harness
// too; its session holds the other seat and steps it once the harness
// has moved.
func TestHarnessOverWebSocket(t *testing.T) {
	model, _ := harnessModel(t)
	_, hs, _, _ := start(t, envserver.Config{HarnessModel: model})
	ctx := t.Context()
	ws, _, err := websocket.Dial(ctx, strings.Replace(hs.URL, "http", "ws", 1)+"/ws", nil)
	require.NoError(t, err)
	defer ws.CloseNow()
	send := func(typ, data string) envclient.Result {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"type":"`+typ+`","data":`+data+`}`)))
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var m envclient.WSMessage
		require.NoError(t, json.Unmarshal(b, &m))
		require.Equal(t, "observation", m.Type, string(m.Data))
		var res envclient.Result
		require.NoError(t, json.Unmarshal(m.Data, &res))
		return res
	}
	res := send("reset", `{"scenario":"tictactoe","seed":4,"harness":["x"]}`)
	require.True(t, res.Observation.Seats[1].Mine)
	h := res.Observation.Seats[0].Harness
	require.NotNil(t, h)
	require.Empty(t, res.Observation.Pending, "x moves first: the answer comes at once")
	code, b := call(t, "POST", h.ToolsURL+"/act", "", `{"action":"b2"}`)
	require.Equal(t, http.StatusOK, code, string(b))
	res = send("step", `{}`)
	require.Len(t, res.Observation.Pending, 1)
	require.Equal(t, "o", res.Observation.Pending[0].Agent)
	require.NotContains(t, res.Observation.Pending[0].Legal, "b2", "x's move is in the game")
}

// TestHarnessSeatPerRole: each role's harness seats ask the shared model
// server for the role's own model and sampling (Config.HarnessLLM), over
// the Responses API, streamed, through the server's routes.
func TestHarnessSeatPerRole(t *testing.T) {
	model, srv := harnessModel(t)
	perRole := func(role string) *llm.Config {
		client, _ := model(role)
		cfg := client.Config()
		if role != "alice" {
			return nil
		}
		cfg.Model, cfg.Temperature = "alice-model", new(0.5)
		return &cfg
	}
	c, _, _, _ := start(t, envserver.Config{HarnessModel: model, HarnessLLM: perRole})
	seed := uint64(3)
	_, res, err := c.Reset(t.Context(), envclient.ResetRequest{Scenario: "negotiation", Seed: &seed, Harness: []string{"alice", "bob"}})
	require.NoError(t, err)
	for i, want := range []string{"alice-model", "seat-model"} {
		h := res.Observation.Seats[i].Harness
		code, b := call(t, "GET", h.OpenAIBaseURL+"/models", "", "")
		require.Equal(t, http.StatusOK, code, string(b))
		require.Contains(t, string(b), `"id":"`+want+`"`)
		req, err := http.NewRequestWithContext(t.Context(), "POST", h.OpenAIBaseURL+"/responses",
			strings.NewReader(`{"model":"gpt-4.1","input":"Your move?","stream":true}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		var last string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: ") {
				last = sc.Text()
			}
		}
		resp.Body.Close()
		require.Equal(t, "event: response.completed", last)
		reqs := srv.Requests()
		require.Equal(t, want, reqs[len(reqs)-1].Model)
		if want == "alice-model" {
			require.Equal(t, 0.5, *reqs[len(reqs)-1].Temperature)
		}
	}
}
