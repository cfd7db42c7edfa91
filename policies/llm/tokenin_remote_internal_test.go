package llm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/protocol"
)

// When the server's ids of the new chat begin with the previous prompt and
// response ids as sampled, they are the prompt: no text is compared and
// nothing else is asked (the common case on a real BPE tokenizer, where the
// fake's, which packs bytes across the generation prompt, never gives it).
func TestTokenInTakesTheServersIDsWhenTheyExtend(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":6,"max_model_len":99,"tokens":[1,2,3,9,4,5]}`))
	}))
	defer srv.Close()
	cfg := testConfig(KindVLLM)
	cfg.BaseURL, cfg.TokenIn = srv.URL+"/v1", true
	c, err := NewClient(cfg)
	require.NoError(t, err)
	defer c.Close()
	chat := []protocol.ChatMessage{{Role: RoleUser, Content: "u"}}
	req := &tokenRequest{model: "m", chat: chat, prev: &agents.Tokens{Prompt: []int{1, 2}, Response: []int{3, 9}}}
	ids, why, _, err := c.remotePromptTokens(context.Background(), req, 1)
	require.NoError(t, err)
	assert.Empty(t, why)
	assert.Equal(t, []int{1, 2, 3, 9, 4, 5}, ids)
	mu.Lock()
	assert.Equal(t, []string{"/tokenize"}, paths, "one call: the chat's ids")
	// Ids that do not extend them send it to the text comparison.
	paths = nil
	mu.Unlock()
	req.prev = &agents.Tokens{Prompt: []int{1, 2}, Response: []int{7}}
	_, _, _, err = c.remotePromptTokens(context.Background(), req, 1)
	require.ErrorIs(t, err, ErrMalformed, "the stub answers /detokenize with no prompt string")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/tokenize", "/detokenize"}, paths[:2])
}
