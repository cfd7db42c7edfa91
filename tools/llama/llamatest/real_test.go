package llamatest_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/scenarios/debate"
	"github.com/troupe-rl/troupe/scenarios/negotiation"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// These tests run the real llama-server with the tiny random model, and
// check the API facts docs/llama.md states: the fields that return token
// ids and log-probs, the endpoints that render the chat template and
// tokenize, and json_schema enforcement. They skip when the cache is not
// built (tools/llama/build.sh), unless TROUPE_REQUIRE_LLAMA=1.

// post sends body as JSON to the server's path and decodes the answer
// into out, failing t on any HTTP or decoding error.
func post(t *testing.T, s *llamatest.Server, path string, body, out any) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(s.URL+path, "application/json", bytes.NewReader(data))
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, raw)
	require.NoError(t, json.Unmarshal(raw, out), "%s: %s", path, raw)
}

// tokenLogprob is one entry of logprobs.content (chat, /v1/completions)
// or completion_probabilities (/completion).
type tokenLogprob struct {
	ID      int     `json:"id"`
	Token   string  `json:"token"`
	Bytes   []byte  `json:"bytes"`
	Logprob float64 `json:"logprob"`
}

type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content string `json:"content"`
		} `json:"message"`
		Logprobs *struct {
			Content []tokenLogprob `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

var chat = []map[string]string{
	{"role": "system", "content": "You are alice, a negotiator."},
	{"role": "user", "content": "Split 2 books and a hat with bob."},
}

// Qwen2's chat template opens every turn with <|im_start|>.
const imStart = 151644

func TestRealServerTokensAndLogprobs(t *testing.T) {
	s := shared.Get(t)

	// The chat endpoint: "logprobs": true with "top_logprobs" >= 1 gives
	// one entry per completion token, each with its token id. (With
	// top_logprobs 0 the server returns no logprobs at all.)
	var got chatResponse
	post(t, s, "/v1/chat/completions", map[string]any{
		"model": llamatest.ModelAlias, "messages": chat, "max_tokens": 8, "temperature": 0,
		"logprobs": true, "top_logprobs": 1,
	}, &got)
	assert.Equal(t, llamatest.ModelAlias, got.Model)
	require.Len(t, got.Choices, 1)
	lp := got.Choices[0].Logprobs
	require.NotNil(t, lp)
	require.Len(t, lp.Content, got.Usage.CompletionTokens)
	var chatIDs []int
	for _, tok := range lp.Content {
		assert.False(t, math.IsNaN(tok.Logprob) || math.IsInf(tok.Logprob, 0))
		assert.LessOrEqual(t, tok.Logprob, 0.0)
		assert.Equal(t, tok.Token, string(tok.Bytes))
		chatIDs = append(chatIDs, tok.ID)
	}
	var none chatResponse
	post(t, s, "/v1/chat/completions", map[string]any{
		"messages": chat, "max_tokens": 2, "temperature": 0, "logprobs": true, "top_logprobs": 0,
	}, &none)
	assert.Nil(t, none.Choices[0].Logprobs, "top_logprobs 0 turns log-probs off")

	// The prompt's token ids: /apply-template renders the chat template,
	// /tokenize (parse_special true, the default) tokenizes it into the
	// tokens the chat endpoint counted.
	var tpl struct {
		Prompt string `json:"prompt"`
	}
	post(t, s, "/apply-template", map[string]any{"messages": chat}, &tpl)
	assert.Contains(t, tpl.Prompt, "<|im_start|>assistant\n", "the generation prompt is appended")
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	post(t, s, "/tokenize", map[string]any{"content": tpl.Prompt, "add_special": true, "parse_special": true}, &tok)
	require.Len(t, tok.Tokens, got.Usage.PromptTokens)
	assert.Equal(t, imStart, tok.Tokens[0])

	// Token in, token out: /completion with the prompt as token ids and
	// "return_tokens" gives the completion's ids in "tokens", and
	// "n_probs" their log-probs in "completion_probabilities": the same
	// tokens the chat endpoint sampled.
	var native struct {
		Tokens          []int          `json:"tokens"`
		TokensEvaluated int            `json:"tokens_evaluated"`
		Probs           []tokenLogprob `json:"completion_probabilities"`
	}
	post(t, s, "/completion", map[string]any{
		"prompt": tok.Tokens, "n_predict": 8, "temperature": 0, "return_tokens": true, "n_probs": 1,
	}, &native)
	assert.Equal(t, chatIDs, native.Tokens)
	assert.Equal(t, len(tok.Tokens), native.TokensEvaluated)
	require.Len(t, native.Probs, len(native.Tokens))
	for i, p := range native.Probs {
		assert.Equal(t, native.Tokens[i], p.ID)
		assert.InDelta(t, lp.Content[i].Logprob, p.Logprob, 1e-4, "token %d", i)
	}
}

// TestRealServerSchema checks that a json_schema response format is
// enforced by grammar: even a random model answers a legal negotiation
// action. The reported log-probs are the model's own, before the grammar
// masks tokens out, so they stay below 0 and vary.
func TestRealServerSchema(t *testing.T) {
	s := shared.Get(t)
	pool := negotiation.Pool{Items: []string{"book", "hat", "ball"}, Counts: []int{2, 1, 3}}
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(negotiation.ActionSchema(pool)), &schema))
	// The tiny model's free text is random bytes; "say" is dropped from
	// the schema so that every answer is bounded and decodable.
	for _, alt := range schema["oneOf"].([]any) {
		delete(alt.(map[string]any)["properties"].(map[string]any), "say")
	}
	for seed := range 3 {
		var got chatResponse
		post(t, s, "/v1/chat/completions", map[string]any{
			"messages": chat, "max_tokens": 400, "temperature": 1, "seed": seed,
			"logprobs": true, "top_logprobs": 1,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "action", "strict": true, "schema": schema}},
		}, &got)
		c := got.Choices[0]
		require.Equal(t, "stop", c.FinishReason, "seed %d: the grammar completed: %q", seed, c.Message.Content)
		a, err := negotiation.ParseAction(c.Message.Content, pool)
		require.NoError(t, err, "seed %d: %q", seed, c.Message.Content)
		assert.Contains(t, []string{negotiation.Propose, negotiation.Accept, negotiation.Walk}, a.Type)
		require.NotNil(t, c.Logprobs)
		assert.Len(t, c.Logprobs.Content, got.Usage.CompletionTokens)
	}
}

// TestRealServerDebateSchemas: the debate roles' schemas, with their
// free-text fields cut to 16 bytes so that a random model closes them,
// give answers the scenario's parsers accept.
func TestRealServerDebateSchemas(t *testing.T) {
	s := shared.Get(t)
	short := func(schema string) map[string]any {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(schema, `"maxLength":2000`, `"maxLength":16`)), &v))
		return v
	}
	ask := func(seed int, schema map[string]any) string {
		var got chatResponse
		post(t, s, "/v1/chat/completions", map[string]any{
			"messages": chat, "max_tokens": 300, "temperature": 1, "seed": seed,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "strict": true, "schema": schema}},
		}, &got)
		require.Equal(t, "stop", got.Choices[0].FinishReason, "seed %d: %q", seed, got.Choices[0].Message.Content)
		return got.Choices[0].Message.Content
	}
	verdicts := map[string]bool{}
	for seed := range 3 {
		text := ask(seed, short(debate.SolverSchema))
		a, err := debate.ParseAnswer(text)
		require.NoError(t, err, "%q", text)
		assert.LessOrEqual(t, len(a.Explanation), 16*4, "at most 16 characters of at most 4 bytes")

		text = ask(seed, short(debate.CriticSchema))
		v, err := debate.ParseVerdict(text)
		if err != nil {
			// The schema cannot forbid an objection of blank characters;
			// that is the one answer the rules may still reject.
			require.ErrorIs(t, err, debate.ErrSyntax)
			require.Contains(t, text, `"object"`)
			continue
		}
		verdicts[v.Verdict] = true
	}
	assert.NotEmpty(t, verdicts)
}

// TestRealServerIsDeterministic: at temperature 0 the same request gives
// the same tokens, which is what makes recorded LLM episodes replayable.
func TestRealServerIsDeterministic(t *testing.T) {
	s := shared.Get(t)
	ids := func() []int {
		var got chatResponse
		post(t, s, "/v1/chat/completions", map[string]any{
			"messages": chat, "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 1,
		}, &got)
		var out []int
		for _, tok := range got.Choices[0].Logprobs.Content {
			out = append(out, tok.ID)
		}
		return out
	}
	first := ids()
	assert.Len(t, first, 6)
	assert.Equal(t, first, ids())
}

// TestRealServerEndOfGeneration: a completion that stops on the model's
// end-of-generation token ("stop") ends with that token's id, written as
// "" in the log-probs; /detokenize writes it out ("<|im_end|>"), so the
// text of what the model wrote is the /detokenize of the ids before it. A
// completion cut at max_tokens ("length") ends in ordinary text.
func TestRealServerEndOfGeneration(t *testing.T) {
	s := shared.Get(t)
	ask := func(maxTokens int) chatResponse {
		var got chatResponse
		post(t, s, "/v1/chat/completions", map[string]any{
			"messages": chat, "max_tokens": maxTokens, "temperature": 0, "logprobs": true, "top_logprobs": 1,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "strict": true, "schema": map[string]any{
				"type": "object", "properties": map[string]any{"action": map[string]any{"type": "string", "enum": []string{"a1", "b2"}}},
				"required": []string{"action"}, "additionalProperties": false,
			}}},
		}, &got)
		return got
	}
	detok := func(ids []int) string {
		var d struct {
			Content string `json:"content"`
		}
		post(t, s, "/detokenize", map[string]any{"tokens": ids}, &d)
		return d.Content
	}
	got := ask(200)
	c := got.Choices[0]
	require.Equal(t, "stop", c.FinishReason, "%q", c.Message.Content)
	var ids []int
	for _, e := range c.Logprobs.Content {
		ids = append(ids, e.ID)
	}
	last := c.Logprobs.Content[len(ids)-1]
	assert.Contains(t, llamatest.EndOfGeneration, last.ID, "the end token is among the completion's ids")
	assert.Empty(t, last.Token, "and written as nothing")
	for _, e := range c.Logprobs.Content[:len(ids)-1] {
		assert.NotEmpty(t, e.Token, "every other token is text")
	}
	assert.Equal(t, got.Usage.CompletionTokens, len(ids), "and counted")
	text := detok(ids[:len(ids)-1])
	end := detok([]int{last.ID})
	assert.Contains(t, []string{"</s>", "<|endoftext|>", "<|im_end|>"}, end, "/detokenize writes special tokens out")
	assert.Equal(t, text+end, detok(ids))
	assert.Equal(t, strings.TrimSpace(text), c.Message.Content, "the content is the same text, its white space trimmed")

	cut := ask(3).Choices[0]
	require.Equal(t, "length", cut.FinishReason)
	assert.NotContains(t, llamatest.EndOfGeneration, cut.Logprobs.Content[len(cut.Logprobs.Content)-1].ID)
}

// TestRealServerToolCall: with a template that renders tools
// (llamatest.ToolTemplate), the tool's schema is in the prompt that
// /apply-template renders from the same body (whose token count is the
// chat's usage.prompt_tokens), tool_choice "required" with
// parallel_tool_calls false makes llama.cpp constrain the answer to one
// call of the tool by grammar, and the answer carries it as a parsed
// tool call. The function-forcing object form of tool_choice is read as
// "auto" (no constraint): llama.cpp reads tool_choice only as a string.
func TestRealServerToolCall(t *testing.T) {
	s := llamatest.New(t, llamatest.Options{ToolTemplate: true})
	schema := map[string]any{
		"type": "object", "properties": map[string]any{"action": map[string]any{"type": "string", "enum": []string{"a1", "b2", "c3"}}},
		"required": []string{"action"}, "additionalProperties": false,
	}
	body := func(seed int) map[string]any {
		return map[string]any{
			"messages": chat, "max_tokens": 200, "temperature": 1, "seed": seed, "logprobs": true, "top_logprobs": 1,
			"tools":       []any{map[string]any{"type": "function", "function": map[string]any{"name": "act", "description": "Take your action.", "strict": true, "parameters": schema}}},
			"tool_choice": "required", "parallel_tool_calls": false,
			"logit_bias": map[string]any{"{": 20},
		}
	}
	var tpl struct {
		Prompt string `json:"prompt"`
	}
	post(t, s, "/apply-template", body(0), &tpl)
	assert.Contains(t, tpl.Prompt, `{"type": "function", "function": {"name": "act"`, "the template renders the tool")
	assert.Contains(t, tpl.Prompt, `"enum": ["a1", "b2", "c3"]`)
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	post(t, s, "/tokenize", map[string]any{"content": tpl.Prompt, "add_special": true, "parse_special": true}, &tok)
	for seed := range 3 {
		var got struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				Logprobs struct {
					Content []tokenLogprob `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		post(t, s, "/v1/chat/completions", body(seed), &got)
		c := got.Choices[0]
		require.Equal(t, "tool_calls", c.FinishReason, "seed %d", seed)
		require.Len(t, c.Message.ToolCalls, 1, "seed %d", seed)
		assert.Equal(t, "act", c.Message.ToolCalls[0].Function.Name)
		var args struct {
			Action string `json:"action"`
		}
		require.NoError(t, json.Unmarshal([]byte(c.Message.ToolCalls[0].Function.Arguments), &args))
		assert.Contains(t, []string{"a1", "b2", "c3"}, args.Action)
		assert.Len(t, tok.Tokens, got.Usage.PromptTokens, "the rendered prompt is the one the chat saw")
		lp := c.Logprobs.Content
		assert.Contains(t, llamatest.EndOfGeneration, lp[len(lp)-1].ID, "the call ends on the end token")
	}

	var auto chatResponse
	b := body(0)
	b["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "act"}}
	b["logit_bias"] = map[string]any{}
	b["max_tokens"] = 16
	post(t, s, "/v1/chat/completions", b, &auto)
	assert.Equal(t, "length", auto.Choices[0].FinishReason, "the object form constrains nothing: the random model rambles")
}
