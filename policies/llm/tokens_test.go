package llm

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// TestRequestBody checks, for every server kind, the body that reaches a
// real listener: temperature 0 survives go-openai's omitempty, the seed
// derives from the turn's seed, the kind's token-id and log-prob fields are
// there, and no key is written twice.
func TestRequestBody(t *testing.T) {
	vendor := map[Kind]map[string]string{
		KindVLLM:     {"logprobs": "true", "return_token_ids": "true", "return_tokens_as_token_ids": "true"},
		KindSGLang:   {"logprobs": "true", "return_token_ids": "true", "return_prompt_token_ids": "true"},
		KindLlamaCpp: {"logprobs": "true", "top_logprobs": "1"},
		KindOpenAI:   {},
	}
	allVendor := []string{"logprobs", "top_logprobs", "return_token_ids", "return_tokens_as_token_ids", "return_prompt_token_ids"}
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.Kind(kind), Record: true})
			cfg := testConfig(kind)
			cfg.MaxTokens = ptr(64)
			cfg.Stop = []string{"\n\n"}
			cfg.NoMemory = true // llamacpp with memory asks /completion: TestCompletionBody
			if kind != KindOpenAI {
				cfg.TopK = ptr(20)
			}
			obs := board(42, "a1", "b2", "c3")
			_, err := overNetwork(t, srv, cfg).Act(t.Context(), obs)
			require.NoError(t, err)
			reqs := srv.Requests()
			require.Len(t, reqs, 1)
			f := reqs[0].Fields()
			assert.JSONEq(t, "0", string(f["temperature"]), "temperature 0 must reach the server")
			assert.JSONEq(t, strconv.Itoa(requestSeed(42, 0)), string(f["seed"]))
			assert.JSONEq(t, `"test-model"`, string(f["model"]))
			assert.JSONEq(t, "64", string(f["max_tokens"]))
			assert.JSONEq(t, `["\n\n"]`, string(f["stop"]))
			if kind == KindOpenAI {
				assert.NotContains(t, f, "top_k")
			} else {
				assert.JSONEq(t, "20", string(f["top_k"]))
			}
			for _, name := range allVendor {
				if want, ok := vendor[kind][name]; ok {
					assert.JSONEq(t, want, string(f[name]), name)
				} else {
					assert.NotContains(t, f, name)
				}
			}
			assert.JSONEq(t, `{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":
				{"type":"object","properties":{"action":{"type":"string","enum":["a1","b2","c3"]}},"required":["action"],"additionalProperties":false}}}`,
				string(f["response_format"]))
			keys := topLevelKeys(t, reqs[0].Body)
			slices.Sort(keys)
			assert.Equal(t, slices.Compact(slices.Clone(keys)), keys, "a key is written twice")
		})
	}
}

// TestCompletionBody: with memory, llama.cpp is asked token in, token out
// (POST /completion): the prompt is token ids, the sampling fields are the
// chat's (n_predict for max_tokens), the log-probs come as n_probs, and no
// chat-only field is sent.
func TestCompletionBody(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp, Record: true})
	cfg := testConfig(KindLlamaCpp)
	cfg.MaxTokens, cfg.TopK, cfg.Stop = ptr(64), ptr(20), []string{"\n\n"}
	turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(42, "a1", "b2", "c3"))
	require.NoError(t, err)
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	f := reqs[0].Fields()
	assert.JSONEq(t, "0", string(f["temperature"]))
	assert.JSONEq(t, strconv.Itoa(requestSeed(42, 0)), string(f["seed"]))
	assert.JSONEq(t, "64", string(f["n_predict"]))
	assert.JSONEq(t, "20", string(f["top_k"]))
	assert.JSONEq(t, `["\n\n"]`, string(f["stop"]))
	assert.JSONEq(t, "1", string(f["n_probs"]))
	assert.JSONEq(t, "true", string(f["return_tokens"]))
	assert.JSONEq(t, `{"type":"object","properties":{"action":{"type":"string","enum":["a1","b2","c3"]}},"required":["action"],"additionalProperties":false}`, string(f["json_schema"]))
	for _, name := range []string{"max_tokens", "logprobs", "top_logprobs", "messages", "response_format", "model"} {
		assert.NotContains(t, f, name)
	}
	var prompt []int
	require.NoError(t, json.Unmarshal(f["prompt"], &prompt))
	tk := turn.Generation.Tokens
	require.NotNil(t, tk, "%v", turn.Notes["llm_text_only"])
	assert.Equal(t, prompt, tk.Prompt, "the sample's prompt ids are the ids sent")
	assert.Equal(t, llmtest.PromptIDs(reqs[0].Messages), tk.Prompt, "a first turn's ids are the template's, tokenized whole")
	assert.Len(t, tk.LogProbs, len(tk.Response))
	keys := topLevelKeys(t, reqs[0].Body)
	slices.Sort(keys)
	assert.Equal(t, slices.Compact(slices.Clone(keys)), keys, "a key is written twice")
}

func TestRequestBodyToolFormat(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	cfg := testConfig(KindVLLM)
	cfg.Format = FormatTool
	turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(5, "a1", "b2"))
	require.NoError(t, err)
	assert.Equal(t, chosen(requestSeed(5, 0), []string{"a1", "b2"}), turn.Text)
	f := srv.Requests()[0].Fields()
	assert.NotContains(t, f, "response_format")
	assert.JSONEq(t, `{"type":"function","function":{"name":"act"}}`, string(f["tool_choice"]))
	var tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	require.NoError(t, json.Unmarshal(f["tools"], &tools))
	require.Len(t, tools, 1)
	assert.Equal(t, "act", tools[0].Function.Name)
	assert.JSONEq(t, `{"type":"object","properties":{"action":{"type":"string","enum":["a1","b2"]}},"required":["action"],"additionalProperties":false}`, string(tools[0].Function.Parameters))
}

func TestExtraFieldsOverride(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	cfg := testConfig(KindVLLM)
	cfg.Extra = map[string]json.RawMessage{
		"return_tokens_as_token_ids": json.RawMessage("false"),
		"chat_template_kwargs":       json.RawMessage(`{"enable_thinking":false}`),
	}
	_, err := overNetwork(t, srv, cfg).Act(t.Context(), board(1, "a1"))
	require.NoError(t, err)
	f := srv.Requests()[0].Fields()
	assert.JSONEq(t, "false", string(f["return_tokens_as_token_ids"]))
	assert.JSONEq(t, `{"enable_thinking":false}`, string(f["chat_template_kwargs"]))
	keys := topLevelKeys(t, srv.Requests()[0].Body)
	assert.Len(t, keys, len(slices.Compact(slices.Sorted(slices.Values(keys)))))
}

// TestServerTokens checks that a sample's tokens are exactly the server's:
// the prompt ids of the chat that was sent, then the completion's ids, with
// the server's log-probs, for every kind that reports them.
func TestServerTokens(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang, KindLlamaCpp} {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.Kind(kind), Record: true})
			obs := board(9, "a1", "b2", "c3")
			turn, err := overNetwork(t, srv, testConfig(kind)).Act(t.Context(), obs)
			require.NoError(t, err)
			a := turn
			require.NotNil(t, a.Generation.Tokens, "text-only: %v", turn.Notes["llm_text_only"])
			sent := srv.Requests()[0].Messages
			require.Len(t, a.Generation.Prompt.Messages, len(sent))
			for i, m := range a.Generation.Prompt.Messages {
				assert.Equal(t, llmtest.Message{Role: m.Role, Content: m.Content}, sent[i], "the recorded prompt is the chat sent")
			}
			assert.Equal(t, llmtest.PromptIDs(sent), a.Generation.Tokens.Prompt)
			reply := `{"action":"` + a.Text + `"}`
			assert.Equal(t, llmtest.CompletionIDs(reply), a.Generation.Tokens.Response)
			require.Len(t, a.Generation.Tokens.LogProbs, len(a.Generation.Tokens.Response))
			for i, id := range a.Generation.Tokens.Response {
				assert.Equal(t, llmtest.LogProb(id, i), a.Generation.Tokens.LogProbs[i])
			}
			assert.Nil(t, a.Generation.Tokens.LossMask, "every response token is sampled")
			assert.NotContains(t, turn.Notes, "llm_text_only")
			assert.Equal(t, len(a.Generation.Tokens.Prompt), turn.Notes["llm_prompt_tokens"])
			assert.Equal(t, len(a.Generation.Tokens.Response), turn.Notes["llm_completion_tokens"])
			if kind == KindLlamaCpp {
				st := srv.Stats()
				assert.Equal(t, 1, st.ApplyTemplate)
				assert.Equal(t, 1, st.Tokenize)
			}
		})
	}
}

func TestTextOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   Kind
		fault  llmtest.Fault
		config func(*Config)
		why    string
	}{
		{name: "openai", kind: KindOpenAI, why: "kind openai: the server returns no token ids"},
		{name: "vllm without ids", kind: KindVLLM, fault: llmtest.MissingIDs, why: "no completion token ids"},
		{name: "sglang without ids", kind: KindSGLang, fault: llmtest.MissingIDs, why: "no completion token ids"},
		{name: "llamacpp without ids", kind: KindLlamaCpp, fault: llmtest.MissingIDs, why: "no completion token ids"},
		{name: "llamacpp without tokenize", kind: KindLlamaCpp, config: func(c *Config) { c.Tokenize = false }, why: "tokenize is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := llmtest.Options{Kind: llmtest.Kind(tc.kind)}
			if tc.fault.Kind != llmtest.None {
				opts.Script = llmtest.Always(tc.fault)
			}
			srv := llmtest.Start(t, opts)
			cfg := testConfig(tc.kind)
			if tc.config != nil {
				tc.config(&cfg)
			}
			turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(1, "a1", "b2"))
			require.NoError(t, err)
			assert.Nil(t, turn.Generation.Tokens)
			assert.Contains(t, turn.Notes["llm_text_only"], tc.why)
			assert.Contains(t, []string{"a1", "b2"}, turn.Text)
		})
	}
}

func TestLlamaCppPromptCountMismatch(t *testing.T) {
	// A server whose usage disagrees with its /tokenize: the ids cannot be
	// trusted to be the prompt the model saw.
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp})
	cfg := testConfig(KindLlamaCpp)
	cfg.BaseURL = srv.URL()
	c, err := NewClient(cfg)
	require.NoError(t, err)
	defer c.Close()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	want := llmtest.PromptIDs([]llmtest.Message{{Role: "user", Content: "hi"}})
	ids, retries, err := c.llamaPromptIDs(t.Context(), body, 1, len(want))
	require.NoError(t, err)
	assert.Equal(t, want, ids)
	assert.Zero(t, retries)
	_, _, err = c.llamaPromptIDs(t.Context(), body, 1, len(want)+1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "where the chat answer counted")
}

func TestReadTokens(t *testing.T) {
	for _, tc := range []struct {
		name       string
		kind       Kind
		raw        string
		prompt     []int
		completion []int
		logprobs   []float64
		why        string
		lpNote     string
	}{
		{
			name: "vllm", kind: KindVLLM,
			raw:    `{"prompt_token_ids":[1,2],"choices":[{"token_ids":[7,8],"logprobs":{"content":[{"token":"token_id:7","logprob":-0.5},{"token":"token_id:8","logprob":-1}]}}]}`,
			prompt: []int{1, 2}, completion: []int{7, 8}, logprobs: []float64{-0.5, -1},
		},
		{
			name: "vllm ids from log-prob tokens only", kind: KindVLLM,
			raw:    `{"prompt_token_ids":[1],"choices":[{"logprobs":{"content":[{"token":"token_id:7","logprob":-0.5}]}}]}`,
			prompt: []int{1}, completion: []int{7}, logprobs: []float64{-0.5},
		},
		{
			name: "vllm ids disagree", kind: KindVLLM,
			raw: `{"prompt_token_ids":[1],"choices":[{"token_ids":[7],"logprobs":{"content":[{"token":"token_id:9","logprob":-0.5}]}}]}`,
			why: "name different ids",
		},
		{
			name: "vllm without prompt ids", kind: KindVLLM,
			raw:        `{"choices":[{"token_ids":[7],"logprobs":{"content":[{"token":"x","logprob":-0.5}]}}]}`,
			completion: []int{7}, logprobs: []float64{-0.5}, why: "no prompt token ids",
		},
		{
			name: "sglang", kind: KindSGLang,
			raw:    `{"choices":[{"prompt_token_ids":[3],"token_ids":[4,5],"logprobs":{"content":[{"token":"a","logprob":-0.25},{"token":"b","logprob":-0.75}]}}]}`,
			prompt: []int{3}, completion: []int{4, 5}, logprobs: []float64{-0.25, -0.75},
		},
		{
			name: "sglang without log-probs", kind: KindSGLang,
			raw:    `{"choices":[{"prompt_token_ids":[3],"token_ids":[4]}]}`,
			prompt: []int{3}, completion: []int{4}, lpNote: "no log-probs",
		},
		{
			name: "log-prob count mismatch", kind: KindSGLang,
			raw:    `{"choices":[{"prompt_token_ids":[3],"token_ids":[4,5],"logprobs":{"content":[{"token":"a","logprob":-0.25}]}}]}`,
			prompt: []int{3}, completion: []int{4, 5}, lpNote: "1 log-probs for 2 completion tokens",
		},
		{
			name: "positive log-prob", kind: KindSGLang,
			raw:    `{"choices":[{"prompt_token_ids":[3],"token_ids":[4],"logprobs":{"content":[{"token":"a","logprob":0.5}]}}]}`,
			prompt: []int{3}, completion: []int{4}, lpNote: "above 0",
		},
		{
			name: "rounding above 0 is clamped", kind: KindSGLang,
			raw:    `{"choices":[{"prompt_token_ids":[3],"token_ids":[4],"logprobs":{"content":[{"token":"a","logprob":1e-9}]}}]}`,
			prompt: []int{3}, completion: []int{4}, logprobs: []float64{0},
		},
		{
			name: "llamacpp", kind: KindLlamaCpp,
			raw:        `{"choices":[{"logprobs":{"content":[{"id":11,"token":"a","logprob":-0.1},{"id":12,"token":"b","logprob":-0.2}]}}]}`,
			completion: []int{11, 12}, logprobs: []float64{-0.1, -0.2}, why: "no prompt token ids",
		},
		{
			name: "llamacpp entry without id", kind: KindLlamaCpp,
			raw:      `{"choices":[{"logprobs":{"content":[{"id":11,"token":"a","logprob":-0.1},{"token":"b","logprob":-0.2}]}}]}`,
			logprobs: nil, lpNote: "2 log-probs for 0 completion tokens", why: "no completion token ids",
		},
		{
			name: "ids of the wrong type", kind: KindVLLM,
			raw: `{"prompt_token_ids":["a"],"choices":[{}]}`,
			why: "cannot read the token ids",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := scanAnswer([]byte(tc.raw))
			got := readTokens(tc.kind, &a)
			tok, why := got.assemble()
			if tc.why == "" {
				require.Empty(t, why)
				require.NotNil(t, tok)
				assert.Equal(t, tc.prompt, tok.Prompt)
				assert.Equal(t, tc.completion, tok.Response)
				assert.Equal(t, tc.logprobs, tok.LogProbs)
			} else {
				assert.Nil(t, tok)
				assert.Contains(t, why, tc.why)
			}
			if tc.lpNote != "" {
				assert.Contains(t, got.lpNote, tc.lpNote)
				assert.Nil(t, got.logprobs)
			}
		})
	}
}

// TestSamplingSeed: under a sampling seed (slime's sampling_seed) a call's
// seed is SampledRequestSeed of it, the agent, its turn number and the
// attempt, whatever the turn's own seed; without one it derives from the
// turn's seed.
func TestSamplingSeed(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	cfg := testConfig(KindVLLM)
	s := int64(1234)
	cfg.SamplingSeed = &s
	p := overNetwork(t, srv, cfg)
	for _, obs := range []*agents.Observation{board(1, "a1"), board(99, "a1")} {
		obs.Turn = 3
		_, err := p.Act(t.Context(), obs)
		require.NoError(t, err)
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	want := SampledRequestSeed(1234, "x", 3, 0)
	for _, r := range reqs {
		assert.Equal(t, int64(want), *r.Seed, "the turn's seed does not matter")
	}
	assert.NotEqual(t, want, SampledRequestSeed(1235, "x", 3, 0))
	assert.NotEqual(t, want, SampledRequestSeed(1234, "o", 3, 0))
	assert.NotEqual(t, want, SampledRequestSeed(1234, "x", 4, 0))
	assert.NotEqual(t, want, SampledRequestSeed(1234, "x", 3, 1))
	assert.Less(t, want, 1<<31)
}

// TestLlamaCppToolChoice: llama.cpp reads tool_choice only as a string, so
// the tool format forces the call with "required" (one tool).
func TestLlamaCppToolChoice(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp, Record: true})
	cfg := testConfig(KindLlamaCpp)
	cfg.Format = FormatTool
	turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(5, "a1", "b2"))
	require.NoError(t, err)
	assert.Empty(t, turn.Invalid)
	f := srv.Requests()[0].Fields()
	assert.JSONEq(t, `"required"`, string(f["tool_choice"]))
	assert.Contains(t, string(f["tools"]), `"name":"act"`)
}

// TestResponseIsWhatTheModelWrote: Action.Generation.Completion is the model's text
// (llama.cpp: /detokenize of the completion ids, less the end token; other
// kinds: the message content) and Text the move read from it.
func TestResponseIsWhatTheModelWrote(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang, KindLlamaCpp, KindOpenAI} {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.Kind(kind), Script: nil,
				Brain: func(*llmtest.Request) llmtest.Reply { return llmtest.Reply{Text: "\n\t{\"action\": \"b2\"}"} }})
			cfg := testConfig(kind)
			cfg.InvalidRetries = 0
			turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(5, "a1", "b2"))
			require.NoError(t, err)
			assert.Empty(t, turn.Invalid)
			assert.Equal(t, "b2", turn.Text)
			if kind == KindLlamaCpp {
				require.NotNil(t, turn.Generation.Tokens)
				assert.Equal(t, llmtest.ImEnd, turn.Generation.Tokens.Response[len(turn.Generation.Tokens.Response)-1], "the end token is trained")
				assert.Equal(t, "\n\t{\"action\": \"b2\"}", turn.Generation.Completion)
				assert.Equal(t, llmtest.Detokenize(turn.Generation.Tokens.Response[:len(turn.Generation.Tokens.Response)-1]), turn.Generation.Completion)
				assert.Equal(t, ResponseDetokenized, turn.Notes["llm_response_source"])
				assert.Equal(t, 1, srv.Stats().Detokenize)
				return
			}
			assert.Equal(t, "\n\t{\"action\": \"b2\"}", turn.Generation.Completion)
			assert.Equal(t, ResponseContent, turn.Notes["llm_response_source"])
		})
	}
}

func TestLlamaResponseIDs(t *testing.T) {
	ids := []int{5, 6, 2}
	assert.Equal(t, []int{5, 6}, llamaResponseIDs(ids, "stop", true), "stopped on the end token")
	assert.Equal(t, []int{5, 6}, llamaResponseIDs(ids, "tool_calls", true))
	assert.Equal(t, ids, llamaResponseIDs(ids, "stop", false), "a stop string ends in text: nothing to drop")
	assert.Equal(t, ids, llamaResponseIDs(ids, "length", true), "cut at max_tokens: every id is text")
	assert.Empty(t, llamaResponseIDs(nil, "stop", true))
}

// TestResponseOfAToolCall: a call with empty content (vLLM, SGLang, any
// kind without /detokenize) writes the call as JSON, and says so.
func TestResponseOfAToolCall(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	cfg := testConfig(KindVLLM)
	cfg.Format = FormatTool
	turn, err := overNetwork(t, srv, cfg).Act(t.Context(), board(5, "a1", "b2"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"act","arguments":{"action":"`+turn.Text+`"}}`, turn.Generation.Completion)
	assert.Equal(t, ResponseToolCall, turn.Notes["llm_response_source"])
}
