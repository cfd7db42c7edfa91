package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/agentstest"
	"github.com/troupe-rl/troupe/cli"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestScenario is all the testing a new scenario needs to start with: the
// harness plays it with every policy and checks troupe's contracts.
func TestScenario(t *testing.T) {
	scenariotest.Check(t, Scenario(), scenariotest.Options{
		Params: []map[string]string{{}, {"citizens": "10", "r": "3", "rounds": "2"}},
	})
}

// TestRoleAgreesWithLooplab checks the citizen's compiled machine against
// looplab/fsm itself.
func TestRoleAgreesWithLooplab(t *testing.T) { agentstest.Check(t, citizen) }

// TestCommandRunsTheScenario runs this program's own command line, as
// `go run . run publicgoods --episodes 5` would, and reads its JSONL back.
func TestCommandRunsTheScenario(t *testing.T) {
	var stdout, stderr bytes.Buffer
	app := cli.New(&stdout, &stderr, cli.WithScenarios(Scenario()))
	code := app.Main(t.Context(), []string{"run", "publicgoods", "--episodes", "5", "--policy", "cooperator", "--out", "-"})
	if code != cli.ExitOK {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	rollouts, err := trajectories.ReadRollouts(&stdout)
	if err != nil {
		t.Fatal(err)
	}
	if len(rollouts) != 5 {
		t.Fatalf("%d episodes, want 5", len(rollouts))
	}
	for i, r := range rollouts {
		if len(r) != 4*5 { // four citizens, five rounds
			t.Fatalf("episode %d: %d samples, want 20", i, len(r))
		}
		for _, s := range r {
			if s.Response != "10" || s.Reward.Value != 320 || s.Status != "completed" {
				t.Fatalf("episode %d: sample %+v", i, s)
			}
		}
	}
	if !bytes.Contains(stderr.Bytes(), []byte("publicgoods: 5 episodes, 100 samples")) {
		t.Errorf("summary: %s", stderr.String())
	}
}

func Example() {
	// One episode by hand: a free rider among reciprocators, who answer the
	// announced contributions of the round before.
	sc := Scenario()
	p, _ := sc.Info().ParseParams(map[string]string{"citizens": "4"})
	ep := env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: func(s env.Seat) agents.Policy {
			if s.ID == "citizen-0" {
				return coins.Always(0)
			}
			return coins.Scripted(reciprocate)
		}},
	})
	fmt.Println("scores:", ep.Score.Agents, "team:", ep.Score.Team)
	for _, m := range ep.Messages {
		fmt.Println(m.Kind+":", m.Payload)
	}
	// Output:
	// scores: [82.4 55.4 55.4 55.4] team: 248.6
	// contributions: 0 10 10 10
	// contributions: 0 7 7 7
	// contributions: 0 5 5 5
	// contributions: 0 3 3 3
	// contributions: 0 2 2 2
}
