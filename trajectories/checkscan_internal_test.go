package trajectories

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
)

// scanSamples are lines the fast path must read as the decoder does.
func scanSamples() [][]byte {
	score := 1.5
	var lines [][]byte
	add := func(s protocol.Sample) { lines = append(lines, append(s.AppendJSON(nil), '\n')) }
	for i := range int64(6) {
		s := protocol.Sample{GroupIndex: i / 4, Index: i, RolloutID: i / 2, Prompt: protocol.TextPrompt("a \"view\"\n\twith escapes \u00e9"),
			Response: "1", Reward: protocol.Scalar(0.25), Status: protocol.StatusCompleted,
			Metadata: protocol.Metadata{Scenario: "x", Seed: 1 << 63, Agent: "a", AgentScore: &score, TextOnly: true, Extra: map[string]any{"note": []any{1.0, "x"}}}}
		if i == 3 {
			s.Metadata.TextOnly = false
			s.Tokens, s.ResponseLength, s.LossMask, s.RolloutLogProbs = []int{1, 2, 3}, 2, []int{1, 0}, []float64{-0.5, 0}
			s.Prompt = protocol.Prompt{Messages: []protocol.ChatMessage{{Role: "user", Content: "hi"}}}
			s.Reward = protocol.DictReward(map[string]float64{"team": 1, "rae": -2e-9})
		}
		add(s)
	}
	return lines
}

// TestFastScanAgreesWithTheDecoder: every well-formed line takes the fast
// path with the decoder's identity; broken ones fall back to the decoder.
func TestFastScanAgreesWithTheDecoder(t *testing.T) {
	var fs fastScan
	for _, line := range scanSamples() {
		var fast, slow lineFacts
		fs.scanLine(line, &fast)
		slowLine(line, &slow)
		require.Equal(t, uint8(lineFlat), fast.kind, "%s", line)
		require.Equal(t, uint8(lineSlow), slow.kind)
		s := slow.samples[0]
		require.NoError(t, s.Validate())
		require.Equal(t, [3]int64{s.RolloutID, s.GroupIndex, s.Index}, [3]int64{fast.rollout, fast.group, fast.index})
	}
	for _, bad := range []string{
		`{"rollout_id":1,"status":"completed","metadata":{"text_only":true},"prompt":"a` + "\x01" + `"}`,
		`{"rollout_id":1,"status":"completed","metadata":{"text_only":true},"prompt":"\x"}`,
		`{"rollout_id":1.5,"status":"completed","metadata":{"text_only":true}}`,
		`{"rollout_id":1,"status":"done","metadata":{"text_only":true}}`,
		`{"rollout_id":1,"status":"completed","metadata":{"text_only":false}}`,
		`{"rollout_id":1,"status":"completed","metadata":{"text_only":true,"x":1e999}}`,
		`{"rollout_id":1,"Status":"completed","metadata":{"text_only":true}}`,
		`{"rollout_id":1,"status":"completed","reward":1e999,"metadata":{"text_only":true}}`,
	} {
		var lf lineFacts
		fs.scanLine([]byte(bad), &lf)
		require.NotEqual(t, uint8(lineFlat), lf.kind, bad)
	}
}

// FuzzFastScan: a line the fast path accepts, the decoder accepts too, as
// a valid sample (or list) with the same identity.
func FuzzFastScan(f *testing.F) {
	for _, l := range scanSamples() {
		f.Add(l)
		f.Add(append(append([]byte("["), bytes.TrimSpace(l)...), ']'))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fs fastScan
		var fast, slow lineFacts
		fs.scanLine(line, &fast)
		if fast.kind != lineFlat && fast.kind != lineNested {
			return
		}
		slowLine(line, &slow)
		require.Equal(t, uint8(lineSlow), slow.kind, "the decoder refuses %q: %v", line, slow.err)
		require.Equal(t, fast.kind == lineNested, slow.nested)
		if slow.nested {
			require.NoError(t, protocol.ValidateRollout(slow.samples))
		}
		for i := range slow.samples {
			s := &slow.samples[i]
			require.NoError(t, s.Validate())
			require.Equal(t, fast.index+int64(i), s.Index)
		}
		require.Equal(t, fast.rollout, slow.samples[0].RolloutID)
		require.Equal(t, fast.group, slow.samples[0].GroupIndex)
	})
}

// TestCheckAtChunksAgreeWithCheck: chunks of any size, on several
// workers, give the sequential check's report, for every prefix.
func TestCheckAtChunksAgreeWithCheck(t *testing.T) {
	data := bytes.Join(scanSamples(), nil)
	data = append(data, "{oops\n"...)
	data = append(data, scanSamples()[5]...)
	for n := 0; n <= len(data); n += 7 {
		want := Check(bytes.NewReader(data[:n]), CheckOptions{})
		for _, chunk := range []int64{1, 50, 300, 1 << 20} {
			got := checkAt(bytes.NewReader(data[:n]), int64(n), CheckOptions{}, 3, chunk)
			require.Equal(t, want, got, "%d bytes, chunks of %d", n, chunk)
		}
	}
}
