package verifiers

import (
	"testing"

	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// BenchmarkAnswer is the server's own work per run past the episode: the
// traces of a two-seat episode of 40 remembering turns each (every turn
// adding 60 prompt and 40 sampled tokens, so the last sample holds 4,000
// ids), built and packed as the deltas and the reply.
func BenchmarkAnswer(b *testing.B) {
	ro := rollout.Rollout{RolloutID: 1, Status: protocol.StatusCompleted, End: "terminal",
		Seats: []rollout.Seat{{ID: "a", Role: "a"}, {ID: "b", Role: "b"}}}
	for _, seat := range []string{"a", "b"} {
		var ids []int
		for turn := range 40 {
			for i := range 100 {
				ids = append(ids, turn*100+i)
			}
			mask, lp := make([]int, 40), make([]float64, 40)
			for i := range mask {
				mask[i], lp[i] = 1, -0.25
			}
			ro.Samples = append(ro.Samples, protocol.Sample{Tokens: append([]int(nil), ids...), ResponseLength: 40, LossMask: mask,
				RolloutLogProbs: lp, Response: "answer", Prompt: protocol.Prompt{Text: "observation"},
				Reward: protocol.DictReward(map[string]float64{"team": 1}), Status: protocol.StatusCompleted,
				Metadata: protocol.Metadata{Agent: seat, Role: seat, Turn: turn}})
		}
	}
	req := &RunRequest{TaskData: map[string]any{"scenario": "x"}, Model: "m"}
	plan := &runPlan{scenario: "x", llm: map[string]bool{"a": true, "b": true}, frozen: map[string]bool{}, allocators: []string{"team"}}
	b.ReportAllocs()
	bytes := 0
	cpu := cputime.Seconds()
	for b.Loop() {
		head, traces, sums := episodeOf(&ro, req, plan)
		bytes = 0
		for _, t := range traces {
			bytes += len(encode(t))
		}
		bytes += len(encode(runResponse{Success: true, Head: head, Traces: sums}))
	}
	b.ReportMetric((cputime.Seconds()-cpu)*1e6/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(bytes), "wire-bytes/op")
}
