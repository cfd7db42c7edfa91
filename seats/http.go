package seats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
)

// The seat's tools.
const (
	ToolObserve = "observe"
	ToolAct     = "act"
)

// CaptureHeader is the response header that tells a harness (and its
// logs) what the seat captured of a call: "trainable", or
// "evaluation-only; WHY".
const CaptureHeader = "Troupe-Capture"

// Handler serves the seat to its harness:
//
//	POST /v1/chat/completions  the seat's model (OpenAI's chat completions, streamed or not)
//	POST /v1/responses         the same model through OpenAI's Responses API (streamed or not)
//	GET  /v1/models            the model it serves
//	GET  /tools                observe and act as OpenAI function tools
//	POST /tools/{name}         a call: the arguments' JSON object in, {"content", "is_error", "observation"} out
//	     /mcp                  observe and act over MCP (streamable HTTP)
//
// Mount it under a prefix of the seat's own (http.StripPrefix), one per
// seat: the prefix is what tells the seats apart.
func (s *Seat) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /tools", s.listTools)
	mux.HandleFunc("POST /tools/{name}", s.callTool)
	srv := s.mcpServer()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true}))
	return mux
}

// openAIError writes an error in the OpenAI API's shape.
func openAIError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": kind, "code": nil}})
}

// readBody reads a model request's body, bounded by Options.MaxBody; on
// failure it answers the harness and returns nil.
func (s *Seat) readBody(w http.ResponseWriter, r *http.Request) []byte {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err == nil {
		return body
	}
	s.refused()
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request body is larger than %d bytes", s.opts.MaxBody))
		return nil
	}
	openAIError(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
	return nil
}

// forward forwards a chat completion request body to the model server and
// records the answer for the seat's next move. It answers the harness
// itself when the request is refused, the server cannot be reached or it
// answers with an error (relayed as it came), and then returns nil.
func (s *Seat) forward(w http.ResponseWriter, r *http.Request, body []byte) *llm.Capture {
	c, err := s.client.Forward(r.Context(), body, llm.ForwardOptions{Seed: s.callSeed(), Config: s.opts.LLM})
	if err != nil {
		s.refused()
		if errors.Is(err, llm.ErrBadRequest) {
			openAIError(w, http.StatusBadRequest, "invalid_request_error", "seat "+s.id+": "+err.Error())
		} else {
			openAIError(w, http.StatusBadGateway, "upstream_error", "seat "+s.id+": the model server: "+err.Error())
		}
		return nil
	}
	if c.Status < 200 || c.Status > 299 {
		s.refused()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.Status)
		_, _ = w.Write(c.Answer)
		return nil
	}
	s.record(c)
	return c
}

// captured is the CaptureHeader of c.
func captured(c *llm.Capture) string {
	if c.Trainable() {
		return "trainable"
	}
	return "evaluation-only; " + strings.ReplaceAll(c.EvalOnly, "\n", " ")
}

// chat forwards one chat completion and records it for the seat's next
// move; a streamed request (stream true) is answered in server-sent
// events, of the whole answer (streamPiece's doc says why).
func (s *Seat) chat(w http.ResponseWriter, r *http.Request) {
	body := s.readBody(w, r)
	if body == nil {
		return
	}
	body, stream, usage, err := streamed(body)
	if err != nil {
		s.refused()
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "seat "+s.id+": "+err.Error())
		return
	}
	c := s.forward(w, r, body)
	if c == nil {
		return
	}
	if stream {
		sw := newSSE(w, captured(c))
		streamChat(sw, c.Answer, usage)
		s.streamed(sw)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(CaptureHeader, captured(c))
	w.WriteHeader(c.Status)
	_, _ = w.Write(c.Answer)
}

// streamed reads a chat request's stream and stream_options fields and
// returns the body without them (the server is asked for the whole
// answer), whether the harness asked for a stream, and whether for its
// usage (stream_options.include_usage). A body that has neither field is
// returned as it is, for Forward to check.
func streamed(body []byte) ([]byte, bool, bool, error) {
	if !bytes.Contains(body, []byte(`"stream`)) {
		return body, false, false, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return body, false, false, nil // Forward names what is wrong
	}
	v, ok := fields["stream"]
	o, hasOpts := fields["stream_options"]
	if !ok && !hasOpts {
		return body, false, false, nil
	}
	var stream bool
	if ok && !isNull(v) {
		if err := json.Unmarshal(v, &stream); err != nil {
			return nil, false, false, fmt.Errorf("%w: stream: want a boolean, got %s", llm.ErrBadRequest, clip(v))
		}
	}
	var opts struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if hasOpts && !isNull(o) {
		if err := json.Unmarshal(o, &opts); err != nil {
			return nil, false, false, fmt.Errorf("%w: stream_options: want an object with include_usage, got %s", llm.ErrBadRequest, clip(o))
		}
	}
	delete(fields, "stream")
	delete(fields, "stream_options")
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, false, false, fmt.Errorf("%w: %w", llm.ErrBadRequest, err)
	}
	return b, stream, opts.IncludeUsage, nil
}

// responses answers one call of the Responses API: the request becomes a
// chat completion (decodeResponses), forwarded and recorded like chat's,
// and its answer a Response object, or its stream's events.
func (s *Seat) responses(w http.ResponseWriter, r *http.Request) {
	body := s.readBody(w, r)
	if body == nil {
		return
	}
	req, err := decodeResponses(body)
	if err != nil {
		s.refused()
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "seat "+s.id+": "+err.Error())
		return
	}
	c := s.forward(w, r, req.chat)
	if c == nil {
		return
	}
	s.mu.Lock()
	s.answered++
	id := fmt.Sprintf("%s_%d", s.id, s.answered)
	s.mu.Unlock()
	res := response(req, c, s.model(), id)
	if req.stream {
		sw := newSSE(w, captured(c))
		streamResponse(sw, res)
		s.streamed(sw)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(CaptureHeader, captured(c))
	_ = json.NewEncoder(w).Encode(res)
}

// streamed counts a stream the harness dropped before its end.
func (s *Seat) streamed(sw *sseWriter) {
	if sw.err == nil {
		return
	}
	s.mu.Lock()
	s.stats.Dropped++
	s.mu.Unlock()
}

// model is the model the seat's calls ask for.
func (s *Seat) model() string {
	if s.opts.LLM != nil {
		return s.opts.LLM.Model
	}
	return s.client.Config().Model
}

func (s *Seat) refused() {
	s.mu.Lock()
	s.stats.Refused++
	s.mu.Unlock()
}

func (s *Seat) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{
		map[string]any{"id": s.model(), "object": "model", "owned_by": "troupe"},
	}})
}

// toolDef is one of the seat's tools.
type toolDef struct {
	name, description string
	schema            json.RawMessage
}

func (s *Seat) tools() []toolDef {
	return []toolDef{
		{ToolObserve, "Observe the game: wait until it is your turn (or the game is over) and see the state, the messages you were sent and how to move.",
			argSchemas().observe},
		{ToolAct, "Make your move when it is your turn.", s.schema},
	}
}

// listTools answers the tools as OpenAI function tools, ready for a chat
// request's "tools".
func (s *Seat) listTools(w http.ResponseWriter, _ *http.Request) {
	var out []any
	for _, t := range s.tools() {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{
			"name": t.name, "description": t.description, "parameters": t.schema,
		}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// ToolResult is a tool call's outcome: its text for the model, whether it
// failed, and for observe the observation.
type ToolResult struct {
	Content     string       `json:"content"`
	IsError     bool         `json:"is_error"`
	Observation *Observation `json:"observation,omitempty"`
}

// CallTool runs one of the seat's tools with its JSON arguments; via names
// the transport (NoteTool: "mcp" or "function"). An error is the call's
// failure (the context's, or an unknown tool); a move the table refuses is
// a result with IsError, for the model to read.
func (s *Seat) CallTool(ctx context.Context, name string, args json.RawMessage, via string) (*ToolResult, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	switch name {
	case ToolObserve:
		o, err := s.Observe(ctx)
		if err != nil {
			if errors.Is(err, table.ErrLeft) {
				return &ToolResult{Content: "You have left the game: " + err.Error(), IsError: true}, nil
			}
			return nil, err
		}
		return &ToolResult{Content: o.Text, Observation: o}, nil
	case ToolAct:
		text, err := s.moveText(args)
		if err != nil {
			return &ToolResult{Content: err.Error(), IsError: true}, nil
		}
		err = s.Act(ctx, text, ToolAct+"/"+via)
		switch {
		case err == nil:
			return &ToolResult{Content: "Move accepted: " + text}, nil
		case ctx.Err() != nil:
			return nil, err
		}
		return &ToolResult{Content: "Move refused: " + err.Error(), IsError: true}, nil
	}
	return nil, fmt.Errorf("%w: no tool %q (observe, act)", ErrBadMove, name)
}

func (s *Seat) callTool(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
		return
	}
	res, err := s.CallTool(r.Context(), r.PathValue("name"), body, "function")
	switch {
	case errors.Is(err, ErrBadMove):
		openAIError(w, http.StatusNotFound, "invalid_request_error", err.Error())
		return
	case err != nil:
		openAIError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

// mcpServer is the seat's MCP server: observe and act, with the same
// schemas and results as the function tools.
func (s *Seat) mcpServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "troupe-seat-" + s.id, Version: "1"}, nil)
	for _, t := range s.tools() {
		srv.AddTool(&mcp.Tool{Name: t.name, Description: t.description, InputSchema: t.schema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				res, err := s.CallTool(ctx, t.name, req.Params.Arguments, "mcp")
				if err != nil {
					return nil, err
				}
				out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Content}}, IsError: res.IsError}
				if res.Observation != nil {
					out.StructuredContent = res.Observation
				}
				return out, nil
			})
	}
	return srv
}
