package llm

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// headerRecorder records the routing header of every request it passes on.
type headerRecorder struct {
	rt     http.RoundTripper
	header string
	mu     sync.Mutex
	seen   map[string][]string // path -> header values
}

func (h *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.seen[req.URL.Path] = append(h.seen[req.URL.Path], req.Header.Get(h.header))
	h.mu.Unlock()
	return h.rt.RoundTrip(req)
}

// TestRoutingKeyOnEveryRequest: every request a turn makes (llama.cpp's
// /apply-template, /tokenize, /completion and /detokenize) carries the agent's session key in
// the routing header; "" sends none; the header name is checked.
func TestRoutingKeyOnEveryRequest(t *testing.T) {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp})
	for _, header := range []string{DefaultRoutingHeader, "X-Session", ""} {
		cfg := testConfig(KindLlamaCpp)
		cfg.RoutingHeader, cfg.Endpoint = header, "big"
		rec := &headerRecorder{rt: srv.Transport(), header: header, seen: map[string][]string{}}
		if header == "" {
			rec.header = DefaultRoutingHeader
		}
		c, err := NewClient(cfg, WithRoundTripper(rec))
		require.NoError(t, err)
		p, err := NewPolicy(c, cfg)
		require.NoError(t, err)
		obs := board(3, "a", "b")
		obs.Session = 0x0123456789abcdef
		a, err := p.Act(context.Background(), obs)
		require.NoError(t, err)
		assert.Equal(t, "big", a.Notes["llm_endpoint"], "the sample names the endpoint")
		// An agent that remembers asks llama.cpp's /completion with token
		// ids (the token-in path), after /apply-template and /tokenize.
		require.Contains(t, rec.seen, "/completion")
		require.Contains(t, rec.seen, "/tokenize")
		for path, values := range rec.seen {
			for _, v := range values {
				if header == "" {
					assert.Empty(t, v, "%s: no routing header", path)
				} else {
					assert.Equal(t, "0123456789abcdef", v, "%s carries the agent's key in %s", path, header)
				}
			}
		}
	}
	cfg := testConfig(KindVLLM)
	cfg.RoutingHeader = "Bad Header"
	assert.ErrorContains(t, cfg.Validate(), `routing header "Bad Header" is not an HTTP header name`)
	assert.Equal(t, "000000000000002a", routingKey(42))
}

// BenchmarkTurnRoutingKey is one turn against an in-process server with
// the routing header (the default) and without it (the yardstick, in the
// same run): what the key costs a turn, a header on a cloned request.
func BenchmarkTurnRoutingKey(b *testing.B) {
	srv := llmtest.NewServer(llmtest.Options{Brain: llmtest.First})
	for _, header := range []string{"", DefaultRoutingHeader} {
		b.Run("header="+header, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.BaseURL, cfg.Model, cfg.RoutingHeader = "http://in-process/v1", "bench", header
			c, err := NewClient(cfg, WithRoundTripper(srv.Transport()))
			if err != nil {
				b.Fatal(err)
			}
			p, err := NewPolicy(c, cfg)
			if err != nil {
				b.Fatal(err)
			}
			obs := board(1, "a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Act(context.Background(), obs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
