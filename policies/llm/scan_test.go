package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/internal/jsonscan"
)

// reference decodes the token fields with encoding/json: what scanAnswer
// must agree with.
type reference struct {
	PromptTokenIDs []int `json:"prompt_token_ids"`
	Choices        []struct {
		TokenIDs       []int `json:"token_ids"`
		PromptTokenIDs []int `json:"prompt_token_ids"`
		Logprobs       *struct {
			Content []struct {
				ID      *int    `json:"id"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// agrees checks that scanAnswer read raw as encoding/json does, when
// encoding/json reads it without error.
func agrees(t *testing.T, raw []byte) {
	var ref reference
	if json.Unmarshal(raw, &ref) != nil || !plainKeys(raw) {
		return
	}
	got := scanAnswer(raw)
	if got.scanErr != nil {
		// Ids beyond 2^62 and null ids (which encoding/json reads as 0)
		// are the only things the scanner refuses that encoding/json
		// reads.
		msg := got.scanErr.Error()
		require.True(t, strings.Contains(msg, "integer too large") || strings.Contains(msg, "null in a token id array"), "%q: %v", raw, msg)
		return
	}
	assert.Equal(t, ref.PromptTokenIDs, got.prompt)
	require.Equal(t, len(ref.Choices), got.choices)
	if len(ref.Choices) == 0 {
		return
	}
	c := ref.Choices[0]
	assert.Equal(t, c.TokenIDs, got.choice.tokenIDs)
	assert.Equal(t, c.PromptTokenIDs, got.choice.promptIDs)
	if c.Logprobs == nil || c.Logprobs.Content == nil {
		assert.False(t, got.choice.logprobs)
		return
	}
	require.True(t, got.choice.logprobs)
	require.Len(t, got.choice.entries, len(c.Logprobs.Content))
	for i, e := range c.Logprobs.Content {
		assert.Equal(t, e.ID != nil, got.choice.entries[i].hasID)
		if e.ID != nil {
			assert.Equal(t, *e.ID, got.choice.entries[i].id)
		}
		assert.Equal(t, e.Logprob, got.choice.entries[i].logprob)
	}
	var slim, whole map[string]any
	blanked := bytes.Clone(raw)
	got.blank(blanked)
	require.Len(t, blanked, len(raw))
	require.NoError(t, json.Unmarshal(blanked, &slim), "blanked: %s", blanked)
	require.NoError(t, json.Unmarshal(raw, &whole))
	delete(whole, "prompt_token_ids")
	delete(slim, "prompt_token_ids")
	for _, m := range []map[string]any{whole, slim} {
		if cs, ok := m["choices"].([]any); ok {
			for i, c := range cs {
				if c, ok := c.(map[string]any); ok {
					delete(c, "token_ids")
					delete(c, "prompt_token_ids")
					if i == 0 {
						delete(c, "logprobs")
					}
				}
			}
		}
	}
	assert.Equal(t, whole, slim, "blank must change nothing but the values troupe reads itself")
}

// plainKeys reports whether raw's objects have no duplicate keys and no
// key that matches a field of interest only when case is ignored: there,
// encoding/json (case-insensitive, last duplicate wins) and the scanner
// (exact keys, as servers write them) may rightly differ.
func plainKeys(raw []byte) bool {
	fields := []string{"prompt_token_ids", "choices", "token_ids", "logprobs", "content", "id", "logprob", "token"}
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return err == io.EOF
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{object: v == '{', keys: map[string]bool{}, key: v == '{'})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.object && top.key {
				if top.keys[v] {
					return false
				}
				top.keys[v] = true
				for _, f := range fields {
					if strings.EqualFold(f, v) && f != v {
						return false
					}
				}
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}

var scanSeeds = []string{
	`{"id":"x","prompt_token_ids":[1,2,3],"choices":[{"index":0,"message":{"role":"assistant","content":"a\"b\\u00e9"},"logprobs":{"content":[{"token":"token_id:7","logprob":-0.5,"bytes":[1,2],"top_logprobs":[{"token":"t","logprob":-1e-3}]}]},"finish_reason":"stop","token_ids":[7]}],"usage":{"prompt_tokens":3}}`,
	`{"choices":[{"prompt_token_ids":[3],"token_ids":[4,5],"logprobs":{"content":[{"token":"a","logprob":-0.25},{"token":"b","logprob":-7.5E-1}]}},{"token_ids":[9]}]}`,
	`{"choices":[{"logprobs":{"content":[{"id":11,"token":"a","logprob":-0.1},{"id":null,"token":"b","logprob":-2}]}}]}`,
	`{"choices":[{"logprobs":null,"token_ids":null}],"prompt_token_ids":null}`,
	`{"choices":[{"logprobs":{"content":null}}]}`,
	`{"choices":[],"prompt_token_ids":[]}`,
	` { "choices" : [ { "token_ids" : [ 1 , 2 ] } ] } `,
	`{"choices":[null]}`,
	`{"prompt_token_ids":[1.5]}`,
	`{"prompt_token_ids":[01]}`,
	`{"a":[true,false,null,{"b":[]}],"choices":[{"x":"\\"}"}]}`,
}

func TestScanAnswer(t *testing.T) {
	for _, s := range scanSeeds {
		agrees(t, []byte(s))
	}
	a := scanAnswer([]byte(scanSeeds[0]))
	require.NoError(t, a.scanErr)
	assert.Equal(t, []int{1, 2, 3}, a.prompt)
	e := a.choice.entries[0]
	assert.True(t, e.hasText)
	assert.Equal(t, 7, e.textID)
	assert.Equal(t, -0.5, e.logprob)
	assert.JSONEq(t, `{"id":"x","prompt_token_ids":[],"choices":[{"index":0,"message":{"role":"assistant","content":"a\"b\\u00e9"},"logprobs":{},"finish_reason":"stop","token_ids":[]}],"usage":{"prompt_tokens":3}}`,
		string(blanked(a, scanSeeds[0])))

	deep := `{"a":` + strings.Repeat("[", jsonscan.DefaultMaxDepth+1) + strings.Repeat("]", jsonscan.DefaultMaxDepth+1) + `}`
	assert.ErrorContains(t, scanAnswer([]byte(deep)).scanErr, "nested deeper than 10000")
	for _, bad := range []string{``, `[]`, `{"choices":[{"token_ids":[1,]}]}`, `{"prompt_token_ids":[1.5]}`, `{"a":1}x`, `{"a":"\u0001` + "\x01" + `"}`, `{"a":tru}`, `{"a" 1}`} {
		assert.Error(t, scanAnswer([]byte(bad)).scanErr, "%q", bad)
	}
}

func blanked(a answerTokens, raw string) []byte {
	b := []byte(raw)
	a.blank(b)
	return b
}

func FuzzScanAnswer(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		agrees(t, []byte(raw))
	})
}
