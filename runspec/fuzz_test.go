package runspec_test

import (
	"bytes"
	"testing"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/runspec"
)

// FuzzSpecDecode: whatever Decode accepts, its canonical form decodes back
// to the same canonical form and hash, and Decode never panics.
func FuzzSpecDecode(f *testing.F) {
	s := full()
	f.Add(s.Canonical())
	f.Add(s.Indent())
	f.Add([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1}`))
	f.Add([]byte(`{"format":"troupe.runspec/v1","scenario":"x","episodes":1,"policies":{"a":{"name":"llm","settings":{"t":1e400}}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"merge_turns":true,"merge_reward":"mean"}`))
	f.Add([]byte(`{"format":"troupe.runspec/v1","scenario":"elfarol","episodes":1,"merge_reward":"sum"}`))
	f.Add([]byte(`{"format":"troupe.runspec/v1","scenario":"x","episodes":1,"policies":{"a":{"name":"llm","settings":{"model":"m","kind":"sglang","token_in":true,"max_context":4096,"no_memory":true,"format":"text","invalid_retries":0,"feedback":false}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := runspec.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		c := s.Canonical()
		d, err := runspec.DecodeBytes(c)
		if err != nil {
			t.Fatalf("the canonical form %s of an accepted spec is refused: %v", c, err)
		}
		if !bytes.Equal(d.Canonical(), c) || d.Hash() != s.Hash() {
			t.Fatalf("canonical form not stable: %s vs %s", c, d.Canonical())
		}
	})
}
