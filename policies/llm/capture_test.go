package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
)

// harnessBody is a chat request as an agent harness sends it.
const harnessBody = `{"model":"gpt-harness","messages":[{"role":"system","content":"You play."},{"role":"user","content":"Your move."}],"temperature":0.5,"stream":false,"stream_options":null}`

func forwardClient(t *testing.T, srv *llmtest.Server, kind Kind) *Client {
	t.Helper()
	cfg := testConfig(kind)
	cfg.Temperature = nil
	c, err := NewClient(cfg, WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	return c
}

func TestForwardCapturesTheServersTokens(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang, KindLlamaCpp} {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.Kind(kind), Record: true})
			c := forwardClient(t, srv, kind)
			seed := 99
			capt, err := c.Forward(context.Background(), []byte(harnessBody), ForwardOptions{Seed: &seed})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, capt.Status)
			require.True(t, capt.Trainable(), capt.EvalOnly)
			require.Equal(t, "ok", capt.Content)
			require.Equal(t, "stop", capt.Finish)

			// What the server saw: the harness's fields, the seed the seat
			// gave, the kind's token fields; keys in sorted order.
			reqs := srv.Requests()
			require.Len(t, reqs, 1)
			r := reqs[0]
			require.Equal(t, "test-model", r.Model, "the seat names the model")
			require.NotNil(t, r.Seed)
			require.EqualValues(t, 99, *r.Seed)
			require.True(t, r.Logprobs)
			require.Equal(t, 0.5, *r.Temperature)
			require.Equal(t, string(capt.Sent), string(r.Body))
			keys := topLevelKeys(t, capt.Sent)
			require.IsIncreasing(t, keys)
			require.NotContains(t, keys, "stream_options")

			// The answer relayed to the harness is the server's, unchanged,
			// and the captured ids are the ones in it.
			var ans struct {
				PromptIDs []int `json:"prompt_token_ids"`
				Choices   []struct {
					TokenIDs  []int `json:"token_ids"`
					PromptIDs []int `json:"prompt_token_ids"`
					Logprobs  struct {
						Content []struct {
							ID      *int    `json:"id"`
							Token   string  `json:"token"`
							Logprob float64 `json:"logprob"`
						} `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
				Usage struct {
					Prompt     int `json:"prompt_tokens"`
					Completion int `json:"completion_tokens"`
				} `json:"usage"`
			}
			require.NoError(t, json.Unmarshal(capt.Answer, &ans))
			lps := ans.Choices[0].Logprobs.Content
			require.Len(t, capt.Tokens.Response, len(lps))
			require.Len(t, capt.Tokens.LogProbs, len(lps))
			for i, e := range lps {
				require.Equal(t, e.Logprob, capt.Tokens.LogProbs[i])
			}
			require.Len(t, capt.Tokens.Prompt, ans.Usage.Prompt)
			require.Len(t, capt.Tokens.Response, ans.Usage.Completion)
			switch kind {
			case KindVLLM:
				require.Equal(t, ans.PromptIDs, capt.Tokens.Prompt)
				require.Equal(t, ans.Choices[0].TokenIDs, capt.Tokens.Response)
			case KindSGLang:
				require.Equal(t, ans.Choices[0].PromptIDs, capt.Tokens.Prompt)
				require.Equal(t, ans.Choices[0].TokenIDs, capt.Tokens.Response)
			case KindLlamaCpp:
				for i, e := range lps {
					require.Equal(t, *e.ID, capt.Tokens.Response[i])
				}
				st := srv.Stats()
				require.Equal(t, 1, st.ApplyTemplate)
				require.Equal(t, 1, st.Tokenize)
				require.Equal(t, 1, st.Detokenize)
				require.Equal(t, ResponseDetokenized, capt.ResponseSource)
			}
			require.Equal(t, "system", capt.Messages[0].Role)
			require.Equal(t, "Your move.", capt.Messages[1].Content)
		})
	}
}

func TestChatMessagesAsText(t *testing.T) {
	msgs, err := chatMessages(json.RawMessage(`[{"role":"user","content":[{"type":"text","text":"Your "},{"type":"text","text":"move."}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"act","arguments":"{\"move\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"ok"}]`))
	require.NoError(t, err)
	require.Equal(t, []protocol.ChatMessage{
		{Role: "user", Content: "Your move."},
		{Role: "assistant", Content: `{"name":"act","arguments":{"move":1}}`},
		{Role: "tool", Content: "ok"},
	}, msgs)
}

func TestForwardSeatSettingsWin(t *testing.T) {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Record: true})
	cfg := testConfig(KindVLLM) // model test-model, temperature 0
	c, err := NewClient(cfg, WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	body := `{"model":"gpt-harness","seed":5,"messages":[{"role":"user","content":"hi"}],"temperature":0.9,"logprobs":false}`
	seed := 99
	capt, err := c.Forward(context.Background(), []byte(body), ForwardOptions{Seed: &seed})
	require.NoError(t, err)
	require.True(t, capt.Trainable(), capt.EvalOnly)
	r := srv.Requests()[0]
	require.Equal(t, "test-model", r.Model)
	require.Equal(t, 0.0, *r.Temperature)
	require.EqualValues(t, 5, *r.Seed, "the harness's own seed is kept")
	require.True(t, r.Logprobs)
}

// TestForwardConfig: a call's own config (a role's model and sampling on
// a shared client) replaces the client's model and sampling; one of
// another kind is refused.
func TestForwardConfig(t *testing.T) {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Record: true})
	c, err := NewClient(testConfig(KindVLLM), WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	role := c.Config()
	role.Model, role.Temperature = "role-model", new(0.7)
	body := `{"model":"gpt-harness","messages":[{"role":"user","content":"hi"}],"temperature":0.1}`
	capt, err := c.Forward(context.Background(), []byte(body), ForwardOptions{Config: &role})
	require.NoError(t, err)
	require.True(t, capt.Trainable(), capt.EvalOnly)
	r := srv.Requests()[0]
	require.Equal(t, "role-model", r.Model)
	require.Equal(t, 0.7, *r.Temperature)
	require.True(t, r.Logprobs, "the client's kind's token fields")

	other := testConfig(KindLlamaCpp)
	_, err = c.Forward(context.Background(), []byte(body), ForwardOptions{Config: &other})
	require.ErrorIs(t, err, ErrBadConfig)
	require.Len(t, srv.Requests(), 1, "refused before the server is asked")
}

func TestForwardEvaluationOnly(t *testing.T) {
	t.Run("openai", func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.OpenAI})
		capt, err := forwardClient(t, srv, KindOpenAI).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
		require.NoError(t, err)
		require.False(t, capt.Trainable())
		require.Contains(t, capt.EvalOnly, "returns no token ids")
		require.Equal(t, "ok", capt.Response)
	})
	t.Run("no ids", func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Script: llmtest.Always(llmtest.MissingIDs)})
		capt, err := forwardClient(t, srv, KindVLLM).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
		require.NoError(t, err)
		require.False(t, capt.Trainable())
		require.NotEmpty(t, capt.EvalOnly)
	})
}

// cannedServer answers every chat request with body.
func cannedServer(t *testing.T, status int, body string) *Client {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(hs.Close)
	cfg := testConfig(KindVLLM)
	cfg.BaseURL, cfg.Retries = hs.URL+"/v1", 1
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// vllmAnswer is a vLLM answer with the given ids, log-probs and usage.
func vllmAnswer(prompt, completion string, logprobs []string, usage string) string {
	var lp []string
	for i, l := range logprobs {
		tok := fmt.Sprintf("token_id:%d", i+1)
		if strings.HasPrefix(l, "~") { // a token text without its id
			tok, l = "x", l[1:]
		}
		lp = append(lp, fmt.Sprintf(`{"token":%q,"logprob":%s}`, tok, l))
	}
	return `{"prompt_token_ids":` + prompt + `,"choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"finish_reason":"stop","token_ids":` + completion +
		`,"logprobs":{"content":[` + strings.Join(lp, ",") + `]}}]` + usage + `}`
}

// TestForwardValidatesOnIngest: a well-formed answer whose ids, counts
// and log-probs disagree is captured for evaluation only, and says why
// (OpenEnv RFC 006: never trust a payload for being well formed).
func TestForwardValidatesOnIngest(t *testing.T) {
	good := `,"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`
	for _, tc := range []struct {
		name, answer, why string
	}{
		{"good", vllmAnswer("[7,8,9]", "[1,2]", []string{"-0.5", "-0.25"}, good), ""},
		{"prompt count", vllmAnswer("[7,8]", "[1,2]", []string{"-0.5", "-0.25"}, good), "2 prompt token ids where usage.prompt_tokens is 3"},
		{"completion count", vllmAnswer("[7,8,9]", "[1,2]", []string{"-0.5", "-0.25"}, `,"usage":{"prompt_tokens":3,"completion_tokens":3}`), "2 response token ids where usage.completion_tokens is 3"},
		{"no usage", vllmAnswer("[7,8,9]", "[1,2]", []string{"-0.5", "-0.25"}, ""), "no usage"},
		{"log-prob count", vllmAnswer("[7,8,9]", "[1,2]", []string{"~-0.5"}, good), "log-probs: 1 log-probs for 2 completion tokens"},
		{"positive log-prob", vllmAnswer("[7,8,9]", "[1,2]", []string{"-0.5", "0.5"}, good), "above 0"},
		{"no prompt ids", vllmAnswer("null", "[1,2]", []string{"-0.5", "-0.25"}, good), "no prompt token ids"},
		{"ids disagree", vllmAnswer("[7,8,9]", "[1,3]", []string{"-0.5", "-0.25"}, good), "different ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capt, err := cannedServer(t, 200, tc.answer).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
			require.NoError(t, err)
			if tc.why == "" {
				require.True(t, capt.Trainable(), capt.EvalOnly)
				require.Equal(t, []int{7, 8, 9}, capt.Tokens.Prompt)
				require.Equal(t, []int{1, 2}, capt.Tokens.Response)
				return
			}
			require.False(t, capt.Trainable())
			require.Contains(t, capt.EvalOnly, tc.why)
			require.Equal(t, tc.answer, string(capt.Answer), "the harness still gets the answer")
		})
	}
}

func TestForwardRelaysRefusals(t *testing.T) {
	capt, err := cannedServer(t, 400, `{"error":{"message":"bad tools"}}`).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
	require.NoError(t, err)
	require.Equal(t, 400, capt.Status)
	require.JSONEq(t, `{"error":{"message":"bad tools"}}`, string(capt.Answer))
	require.False(t, capt.Trainable())

	capt, err = cannedServer(t, 500, `{"error":{"message":"cannot parse the tool call"}}`).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
	require.NoError(t, err, "the server's last error answer is relayed")
	require.Equal(t, 500, capt.Status)
	require.Equal(t, 1, capt.Retries)
	require.Contains(t, string(capt.Answer), "cannot parse the tool call")

	_, err = cannedServer(t, 200, `{"choices":[`).Forward(context.Background(), []byte(harnessBody), ForwardOptions{})
	require.ErrorIs(t, err, ErrGaveUp)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestForwardRefusesBadRequests(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"not json", `{"model":`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"stream", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, "stream true"},
		{"stream type", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, "stream: want a boolean"},
		{"n", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, "one choice"},
		{"no messages", `{"model":"m"}`, "messages is required"},
		{"empty messages", `{"model":"m","messages":[]}`, "must not be empty"},
		{"messages type", `{"model":"m","messages":{}}`, "messages:"},
		{"no role", `{"model":"m","messages":[{"content":"x"}]}`, "has no role"},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, `type "image_url"`},
		{"content type", `{"model":"m","messages":[{"role":"user","content":3}]}`, "want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM})
			_, err := forwardClient(t, srv, KindVLLM).Forward(context.Background(), []byte(tc.body), ForwardOptions{})
			require.ErrorIs(t, err, ErrBadRequest)
			require.Contains(t, err.Error(), tc.want)
			require.Zero(t, srv.Stats().Chat, "a bad request never reaches the server")
		})
	}
}

// FuzzForwardBody: whatever a harness sends, forwardBody refuses it with
// ErrBadRequest or forwards a JSON object that asks for the token fields.
func FuzzForwardBody(f *testing.F) {
	f.Add([]byte(harnessBody))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"act","arguments":"{}"}}]}]}`))
	f.Add([]byte(`{"model":"m","n":null,"seed":null,"stream":false,"messages":[{"role":"tool","content":"x"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`))
	cfg := testConfig(KindLlamaCpp)
	c, err := NewClient(cfg)
	if err != nil {
		f.Fatal(err)
	}
	seed := 3
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := c.forwardBody(body, ForwardOptions{Seed: &seed})
		if err != nil {
			require.ErrorIs(t, err, ErrBadRequest)
			return
		}
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(req.body, &fields))
		require.JSONEq(t, "true", string(fields["logprobs"]))
		require.NotEmpty(t, req.messages)
		require.IsIncreasing(t, topLevelKeys(t, req.body))
	})
}
