package llm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
)

// marshalChatBody is the render body as llamaRender wrote it with
// encoding/json, the value appendChatBody's bytes must decode to.
func marshalChatBody(t testing.TB, model string, chat []protocol.ChatMessage, fields []byte) []byte {
	body, err := json.Marshal(struct {
		Model    string                         `json:"model"`
		Messages []openai.ChatCompletionMessage `json:"messages"`
	}{model, toOpenAI(chat)})
	require.NoError(t, err)
	body, err = spliceFields(body, fields)
	require.NoError(t, err)
	return body
}

// sameJSON asserts that got decodes, as encoding/json decodes it, to what
// want decodes to: the hand-written bodies escape strings as
// protocol.AppendString does (no HTML escapes; \b as \u0008), so their
// bytes may differ from json.Marshal's, never their value.
func sameJSON(t testing.TB, want, got []byte) {
	t.Helper()
	var w, g any
	require.NoError(t, json.Unmarshal(want, &w), "want %q", want)
	require.NoError(t, json.Unmarshal(got, &g), "got %q", got)
	assert.Equal(t, w, g, "got %q, want %q", got, want)
}

func TestAppendChatBodyIsJSONMarshal(t *testing.T) {
	chat := []protocol.ChatMessage{
		{Role: RoleSystem, Content: "You are <x> & \"y\"\n\ttab \b\f\r\x01 \u2028\u2029 é \xff"},
		{Role: RoleUser, Content: ""},
		{Role: RoleAssistant, Content: `{"action":"a1"}`},
	}
	for _, fields := range [][]byte{nil, []byte(`"temperature":0,"top_k":20`)} {
		got := appendChatBody(nil, "m<", chat, fields)
		sameJSON(t, marshalChatBody(t, "m<", chat, fields), got)
		assert.LessOrEqual(t, len(got), chatBodySize("m<", chat, fields)+64, "the size bound is close")
	}
	// The point of not escaping HTML: a rendered prompt's markers go as
	// they are.
	assert.Equal(t, `{"model":"m","messages":[{"role":"user","content":"<|im_start|>a&b"}]}`,
		string(appendChatBody(nil, "m", []protocol.ChatMessage{{Role: RoleUser, Content: "<|im_start|>a&b"}}, nil)))
}

func TestAppendIntsIsJSONMarshal(t *testing.T) {
	ids := []int{0, 1, 9, 10, 99, 100, 151643, 999999999, 1000000000, -1, -151643, math.MaxInt64, math.MinInt64}
	want, err := json.Marshal(ids)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(appendInts(nil, ids)))
	assert.Equal(t, "[]", string(appendInts(nil, nil)))
}

func TestReadLlamaAnswers(t *testing.T) {
	ids, err := readTokensKey([]byte(` {"x":[1,{"tokens":2}], "tokens" : [ 3, 151643 ,0 ] } `))
	require.NoError(t, err)
	assert.Equal(t, []int{3, 151643, 0}, ids)
	ids, err = readTokensKey([]byte(`{"tokens":[]}`))
	require.NoError(t, err)
	assert.NotNil(t, ids, "an empty list is a list")
	ids, err = readTokensKey([]byte(`{"other":[]}`))
	require.NoError(t, err)
	assert.Nil(t, ids)
	for _, bad := range []string{`{"tokens":[1.5]}`, `{"tokens":[null]}`, `{"tokens":["1"]}`, `{"tokens":[1]`, `[1]`, `{"tokens":[1]} x`} {
		_, err := readTokensKey([]byte(bad))
		assert.Error(t, err, bad)
	}

	p, err := readStringKey([]byte(`{"prompt":"<|im_start|>user\nhi \u00e9\ud83d\ude00 \ud800 \/"}`), "prompt")
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, "<|im_start|>user\nhi é😀 \ufffd /", *p)
	p, err = readStringKey([]byte(`{"prompt":null}`), "prompt")
	require.NoError(t, err)
	assert.Nil(t, p)

	var a llamaCompletion
	require.NoError(t, readLlamaCompletion([]byte(`{"content":"ok","tokens":[1,2],"stop_type":"eos","tokens_evaluated":7,"truncated":false,`+
		`"completion_probabilities":[{"id":1,"token":"o","bytes":[111],"logprob":-0.5,"top_logprobs":[{"id":1,"logprob":-0.5}]},{"id":2,"logprob":-1e-3}],"timings":{"x":1.5}}`), &a))
	assert.Equal(t, llamaCompletion{Content: "ok", Tokens: []int{1, 2}, StopType: "eos", TokensEvaluated: 7,
		Probs: []llamaProb{{ID: 1, LogProb: -0.5}, {ID: 2, LogProb: -1e-3}}}, a)
}

// caseFolded reports whether the JSON value b has a key, at any depth,
// that encoding/json would match to one of names by folding case but that
// is not one of them: the readers match keys exactly, as llama-server
// writes them.
func caseFolded(b []byte, names ...string) bool {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	fold := strings.NewReplacer("\u017f", "s", "\u212a", "k", "\u017F", "s", "\u212A", "k", "ſ", "s", "K", "k")
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				for _, n := range names {
					if k != n && strings.EqualFold(fold.Replace(k), n) {
						return true
					}
				}
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// FuzzLlamaJSON holds the token path's hand-written JSON to encoding/json:
// what it writes decodes to what json.Marshal's bytes decode to (its ids
// are json.Marshal's bytes), and what it reads, when it reads it at all, is
// what json.Unmarshal reads.
func FuzzLlamaJSON(f *testing.F) {
	f.Add(`<|im_start|>user`+"\n"+`hi "é" \ <&> `+"\u2028\x01\xff", []byte(`{"tokens":[1,2,3],"content":"a\nb","prompt":"\ud83d\ude00"}`), []byte{1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add("", []byte(`{"content":"ok","tokens":[2],"stop_type":"eos","tokens_evaluated":5,"truncated":true,"completion_probabilities":[{"id":2,"logprob":-0.25},null]}`), []byte{})
	f.Add("x", []byte(`{"tokens":null,"content":"\u0000\/\b","tokens_evaluated":1e2}`), []byte{9})
	f.Add("y", []byte(`{"text":null,"text":"\ud83d\ude00\ud800x"}`), []byte{})
	f.Fuzz(func(t *testing.T, text string, answer []byte, raw []byte) {
		// Writing.
		chat := []protocol.ChatMessage{{Role: RoleUser, Content: text}, {Role: text, Content: ""}}
		sameJSON(t, marshalChatBody(t, text, chat, []byte(`"n":1`)), appendChatBody(nil, text, chat, []byte(`"n":1`)))
		ids := make([]int, len(raw)/8)
		for i := range ids {
			ids[i] = int(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		want, err := json.Marshal(ids)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendInts(nil, ids)))
		inRange := true // the scanner bounds ids, as it always has
		for i := range ids {
			inRange = inRange && ids[i] <= maxID && ids[i] >= -maxID
		}
		if got, err := readTokensKey(append(append([]byte(`{"tokens":`), want...), '}')); inRange && assert.NoError(t, err) {
			assert.Equal(t, ids, got)
		}

		// Reading.
		if got, err := readTokensKey(answer); err == nil && !caseFolded(answer, "tokens") {
			var a struct {
				Tokens []int `json:"tokens"`
			}
			require.NoError(t, json.Unmarshal(answer, &a), "read %q", answer)
			assert.Equal(t, a.Tokens, got)
		}
		if got, err := readStringKey(answer, "prompt"); err == nil && !caseFolded(answer, "prompt") {
			var a struct {
				Prompt *string `json:"prompt"`
			}
			require.NoError(t, json.Unmarshal(answer, &a), "read %q", answer)
			assert.Equal(t, a.Prompt, got)
		}
		if got, err := readStringKey(answer, "content"); err == nil && !caseFolded(answer, "content") {
			var a struct {
				Content *string `json:"content"`
			}
			require.NoError(t, json.Unmarshal(answer, &a), "read %q", answer)
			assert.Equal(t, a.Content, got)
		}
		if got, present, err := readStringOrNull(answer, "text"); err == nil && present {
			// postText's reading with encoding/json.
			var m map[string]json.RawMessage
			var want string
			require.NoError(t, json.Unmarshal(answer, &m), "read %q", answer)
			require.NoError(t, json.Unmarshal(m["text"], &want), "read %q", answer)
			assert.Equal(t, want, got)
		}
		var a llamaCompletion
		if err := readLlamaCompletion(answer, &a); err == nil && !caseFolded(answer, "content", "tokens", "stop_type", "tokens_evaluated", "truncated", "completion_probabilities", "id", "logprob") {
			var want llamaCompletion
			require.NoError(t, json.Unmarshal(answer, &want), "read %q", answer)
			assert.Equal(t, want, a)
		}
		// A string value: both read it, or neither.
		if bytes.HasPrefix(answer, []byte(`"`)) {
			obj := append(append([]byte(`{"prompt":`), answer...), '}')
			var want struct {
				Prompt *string `json:"prompt"`
			}
			wantErr := json.Unmarshal(obj, &want)
			got, err := readStringKey(obj, "prompt")
			if assert.Equal(t, wantErr == nil, err == nil, "%q: %v, %v", obj, wantErr, err) && err == nil {
				assert.Equal(t, want.Prompt, got)
			}
		}
	})
}
