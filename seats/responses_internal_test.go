package seats

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeResponses: whatever the body, decodeResponses either refuses
// it with ErrBadRequest or makes a chat request: a JSON object with
// messages of the chat roles, none of the Responses-only fields.
func FuzzDecodeResponses(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi"}`,
		`{"model":"m","instructions":"be brief","input":[{"role":"user","content":"x"}],"stream":true,"store":false,"include":[]}`,
		`{"input":[{"role":"developer","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b","annotations":[]}]},{"type":"function_call","call_id":"c1","name":"act","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"ok"}]}]}`,
		`{"input":"x","tools":[{"type":"function","name":"act","parameters":{"type":"object"},"strict":true}],"tool_choice":{"type":"function","name":"act"},"parallel_tool_calls":false}`,
		`{"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}},"max_output_tokens":5,"temperature":0.5,"top_p":1}`,
		`{"input":"x","previous_response_id":null,"reasoning":{"effort":"low"},"logit_bias":{"{":20}}`,
		`{"input":[{"type":"reasoning"}]}`, `{"input":[]}`, `[]`, `null`, `{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeResponses(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("an error that is not ErrBadRequest: %v", err)
			}
			return
		}
		var chat map[string]json.RawMessage
		if err := json.Unmarshal(req.chat, &chat); err != nil {
			t.Fatalf("the chat request is not a JSON object: %v: %s", err, req.chat)
		}
		for _, k := range append([]string{"input", "instructions", "stream", "max_output_tokens", "text", "previous_response_id"}, responsesDropped...) {
			if _, ok := chat[k]; ok {
				t.Fatalf("the chat request keeps %s: %s", k, req.chat)
			}
		}
		var msgs []chatMessage
		if err := json.Unmarshal(chat["messages"], &msgs); err != nil || len(msgs) == 0 {
			t.Fatalf("no messages (%v): %s", err, req.chat)
		}
		for _, m := range msgs {
			switch m.Role {
			case "system", "user", "assistant", "tool":
			default:
				t.Fatalf("a message of role %q", m.Role)
			}
			if m.Role == "tool" && m.ToolCallID == "" {
				t.Fatal("a tool message without its call's id")
			}
		}
	})
}

// FuzzStreamed: whatever the chat body, streamed either refuses its stream
// fields by name or returns a body without them (or the body as it came,
// when it has none, for Forward to check).
func FuzzStreamed(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":false}`, `{"stream":"yes"}`, `{"stream_options":[]}`, `{"streaming":1}`, `not json`, `{"messages":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, stream, usage, err := streamed(body)
		if err != nil {
			if !strings.Contains(err.Error(), "stream") {
				t.Fatalf("a refusal that does not name the field: %v", err)
			}
			return
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(out, &fields) != nil {
			if string(out) != string(body) {
				t.Fatal("a body that is not JSON was changed")
			}
			return
		}
		if _, ok := fields["stream"]; ok && (stream || usage) {
			t.Fatalf("stream kept in %s", out)
		}
	})
}

// FuzzPieces: a streamed text's pieces make the text, each at most
// streamPiece bytes, and valid UTF-8 when the text is.
func FuzzPieces(f *testing.F) {
	f.Add("")
	f.Add(strings.Repeat("héllo wörld ", 20))
	f.Add(strings.Repeat("€", 50))
	f.Fuzz(func(t *testing.T, s string) {
		ps := pieces(s)
		require.Equal(t, s, strings.Join(ps, ""))
		for _, p := range ps {
			require.LessOrEqual(t, len(p), streamPiece)
			if utf8.ValidString(s) {
				require.True(t, utf8.ValidString(p), "%q", p)
			}
		}
	})
}
