package seats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrBadRequest marks a model request a seat cannot serve: a Responses
// request (POST /v1/responses) that is not one, or asks for what a seat
// does not do (stored responses, hosted tools, images). The seat answers
// it 400 with the error's text, which names the field. A chat request's
// refusals wrap llm.ErrBadRequest.
var ErrBadRequest = errors.New("bad request")

// responsesRequest is a Responses API request read for forwarding: the
// chat completion request it becomes, and what the answer echoes.
type responsesRequest struct {
	// chat is the chat completion request body sent to the model server
	// (through llm.Client.Forward, which sets the seat's model, sampling
	// and token fields on it).
	chat []byte
	// stream: the harness asked for server-sent events.
	stream bool
	// echo are the request fields the Response object repeats (tools,
	// tool_choice, parallel_tool_calls, instructions, temperature,
	// top_p, max_output_tokens, text), as the harness sent them.
	echo map[string]json.RawMessage
}

// Responses request fields a seat reads but does not forward: they ask
// for server-side state or hosted features a seat does not keep
// (storage, includes, metadata, reasoning summaries, cache keys), and
// dropping them changes nothing the model samples.
var responsesDropped = []string{
	"context_management", "include", "max_tool_calls", "metadata", "prompt_cache_key", "prompt_cache_options",
	"prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store", "stream_options",
	"top_logprobs", "truncation", "user",
}

// Responses request fields that need state a seat does not keep: refused
// unless null (or false).
var responsesStateful = map[string]string{
	"previous_response_id": "a seat keeps no responses: send the whole conversation as input",
	"conversation":         "a seat keeps no conversations: send the whole conversation as input",
	"prompt":               "a seat has no stored prompts: send instructions and input",
	"background":           "a seat answers in the foreground only",
}

// responsesEchoed are the fields the Response object repeats.
var responsesEchoed = []string{"instructions", "max_output_tokens", "parallel_tool_calls", "temperature", "text", "tool_choice", "tools", "top_p"}

// decodeResponses reads a Responses API request (POST /v1/responses, as
// the OpenAI SDKs and the Agents SDK send it) and makes the chat
// completion request the seat forwards:
//
//   - instructions become a first system message; input (a string: one
//     user message; or a list of items) becomes messages: a message item
//     (or a bare {role, content}) a message of its role, developer read as
//     system, its text parts joined; an assistant message and the
//     function_call items after it one assistant message with tool calls;
//     a function_call_output item a tool message;
//   - function tools become chat function tools, tool_choice and
//     text.format (json_schema, json_object) their chat equivalents,
//     max_output_tokens max_tokens; temperature, top_p and
//     parallel_tool_calls are passed as they are;
//   - the fields of responsesDropped are dropped, those of
//     responsesStateful refused unless null or false, model left to the
//     seat; any other field (extra_body's: logit_bias, top_k, seed...) is
//     passed to the chat request as it is.
//
// Every refusal wraps ErrBadRequest and names the field.
func decodeResponses(body []byte) (*responsesRequest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, bad("the body is not a JSON object: %v", err)
	}
	out := &responsesRequest{echo: map[string]json.RawMessage{}}
	chat := map[string]json.RawMessage{}
	var instructions string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		null := isNull(v)
		if slices.Contains(responsesEchoed, k) && !null {
			out.echo[k] = v
		}
		switch {
		case k == "model", k == "input", slices.Contains(responsesDropped, k):
		case responsesStateful[k] != "":
			if !null && string(v) != "false" {
				return nil, bad("%s: %s", k, responsesStateful[k])
			}
		case k == "messages":
			return nil, bad("messages: a Responses request sends input (chat messages go to /v1/chat/completions)")
		case k == "stream":
			if null {
				break
			}
			if err := json.Unmarshal(v, &out.stream); err != nil {
				return nil, bad("stream: want a boolean, got %s", v)
			}
		case k == "instructions":
			if null {
				break
			}
			if err := json.Unmarshal(v, &instructions); err != nil {
				return nil, bad("instructions: want a string, got %s", clip(v))
			}
		case k == "temperature" || k == "top_p":
			if null {
				break
			}
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return nil, bad("%s: want a number, got %s", k, clip(v))
			}
			chat[k] = v
		case k == "max_output_tokens":
			if null {
				break
			}
			var n int
			if err := json.Unmarshal(v, &n); err != nil || n < 1 {
				return nil, bad("max_output_tokens: want a positive integer, got %s", clip(v))
			}
			chat["max_tokens"] = v
		case k == "parallel_tool_calls":
			if null {
				break
			}
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, bad("parallel_tool_calls: want a boolean, got %s", clip(v))
			}
			chat[k] = v
		case k == "tools":
			if null {
				break
			}
			tools, err := chatTools(v)
			if err != nil {
				return nil, bad("%v", err)
			}
			if tools != nil {
				chat["tools"] = tools
			}
		case k == "tool_choice":
			if null {
				break
			}
			tc, err := chatToolChoice(v)
			if err != nil {
				return nil, bad("%v", err)
			}
			chat["tool_choice"] = tc
		case k == "text":
			if null {
				break
			}
			rf, err := chatResponseFormat(v)
			if err != nil {
				return nil, bad("%v", err)
			}
			if rf != nil {
				chat["response_format"] = rf
			}
		default:
			chat[k] = v
		}
	}
	msgs, err := inputMessages(fields["input"], instructions)
	if err != nil {
		return nil, bad("%v", err)
	}
	chat["messages"], err = json.Marshal(msgs)
	if err != nil {
		return nil, bad("input: %v", err)
	}
	if out.chat, err = json.Marshal(chat); err != nil {
		return nil, bad("%v", err)
	}
	return out, nil
}

// isNull reports whether v is JSON null (or absent).
func isNull(v json.RawMessage) bool {
	return len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// clip is v for an error message: at most 80 bytes of it.
func clip(v json.RawMessage) string {
	if len(v) > 80 {
		return string(v[:77]) + "..."
	}
	return string(v)
}

// chatMessage is a message of the chat request a Responses request
// becomes.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// inputItem is an item of a Responses request's input, as much of it as
// a seat reads.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    *string         `json:"call_id"`
	Name      *string         `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// inputMessages makes the chat messages of a Responses request's
// instructions and input (decodeResponses says how).
func inputMessages(raw json.RawMessage, instructions string) ([]chatMessage, error) {
	var msgs []chatMessage
	if instructions != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: &instructions})
	}
	if isNull(raw) {
		return nil, errors.New("input is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return append(msgs, chatMessage{Role: "user", Content: &text}), nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("input: want a string or a list of items, got %s", clip(raw))
	}
	if len(items) == 0 {
		return nil, errors.New("input must not be empty")
	}
	// open is the index of the assistant message that function calls
	// join, or -1 when the last message is not one.
	open := -1
	for i, b := range items {
		var it inputItem
		if err := json.Unmarshal(b, &it); err != nil {
			return nil, fmt.Errorf("input[%d]: want an item object, got %s", i, clip(b))
		}
		switch it.Type {
		case "", "message":
			role := it.Role
			switch role {
			case "developer":
				role = "system"
			case "user", "system", "assistant":
			case "":
				return nil, fmt.Errorf("input[%d]: a message has no role", i)
			default:
				return nil, fmt.Errorf("input[%d]: role %q (user, assistant, system, developer)", i, role)
			}
			text, err := partsText(it.Content, "input_text", "output_text", "text")
			if err != nil {
				return nil, fmt.Errorf("input[%d].content: %v", i, err)
			}
			msgs = append(msgs, chatMessage{Role: role, Content: &text})
			open = -1
			if role == "assistant" {
				open = len(msgs) - 1
			}
		case "function_call":
			if it.CallID == nil || *it.CallID == "" {
				return nil, fmt.Errorf("input[%d]: a function_call has no call_id", i)
			}
			if it.Name == nil || *it.Name == "" {
				return nil, fmt.Errorf("input[%d]: a function_call has no name", i)
			}
			var args string
			if err := json.Unmarshal(it.Arguments, &args); err != nil {
				return nil, fmt.Errorf("input[%d].arguments: want the arguments' JSON as a string, got %s", i, clip(it.Arguments))
			}
			if open < 0 {
				msgs = append(msgs, chatMessage{Role: "assistant"})
				open = len(msgs) - 1
			}
			tc := chatToolCall{ID: *it.CallID, Type: "function"}
			tc.Function.Name, tc.Function.Arguments = *it.Name, args
			msgs[open].ToolCalls = append(msgs[open].ToolCalls, tc)
		case "function_call_output":
			if it.CallID == nil || *it.CallID == "" {
				return nil, fmt.Errorf("input[%d]: a function_call_output has no call_id", i)
			}
			text, err := partsText(it.Output, "input_text", "output_text", "text")
			if err != nil {
				return nil, fmt.Errorf("input[%d].output: %v", i, err)
			}
			msgs = append(msgs, chatMessage{Role: "tool", Content: &text, ToolCallID: *it.CallID})
			open = -1
		case "item_reference":
			return nil, fmt.Errorf("input[%d]: type item_reference: a seat keeps no items, send them whole", i)
		default:
			return nil, fmt.Errorf("input[%d]: type %q: a seat reads message, function_call and function_call_output items", i, it.Type)
		}
	}
	return msgs, nil
}

// partsText reads a content: a string, or a list of parts whose types are
// among kinds (their text joined) or refusals.
func partsText(raw json.RawMessage, kinds ...string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or a list of text parts, got %s", clip(raw))
	}
	var b strings.Builder
	for i, p := range parts {
		switch {
		case p.Type == "refusal" && p.Refusal != nil:
			b.WriteString(*p.Refusal)
		case slices.Contains(kinds, p.Type) && p.Text != nil:
			b.WriteString(*p.Text)
		case slices.Contains(kinds, p.Type):
			return "", fmt.Errorf("part %d (%s) has no text", i, p.Type)
		default:
			return "", fmt.Errorf("part %d is of type %q: a seat forwards text only (%s)", i, p.Type, strings.Join(kinds[:2], ", "))
		}
	}
	return b.String(), nil
}

// chatTools makes chat function tools of a Responses request's tools;
// nil for an empty list.
func chatTools(raw json.RawMessage) (json.RawMessage, error) {
	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, fmt.Errorf("tools: want a list of tools, got %s", clip(raw))
	}
	if len(tools) == 0 {
		return nil, nil
	}
	type function struct {
		Name        string          `json:"name"`
		Description *string         `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	type tool struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	out := make([]tool, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return nil, fmt.Errorf("tools[%d]: type %q: a seat offers function tools only (the harness runs its own)", i, t.Type)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tools[%d]: a function tool has no name", i)
		}
		if isNull(t.Parameters) {
			t.Parameters = nil
		}
		out[i] = tool{"function", function{t.Name, t.Description, t.Parameters, t.Strict}}
	}
	return json.Marshal(out)
}

// chatToolChoice makes a chat tool_choice of a Responses one: "auto",
// "none", "required", or {"type": "function", "name": NAME}.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return raw, nil
		}
		return nil, fmt.Errorf("tool_choice %q: want auto, none, required or a function", s)
	}
	var f struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || f.Type != "function" || f.Name == "" {
		return nil, fmt.Errorf("tool_choice %s: a seat offers function tools only: want {\"type\": \"function\", \"name\": NAME}", clip(raw))
	}
	return json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": f.Name}})
}

// chatResponseFormat makes a chat response_format of a Responses
// request's text: nil for plain text.
func chatResponseFormat(raw json.RawMessage) (json.RawMessage, error) {
	var text struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"format"`
	}
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, fmt.Errorf("text: want an object, got %s", clip(raw))
	}
	if text.Format == nil {
		return nil, nil
	}
	switch f := text.Format; f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`), nil
	case "json_schema":
		if isNull(f.Schema) {
			return nil, errors.New("text.format: a json_schema format has no schema")
		}
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		if f.Description != nil {
			js["description"] = *f.Description
		}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		return json.Marshal(map[string]any{"type": "json_schema", "json_schema": js})
	default:
		return nil, fmt.Errorf("text.format: type %q (text, json_object, json_schema)", f.Type)
	}
}
