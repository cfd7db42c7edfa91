package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTokenizer(t *testing.T) {
	text := "<|im_start|>user\nhé <b><|im_end|>\n<|endoftext|>"
	ids := Tokenize(text)
	assert.Equal(t, []int{ImStart, Bytes("use"), Bytes("r\nh")}, ids[:3])
	assert.Equal(t, int(FirstByte+'u'+'s'<<8+'e'<<16+2<<24), Bytes("use"))
	assert.Equal(t, EndOfText, ids[len(ids)-1])
	assert.Equal(t, text, Detokenize(ids))
	assert.Equal(t, "<|unk:99|>", Piece(99))
	assert.Equal(t, Tokenize(ApplyTemplate([]Message{{"system", "s"}, {"user", "u"}})), PromptIDs([]Message{{"system", "s"}, {"user", "u"}}))
	assert.Equal(t, "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\n", ApplyTemplate([]Message{{"system", "s"}}))
	assert.Equal(t, append(Tokenize("ok"), ImEnd), CompletionIDs("ok"))
	for id := range 400 {
		for pos := range 10 {
			lp := LogProb(id, pos)
			require.True(t, lp < 0 && lp >= -1, "LogProb(%d, %d) = %v", id, pos, lp)
		}
	}
}

// post sends a chat request body to srv over the network and returns the
// status, headers and body.
func post(t *testing.T, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

const schemaBody = `{"model":"m","seed":3,"messages":[{"role":"user","content":"hi"}],%s
	"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":{"action":{"type":"string","enum":["x","y"]}}}}}}`

func body(fields string) string { return strings.Replace(schemaBody, "%s", fields, 1) }

// answer is the part of a completion the shape tests read.
type answer struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Function struct{ Name, Arguments string } `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason   string `json:"finish_reason"`
		TokenIDs       []int  `json:"token_ids"`
		PromptTokenIDs []int  `json:"prompt_token_ids"`
		Logprobs       *struct {
			Content []struct {
				ID      *int    `json:"id"`
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func decode(t *testing.T, b []byte) answer {
	t.Helper()
	var a answer
	require.NoError(t, json.Unmarshal(b, &a), "%s", b)
	require.Len(t, a.Choices, 1)
	return a
}

func TestShapes(t *testing.T) {
	prompt := PromptIDs([]Message{{"user", "hi"}})
	reply := `{"action":"y"}` // seed 3 picks enum[3 % 2]
	comp := CompletionIDs(reply)
	for _, tc := range []struct {
		kind   Kind
		fields string
		check  func(t *testing.T, a answer)
	}{
		{VLLM, `"logprobs":true,"return_token_ids":true,"return_tokens_as_token_ids":true,`, func(t *testing.T, a answer) {
			assert.Equal(t, prompt, a.PromptTokenIDs)
			assert.Equal(t, comp, a.Choices[0].TokenIDs)
			assert.Equal(t, "token_id:"+itoa(comp[0]), a.Choices[0].Logprobs.Content[0].Token)
		}},
		{VLLM, `"logprobs":true,`, func(t *testing.T, a answer) {
			assert.Nil(t, a.PromptTokenIDs)
			assert.Nil(t, a.Choices[0].TokenIDs)
			assert.Equal(t, `{"a`, a.Choices[0].Logprobs.Content[0].Token)
		}},
		{SGLang, `"logprobs":true,"return_token_ids":true,"return_prompt_token_ids":true,`, func(t *testing.T, a answer) {
			assert.Nil(t, a.PromptTokenIDs)
			assert.Equal(t, prompt, a.Choices[0].PromptTokenIDs)
			assert.Equal(t, comp, a.Choices[0].TokenIDs)
		}},
		{LlamaCpp, `"logprobs":true,"top_logprobs":1,`, func(t *testing.T, a answer) {
			assert.Nil(t, a.Choices[0].TokenIDs)
			for i, e := range a.Choices[0].Logprobs.Content {
				require.NotNil(t, e.ID)
				assert.Equal(t, comp[i], *e.ID)
			}
		}},
		{OpenAI, `"logprobs":true,"return_token_ids":true,`, func(t *testing.T, a answer) {
			assert.Nil(t, a.Choices[0].TokenIDs)
			assert.Nil(t, a.Choices[0].Logprobs.Content[0].ID)
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			srv := Start(t, Options{Kind: tc.kind})
			code, _, b := post(t, srv.URL()+"/chat/completions", body(tc.fields))
			require.Equal(t, http.StatusOK, code, "%s", b)
			a := decode(t, b)
			assert.Equal(t, reply, *a.Choices[0].Message.Content)
			assert.Equal(t, "stop", a.Choices[0].FinishReason)
			assert.Equal(t, len(prompt), a.Usage.PromptTokens)
			assert.Equal(t, len(comp), a.Usage.CompletionTokens)
			require.Len(t, a.Choices[0].Logprobs.Content, len(comp))
			for i, e := range a.Choices[0].Logprobs.Content {
				assert.Equal(t, LogProb(comp[i], i), e.Logprob)
			}
			tc.check(t, a)
		})
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestToolCallAndLength(t *testing.T) {
	srv := Start(t, Options{})
	tool := `{"model":"m","seed":0,"messages":[{"role":"user","content":"hi"}],
		"tools":[{"type":"function","function":{"name":"act","parameters":{"type":"object","properties":{"action":{"type":"string","enum":["x"]}}}}}],
		"tool_choice":{"type":"function","function":{"name":"act"}}}`
	_, _, b := post(t, srv.URL()+"/chat/completions", tool)
	a := decode(t, b)
	assert.Nil(t, a.Choices[0].Message.Content)
	require.Len(t, a.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, "act", a.Choices[0].Message.ToolCalls[0].Function.Name)
	assert.Equal(t, `{"action":"x"}`, a.Choices[0].Message.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "tool_calls", a.Choices[0].FinishReason)

	_, _, b = post(t, srv.URL()+"/chat/completions", body(`"max_tokens":4,`))
	a = decode(t, b)
	assert.Equal(t, "length", a.Choices[0].FinishReason)
	assert.Equal(t, `{"action":"y`, *a.Choices[0].Message.Content)
	assert.Equal(t, 4, a.Usage.CompletionTokens)
}

func TestBadRequests(t *testing.T) {
	srv := Start(t, Options{Kind: LlamaCpp})
	for _, b := range []string{
		`not json`,
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"robot","content":"hi"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}`,
	} {
		code, _, out := post(t, srv.URL()+"/chat/completions", b)
		assert.Equal(t, http.StatusBadRequest, code, "%s", b)
		assert.Contains(t, string(out), `"type":"invalid_request_error"`)
	}
	assert.Equal(t, 7, srv.Stats().BadRequests)
}

func TestLlamaCppEndpoints(t *testing.T) {
	srv := Start(t, Options{Kind: LlamaCpp})
	root := strings.TrimSuffix(srv.URL(), "/v1")
	chat := `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`
	code, _, b := post(t, root+"/apply-template", chat)
	require.Equal(t, http.StatusOK, code)
	var tmpl struct{ Prompt string }
	require.NoError(t, json.Unmarshal(b, &tmpl))
	assert.Equal(t, ApplyTemplate([]Message{{"system", "s"}, {"user", "u"}}), tmpl.Prompt)
	req, _ := json.Marshal(map[string]any{"content": tmpl.Prompt, "add_special": true, "parse_special": true})
	_, _, b = post(t, root+"/tokenize", string(req))
	var tok struct{ Tokens []int }
	require.NoError(t, json.Unmarshal(b, &tok))
	assert.Equal(t, PromptIDs([]Message{{"system", "s"}, {"user", "u"}}), tok.Tokens)
	_, _, b = post(t, root+"/tokenize", `{"content":"<|im_end|>","parse_special":false}`)
	require.NoError(t, json.Unmarshal(b, &tok))
	assert.Equal(t, []int{Bytes("<|i"), Bytes("m_e"), Bytes("nd|"), Bytes(">")}, tok.Tokens, "without parse_special, special names are plain text")
	_, _, b = post(t, root+"/tokenize", `{"content":"abcd","with_pieces":true}`)
	assert.JSONEq(t, `{"tokens":[{"id":40067781,"piece":"abc"},{"id":200,"piece":"d"}]}`, string(b))
	st := srv.Stats()
	assert.Equal(t, 1, st.ApplyTemplate)
	assert.Equal(t, 3, st.Tokenize)
	code, _, _ = post(t, strings.TrimSuffix(Start(t, Options{Kind: VLLM}).URL(), "/v1")+"/tokenize", `{"content":"x"}`)
	assert.Equal(t, http.StatusBadRequest, code, "vLLM's /tokenize takes a prompt or messages, not llama.cpp's content")
	code, _, _ = post(t, strings.TrimSuffix(Start(t, Options{Kind: OpenAI}).URL(), "/v1")+"/tokenize", `{"content":"x"}`)
	assert.Equal(t, http.StatusNotFound, code, "OpenAI-shaped servers do not tokenize")
}

func TestFaultsOverNetwork(t *testing.T) {
	t.Run("status", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(Status(http.StatusTooManyRequests, "3"))})
		code, h, b := post(t, srv.URL()+"/chat/completions", body(""))
		assert.Equal(t, http.StatusTooManyRequests, code)
		assert.Equal(t, "3", h.Get("Retry-After"))
		assert.JSONEq(t, `{"error":{"message":"injected fault: Too Many Requests","type":"invalid_request_error","code":429}}`, string(b))
		assert.Equal(t, map[string]int{"status_429": 1}, srv.Stats().Faults)
	})
	t.Run("plain body", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(Fault{Kind: StatusCode, Status: http.StatusBadGateway, Body: "<html>bad gateway</html>"})})
		code, h, b := post(t, srv.URL()+"/chat/completions", body(""))
		assert.Equal(t, http.StatusBadGateway, code)
		assert.Empty(t, h.Get("Retry-After"))
		assert.Equal(t, "<html>bad gateway</html>", string(b))
	})
	t.Run("malformed", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(MalformedJSON)})
		code, _, b := post(t, srv.URL()+"/chat/completions", body(""))
		assert.Equal(t, http.StatusOK, code)
		assert.False(t, json.Valid(b))
	})
	t.Run("empty choices", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(NoChoices)})
		_, _, b := post(t, srv.URL()+"/chat/completions", body(""))
		var a answer
		require.NoError(t, json.Unmarshal(b, &a))
		assert.Empty(t, a.Choices)
	})
	t.Run("truncated", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(TruncatedBody)})
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(body("")))
		require.NoError(t, err)
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	})
	t.Run("hang", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(HangFault)})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", strings.NewReader(body("")))
		require.NoError(t, err)
		_, err = http.DefaultClient.Do(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("content", func(t *testing.T) {
		srv := Start(t, Options{Script: Always(WrongSchema)})
		_, _, b := post(t, srv.URL()+"/chat/completions", body(""))
		assert.Equal(t, `{"move": 42}`, *decode(t, b).Choices[0].Message.Content)
	})
	t.Run("no token ids", func(t *testing.T) {
		srv := Start(t, Options{Kind: SGLang, Script: Always(MissingIDs)})
		_, _, b := post(t, srv.URL()+"/chat/completions", body(`"return_token_ids":true,"return_prompt_token_ids":true,`))
		a := decode(t, b)
		assert.Nil(t, a.Choices[0].TokenIDs)
		assert.Nil(t, a.Choices[0].PromptTokenIDs)
	})
}

func TestScripts(t *testing.T) {
	a := &Request{Body: []byte("a")}
	b := &Request{Body: []byte("b")}
	f := FailFirst(2, InternalError)
	assert.Equal(t, InternalError, f(a, Call{N: 7, Repeat: 1}))
	assert.Equal(t, Fault{}, f(a, Call{N: 0, Repeat: 2}))
	g := FailCalls(1, Unavailable)
	assert.Equal(t, Unavailable, g(a, Call{N: 0, Repeat: 5}))
	assert.Equal(t, Fault{}, g(a, Call{N: 1}))
	// Sometimes picks requests by content: the same ones every time.
	picked := 0
	for i := range 300 {
		r := &Request{Body: []byte(strings.Repeat("x", i))}
		got := Sometimes(3, Always(HangFault))(r, Call{})
		assert.Equal(t, got, Sometimes(3, Always(HangFault))(r, Call{N: 9}))
		if got.Kind == Hang {
			picked++
		}
	}
	assert.InDelta(t, 100, picked, 40)
	c := Chain(FailCalls(1, NoChoices), Always(MalformedJSON))
	assert.Equal(t, NoChoices, c(b, Call{N: 0}))
	assert.Equal(t, MalformedJSON, c(b, Call{N: 1}))
	assert.Equal(t, "status_503", Unavailable.Name())
	assert.Equal(t, "hang", HangFault.Name())
	assert.Equal(t, "FaultKind(99)", FaultKind(99).String())
}

// TestRepeatCountsPerBody: a client that sends the same body again is
// counted as repeating it, whatever else arrives in between.
func TestRepeatCountsPerBody(t *testing.T) {
	var seen []Call
	srv := Start(t, Options{Script: func(_ *Request, c Call) Fault { seen = append(seen, c); return Fault{} }})
	for _, fields := range []string{"", `"top_k":1,`, "", "", `"top_k":1,`} {
		code, _, _ := post(t, srv.URL()+"/chat/completions", body(fields))
		require.Equal(t, http.StatusOK, code)
	}
	assert.Equal(t, []Call{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 1}}, seen)
}

// TestTransportMatchesNetwork: the in-process transport answers exactly
// what the network server answers, and in a synctest bubble its latency
// is virtual.
func TestTransportMatchesNetwork(t *testing.T) {
	net := Start(t, Options{Kind: SGLang})
	_, _, want := post(t, net.URL()+"/chat/completions", body(`"logprobs":true,"return_token_ids":true,`))
	synctest.Test(t, func(t *testing.T) {
		srv := NewServer(Options{Kind: SGLang, Latency: time.Hour, Record: true})
		c := &http.Client{Transport: srv.Transport()}
		start := time.Now()
		resp, err := c.Post("http://in-process/v1/chat/completions", "application/json", strings.NewReader(body(`"logprobs":true,"return_token_ids":true,`)))
		require.NoError(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, time.Hour, time.Since(start))
		assert.Equal(t, "200 OK", resp.Status)
		assert.True(t, bytes.Equal(want, got), "in process:\n%s\nnetwork:\n%s", got, want)
		require.Len(t, srv.Requests(), 1)
		assert.True(t, srv.Requests()[0].Flag("return_token_ids"))
		assert.Equal(t, 1, srv.Stats().MaxInFlight)
	})
}

func TestTransportTruncatesAndCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := NewServer(Options{Script: FailCalls(1, TruncatedBody)})
		c := &http.Client{Transport: srv.Transport()}
		resp, err := c.Post("http://in-process/v1/chat/completions", "application/json", strings.NewReader(body("")))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		_ = resp.Body.Close()

		hang := NewServer(Options{Script: Always(HangFault)})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://in-process/v1/chat/completions", strings.NewReader(body("")))
		_, err = (&http.Client{Transport: hang.Transport()}).Do(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		hang.Close()
	})
}

func TestCloseReleasesHangs(t *testing.T) {
	arrived := make(chan struct{})
	var once sync.Once
	srv := Start(t, Options{Script: func(*Request, Call) Fault {
		once.Do(func() { close(arrived) })
		return HangFault
	}})
	done := make(chan int)
	go func() {
		resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(body("")))
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-arrived
	srv.Close()
	<-done // Close must not wait for the client to give up
	srv.Close()
}
