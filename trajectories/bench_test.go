package trajectories_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// benchEpisode is an episode of 100 typical text-only turns.
func benchEpisode() *trajectories.Episode {
	ep := fxEpisode(1, 0, 0, 0)
	for i := range 100 {
		s := fxSample(1, 0, 0)
		s.Index = int64(i)
		s.Metadata.Turn, s.Metadata.Step = i/10, i
		s.Prompt = protocol.TextPrompt("You are p17, a patron of the El Farol bar. The bar is fun when fewer than 60 of the 100 patrons go.\n" +
			"Attendance so far: 44, 71, 58, 63, 39, 55.\n" +
			"Messages:\n[t=5] p3 -> * (say): I am going tonight, the last two nights were quiet.\n" +
			"[t=5] p41 -> * (say): Staying home, it will be packed.\n" +
			"Answer \"go\" or \"stay\".")
		ep.Samples = append(ep.Samples, s)
	}
	return ep
}

func BenchmarkJSONLWriterEpisode(b *testing.B) {
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			ep := benchEpisode()
			b.SetBytes(int64(len(writeAll(b, l.layout, []*trajectories.Episode{ep}))))
			b.ReportAllocs()
			jw := trajectories.NewJSONLWriter(io.Discard, l.layout)
			for b.Loop() {
				if err := jw.WriteEpisode(ep); err != nil {
					b.Fatal(err)
				}
			}
			if err := jw.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkJSONLEpisodeStdlib writes the same episode flat with
// encoding/json from maps holding the same keys and values: the generic
// baseline JSONLWriter is measured against.
func BenchmarkJSONLEpisodeStdlib(b *testing.B) {
	ep := benchEpisode()
	maps := make([]map[string]any, len(ep.Samples))
	for i := range ep.Samples {
		maps[i] = sampleMap(&ep.Samples[i])
	}
	b.SetBytes(int64(len(writeAll(b, trajectories.Flat, []*trajectories.Episode{ep}))))
	b.ReportAllocs()
	bw := bufio.NewWriterSize(io.Discard, 1<<20)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for b.Loop() {
		for _, m := range maps {
			if err := enc.Encode(m); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkReader(b *testing.B) {
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			var eps []*trajectories.Episode
			for i := range 10 {
				ep := benchEpisode()
				for j := range ep.Samples {
					ep.Samples[j].RolloutID = int64(i)
				}
				eps = append(eps, ep)
			}
			data := writeAll(b, l.layout, eps)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				all, err := trajectories.ReadAll(bytes.NewReader(data))
				if err != nil || len(all) != 1000 {
					b.Fatal(len(all), err)
				}
			}
		})
	}
}

// sampleMap is the map a generic encoder would be given for s: the same
// keys and values as AppendJSON writes.
func sampleMap(s *protocol.Sample) map[string]any {
	var reward any
	if v, ok := s.Reward.Get(""); ok {
		reward = v
	}
	var mask, lps any
	if s.LossMask != nil {
		mask = s.LossMask
	}
	if s.RolloutLogProbs != nil {
		lps = s.RolloutLogProbs
	}
	tokens := s.Tokens
	if tokens == nil {
		tokens = []int{}
	}
	md := s.Metadata
	return map[string]any{
		"group_index": s.GroupIndex, "index": s.Index, "rollout_id": s.RolloutID,
		"prompt": s.Prompt.Text, "tokens": tokens, "response": s.Response,
		"response_length": s.ResponseLength, "label": nil, "reward": reward,
		"loss_mask": mask, "rollout_log_probs": lps, "remove_sample": s.RemoveSample,
		"status": s.Status,
		"metadata": map[string]any{
			"scenario": md.Scenario, "seed": md.Seed, "episode": md.Episode, "agent": md.Agent,
			"role": md.Role, "turn": md.Turn, "step": md.Step, "state": md.State,
			"team_reward": md.TeamReward, "raw_reward": md.TeamReward, "allocator": md.Allocator,
			"text_only": md.TextOnly, "end": md.End,
		},
	}
}
