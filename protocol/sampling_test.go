package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/protocol"
)

// TestSamplingOver: a field given replaces the base's, explicit zeros
// included; one not given keeps it; Extra adds keys to a copy.
func TestSamplingOver(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	base := protocol.Sampling{Temperature: f(0.7), TopP: f(0.9), TopK: i(40), Stop: []string{"x"},
		Extra: map[string]json.RawMessage{"min_p": json.RawMessage(`0.1`)}}
	s := protocol.Sampling{Temperature: f(0), TopK: i(0), MaxTokens: i(8),
		Extra: map[string]json.RawMessage{"top_a": json.RawMessage(`1`)}}
	got := s.Over(base)
	assert.Equal(t, protocol.Sampling{Temperature: f(0), TopP: f(0.9), TopK: i(0), MaxTokens: i(8), Stop: []string{"x"},
		Extra: map[string]json.RawMessage{"min_p": json.RawMessage(`0.1`), "top_a": json.RawMessage(`1`)}}, got)
	assert.Len(t, base.Extra, 1, "the base is not written to")
	assert.Equal(t, base, protocol.Sampling{}.Over(base))

	b, err := json.Marshal(got)
	assert.NoError(t, err)
	assert.Equal(t, `{"temperature":0,"top_p":0.9,"top_k":0,"max_tokens":8,"stop":["x"],"extra":{"min_p":0.1,"top_a":1}}`, string(b))
}
