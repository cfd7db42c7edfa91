package protocol_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/troupe-rl/troupe/protocol"
)

// benchTextSample is a typical text-only turn: an El Farol prompt with the
// last few nights' messages.
func benchTextSample() protocol.Sample {
	s := textOnlySample()
	s.Prompt = protocol.TextPrompt("You are p17, a patron of the El Farol bar. The bar is fun when fewer than 60 of the 100 patrons go.\n" +
		"Attendance so far: 44, 71, 58, 63, 39, 55.\n" +
		"Messages:\n[t=5] p3 -> * (say): I am going tonight, the last two nights were quiet.\n" +
		"[t=5] p41 -> * (say): Staying home, it will be packed.\n" +
		"Answer \"go\" or \"stay\".")
	s.Response = "go"
	s.Metadata.Extra = nil
	return s
}

// benchTokenSample is an LLM turn of 512 prompt and 256 response tokens,
// with log-probs and a loss mask that masks one tool observation.
func benchTokenSample() protocol.Sample {
	s := benchTextSample()
	rng := rand.New(rand.NewPCG(5, 6))
	s.Tokens = make([]int, 512+256)
	for i := range s.Tokens {
		s.Tokens[i] = rng.IntN(150000)
	}
	s.ResponseLength = 256
	s.LossMask = make([]int, 256)
	s.RolloutLogProbs = make([]float64, 256)
	for i := range s.LossMask {
		if i >= 100 && i < 140 {
			continue // the observation: masked, log-prob 0
		}
		s.LossMask[i] = 1
		s.RolloutLogProbs[i] = -rng.ExpFloat64()
	}
	s.Metadata.TextOnly = false
	return s
}

// sampleMap is the map a generic encoder would be given for s: the same
// keys and values.
func sampleMap(s *protocol.Sample) map[string]any {
	var reward any
	if v, ok := s.Reward.Get(""); ok {
		reward = v
	}
	var mask any
	if s.LossMask != nil {
		mask = s.LossMask
	}
	var lps any
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

func benchAppendJSON(b *testing.B, s protocol.Sample) {
	b.SetBytes(int64(len(s.AppendJSON(nil))))
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = s.AppendJSON(buf[:0])
	}
}

func benchMarshalMap(b *testing.B, s protocol.Sample) {
	m := sampleMap(&s)
	b.SetBytes(int64(len(s.AppendJSON(nil))))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSampleAppendJSON(b *testing.B)       { benchAppendJSON(b, benchTextSample()) }
func BenchmarkSampleAppendJSONTokens(b *testing.B) { benchAppendJSON(b, benchTokenSample()) }

// The encoding/json baselines marshal the same content from a map, the
// generic alternative to the hand-written encoder (SetBytes uses
// AppendJSON's length so MB/s compare directly).
func BenchmarkSampleMarshalMapStdlib(b *testing.B)       { benchMarshalMap(b, benchTextSample()) }
func BenchmarkSampleMarshalMapStdlibTokens(b *testing.B) { benchMarshalMap(b, benchTokenSample()) }

func BenchmarkSampleUnmarshalJSON(b *testing.B) {
	s := benchTokenSample()
	data := s.AppendJSON(nil)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var out protocol.Sample
		if err := out.UnmarshalJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}
