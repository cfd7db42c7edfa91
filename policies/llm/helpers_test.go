package llm

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// testConfig is a configuration for the test servers: short backoffs and
// timeouts, so that the synctest bubbles stay small, and temperature 0.
func testConfig(kind Kind) Config {
	c := DefaultConfig()
	c.BaseURL = "http://llmtest.invalid/v1" // replaced for network tests
	c.Kind = kind
	c.Model = "test-model"
	c.Temperature = ptr(0.0)
	c.Timeout = 10 * time.Second
	c.BackoffBase = 100 * time.Millisecond
	c.BackoffMax = 2 * time.Second
	c.Seed = 7
	return c
}

// inProcess returns a policy that reaches srv through its in-process
// transport: usable inside a synctest bubble.
func inProcess(t *testing.T, srv *llmtest.Server, cfg Config, opts ...Option) *Policy {
	t.Helper()
	c, err := NewClient(cfg, WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	p, err := NewPolicy(c, cfg, opts...)
	require.NoError(t, err)
	return p
}

// overNetwork returns a policy that reaches srv (listening on 127.0.0.1)
// through the client's own pooled transport.
func overNetwork(t *testing.T, srv *llmtest.Server, cfg Config, opts ...Option) *Policy {
	t.Helper()
	cfg.BaseURL = srv.URL()
	p, err := New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(p.Client().Close)
	return p
}

// board is an observation with a finite action space.
func board(seed uint64, legal ...string) *agents.Observation {
	return &agents.Observation{Agent: "x", Role: "x", State: "to_move", Step: 1, View: "Pick a cell.", Legal: legal, Seed: seed}
}

// topLevelKeys returns the keys of a JSON object in order, duplicates
// included.
func topLevelKeys(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, k.(string))
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return keys
}

// chosen returns the action DefaultBrain picks for the request seed among
// legal.
func chosen(seed int, legal []string) string { return legal[uint64(seed)%uint64(len(legal))] }
