package llmtest

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTokenInFieldsMatchTheSource: the fake's field lists are the ones
// extracted by hand from vLLM's and SGLang's source into
// testdata/fields (each file names its source file and commit), in the
// source's order.
func TestTokenInFieldsMatchTheSource(t *testing.T) {
	for file, fields := range map[string][]string{
		"vllm_completion_request.txt": VLLMCompletionFields,
		"vllm_completion_choice.txt":  VLLMCompletionChoiceFields,
		"vllm_tokenize_chat.txt":      VLLMTokenizeChatFields,
		"vllm_tokenize_prompt.txt":    VLLMTokenizeCompletionFields,
		"vllm_detokenize.txt":         VLLMDetokenizeFields,
		"sglang_tokenize.txt":         SGLangTokenizeFields,
		"sglang_detokenize.txt":       SGLangDetokenizeFields,
		"sglang_sampling_params.txt":  SGLangSamplingFields,
		"sglang_generate_request.txt": SGLangGenerateFields,
		"sglang_meta_info.txt":        SGLangMetaInfoFields,
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "fields", file))
		require.NoError(t, err)
		var want []string
		for line := range strings.Lines(string(b)) {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				want = append(want, line)
			}
		}
		require.True(t, strings.HasPrefix(string(b), "# "), "%s names its source", file)
		assert.Equal(t, want, fields, file)
	}
}

// keys returns a JSON object's keys, sorted.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return slices.Sorted(maps.Keys(m))
}

// subset asserts that every one of got is in allowed.
func subset(t *testing.T, got, allowed []string, what string) {
	t.Helper()
	for _, k := range got {
		assert.Contains(t, allowed, k, "%s writes %q, which the source does not define", what, k)
	}
}

// TestVLLMTokenIn: the fake vLLM's token endpoints answer in the shapes
// of vLLM's, refuse what it does not define, and default as it does.
func TestVLLMTokenIn(t *testing.T) {
	srv := Start(t, Options{Kind: VLLM})
	root := strings.TrimSuffix(srv.URL(), "/v1")
	msgs := []Message{{"system", "s"}, {"user", "u"}}
	chat, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	code, _, b := post(t, root+"/tokenize", string(chat))
	require.Equal(t, 200, code, "%s", b)
	var tok struct {
		Tokens []int
		Count  int
	}
	require.NoError(t, json.Unmarshal(b, &tok))
	assert.Equal(t, PromptIDs(msgs), tok.Tokens, "the chat's prompt ids, generation prompt included")
	assert.Equal(t, []string{"count", "max_model_len", "tokens"}, keys(t, b))

	_, _, b = post(t, root+"/detokenize", `{"model":"m","tokens":[1,2,0]}`)
	assert.JSONEq(t, `{"prompt":"<|im_start|><|im_end|><|endoftext|>"}`, string(b), "special tokens written out")
	_, _, b = post(t, root+"/tokenize", `{"model":"m","prompt":"<|im_end|>ab","add_special_tokens":false}`)
	require.NoError(t, json.Unmarshal(b, &tok))
	assert.Equal(t, []int{ImEnd, Bytes("ab")}, tok.Tokens)

	prompt := PromptIDs(msgs)
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "logprobs": 1, "return_token_ids": true,
		"return_tokens_as_token_ids": true, "max_tokens": nil, "seed": 3})
	code, _, b = post(t, srv.URL()+"/completions", string(body))
	require.Equal(t, 200, code, "%s", b)
	var a struct {
		Choices []json.RawMessage
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &a))
	subset(t, keys(t, a.Choices[0]), VLLMCompletionChoiceFields, "a completion choice")
	var ch struct {
		Text           string
		FinishReason   string `json:"finish_reason"`
		TokenIDs       []int  `json:"token_ids"`
		PromptTokenIDs []int  `json:"prompt_token_ids"`
		Logprobs       struct {
			Tokens        []string
			TokenLogprobs []float64 `json:"token_logprobs"`
		}
	}
	require.NoError(t, json.Unmarshal(a.Choices[0], &ch))
	assert.Equal(t, prompt, ch.PromptTokenIDs)
	assert.Equal(t, "stop", ch.FinishReason)
	assert.Equal(t, ImEnd, ch.TokenIDs[len(ch.TokenIDs)-1], "the end token is among the ids, not in the text")
	assert.Equal(t, Detokenize(ch.TokenIDs[:len(ch.TokenIDs)-1]), ch.Text)
	assert.Equal(t, "token_id:2", ch.Logprobs.Tokens[len(ch.TokenIDs)-1])
	assert.Len(t, ch.Logprobs.TokenLogprobs, len(ch.TokenIDs))

	// vLLM's max_tokens defaults to 16.
	body, _ = json.Marshal(map[string]any{"model": "m", "prompt": prompt, "return_token_ids": true})
	_, _, b = post(t, srv.URL()+"/completions", string(body))
	require.NoError(t, json.Unmarshal(b, &a))
	require.NoError(t, json.Unmarshal(a.Choices[0], &ch))
	assert.Len(t, ch.TokenIDs, min(16, len(ch.TokenIDs)))

	for _, bad := range []string{
		`{"model":"m","prompt":[1],"n_predict":3}`,                               // llama.cpp's name
		`{"model":"m","prompt":[1],"max_new_tokens":3}`,                          // SGLang's name
		`{"model":"m","prompt":[]}`,                                              // empty
		`{"model":"m","prompt":[1],"logprobs":-2}`,                               // out of range
		`{"model":"m","messages":[{"role":"user","content":"x"}],"n_predict":1}`, // tokenize: unknown field
	} {
		path := "/v1/completions"
		if strings.Contains(bad, "messages") {
			path = "/tokenize"
		}
		code, _, b := post(t, root+path, bad)
		assert.Equal(t, 400, code, "%s: %s", bad, b)
	}
}

// TestSGLangTokenIn: the fake SGLang's /v1/tokenize, /v1/detokenize and
// /generate answer in the shapes of SGLang's; sampling_params takes only
// SamplingParams' fields, as SGLang's does.
func TestSGLangTokenIn(t *testing.T) {
	srv := Start(t, Options{Kind: SGLang})
	root := strings.TrimSuffix(srv.URL(), "/v1")
	_, _, b := post(t, srv.URL()+"/tokenize", `{"model":"m","prompt":"a<|im_end|>","add_special_tokens":false}`)
	assert.Equal(t, []string{"count", "max_model_len", "tokens"}, keys(t, b))
	_, _, b = post(t, srv.URL()+"/detokenize", `{"model":"m","tokens":[197,2]}`)
	assert.JSONEq(t, `{"text":"a"}`, string(b), "skip_special_tokens defaults to true")
	_, _, b = post(t, srv.URL()+"/detokenize", `{"model":"m","tokens":[197,2],"skip_special_tokens":false}`)
	assert.JSONEq(t, `{"text":"a<|im_end|>"}`, string(b))

	prompt := PromptIDs([]Message{{"user", "u"}})
	body, _ := json.Marshal(map[string]any{"input_ids": prompt, "return_logprob": true,
		"sampling_params": map[string]any{"max_new_tokens": nil, "sampling_seed": 5, "temperature": 1}})
	code, _, b := post(t, root+"/generate", string(body))
	require.Equal(t, 200, code, "%s", b)
	var a struct {
		Text     string
		MetaInfo json.RawMessage `json:"meta_info"`
	}
	require.NoError(t, json.Unmarshal(b, &a))
	subset(t, keys(t, a.MetaInfo), SGLangMetaInfoFields, "meta_info")
	var m struct {
		FinishReason struct {
			Type    string
			Matched int
		} `json:"finish_reason"`
		PromptTokens int             `json:"prompt_tokens"`
		Logprobs     [][]json.Number `json:"output_token_logprobs"`
	}
	require.NoError(t, json.Unmarshal(a.MetaInfo, &m))
	assert.Equal(t, "stop", m.FinishReason.Type)
	assert.Equal(t, ImEnd, m.FinishReason.Matched)
	assert.Equal(t, len(prompt), m.PromptTokens)
	last := m.Logprobs[len(m.Logprobs)-1]
	assert.Equal(t, "2", last[1].String(), "[log-prob, id, text]: the end token is the last sampled")

	for _, bad := range []string{
		`{"input_ids":[1],"sampling_params":{"max_tokens":3}}`,   // not a SamplingParams field
		`{"input_ids":[1],"sampling_params":{"min_tokens":3}}`,   // SGLang calls it min_new_tokens
		`{"input_ids":[1],"sampling_params":{"json_schema":{}}}`, // a string, not an object
		`{"input_ids":[1],"text":"x"}`,                           // both
		`{"sampling_params":{}}`,                                 // neither
		`{"input_ids":[1],"prompt":"x"}`,                         // not a GenerateReqInput field
	} {
		code, _, b := post(t, root+"/generate", bad)
		assert.Equal(t, 400, code, "%s: %s", bad, b)
	}
}
