package envserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-rl/troupe/envserver/envclient"
)

// The server's MCP tools, at /mcp and in a WebSocket's "mcp" messages.
// OpenEnv reserves reset, step, state and close for its own protocol:
// the tools that start an episode and move in it are named otherwise.
const (
	ToolScenarios  = "scenarios"
	ToolNewEpisode = "new_episode"
	ToolObserve    = "observe"
	ToolAct        = "act"
)

// JSON-RPC 2.0's error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcServerError    = -32000
)

// mcpTool is one tool: its description, the JSON schema of its
// arguments, and whether it needs a session (one is started from the
// default reset where the caller has none).
type mcpTool struct {
	name, description string
	schema            map[string]any
}

var mcpTools = []mcpTool{
	{ToolScenarios, "List the scenarios this server plays: name, summary, schedule, roles, parameters and policies.",
		map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false}},
	{ToolNewEpisode, "Start an episode and take seats in it (the arguments are a reset's: scenario, params, policies, open, seats, seed...; none: the server's default episode). " +
		"Answers the first observation: the seats that must act now, each with its view and legal moves.",
		map[string]any{"type": "object", "properties": map[string]any{
			"scenario": map[string]any{"type": "string", "description": "the scenario (troupe scenarios lists them); empty: the server's default"},
			"params":   map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
			"policies": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "the house policy of each role's seats no session holds"},
			"open":     map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "the seats sessions may take; empty: every seat"},
			"seats":    map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "the seats this session takes; empty: every open seat"},
			"seed":     map[string]any{"type": "integer", "minimum": 0},
		}}},
	{ToolObserve, "What the session sees now: waits (up to the server's max wait) for one of its seats to act or for the end, and answers the pending seats' views and legal moves, or the scores.",
		map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false}},
	{ToolAct, "Make a move for the session's seat that acts now (seat names it when several do; moves gives several at once, by agent) and wait for the next turn. " +
		"Answers what the session sees then, with its reward once the episode is over.",
		map[string]any{"type": "object", "properties": map[string]any{
			"move":  map[string]any{"type": "string", "description": "the move: one of the legal moves, or an answer in the scenario's grammar"},
			"seat":  map[string]any{"type": "string", "description": "which of the session's seats moves, when several act now"},
			"moves": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "moves by agent id: a simultaneous step"},
		}, "additionalProperties": false}},
}

// binding is where a tool call's session lives: an MCP session's own
// (mcpHolder), a WebSocket's, or, for calls that name none, the latest
// HTTP reset's.
type binding interface {
	get() *session
	// set makes ss the binding's session and returns the one it held
	// that should leave (nil when it is not the binding's to end).
	set(ss *session) (old *session)
	ws() bool
}

// mcpHolder is an MCP session's binding: OpenEnv's openenv/session/create
// makes one, and each MCP client session (streamable HTTP) has one.
type mcpHolder struct {
	mu   sync.Mutex
	ss   *session
	last time.Time
}

func (h *mcpHolder) get() *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = time.Now()
	return h.ss
}

func (h *mcpHolder) set(ss *session) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.ss
	h.ss, h.last = ss, time.Now()
	return old
}

func (h *mcpHolder) ws() bool { return false }

// latestBinding is the session of the latest HTTP reset: a call that
// names no session means it, as a session-less HTTP step does.
type latestBinding struct{ s *Server }

func (b latestBinding) get() *session {
	ss, _ := b.s.latestSession()
	return ss
}

func (b latestBinding) set(ss *session) *session {
	b.s.setLatest(ss)
	return nil // another HTTP caller's, perhaps: not ours to end
}

func (latestBinding) ws() bool { return false }

// wsBinding is a WebSocket connection's session.
type wsBinding struct{ ss **session }

func (b wsBinding) get() *session { return *b.ss }
func (b wsBinding) set(ss *session) *session {
	old := *b.ss
	*b.ss = ss
	return old
}
func (wsBinding) ws() bool { return true }

// toolResult is a tool's answer: MCP's CallToolResult.
type toolResult struct {
	text    string
	object  any
	isError bool
}

// callTool runs tool name with its JSON arguments for the session b
// holds. A refused move or bad argument is the tool's error (isError),
// as MCP wants; an unknown tool is the call's.
func (s *Server) callTool(ctx context.Context, b binding, name string, args json.RawMessage) (toolResult, error) {
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	fail := func(e *apiError) (toolResult, error) {
		return toolResult{text: e.Error(), object: map[string]any{"error": e.body}, isError: true}, nil
	}
	switch name {
	case ToolScenarios:
		var none struct{}
		if e := decodeJSON(args, &none); e != nil {
			return fail(e)
		}
		m := metadataOf(s.cfg.Scenarios)
		return done(map[string]any{"scenarios": m.Scenarios})
	case ToolNewEpisode:
		var req envclient.ResetRequest
		if e := decodeJSON(args, &req); e != nil {
			return fail(e)
		}
		_, ss, e := s.reset(ctx, &req, b.ws())
		if e != nil {
			return fail(e)
		}
		if ss == nil {
			return fail(errorf(http.StatusBadRequest, envclient.CodeBadRequest, "the episode leaves no seat to this session (its seats are all the house's or harnesses')"))
		}
		if old := b.set(ss); old != nil {
			s.leave(ctx, old, "its MCP session started another episode")
		}
		res, e := s.first(ctx, ss)
		if e != nil {
			return fail(e)
		}
		res.Reward, res.Observation.Seats = nil, ss.ep.seats(ss, "")
		return done(res)
	case ToolObserve, ToolAct:
		var a envclient.Action
		if name == ToolObserve {
			var none struct{}
			if e := decodeJSON(args, &none); e != nil {
				return fail(e)
			}
		} else if e := decodeJSON(args, &a); e != nil {
			return fail(e)
		}
		ss := b.get()
		s.mu.Lock()
		live := ss != nil && s.sessions[ss.id] == ss
		s.mu.Unlock()
		switch {
		case ss != nil && !live && name == ToolObserve:
			// Its episode is over (or the session left): what it saw last.
			return done(s.result(ss, nil))
		case !live:
			var e *apiError
			if ss, e = s.freshSession(ctx, b.ws()); e != nil {
				return fail(e)
			}
			if old := b.set(ss); old != nil {
				s.leave(ctx, old, "its MCP session started another episode")
			}
		}
		var res envclient.Result
		var e *apiError
		if name == ToolObserve {
			s.touch(ss)
			res, e = s.await(ctx, ss)
		} else {
			res, e = s.step(ctx, ss, &a)
		}
		if e != nil {
			return fail(e)
		}
		return done(res)
	}
	return toolResult{}, fmt.Errorf("no tool %q (%s)", name, strings.Join(toolNames(), ", "))
}

func done(v any) (toolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return toolResult{}, err
	}
	return toolResult{text: string(b), object: v}, nil
}

func toolNames() []string {
	out := make([]string, len(mcpTools))
	for i, t := range mcpTools {
		out[i] = t.name
	}
	return out
}

// rpcRequest and rpcResponse are JSON-RPC 2.0's.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func rpcFail(id json.RawMessage, code int, format string, args ...any) rpcResponse {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	return rpcResponse{JSONRPC: "2.0", ID: id, Error: &rpcError{code, fmt.Sprintf(format, args...)}}
}

// rpc answers one JSON-RPC request in OpenEnv's MCP dialect: tools/list
// and tools/call with no initialize, and openenv/session/create and
// openenv/session/close, its sessions. A call names its session by
// params.session_id; without one it is b's (a WebSocket's), or the
// latest HTTP reset's (b nil).
func (s *Server) rpc(ctx context.Context, b binding, body []byte) rpcResponse {
	var req rpcRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return rpcFail(nil, rpcParseError, "Parse error: %v", err)
		}
		return rpcFail(nil, rpcInvalidRequest, "Invalid Request: %v", err)
	}
	var missing []string
	if req.JSONRPC != "2.0" {
		missing = append(missing, `jsonrpc must be "2.0"`)
	}
	if req.Method == "" {
		missing = append(missing, "method is missing")
	}
	if missing != nil {
		return rpcFail(req.ID, rpcInvalidRequest, "Invalid Request: %s", strings.Join(missing, "; "))
	}
	var p struct {
		SessionID string          `json:"session_id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if len(req.Params) > 0 && string(req.Params) != "null" {
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return rpcFail(req.ID, rpcInvalidParams, "Invalid params: %v", err)
		}
	}
	ok := func(v any) rpcResponse {
		id := req.ID
		if len(id) == 0 {
			id = json.RawMessage("null")
		}
		return rpcResponse{JSONRPC: "2.0", ID: id, Result: v}
	}
	switch req.Method {
	case "openenv/session/create":
		id, e := s.newHolder()
		if e != nil {
			return rpcFail(req.ID, rpcServerError, "%s", e.body.Message)
		}
		return ok(map[string]any{"session_id": id})
	case "openenv/session/close":
		if p.SessionID == "" {
			return rpcFail(req.ID, rpcInvalidParams, "Invalid params: session_id is required")
		}
		if !s.closeHolder(ctx, p.SessionID) {
			return rpcFail(req.ID, rpcInvalidParams, "Unknown session_id: %s", p.SessionID)
		}
		return ok(map[string]any{"session_id": p.SessionID, "closed": true})
	case "tools/list":
		return ok(map[string]any{"tools": toolList()})
	case "tools/call":
		if p.Name == "" {
			return rpcFail(req.ID, rpcInvalidParams, "Invalid params: name (the tool's) is missing (%s)", strings.Join(toolNames(), ", "))
		}
		if p.SessionID != "" {
			h := s.holder(p.SessionID)
			if h == nil {
				return rpcFail(req.ID, rpcInvalidParams, "Unknown session_id: %s (openenv/session/create makes one)", p.SessionID)
			}
			b = h
		} else if b == nil {
			b = latestBinding{s}
		}
		res, err := s.callTool(ctx, b, p.Name, p.Arguments)
		if err != nil {
			return rpcFail(req.ID, rpcInvalidParams, "Invalid params: %v", err)
		}
		return ok(callResult(res))
	case "initialize", "ping":
		return rpcFail(req.ID, rpcMethodNotFound, "Method not found: %s: MCP's lifecycle is served over its streamable HTTP transport (send Accept: application/json, text/event-stream); OpenEnv's dialect takes tools/list and tools/call directly", req.Method)
	}
	return rpcFail(req.ID, rpcMethodNotFound, "Method not found: %s (tools/list, tools/call, openenv/session/create, openenv/session/close)", req.Method)
}

func toolList() []map[string]any {
	out := make([]map[string]any, len(mcpTools))
	for i, t := range mcpTools {
		out[i] = map[string]any{"name": t.name, "description": t.description, "inputSchema": t.schema}
	}
	return out
}

// newHolder makes an OpenEnv MCP session; those idle for longer than
// SessionTimeout go first (their sessions leave).
func (s *Server) newHolder() (string, *apiError) {
	s.reapHolders()
	s.oe.mu.Lock()
	defer s.oe.mu.Unlock()
	if len(s.oe.mcp) >= s.cfg.MaxSessions {
		return "", errorf(http.StatusServiceUnavailable, envclient.CodeTooMany, "the server holds %d MCP sessions, its limit", s.cfg.MaxSessions)
	}
	id := newID("m-")
	if s.oe.mcp == nil {
		s.oe.mcp = map[string]*mcpHolder{}
	}
	s.oe.mcp[id] = &mcpHolder{last: time.Now()}
	return id, nil
}

func (s *Server) holder(id string) *mcpHolder {
	s.oe.mu.Lock()
	defer s.oe.mu.Unlock()
	return s.oe.mcp[id]
}

// closeHolder ends an MCP session: its troupe session leaves.
func (s *Server) closeHolder(ctx context.Context, id string) bool {
	s.oe.mu.Lock()
	h := s.oe.mcp[id]
	delete(s.oe.mcp, id)
	s.oe.mu.Unlock()
	if h == nil {
		return false
	}
	if ss := h.set(nil); ss != nil {
		s.leave(ctx, ss, "its MCP session closed")
	}
	return true
}

func (s *Server) reapHolders() {
	now := time.Now()
	var idle []string
	s.oe.mu.Lock()
	for id, h := range s.oe.mcp {
		h.mu.Lock()
		if now.Sub(h.last) > s.cfg.SessionTimeout {
			idle = append(idle, id)
		}
		h.mu.Unlock()
	}
	s.oe.mu.Unlock()
	for _, id := range idle {
		s.closeHolder(context.Background(), id)
	}
}

// mcpServer is the server's MCP server for clients of MCP's streamable
// HTTP transport: the same tools, each MCP session holding its own
// troupe session.
func (s *Server) mcpServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "troupe", Version: OpenAPIVersion}, nil)
	for _, t := range mcpTools {
		srv.AddTool(&mcp.Tool{Name: t.name, Description: t.description, InputSchema: t.schema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				res, err := s.callTool(ctx, s.sdkHolder(req.Session), t.name, req.Params.Arguments)
				if err != nil {
					return nil, err
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.text}}, StructuredContent: res.object, IsError: res.isError}, nil
			})
	}
	return srv
}

// sdkHolder is the binding of an MCP client session: made at its first
// tool call, closed (its troupe session leaving) when the MCP session
// ends.
func (s *Server) sdkHolder(ms *mcp.ServerSession) *mcpHolder {
	id := "mcp-" + ms.ID()
	s.oe.mu.Lock()
	h := s.oe.mcp[id]
	if h == nil {
		h = &mcpHolder{last: time.Now()}
		if s.oe.mcp == nil {
			s.oe.mcp = map[string]*mcpHolder{}
		}
		s.oe.mcp[id] = h
		go func() {
			_ = ms.Wait()
			s.closeHolder(context.Background(), id)
		}()
	}
	s.oe.mu.Unlock()
	return h
}

// handleMCP serves /mcp: a request of MCP's streamable HTTP transport
// (one that accepts text/event-stream, as MCP clients must, or carries
// an MCP session, or is no POST) goes to the MCP SDK's handler; any other
// POST is OpenEnv's JSON-RPC (its clients and openenv validate post plain
// JSON), answered 200 with a JSON-RPC response, errors included.
func (s *Server) handleMCP(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || acceptsStream(r.Header.Values("Accept")) {
		s.mcpHTTP.ServeHTTP(w, r)
		return nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errorf(http.StatusRequestEntityTooLarge, envclient.CodeTooLarge, "the body is over %d bytes", s.cfg.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "reading the body: %v", err)
	}
	return reply(w, s.rpc(r.Context(), nil, body))
}

// acceptsStream reports whether an Accept header names text/event-stream
// (not a wildcard: OpenEnv's clients send */*).
func acceptsStream(values []string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(base), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// newMCPHandler is the MCP SDK's streamable HTTP handler of the server's
// tools. Its sessions end after SessionTimeout idle. Loopback protection
// stays on.
func (s *Server) newMCPHandler() http.Handler {
	srv := s.mcpServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: true, SessionTimeout: s.cfg.SessionTimeout, Logger: s.cfg.Logger, MaxRequestBodyBytes: s.cfg.MaxBodyBytes})
}

// toolStep answers a step whose action is OpenEnv's MCP action
// (ListToolsAction, CallToolAction: {"type": "list_tools"} or
// {"type": "call_tool", "tool_name", "arguments"}), as OpenEnv's
// MCPToolClient sends over the WebSocket: an observation holding the
// tools, or the tool's name and result (with the reward and done of the
// episode when the tool moved in it). ok is false for any other action.
func (s *Server) toolStep(ctx context.Context, b binding, data []byte) (v any, ok bool, e *apiError) {
	var peek struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(data, &peek) != nil || peek.Type == nil {
		return nil, false, nil
	}
	var a struct {
		Type      string          `json:"type"`
		ToolName  string          `json:"tool_name"`
		Arguments json.RawMessage `json:"arguments"`
		Metadata  json.RawMessage `json:"metadata"`
	}
	if e := decodeJSON(data, &a); e != nil {
		return nil, true, e
	}
	type observation struct {
		Tools    []map[string]any `json:"tools,omitempty"`
		ToolName string           `json:"tool_name,omitempty"`
		Result   any              `json:"result,omitempty"`
		Error    any              `json:"error"`
		Done     bool             `json:"done"`
		Reward   *float64         `json:"reward"`
		Metadata map[string]any   `json:"metadata"`
	}
	type result struct {
		Observation observation `json:"observation"`
		Reward      *float64    `json:"reward"`
		Done        bool        `json:"done"`
	}
	switch a.Type {
	case "list_tools":
		return result{Observation: observation{Tools: toolList(), Metadata: map[string]any{}}}, true, nil
	case "call_tool":
		if a.ToolName == "" {
			return nil, true, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "call_tool: tool_name is missing (%s)", strings.Join(toolNames(), ", "))
		}
		res, err := s.callTool(ctx, b, a.ToolName, a.Arguments)
		o := observation{ToolName: a.ToolName, Metadata: map[string]any{}}
		if err != nil {
			o.Error = map[string]any{"error_type": "tool_not_found", "message": err.Error()}
			return result{Observation: o}, true, nil
		}
		o.Result = callResult(res)
		var out result
		if r, isResult := res.object.(envclient.Result); isResult {
			out.Reward, out.Done = r.Reward, r.Done
			o.Reward, o.Done = r.Reward, r.Done
		}
		out.Observation = o
		return out, true, nil
	}
	return nil, true, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action.type %q: OpenEnv's MCP actions are list_tools and call_tool; a move is {\"move\": ...}", a.Type)
}

// callResult is a tool's answer as MCP's CallToolResult, with FastMCP's
// "data" (the structured result), which OpenEnv's MCPToolClient returns.
func callResult(res toolResult) map[string]any {
	out := map[string]any{"content": []any{map[string]any{"type": "text", "text": res.text}}, "isError": res.isError}
	if res.object != nil {
		out["structuredContent"] = res.object
		out["data"] = res.object
	}
	return out
}
