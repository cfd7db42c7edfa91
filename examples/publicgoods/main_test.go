package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/agentstest"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/env/envtest"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestScenario is all the testing a new scenario needs to start with: the
// harness plays it with every policy and checks troupe's contracts.
func TestScenario(t *testing.T) {
	envtest.Check(t, Scenario(), envtest.Options{
		Params: []map[string]string{{}, {"citizens": "10", "r": "3"}},
	})
}

func Example() {
	// One episode by hand: three cooperators and one free rider.
	sc := Scenario()
	p, _ := sc.Info().ParseParams(map[string]string{"citizens": "4"})
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Scenario: sc,
		Params:   p,
		Policy: func(s env.Seat) agents.Policy {
			if s.ID == "citizen-0" {
				return agents.Replay("0")
			}
			return agents.Replay("10")
		},
	}))
	fmt.Println("scores:", ep.Score.Agents, "team:", ep.Score.Team)

	// A run of 3 episodes of cooperators, written as JSONL.
	var out bytes.Buffer
	sum, _ := Run(context.Background(), "cooperator", 3, &out)
	samples, _ := trajectories.ReadAll(&out)
	fmt.Println(sum.Episodes, "episodes,", len(samples), "samples, each rewarded", samples[0].Reward.Value)
	// Output:
	// scores: [22 12 12 12] team: 58
	// 3 episodes, 12 samples, each rewarded 64
}

// TestRoleAgreesWithLooplab checks the citizen's compiled machine against
// looplab/fsm itself.
func TestRoleAgreesWithLooplab(t *testing.T) {
	for _, r := range Scenario().Info().Roles {
		agentstest.Check(t, r)
	}
}
