package envserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/trajectories"
)

// ticDefault is a default episode: tic-tac-toe as x against minimax.
var ticDefault = &envclient.ResetRequest{Scenario: "tictactoe", Open: []string{"x"}, Policies: map[string]string{"o": "minimax"}}

// do sends body (JSON) to url+path and decodes the answer into out;
// it returns the status.
func do(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
	return resp.StatusCode
}

// TestOpenAPI: GET /openapi.json declares the OpenEnv HTTP version and
// every endpoint, and its schemas are GET /schema's.
func TestOpenAPI(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{})
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Info    map[string]any            `json:"info"`
		Paths   map[string]map[string]any `json:"paths"`
		Comp    struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.Equal(t, 200, do(t, "GET", hs.URL+"/openapi.json", nil, &doc))
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	assert.Equal(t, envserver.OpenAPIVersion, doc.Info["version"])
	for path, method := range map[string]string{"/health": "get", "/metadata": "get", "/schema": "get", "/openapi.json": "get", "/reset": "post",
		"/step": "post", "/state": "get", "/close": "post", "/record": "get", "/seats": "post", "/ws": "get", "/mcp": "post"} {
		assert.Contains(t, doc.Paths[path], method, path)
	}
	var sch map[string]json.RawMessage
	require.Equal(t, 200, do(t, "GET", hs.URL+"/schema", nil, &sch))
	assert.JSONEq(t, string(sch["action"]), string(doc.Comp.Schemas["Action"]))
}

// TestDefaultEpisode: with a default, an empty reset plays it (a seed
// still its own), a step naming no session steps the latest HTTP reset's,
// GET /state names none, and a session-less step before any reset (or
// after the latest episode ended) starts a default episode.
func TestDefaultEpisode(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{Default: ticDefault})
	var step envclient.Result
	require.Equal(t, 200, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": "b2"}, "timeout_s": 5, "request_id": "r1"}, &step))
	first := step.Observation.EpisodeID
	assert.NotEmpty(t, first)
	assert.False(t, step.Done)

	var res envclient.Result
	require.Equal(t, 200, do(t, "POST", hs.URL+"/reset", map[string]any{"seed": 7}, &res))
	assert.Nil(t, res.Reward)
	require.Len(t, res.Observation.Pending, 1)
	assert.Equal(t, "x", res.Observation.Pending[0].Agent)
	ep := res.Observation.EpisodeID
	assert.NotEqual(t, first, ep)

	for !res.Done {
		legal := res.Observation.Pending[0].Legal
		require.Equal(t, 200, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": legal[0]}}, &res))
		assert.Equal(t, ep, res.Observation.EpisodeID, "the latest reset's session")
	}
	require.NotNil(t, res.Reward)
	assert.LessOrEqual(t, *res.Reward, 0.0, "minimax never loses")
	var st envclient.State
	require.Equal(t, 200, do(t, "GET", hs.URL+"/state", nil, &st))
	assert.Equal(t, ep, st.EpisodeID)
	assert.True(t, st.Done)
	assert.Equal(t, "tictactoe", st.Scenario)

	// Over: a session-less step starts the next default episode.
	require.Equal(t, 200, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": "a1"}}, &step))
	assert.NotEqual(t, ep, step.Observation.EpisodeID)

	// A reset naming a scenario is its own.
	require.Equal(t, 200, do(t, "POST", hs.URL+"/reset", map[string]any{"scenario": "signal", "policies": map[string]string{"listener": "random"}, "open": []string{"speaker"}}, &res))
	require.Len(t, res.Observation.Pending, 1)
	assert.Equal(t, "speaker", res.Observation.Pending[0].Role)
}

// TestNoDefault: without one, an empty reset and a session-less step say
// how to make one; a bad default is refused by New.
func TestNoDefault(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{})
	var body envclient.ErrorBody
	require.Equal(t, 400, do(t, "POST", hs.URL+"/reset", map[string]any{}, &body))
	assert.Contains(t, body.Error.Message, "--scenario NAME")
	require.Equal(t, 400, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": "a1"}}, &body))
	assert.Contains(t, body.Error.Message, "session_id: missing")
	require.Equal(t, 400, do(t, "GET", hs.URL+"/state", nil, &body))

	for _, d := range []*envclient.ResetRequest{{}, {Scenario: "nope"}, {Scenario: "tictactoe", Join: "e-1"}, {Scenario: "tictactoe", Params: map[string]string{"bogus": "1"}}, {Scenario: "tictactoe", Reward: "nope"}} {
		_, err := envserver.New(envserver.Config{Default: d})
		assert.ErrorIs(t, err, envserver.ErrBadConfig, "%+v", d)
	}
}

// rpc posts a JSON-RPC request to /mcp as OpenEnv's clients do (plain
// JSON, Accept */*).
func rpc(t *testing.T, url string, body any) map[string]any {
	t.Helper()
	var out map[string]any
	require.Equal(t, 200, do(t, "POST", url+"/mcp", body, &out))
	assert.Equal(t, "2.0", out["jsonrpc"])
	return out
}

// TestOpenEnvMCP: /mcp answers OpenEnv's JSON-RPC dialect: openenv
// validate's empty body, tools/list without initialize, sessions made by
// openenv/session/create whose tools start an episode and move in it.
func TestOpenEnvMCP(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{Default: ticDefault})
	out := rpc(t, hs.URL, map[string]any{})
	assert.EqualValues(t, -32600, out["error"].(map[string]any)["code"])
	out = rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "nope"})
	assert.EqualValues(t, -32601, out["error"].(map[string]any)["code"])

	out = rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
	var names []string
	for _, tool := range out["result"].(map[string]any)["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"scenarios", "new_episode", "observe", "act"}, names)

	out = rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "openenv/session/create"})
	sid := out["result"].(map[string]any)["session_id"].(string)
	tool := func(name string, args any) map[string]any {
		out := rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": map[string]any{"session_id": sid, "name": name, "arguments": args}})
		require.Nil(t, out["error"], "%v", out)
		return out["result"].(map[string]any)
	}
	res := tool("new_episode", map[string]any{"seed": 3})
	assert.Equal(t, false, res["isError"])
	obs := res["structuredContent"].(map[string]any)["observation"].(map[string]any)
	ep := obs["episode_id"]
	res = tool("act", map[string]any{"move": "z9"})
	assert.Equal(t, true, res["isError"], "an illegal move is the tool's error")
	assert.Contains(t, res["content"].([]any)[0].(map[string]any)["text"], "illegal_action")
	for done := false; !done; {
		res = tool("observe", map[string]any{})
		r := res["structuredContent"].(map[string]any)
		if done = r["done"].(bool); done {
			break
		}
		legal := r["observation"].(map[string]any)["pending"].([]any)[0].(map[string]any)["legal"].([]any)
		res = tool("act", map[string]any{"move": legal[0]})
		assert.Equal(t, ep, res["structuredContent"].(map[string]any)["observation"].(map[string]any)["episode_id"])
	}
	out = rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 5, "method": "openenv/session/close", "params": map[string]any{"session_id": sid}})
	assert.Equal(t, true, out["result"].(map[string]any)["closed"])
	out = rpc(t, hs.URL, map[string]any{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": map[string]any{"session_id": sid, "name": "observe"}})
	assert.Contains(t, out["error"].(map[string]any)["message"], "Unknown session_id")
}

// TestMCPClient: an MCP client of the official SDK (streamable HTTP,
// initialize first) lists the tools and plays an episode.
func TestMCPClient(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{Default: ticDefault})
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 4)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "act", Arguments: map[string]any{"move": "b2"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	var r envclient.Result
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &r))
	require.Len(t, r.Observation.Pending, 1)
	assert.Len(t, r.Observation.Pending[0].Legal, 7, "x moved, then o: x's turn again")
}

// TestWebSocketMCP: OpenEnv's "mcp" WebSocket message runs a tool for the
// connection's session; a step before any reset plays the default.
func TestWebSocketMCP(t *testing.T) {
	_, hs, _, _ := start(t, envserver.Config{Default: ticDefault})
	ws, _, err := websocket.Dial(t.Context(), strings.Replace(hs.URL, "http", "ws", 1)+"/ws", nil)
	require.NoError(t, err)
	defer ws.CloseNow()
	send := func(typ string, data any) envclient.WSMessage {
		b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
		require.NoError(t, ws.Write(t.Context(), websocket.MessageText, b))
		_, msg, err := ws.Read(t.Context())
		require.NoError(t, err)
		var m envclient.WSMessage
		require.NoError(t, json.Unmarshal(msg, &m))
		return m
	}
	m := send("step", map[string]any{"move": "a1"})
	require.Equal(t, "observation", m.Type, "%s", m.Data)
	var r envclient.Result
	require.NoError(t, json.Unmarshal(m.Data, &r))
	m = send("mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "observe"}})
	require.Equal(t, "mcp", m.Type)
	var out struct {
		Result struct {
			Structured envclient.Result `json:"structuredContent"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &out), "%s", m.Data)
	assert.Equal(t, r.Observation.EpisodeID, out.Result.Structured.Observation.EpisodeID, "the connection's session")
}

// TestGeneration: a move's generation becomes its sample's tokens; a bad
// one is refused by name.
func TestGeneration(t *testing.T) {
	var buf lockedBuffer
	_, hs, _, _ := start(t, envserver.Config{Default: &envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": "1", "nights": "2"}},
		Sink: trajectories.NewJSONLWriter(&buf, trajectories.Flat)})
	var body envclient.ErrorBody
	for _, g := range []map[string]any{{"prompt_ids": []int{}, "completion_ids": []int{1}}, {"prompt_ids": []int{1}, "completion_ids": []int{2}, "logprobs": []float64{}}} {
		require.Equal(t, 400, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": "1", "generation": g}}, &body))
		assert.Contains(t, body.Error.Message, "action.generation")
	}
	var res envclient.Result
	require.Equal(t, 200, do(t, "POST", hs.URL+"/step", map[string]any{"action": map[string]any{"move": "1",
		"generation": map[string]any{"prompt_ids": []int{5, 6, 7}, "completion_ids": []int{3, 2}, "logprobs": []float64{-0.5, -0.25}, "prompt": "pick", "completion": "1!"}}}, &res))
	require.True(t, res.Done)
	var s struct {
		Prompt   string    `json:"prompt"`
		Tokens   []int     `json:"tokens"`
		Response string    `json:"response"`
		Length   int       `json:"response_length"`
		LogProbs []float64 `json:"rollout_log_probs"`
		Reward   float64   `json:"reward"`
	}
	require.NoError(t, json.Unmarshal([]byte(buf.String()), &s), "%s", buf.String())
	assert.Equal(t, []int{5, 6, 7, 3, 2}, s.Tokens)
	assert.Equal(t, 2, s.Length)
	assert.Equal(t, []float64{-0.5, -0.25}, s.LogProbs)
	assert.Equal(t, "pick", s.Prompt)
	assert.Equal(t, "1!", s.Response)
	assert.Equal(t, *res.Reward, s.Reward)
}
