package protocol_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
)

// FuzzSampleDecode feeds arbitrary bytes to UnmarshalJSON. It must never
// panic, and whatever it accepts must survive the encoder: AppendJSON of the
// result is valid JSON, decodes to an equal Sample, and re-encodes to the
// same bytes.
func FuzzSampleDecode(f *testing.F) {
	for _, fx := range fixtures() {
		f.Add(fx.sample.AppendJSON(nil))
	}
	slime, err := os.ReadFile(filepath.Join("testdata", "slime_to_dict.json"))
	require.NoError(f, err)
	f.Add(slime)
	for _, seed := range []string{
		`{"rollout_id":0,"status":"pending"}`,
		`{"rollout_id":1,"status":"completed","prompt":[],"tokens":[],"reward":{},"loss_mask":[],"rollout_log_probs":[],"metadata":{}}`,
		`{"rollout_id":-1,"status":"failed","reward":-0,"metadata":{"agent_score":null,"x":[{"y":1e300}],"raw_reward":5}}`,
		`{"rollout_id":1,"status":"truncated","prompt":[null,{"role":"u"}],"label":"","response":"\ud800\u2028"}`,
		`{"rollout_id":1,"ROLLOUT_ID":2,"Status":"aborted","metadata":{"seed":18446744073709551615,"Seed":1}}`,
		`[{"rollout_id":1,"status":"completed"}]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var s protocol.Sample
		if err := s.UnmarshalJSON(data); err != nil {
			require.ErrorIs(t, err, protocol.ErrDecode)
			return
		}
		_ = s.Validate() // must not panic on anything the decoder accepts

		first := s.AppendJSON(nil)
		require.True(t, json.Valid(first), "invalid JSON from %q: %s", data, first)
		var generic map[string]any
		require.NoError(t, json.Unmarshal(first, &generic))

		var again protocol.Sample
		require.NoError(t, again.UnmarshalJSON(first), "cannot decode our own encoding %s", first)
		require.Equal(t, s, again, "decoding %s", first)
		require.Equal(t, string(first), string(again.AppendJSON(nil)))
	})
}
