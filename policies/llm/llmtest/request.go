package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Request is a chat completion request as the server read it.
type Request struct {
	// Body is the request body exactly as it arrived.
	Body []byte

	Model       string
	Messages    []Message
	Seed        *int64
	Temperature *float64
	MaxTokens   int // max_tokens, or max_completion_tokens; 0 when absent
	Logprobs    bool
	TopLogprobs *int
	// Schema is the JSON schema the answer must follow: response_format's
	// json_schema, or the parameters of the tool the request forces. Nil
	// when the answer is free text.
	Schema json.RawMessage
	// Tool names the function the request forces the model to call; empty
	// when the answer goes in the message content.
	Tool string

	switches map[string]bool // the vendor switches the server answers to
	once     sync.Once
	fields   map[string]json.RawMessage
}

// Fields returns the request's top-level fields, undecoded.
func (r *Request) Fields() map[string]json.RawMessage {
	r.once.Do(func() { _ = json.Unmarshal(r.Body, &r.fields) })
	return r.fields
}

// Flag reports whether the top-level field name is JSON true: the way to
// read a vendor switch such as return_token_ids.
func (r *Request) Flag(name string) bool {
	if on, ok := r.switches[name]; ok {
		return on
	}
	v, ok := r.Fields()[name]
	if !ok {
		return false
	}
	var b bool
	return json.Unmarshal(v, &b) == nil && b
}

// errBadRequest is wrapped by parseRequest's errors; the server answers
// them with 400.
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// parseRequest reads a chat completion body the way an OpenAI-compatible
// server validates it: a model, at least one message, string contents, and
// well-formed sampling fields.
func parseRequest(body []byte) (*Request, error) {
	r := &Request{Body: body}
	var wire struct {
		ReturnTokenIDs         bool `json:"return_token_ids"`
		ReturnPromptTokenIDs   bool `json:"return_prompt_token_ids"`
		ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`

		Model               string    `json:"model"`
		Messages            []Message `json:"messages"`
		Seed                *int64    `json:"seed"`
		Temperature         *float64  `json:"temperature"`
		MaxTokens           int       `json:"max_tokens"`
		MaxCompletionTokens int       `json:"max_completion_tokens"`
		Logprobs            bool      `json:"logprobs"`
		TopLogprobs         *int      `json:"top_logprobs"`
		Stream              bool      `json:"stream"`
		ResponseFormat      *struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, badRequest("the body is not a chat request: %v", err)
	}
	r.switches = map[string]bool{
		"return_token_ids": wire.ReturnTokenIDs, "return_prompt_token_ids": wire.ReturnPromptTokenIDs,
		"return_tokens_as_token_ids": wire.ReturnTokensAsTokenIDs,
	}
	switch {
	case wire.Model == "":
		return nil, badRequest("model is required")
	case len(wire.Messages) == 0:
		return nil, badRequest("messages must not be empty")
	case wire.Stream:
		return nil, badRequest("this test server does not stream")
	case wire.MaxTokens < 0 || wire.MaxCompletionTokens < 0:
		return nil, badRequest("max_tokens must be positive")
	case wire.TopLogprobs != nil && !wire.Logprobs:
		return nil, badRequest("top_logprobs requires logprobs to be true")
	}
	for i, m := range wire.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool", "developer":
		default:
			return nil, badRequest("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	r.Model, r.Messages, r.Seed, r.Temperature = wire.Model, wire.Messages, wire.Seed, wire.Temperature
	r.MaxTokens = wire.MaxTokens
	if wire.MaxCompletionTokens > 0 {
		r.MaxTokens = wire.MaxCompletionTokens
	}
	r.Logprobs, r.TopLogprobs = wire.Logprobs, wire.TopLogprobs
	if rf := wire.ResponseFormat; rf != nil {
		switch rf.Type {
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
				return nil, badRequest("response_format json_schema without a schema")
			}
			r.Schema = rf.JSONSchema.Schema
		case "json_object":
			r.Schema = json.RawMessage(`{"type":"object"}`)
		case "text", "":
		default:
			return nil, badRequest("response_format type %q", rf.Type)
		}
	}
	if len(wire.Tools) > 0 {
		name, err := forcedTool(wire.ToolChoice, len(wire.Tools), wire.Tools[0].Function.Name)
		if err != nil {
			return nil, err
		}
		if name != "" {
			found := false
			for _, t := range wire.Tools {
				if t.Function.Name == name {
					r.Tool, r.Schema, found = name, t.Function.Parameters, true
				}
			}
			if !found {
				return nil, badRequest("tool_choice names %q, which is not among the tools", name)
			}
		}
	}
	return r, nil
}

// forcedTool returns the tool a request makes the model call: the one
// tool_choice names, or the only tool under "required" or "auto".
func forcedTool(choice json.RawMessage, tools int, first string) (string, error) {
	if len(choice) == 0 {
		choice = json.RawMessage(`"auto"`)
	}
	var mode string
	if json.Unmarshal(choice, &mode) == nil {
		switch mode {
		case "none":
			return "", nil
		case "auto", "required":
			if tools == 1 {
				return first, nil
			}
			return "", badRequest("tool_choice %q with %d tools: this test server needs one tool or a named choice", mode, tools)
		}
		return "", badRequest("tool_choice %q", mode)
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(choice, &named); err != nil || named.Function.Name == "" {
		return "", badRequest("tool_choice must be a mode or name a function")
	}
	return named.Function.Name, nil
}
