package seats_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
)

// actTool is the act tool as a Responses request names it.
const actTool = `{"type":"function","name":"act","description":"Make your move.","parameters":{"type":"object","properties":{"move":{"type":"object"}},"required":["move"]},"strict":false}`

// responsesBody is a Responses request as the Python Agents SDK sends it:
// instructions, the input items, one function tool that the model must
// call, and the fields the seat drops.
func responsesBody(stream bool, input string) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"gpt-4.1","instructions":"You negotiate.","input":` + input + `,"include":[],"tools":[` + actTool +
		`],"tool_choice":"required","parallel_tool_calls":false,"max_output_tokens":100,"store":null,"stream":` + s + `}`
}

// firstInput is a first call's input: the observation as a user message.
const firstInput = `[{"content":"Your move?","role":"user"}]`

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data []byte
}

// readSSE reads a stream's events to its end.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = []byte(strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// postStream posts body and returns the status, headers and events.
func postStream(t *testing.T, url, body string) (int, http.Header, []sseEvent) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return resp.StatusCode, resp.Header, readSSE(t, resp.Body)
}

// respObject is what a test reads of a Response object.
type respObject struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Output []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		In    int `json:"input_tokens"`
		Out   int `json:"output_tokens"`
		Total int `json:"total_tokens"`
	} `json:"usage"`
	ToolChoice string          `json:"tool_choice"`
	Tools      json.RawMessage `json:"tools"`
}

// TestSeatResponses: a harness that speaks the Responses API (as the
// Python Agents SDK does) calls the seat's model twice in a turn, the
// second time with the first's function call and its output in the
// input, and moves; streamed and not, the answers are the same, and the
// turn's sample has the server's tokens of the last call with the first
// kept in its notes.
func TestSeatResponses(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "whole"
		if stream {
			name = "streamed"
		}
		t.Run(name, func(t *testing.T) {
			setup, res := negotiation(t, 3)
			h, srv := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
			call := func(input string) respObject {
				t.Helper()
				var r respObject
				if !stream {
					code, hdr, b := post(t, h.url+"/v1/responses", responsesBody(false, input))
					require.Equal(t, 200, code, string(b))
					require.Equal(t, "trainable", hdr.Get(seats.CaptureHeader))
					require.NoError(t, json.Unmarshal(b, &r))
					return r
				}
				_, hdr, evs := postStream(t, h.url+"/v1/responses", responsesBody(true, input))
				require.Equal(t, "trainable", hdr.Get(seats.CaptureHeader))
				var types []string
				var args strings.Builder
				for i, ev := range evs {
					var e struct {
						Type     string          `json:"type"`
						Seq      int             `json:"sequence_number"`
						Delta    string          `json:"delta"`
						Args     string          `json:"arguments"`
						Response json.RawMessage `json:"response"`
					}
					require.NoError(t, json.Unmarshal(ev.data, &e), string(ev.data))
					require.Equal(t, ev.name, e.Type, "the event's name is its type")
					require.Equal(t, i, e.Seq)
					types = append(types, e.Type)
					switch e.Type {
					case "response.function_call_arguments.delta":
						args.WriteString(e.Delta)
					case "response.function_call_arguments.done":
						require.Equal(t, args.String(), e.Args, "the deltas make the arguments")
					case "response.completed":
						require.NoError(t, json.Unmarshal(e.Response, &r))
					}
				}
				require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
					"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
					"response.completed"}, types)
				return r
			}

			code, _, b := post(t, h.url+"/tools/observe", `{}`)
			require.Equal(t, 200, code, string(b))
			first := call(firstInput)
			require.Equal(t, "response", first.Object)
			require.Equal(t, "completed", first.Status)
			require.Equal(t, "seat-model", first.Model, "the seat names the model")
			require.Equal(t, "required", first.ToolChoice, "the request's fields are echoed")
			require.JSONEq(t, "["+actTool+"]", string(first.Tools))
			require.Len(t, first.Output, 1)
			fc := first.Output[0]
			require.Equal(t, "function_call", fc.Type)
			require.Equal(t, "act", fc.Name)
			require.Equal(t, "{}", fc.Arguments, "the fake model's call under act's schema")
			require.NotEmpty(t, fc.CallID)
			require.Positive(t, first.Usage.In)
			require.Equal(t, first.Usage.In+first.Usage.Out, first.Usage.Total)

			// The harness ran the tool (a bad move) and asks again, with
			// the call and its output in the input, as the SDK replays
			// them.
			item, _ := json.Marshal(map[string]any{"type": "function_call", "id": fc.ID, "call_id": fc.CallID, "name": fc.Name, "arguments": fc.Arguments, "status": "completed"})
			out, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": fc.CallID, "output": "Move refused: no move"})
			second := call(`[{"content":"Your move?","role":"user"},` + string(item) + `,` + string(out) + `]`)
			require.Equal(t, "function_call", second.Output[0].Type)
			require.NotEqual(t, first.ID, second.ID)

			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			var sent struct {
				Messages []struct {
					Role       string  `json:"role"`
					Content    *string `json:"content"`
					ToolCallID string  `json:"tool_call_id"`
					ToolCalls  []struct {
						ID       string `json:"id"`
						Function struct {
							Name, Arguments string
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"messages"`
				Tools []struct {
					Type     string `json:"type"`
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tools"`
				ToolChoice string `json:"tool_choice"`
				MaxTokens  int    `json:"max_tokens"`
				Stream     *bool  `json:"stream"`
				Include    any    `json:"include"`
			}
			require.NoError(t, json.Unmarshal(reqs[1].Body, &sent))
			require.Nil(t, sent.Stream, "the server is asked for the whole answer")
			require.Nil(t, sent.Include, "Responses-only fields are dropped")
			require.Equal(t, "required", sent.ToolChoice)
			require.Equal(t, 100, sent.MaxTokens)
			require.Equal(t, "act", sent.Tools[0].Function.Name)
			require.Len(t, sent.Messages, 4)
			require.Equal(t, "system", sent.Messages[0].Role)
			require.Equal(t, "You negotiate.", *sent.Messages[0].Content)
			require.Equal(t, "user", sent.Messages[1].Role)
			require.Equal(t, "assistant", sent.Messages[2].Role)
			require.Equal(t, fc.CallID, sent.Messages[2].ToolCalls[0].ID)
			require.Equal(t, "act", sent.Messages[2].ToolCalls[0].Function.Name)
			require.Equal(t, "tool", sent.Messages[3].Role)
			require.Equal(t, fc.CallID, sent.Messages[3].ToolCallID)
			require.Equal(t, "Move refused: no move", *sent.Messages[3].Content)

			code, _, b = post(t, h.url+"/tools/act", `{"move":{"type":"walk"}}`)
			require.Equal(t, 200, code, string(b))
			<-h.tb.Done()
			rec := h.tb.Record()
			require.Equal(t, protocol.StatusCompleted, rec.Status)
			var alice []protocol.Sample
			for _, s := range samples(t, res, rec) {
				if s.Metadata.Agent == "alice" {
					alice = append(alice, s)
				}
			}
			require.Len(t, alice, 1)
			s := alice[0]
			require.False(t, s.Metadata.TextOnly)
			require.Equal(t, 2, s.Metadata.Extra[seats.NoteCalls])
			require.Len(t, s.Metadata.Extra[seats.NoteEarlier], 1, "the first call is kept, not trained")
			require.Equal(t, second.Usage.Out, s.ResponseLength)
			require.Len(t, s.Tokens, second.Usage.In+second.Usage.Out)
			require.Equal(t, "tool", s.Prompt.Messages[3].Role)
			st := h.seat.Stats()
			require.Equal(t, seats.Stats{Calls: 2, Trainable: 2, Moves: 1}, st)
		})
	}
}

// TestSeatChatStream: a streamed chat completion is answered in
// chat.completion.chunk events that make the whole answer, with the usage
// when asked, and [DONE]; the server is asked without stream.
func TestSeatChatStream(t *testing.T) {
	setup, _ := negotiation(t, 3)
	h, srv := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	for _, tc := range []struct {
		name, body string
		tool       bool
	}{
		{"text", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Your move?"}]}`, false},
		{"tool", `{"model":"m","stream":true,"tool_choice":"required","tools":[{"type":"function","function":{"name":"act","parameters":{"type":"object","properties":{"action":{"type":"string","enum":["walk"]}}}}}],"messages":[{"role":"user","content":"Your move?"}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hdr, evs := postStream(t, h.url+"/v1/chat/completions", tc.body)
			require.Equal(t, "trainable", hdr.Get(seats.CaptureHeader))
			require.Equal(t, "[DONE]", string(evs[len(evs)-1].data))
			var content, args strings.Builder
			var finish string
			var usage map[string]any
			for _, ev := range evs[:len(evs)-1] {
				require.Empty(t, ev.name, "chat chunks are data lines alone")
				var c struct {
					Object  string `json:"object"`
					Choices []struct {
						Delta struct {
							Content   string `json:"content"`
							ToolCalls []struct {
								Index    int `json:"index"`
								Function struct {
									Name      string `json:"name"`
									Arguments string `json:"arguments"`
								} `json:"function"`
							} `json:"tool_calls"`
						} `json:"delta"`
						FinishReason *string `json:"finish_reason"`
					} `json:"choices"`
					Usage map[string]any `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(ev.data, &c), string(ev.data))
				require.Equal(t, "chat.completion.chunk", c.Object)
				if c.Usage != nil {
					usage = c.Usage
					require.Empty(t, c.Choices)
					continue
				}
				content.WriteString(c.Choices[0].Delta.Content)
				for _, tc := range c.Choices[0].Delta.ToolCalls {
					args.WriteString(tc.Function.Arguments)
				}
				if f := c.Choices[0].FinishReason; f != nil {
					finish = *f
				}
			}
			if tc.tool {
				require.Equal(t, `{"action":"walk"}`, args.String())
				require.Equal(t, "tool_calls", finish)
				require.Nil(t, usage, "no usage unless asked")
			} else {
				require.Equal(t, "ok", content.String())
				require.Equal(t, "stop", finish)
				require.NotNil(t, usage)
				require.Positive(t, usage["prompt_tokens"])
			}
			reqs := srv.Requests()
			require.NotContains(t, string(reqs[len(reqs)-1].Body), `"stream`)
		})
	}
	require.Equal(t, 2, h.seat.Stats().Calls)
}

// TestSeatResponsesBadRequests: a Responses request a seat cannot serve is
// refused 400, before the server is asked, with a message that names what
// was wrong.
func TestSeatResponsesBadRequests(t *testing.T) {
	setup, _ := negotiation(t, 3)
	h, srv := serve(t, llmtest.LlamaCpp, table.Config{Setup: setup, Open: []int{0}}, seats.Options{MaxBody: 1 << 12})
	for _, tc := range []struct {
		path, body, want string
		code             int
	}{
		{"responses", `[1]`, "not a JSON object", 400},
		{"responses", `{"model":"m"}`, "input is required", 400},
		{"responses", `{"input":[]}`, "input must not be empty", 400},
		{"responses", `{"input":"x","stream":"yes"}`, "stream: want a boolean", 400},
		{"responses", `{"input":"x","previous_response_id":"resp_1"}`, "previous_response_id: a seat keeps no responses", 400},
		{"responses", `{"input":"x","background":true}`, "background", 400},
		{"responses", `{"input":"x","tools":[{"type":"web_search"}]}`, `tools[0]: type "web_search"`, 400},
		{"responses", `{"input":"x","tool_choice":{"type":"file_search"}}`, "tool_choice", 400},
		{"responses", `{"input":"x","max_output_tokens":0}`, "max_output_tokens: want a positive integer", 400},
		{"responses", `{"input":"x","temperature":"hot"}`, "temperature: want a number", 400},
		{"responses", `{"input":"x","text":{"format":{"type":"json_schema"}}}`, "has no schema", 400},
		{"responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, `input[0].content: part 0 is of type "input_image"`, 400},
		{"responses", `{"input":[{"type":"function_call","name":"act","arguments":"{}"}]}`, "input[0]: a function_call has no call_id", 400},
		{"responses", `{"input":[{"type":"function_call","call_id":"c","name":"act","arguments":{}}]}`, "input[0].arguments: want the arguments' JSON as a string", 400},
		{"responses", `{"input":[{"type":"function_call_output","output":"x"}]}`, "function_call_output has no call_id", 400},
		{"responses", `{"input":[{"type":"reasoning","summary":[]}]}`, `input[0]: type "reasoning"`, 400},
		{"responses", `{"input":[{"type":"item_reference","id":"x"}]}`, "item_reference", 400},
		{"responses", `{"input":[{"role":"robot","content":"x"}]}`, `role "robot"`, 400},
		{"responses", `{"input":[{"content":"x"}]}`, "has no role", 400},
		{"responses", `{"messages":[]}`, "messages: a Responses request sends input", 400},
		{"responses", `{"input":"` + strings.Repeat("x", 5<<10) + `"}`, "larger than 4096 bytes", 413},
		{"chat/completions", `{"model":"m","stream":1,"messages":[{"role":"user","content":"x"}]}`, "stream: want a boolean", 400},
		{"chat/completions", `{"model":"m","stream":true,"stream_options":[],"messages":[{"role":"user","content":"x"}]}`, "stream_options", 400},
	} {
		code, _, b := post(t, h.url+"/v1/"+tc.path, tc.body)
		require.Equal(t, tc.code, code, string(b))
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &e), string(b))
		require.Contains(t, e.Error.Message, tc.want)
		require.Equal(t, "invalid_request_error", e.Error.Type)
	}
	require.Zero(t, srv.Stats().Chat, "nothing reached the model server")
	require.Equal(t, 23, h.seat.Stats().Refused)
}

// TestSeatResponsesUpstreamError: a server's refusal is relayed as it came,
// streamed request or not, with nothing recorded.
func TestSeatResponsesUpstreamError(t *testing.T) {
	setup, _ := negotiation(t, 3)
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp, Script: llmtest.Always(llmtest.Status(400, ""))})
	h := seatOn(t, srv, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	for _, stream := range []bool{false, true} {
		code, hdr, b := post(t, h.url+"/v1/responses", responsesBody(stream, firstInput))
		require.Equal(t, 400, code, string(b))
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		require.Contains(t, string(b), "injected fault")
	}
	require.Equal(t, seats.Stats{Refused: 2}, h.seat.Stats())
}

// TestSeatStreamDropped: a harness that drops a stream half-way loses
// nothing (the call is recorded once, before the first event) and
// duplicates nothing (its next call is a call of its own); the move's
// sample is the last call's, the dropped one kept in the notes.
func TestSeatStreamDropped(t *testing.T) {
	setup, res := negotiation(t, 3)
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp, Record: true,
		Brain: llmtest.Fixed(strings.Repeat("a long answer, streamed in many pieces. ", 40))})
	h := seatOn(t, srv, table.Config{Setup: setup, Open: []int{0}}, seats.Options{})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"Your move?"}]}`

	// Over HTTP: read the first event, then hang up.
	resp, err := http.Post(h.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: "), line)
	require.NoError(t, resp.Body.Close())

	// In process: a writer that fails after its first event, as a
	// connection that broke.
	req, err := http.NewRequestWithContext(t.Context(), "POST", "/v1/responses", strings.NewReader(responsesBody(true, firstInput)))
	require.NoError(t, err)
	fw := &failingWriter{header: http.Header{}}
	h.seat.Handler().ServeHTTP(fw, req)
	require.Equal(t, 2, fw.writes, "the first event, then the failed write")

	// The harness asks again, whole, and moves.
	code, _, b := post(t, h.url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Your move?"}]}`)
	require.Equal(t, 200, code, string(b))
	code, _, b = post(t, h.url+"/tools/act", `{"move":{"type":"walk"}}`)
	require.Equal(t, 200, code, string(b))
	<-h.tb.Done()

	require.Equal(t, 3, srv.Stats().Chat, "each call reached the server once")
	st := h.seat.Stats()
	require.Equal(t, 3, st.Calls)
	require.Equal(t, 1, st.Moves)
	require.GreaterOrEqual(t, st.Dropped, 1, "the in-process drop is seen; the HTTP one may have been buffered whole")
	var alice []protocol.Sample
	for _, s := range samples(t, res, h.tb.Record()) {
		if s.Metadata.Agent == "alice" {
			alice = append(alice, s)
		}
	}
	require.Len(t, alice, 1)
	require.Equal(t, 3, alice[0].Metadata.Extra[seats.NoteCalls], "every call belongs to the turn, once")
	require.Len(t, alice[0].Metadata.Extra[seats.NoteEarlier], 2)
	require.False(t, alice[0].Metadata.TextOnly)
}

// failingWriter is a ResponseWriter whose writes fail after the first.
type failingWriter struct {
	header http.Header
	writes int
}

func (w *failingWriter) Header() http.Header { return w.header }
func (w *failingWriter) WriteHeader(int)     {}
func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes > 1 {
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

// seatOn seats alice of cfg's table for a harness whose model calls go to
// the fake server srv, of kind llamacpp.
func seatOn(t *testing.T, srv *llmtest.Server, cfg table.Config, opts seats.Options) *harness {
	t.Helper()
	lc := llm.DefaultConfig()
	lc.BaseURL, lc.Kind, lc.Model = "http://llmtest.invalid/v1", llm.KindLlamaCpp, "seat-model"
	lc.Temperature = new(float64)
	client, err := llm.NewClient(lc, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	return seatFor(t, client, cfg, opts)
}
