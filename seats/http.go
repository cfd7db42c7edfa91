package seats

import (
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
//	POST /v1/chat/completions  the seat's model (OpenAI-compatible, not streamed)
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

// chat forwards one chat completion and records it for the seat's next
// move.
func (s *Seat) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		s.refused()
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf("the request body is larger than %d bytes", s.opts.MaxBody))
			return
		}
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
		return
	}
	c, err := s.client.Forward(r.Context(), body, llm.ForwardOptions{Seed: s.callSeed()})
	if err != nil {
		s.refused()
		if errors.Is(err, llm.ErrBadRequest) {
			openAIError(w, http.StatusBadRequest, "invalid_request_error", "seat "+s.id+": "+err.Error())
		} else {
			openAIError(w, http.StatusBadGateway, "upstream_error", "seat "+s.id+": the model server: "+err.Error())
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if c.Status < 200 || c.Status > 299 {
		s.refused()
		w.WriteHeader(c.Status)
		_, _ = w.Write(c.Answer)
		return
	}
	s.record(c)
	if c.Trainable() {
		w.Header().Set(CaptureHeader, "trainable")
	} else {
		w.Header().Set(CaptureHeader, "evaluation-only; "+strings.ReplaceAll(c.EvalOnly, "\n", " "))
	}
	w.WriteHeader(c.Status)
	_, _ = w.Write(c.Answer)
}

func (s *Seat) refused() {
	s.mu.Lock()
	s.stats.Refused++
	s.mu.Unlock()
}

func (s *Seat) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{
		map[string]any{"id": s.client.Config().Model, "object": "model", "owned_by": "troupe"},
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
