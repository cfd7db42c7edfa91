package llm

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
)

func TestActionAnswerParse(t *testing.T) {
	legal := board(0, "a1", "b2")
	free := board(0)
	for _, tc := range []struct {
		name   string
		obs    *agents.Observation
		answer string
		want   string
		err    string
	}{
		{"legal", legal, `{"action":"b2"}`, "b2", ""},
		{"spaces around", legal, " {\"action\": \"a1\"}\n", "a1", ""},
		{"illegal keeps the reading", legal, `{"action":"c3"}`, "c3", `"c3" is not a legal action; legal: a1, b2`},
		{"case matters", legal, `{"action":"B2"}`, "B2", "not a legal action"},
		{"prose", legal, `I play b2`, "", "not a JSON object"},
		{"code fence", legal, "```json\n{\"action\":\"b2\"}\n```", "", "not a JSON object"},
		{"trailing text", legal, `{"action":"b2"} done`, "", "not a JSON object"},
		{"two objects", legal, `{"action":"b2"}{"action":"a1"}`, "", "not a JSON object"},
		{"null", legal, `null`, "", "null, not a JSON object"},
		{"array", legal, `["b2"]`, "", "not a JSON object"},
		{"missing action", legal, `{"move":"b2"}`, "", `no "action" field (it has: move)`},
		{"key case matters", legal, `{"Action":"b2"}`, "", `no "action" field`},
		{"extra field", legal, `{"action":"b2","why":"center","z":1}`, "", `fields besides "action": why, z`},
		{"number", legal, `{"action":2}`, "", `"action" is 2, not a string`},
		{"free text", free, `{"action":"raise 10"}`, "raise 10", ""},
		{"free blank", free, `{"action":"  "}`, "  ", "blank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ActionAnswer().Parse(tc.obs, tc.answer)
			assert.Equal(t, tc.want, got)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidAnswer)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func FuzzActionAnswerParse(f *testing.F) {
	for _, s := range []string{`{"action":"a1"}`, `{"action":"zz"}`, `{}`, `null`, `{"action":1}`, `{"action":"a1","x":0}`, "\x00", `{"action":"\u0061\u0031"}`} {
		f.Add(s)
	}
	obs := board(0, "a1", "b2", "c3")
	f.Fuzz(func(t *testing.T, answer string) {
		got, err := ActionAnswer().Parse(obs, answer)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnswer) {
				t.Fatalf("error %v does not wrap ErrInvalidAnswer", err)
			}
			return
		}
		if !slices.Contains(obs.Legal, got) {
			t.Fatalf("accepted %q from %q, which is not legal", got, answer)
		}
	})
}

func TestActionAnswerSchema(t *testing.T) {
	var s map[string]any
	require.NoError(t, json.Unmarshal(ActionAnswer().Schema(board(0, "a1", `q"uote`)), &s))
	assert.Equal(t, []any{"a1", `q"uote`}, s["properties"].(map[string]any)["action"].(map[string]any)["enum"])
	require.NoError(t, json.Unmarshal(ActionAnswer().Schema(board(0)), &s))
	assert.Equal(t, map[string]any{"type": "string", "minLength": 1.0}, s["properties"].(map[string]any)["action"])
}

// TestActionSchemaBytes pins the generated schema's bytes: they ride in
// every model request, and the requests the goldens pin must not change.
func TestActionSchemaBytes(t *testing.T) {
	assert.Equal(t, `{"type":"object","properties":{"action":{"type":"string","enum":["a1","q\"uote","\u003cb\u003e"]}},"required":["action"],"additionalProperties":false}`,
		string(ActionAnswer().Schema(board(0, "a1", `q"uote`, "<b>"))))
	assert.Equal(t, `{"type":"object","properties":{"action":{"type":"string","minLength":1}},"required":["action"],"additionalProperties":false}`,
		string(ActionAnswer().Schema(board(0))))
}

func TestObjectAnswer(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"give":{"type":"integer"}},"required":["give"]}`)
	a := ObjectAnswer(schema, `a JSON object {"give": N}`, func(_ *agents.Observation, obj map[string]json.RawMessage) error {
		if string(obj["give"]) == "0" {
			return errors.New("give at least one")
		}
		return nil
	})
	got, err := a.Parse(board(0), "{ \"give\" : 3 }")
	require.NoError(t, err)
	assert.Equal(t, `{"give":3}`, got)
	got, err = a.Parse(board(0), `{"give":0}`)
	require.ErrorIs(t, err, ErrInvalidAnswer)
	assert.Equal(t, `{"give":0}`, got)
	assert.Contains(t, err.Error(), "give at least one")
	_, err = a.Parse(board(0), `[1]`)
	require.ErrorIs(t, err, ErrInvalidAnswer)
	assert.JSONEq(t, string(schema), string(a.Schema(board(0))))
}

// TestInvalidAnswerIsAskedAgain: the first answer is off-schema; with
// feedback, the re-ask shows the model its answer and the reason, and the
// valid second answer is the action, with the second request's tokens.
func TestInvalidAnswerIsAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Record: true, Script: llmtest.FailCalls(1, llmtest.WrongSchema)})
		turn, err := inProcess(t, srv, testConfig(KindVLLM)).Act(t.Context(), board(4, "a1", "b2"))
		require.NoError(t, err)
		a := turn
		assert.Empty(t, a.Invalid)
		assert.Contains(t, []string{"a1", "b2"}, a.Text)
		assert.Equal(t, 2, turn.Notes["llm_attempts"])
		assert.Equal(t, []string{`invalid answer: the object has no "action" field (it has: move)`}, turn.Notes["llm_rejected"])
		reqs := srv.Requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, int64(requestSeed(4, 1)), *reqs[1].Seed, "a re-ask samples with the next seed")
		msgs := a.Generation.Prompt.Messages
		require.Len(t, msgs, 4)
		assert.Equal(t, protocol.ChatMessage{Role: RoleAssistant, Content: `{"move": 42}`}, msgs[2])
		assert.Equal(t, RoleUser, msgs[3].Role)
		assert.True(t, strings.HasPrefix(msgs[3].Content, `Your answer was rejected: the object has no "action" field (it has: move). Answer with a JSON object`), msgs[3].Content)
		assert.Equal(t, llmtest.PromptIDs(reqs[1].Messages), a.Generation.Tokens.Prompt, "the tokens are the accepted attempt's")
	})
}

func TestInvalidAnswerWithoutFeedbackResamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Record: true, Script: llmtest.FailCalls(1, llmtest.Text("b2 please"))})
		cfg := testConfig(KindVLLM)
		cfg.Feedback = false
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(4, "a1", "b2"))
		require.NoError(t, err)
		reqs := srv.Requests()
		require.Len(t, reqs, 2)
		assert.Equal(t, reqs[0].Messages, reqs[1].Messages)
		assert.NotEqual(t, *reqs[0].Seed, *reqs[1].Seed)
		assert.Len(t, turn.Generation.Prompt.Messages, 2)
	})
}

// TestStillInvalidAfterRetries: the action is marked invalid, its text is
// the best reading of the answer, and its tokens are kept: an invalid move
// is exactly what a learner must be penalised for.
func TestStillInvalidAfterRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.Text(`{"action":"e9"}`))})
		cfg := testConfig(KindSGLang)
		cfg.InvalidRetries = 3
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(4, "a1", "b2"))
		require.NoError(t, err)
		a := turn
		assert.Equal(t, "e9", a.Text)
		assert.Equal(t, `invalid answer: "e9" is not a legal action; legal: a1, b2`, a.Invalid)
		assert.Equal(t, 4, turn.Notes["llm_attempts"])
		assert.Len(t, turn.Notes["llm_rejected"], 4)
		require.NotNil(t, a.Generation.Tokens)
		assert.Equal(t, llmtest.CompletionIDs(`{"action":"e9"}`), a.Generation.Tokens.Response)
		assert.Equal(t, 4, srv.Stats().Chat)
	})
}

func TestCutOffAnswerSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{})
		cfg := testConfig(KindVLLM)
		cfg.MaxTokens = ptr(3)
		cfg.InvalidRetries = 0
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(4, "a1", "b2"))
		require.NoError(t, err)
		assert.Contains(t, turn.Invalid, "cut off at the token limit")
		assert.Equal(t, "length", turn.Notes["llm_finish_reason"])
		assert.Equal(t, `{"action"`, turn.Text, "an unreadable answer is passed on as it is")
		assert.Len(t, turn.Generation.Tokens.Response, 3)
	})
}

func TestTextFormat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Record: true, Brain: func(r *llmtest.Request) llmtest.Reply {
			if r.Schema != nil {
				return llmtest.Reply{Text: "schema sent in text format"}
			}
			return llmtest.Reply{Text: " b2\n"}
		}})
		cfg := testConfig(KindVLLM)
		cfg.Format = FormatText
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(4, "a1", "b2"))
		require.NoError(t, err)
		assert.Equal(t, "b2", turn.Text)
		assert.Empty(t, turn.Invalid)
		f := srv.Requests()[0].Fields()
		assert.NotContains(t, f, "response_format")
		assert.NotContains(t, f, "tools")
		last := turn.Generation.Prompt.Messages[len(turn.Generation.Prompt.Messages)-1]
		assert.True(t, strings.HasSuffix(last.Content, "Answer with exactly one of: a1, b2, and nothing else."), last.Content)
	})
}

func TestParseToolCalls(t *testing.T) {
	p := &Policy{cfg: Config{Format: FormatTool}}
	obs := board(0, "a1")
	call := func(name, args string) openaiToolCall { return openaiToolCall{name, args} }
	for _, tc := range []struct {
		name    string
		content string
		calls   []openaiToolCall
		want    string
		err     string
	}{
		{"one call", "", []openaiToolCall{call("act", `{"action":"a1"}`)}, "a1", ""},
		{"no call", `{"action":"a1"}`, nil, `{"action":"a1"}`, "calls no function"},
		{"two calls", "", []openaiToolCall{call("act", `{"action":"a1"}`), call("act", `{"action":"a1"}`)}, "", "makes 2 function calls"},
		{"wrong name", "", []openaiToolCall{call("move", `{"action":"a1"}`)}, "", `calls "move"`},
		{"bad arguments", "", []openaiToolCall{call("act", `{"action":"zz"}`)}, "zz", "not a legal action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, _, err := p.parse(ActionAnswer(), obs, toolCompletion(tc.content, tc.calls))
			assert.Equal(t, tc.want, text)
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidAnswer)
				assert.Contains(t, err.Error(), tc.err)
			}
		})
	}
}

type openaiToolCall struct{ name, args string }

func toolCompletion(content string, calls []openaiToolCall) *completion {
	c := &completion{content: content, finish: "tool_calls"}
	for _, tc := range calls {
		c.toolCalls = append(c.toolCalls, openai.ToolCall{Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: tc.name, Arguments: tc.args}})
	}
	return c
}
