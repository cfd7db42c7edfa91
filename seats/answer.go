package seats

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/policies/llm"
)

// A seat streams (stream true, server-sent events) what it forwarded whole:
// the model server is asked without stream, so that the capture is the one
// of a whole answer (the server's token ids, log-probs and usage, checked
// together), and the answer is then written to the harness as the events
// an OpenAI server sends, its text cut in pieces of at most streamPiece
// bytes. The harness gets its first event when the whole answer is there.
// The call is recorded for the seat's next move before the first event is
// written: a harness that drops the stream half-way loses nothing of the
// capture, and a call it makes again is a call of its own (Stats.Dropped
// counts the streams dropped).
const streamPiece = 64

// pieces cuts s into pieces of at most streamPiece bytes, never inside a
// UTF-8 sequence; one empty piece for an empty s.
func pieces(s string) []string {
	if s == "" {
		return []string{""}
	}
	var out []string
	for len(s) > 0 {
		n := min(streamPiece, len(s))
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			n = min(streamPiece, len(s)) // not UTF-8: cut anyway
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// sseWriter writes server-sent events, flushing each; after a write fails
// (the harness went away) it writes nothing more and err says why.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	seq int // the Responses events' sequence_number
	err error
}

func newSSE(w http.ResponseWriter, capture string) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set(CaptureHeader, capture)
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// data writes one event: its name's line unless name is "", then data.
func (s *sseWriter) data(name string, data []byte) {
	if s.err != nil {
		return
	}
	buf := make([]byte, 0, len(data)+len(name)+16)
	if name != "" {
		buf = append(append(append(buf, "event: "...), name...), '\n')
	}
	buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		s.err = err
		return
	}
	// A writer that cannot flush (a middleware's) sends the events when
	// the handler returns: late, but whole.
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
}

// event writes a Responses stream event: v, a JSON object, with its type
// and sequence number.
func (s *sseWriter) event(typ string, v map[string]any) {
	v["type"], v["sequence_number"] = typ, s.seq
	s.seq++
	b, err := json.Marshal(v)
	if err != nil {
		s.err = fmt.Errorf("encoding %s: %w", typ, err)
		return
	}
	s.data(typ, b)
}

// chatAnswer is a chat completion answer, as much of it as a stream
// repeats.
type chatAnswer struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content          *string        `json:"content"`
			ReasoningContent *string        `json:"reasoning_content"`
			ToolCalls        []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// streamChat writes a whole chat completion answer as the chunks of a
// streamed one (chat.completion.chunk): the role, the content in pieces,
// each tool call's name then its arguments in pieces, the finish reason,
// and, when the harness asked (stream_options.include_usage), a last
// chunk with the usage; then [DONE].
func streamChat(s *sseWriter, raw []byte, includeUsage bool) {
	var a chatAnswer
	if err := json.Unmarshal(raw, &a); err != nil || len(a.Choices) == 0 {
		// Forward checked the answer has a choice: this cannot be.
		s.err = fmt.Errorf("re-reading the answer: %v", err)
		return
	}
	ch := &a.Choices[0]
	chunk := func(delta any, finish *string, usage json.RawMessage) {
		c := map[string]any{"id": a.ID, "object": "chat.completion.chunk", "created": a.Created, "model": a.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if usage != nil {
			c["choices"], c["usage"] = []any{}, usage
		}
		b, _ := json.Marshal(c)
		s.data("", b)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if r := ch.Message.ReasoningContent; r != nil && *r != "" {
		for _, p := range pieces(*r) {
			chunk(map[string]any{"reasoning_content": p}, nil, nil)
		}
	}
	if c := ch.Message.Content; c != nil && *c != "" {
		for _, p := range pieces(*c) {
			chunk(map[string]any{"content": p}, nil, nil)
		}
	}
	for i, tc := range ch.Message.ToolCalls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": ""}}}}, nil, nil)
		for _, p := range pieces(tc.Function.Arguments) {
			if p != "" {
				chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil, nil)
			}
		}
	}
	finish := "stop"
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	chunk(map[string]any{}, &finish, nil)
	if includeUsage && len(a.Usage) > 0 {
		chunk(nil, nil, a.Usage)
	}
	s.data("", []byte("[DONE]"))
}

// response is the Response object of a Responses call answered by the
// chat answer c captured: its output items (a message with the text, when
// there is text or nothing else; a function_call per tool call), status
// (incomplete when the model ran out of tokens) and usage, and the request
// fields a Response repeats. model is the seat's; id, unique to the seat's
// responses, makes the response's and items' ids.
func response(req *responsesRequest, c *llm.Capture, model, id string) map[string]any {
	var a chatAnswer
	_ = json.Unmarshal(c.Answer, &a) // Forward read it already
	created := a.Created
	if created == 0 {
		created = time.Now().Unix()
	}
	status, itemStatus := "completed", "completed"
	var incomplete any
	switch c.Finish {
	case "length":
		status, itemStatus, incomplete = "incomplete", "incomplete", map[string]any{"reason": "max_output_tokens"}
	case "content_filter":
		status, itemStatus, incomplete = "incomplete", "incomplete", map[string]any{"reason": "content_filter"}
	}
	var output []any
	if c.Content != "" || len(c.ToolCalls) == 0 {
		output = append(output, map[string]any{"id": "msg_" + id, "type": "message", "role": "assistant", "status": itemStatus,
			"content": []any{map[string]any{"type": "output_text", "text": c.Content, "annotations": []any{}, "logprobs": []any{}}}})
	}
	for i, tc := range c.ToolCalls {
		callID := tc.ID
		if callID == "" {
			callID = fmt.Sprintf("call_%s_%d", id, i)
		}
		output = append(output, map[string]any{"id": fmt.Sprintf("fc_%s_%d", id, i), "type": "function_call", "status": "completed",
			"call_id": callID, "name": tc.Function.Name, "arguments": tc.Function.Arguments})
	}
	r := map[string]any{
		"id": "resp_" + id, "object": "response", "created_at": created, "status": status, "model": model,
		"output": output, "error": nil, "incomplete_details": incomplete,
		"usage": map[string]any{
			"input_tokens": c.Usage.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": c.Usage.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": c.Usage.PromptTokens + c.Usage.CompletionTokens,
		},
		"tools": []any{}, "tool_choice": "auto", "parallel_tool_calls": true, "metadata": map[string]any{},
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "truncation": "disabled", "store": false,
		"previous_response_id": nil, "reasoning": nil, "instructions": nil, "temperature": nil, "top_p": nil, "max_output_tokens": nil,
	}
	for k, v := range req.echo {
		r[k] = v
	}
	return r
}

// streamResponse writes the Response r as the events of a streamed one:
// response.created and response.in_progress (no output yet); for each
// output item its output_item.added, its text (content_part.added,
// output_text.delta in pieces, output_text.done, content_part.done) or
// arguments (function_call_arguments.delta in pieces and .done), and
// output_item.done; then response.completed, or response.incomplete.
func streamResponse(s *sseWriter, r map[string]any) {
	pending := make(map[string]any, len(r))
	for k, v := range r {
		pending[k] = v
	}
	pending["status"], pending["output"], pending["usage"], pending["incomplete_details"] = "in_progress", []any{}, nil, nil
	s.event("response.created", map[string]any{"response": pending})
	s.event("response.in_progress", map[string]any{"response": pending})
	for i, it := range r["output"].([]any) {
		item := it.(map[string]any)
		id := item["id"]
		started := make(map[string]any, len(item))
		for k, v := range item {
			started[k] = v
		}
		started["status"] = "in_progress"
		switch item["type"] {
		case "message":
			part := item["content"].([]any)[0].(map[string]any)
			text := part["text"].(string)
			started["content"] = []any{}
			s.event("response.output_item.added", map[string]any{"output_index": i, "item": started})
			s.event("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
			for _, p := range pieces(text) {
				if p != "" {
					s.event("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
				}
			}
			s.event("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			s.event("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			args := item["arguments"].(string)
			started["arguments"] = ""
			s.event("response.output_item.added", map[string]any{"output_index": i, "item": started})
			for _, p := range pieces(args) {
				if p != "" {
					s.event("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": p})
				}
			}
			s.event("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "name": item["name"], "arguments": args})
		}
		s.event("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	if r["status"] == "incomplete" {
		s.event("response.incomplete", map[string]any{"response": r})
		return
	}
	s.event("response.completed", map[string]any{"response": r})
}
