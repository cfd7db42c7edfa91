package protocol_test

import (
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/protocol"
)

func ExampleSample_AppendJSON() {
	s := protocol.Sample{
		GroupIndex: 0,
		Index:      4,
		RolloutID:  1,
		Prompt:     protocol.TextPrompt("Night 3: 58 of 100 went. Go or stay?"),
		Response:   "stay",
		Reward:     protocol.Scalar(1),
		Status:     protocol.StatusCompleted,
		Metadata: protocol.Metadata{
			Scenario:   "elfarol",
			Seed:       7,
			Episode:    1,
			Agent:      "p2",
			Role:       "patron",
			Turn:       2,
			Step:       2,
			State:      "deciding",
			TeamReward: 1,
			Allocator:  "team",
			TextOnly:   true,
			End:        "terminated",
		},
	}
	fmt.Println(string(s.AppendJSON(nil)))
	// Output:
	// {"group_index":0,"index":4,"rollout_id":1,"prompt":"Night 3: 58 of 100 went. Go or stay?","tokens":[],"response":"stay","response_length":0,"label":null,"reward":1,"loss_mask":null,"rollout_log_probs":null,"remove_sample":false,"status":"completed","metadata":{"scenario":"elfarol","seed":7,"episode":1,"agent":"p2","role":"patron","turn":2,"step":2,"state":"deciding","team_reward":1,"raw_reward":1,"allocator":"team","text_only":true,"end":"terminated"}}
}

func ExampleSample_Validate() {
	s := protocol.Sample{
		RolloutID:      1,
		Index:          4,
		Tokens:         []int{9, 12, 40, 41}, // one prompt token, three response tokens
		ResponseLength: 3,
		// The second response token is a tool observation: not trained, so
		// its log-prob must be 0.
		LossMask:        []int{1, 0, 1},
		RolloutLogProbs: []float64{-0.5, -2, -0.25},
		Status:          protocol.StatusCompleted,
	}
	err := s.Validate()
	fmt.Println(errors.Is(err, protocol.ErrInvalidSample))
	fmt.Println(err)

	s.RolloutLogProbs[1] = 0
	fmt.Println(s.Validate())
	// Output:
	// true
	// invalid sample: rollout 1 index 4: rollout_log_probs[1] = -2 at a masked position, want 0.0
	// <nil>
}
