package trajectories_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

func ExampleJSONLWriter() {
	md := protocol.Metadata{Scenario: "elfarol", Seed: 7, Role: "patron", TeamReward: 1, Allocator: "team", TextOnly: true, End: "terminated"}
	ep := &trajectories.Episode{
		Record: episode.Record{
			RolloutID: 3,
		},
		Samples: []protocol.Sample{
			{Index: 0, RolloutID: 3, Prompt: protocol.TextPrompt("Go or stay?"), Response: "go", Reward: protocol.Scalar(1), Status: protocol.StatusCompleted, Metadata: md},
			{Index: 1, RolloutID: 3, Prompt: protocol.TextPrompt("Go or stay?"), Response: "stay", Reward: protocol.Scalar(1), Status: protocol.StatusCompleted, Metadata: md},
		},
	}
	ep.Samples[0].Metadata.Agent = "p0"
	ep.Samples[1].Metadata.Agent = "p1"

	jw := trajectories.NewJSONLWriter(os.Stdout, trajectories.Flat)
	if err := jw.WriteEpisode(ep); err != nil {
		fmt.Println(err)
	}
	// The writer buffers whole episodes; Flush hands them to os.Stdout.
	if err := jw.Flush(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"group_index":0,"index":0,"rollout_id":3,"prompt":"Go or stay?","tokens":[],"response":"go","response_length":0,"label":null,"reward":1,"loss_mask":null,"rollout_log_probs":null,"remove_sample":false,"status":"completed","metadata":{"scenario":"elfarol","seed":7,"episode":0,"agent":"p0","role":"patron","turn":0,"step":0,"state":"","team_reward":1,"raw_reward":1,"allocator":"team","text_only":true,"end":"terminated"}}
	// {"group_index":0,"index":1,"rollout_id":3,"prompt":"Go or stay?","tokens":[],"response":"stay","response_length":0,"label":null,"reward":1,"loss_mask":null,"rollout_log_probs":null,"remove_sample":false,"status":"completed","metadata":{"scenario":"elfarol","seed":7,"episode":0,"agent":"p1","role":"patron","turn":0,"step":0,"state":"","team_reward":1,"raw_reward":1,"allocator":"team","text_only":true,"end":"terminated"}}
}

func ExampleReadRollouts() {
	// Rollout 1 is written flat (one sample per line), rollout 2 nested (one
	// rollout per line); the reader takes both.
	in := strings.Join([]string{
		`{"index":0,"rollout_id":1,"response":"go","status":"completed"}`,
		`{"index":1,"rollout_id":1,"response":"stay","status":"completed"}`,
		`[{"index":2,"rollout_id":2,"response":"go","status":"truncated"},{"index":3,"rollout_id":2,"response":"go","status":"truncated"}]`,
		`{"index":4,"rollout_id":3,"response":"stay","status":"failed"}`,
	}, "\n") + "\n"

	rollouts, err := trajectories.ReadRollouts(strings.NewReader(in))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rollouts {
		var responses []string
		for _, s := range r {
			responses = append(responses, s.Response)
		}
		fmt.Printf("rollout %d (%s): %s\n", r[0].RolloutID, r[0].Status, strings.Join(responses, ", "))
	}
	// Output:
	// rollout 1 (completed): go, stay
	// rollout 2 (truncated): go, go
	// rollout 3 (failed): stay
}
