package protocol_test

import (
	"github.com/troupe-rl/troupe/protocol"
)

// The fixtures below are the sample shapes troupe emits. Each function
// returns a fresh value, so a test may change it freely.

// textOnlySample is a turn of a policy that gave no token ids.
func textOnlySample() protocol.Sample {
	return protocol.Sample{
		GroupIndex: 2,
		Index:      7,
		RolloutID:  3,
		Prompt:     protocol.TextPrompt("Week 4. Last week 61 of 100 went to the bar.\nGo or stay?"),
		Response:   "go",
		Reward:     protocol.Scalar(0.5),
		Status:     protocol.StatusCompleted,
		Metadata: protocol.Metadata{
			Scenario:   "elfarol",
			Seed:       42,
			Episode:    3,
			Agent:      "a1",
			Role:       "patron",
			Turn:       3,
			Step:       3,
			State:      "deciding",
			TeamReward: 1.25,
			Allocator:  "team",
			TextOnly:   true,
			End:        "terminated",
		},
	}
}

// tokenSample is an LLM turn with token ids, a loss mask with one
// observation token inside the response, and log-probs.
func tokenSample() protocol.Sample {
	s := textOnlySample()
	s.Tokens = []int{101, 2023, 2003, 1037, 3231, 102, 2175, 999, 4521}
	s.ResponseLength = 4
	s.LossMask = []int{1, 1, 0, 1}
	s.RolloutLogProbs = []float64{-0.25, -1.5e-7, 0, -3.125}
	s.Metadata.TextOnly = false
	return s
}

// chatSample has a chat-style prompt and a label.
func chatSample() protocol.Sample {
	s := textOnlySample()
	s.Prompt = protocol.Prompt{Messages: []protocol.ChatMessage{
		{Role: "system", Content: "You are a patron of the El Farol bar."},
		{Role: "user", Content: "Go or stay? Answer \"go\" or \"stay\"."},
	}}
	s.Label = protocol.TextLabel("stay")
	return s
}

// dictRewardSample carries one reward per allocator, for --reward-key.
func dictRewardSample() protocol.Sample {
	s := textOnlySample()
	s.Reward = protocol.DictReward(map[string]float64{"team": 1.25, "equal_split": 0.0125, "counterfactual": -0.5})
	s.Metadata.Allocator = "team,equal_split,counterfactual"
	return s
}

// extrasSample exercises everything optional: an agent score, an error,
// remove_sample, a non-pending status and scenario extras of every JSON type
// (in the Go types encoding/json decodes them to, so a round trip is exact).
func extrasSample() protocol.Sample {
	s := tokenSample()
	score := -2.75
	s.Status = protocol.StatusAborted
	s.RemoveSample = true
	s.Reward = protocol.Reward{}
	s.Metadata.AgentScore = &score
	s.Metadata.Error = "policy a1: context deadline exceeded"
	s.Metadata.End = "interrupted"
	s.Metadata.Extra = map[string]any{
		"attended":  true,
		"night":     float64(4),
		"note":      "illegal move <b4>",
		"history":   []any{float64(61), float64(38), "x"},
		"nested":    map[string]any{"z": nil, "a": []any{}},
		"nothing":   nil,
		"zz_last":   "\u2028",
		"aa_first":  -1e-9,
		"ünïcode_k": "välue",
	}
	return s
}

// fixture is a named sample, for table-driven tests.
type fixture struct {
	name   string
	sample protocol.Sample
}

// fixtures returns every fixture, in a fixed order.
func fixtures() []fixture {
	return []fixture{
		{"text-only", textOnlySample()},
		{"tokens", tokenSample()},
		{"chat prompt", chatSample()},
		{"dict reward", dictRewardSample()},
		{"extras", extrasSample()},
	}
}
