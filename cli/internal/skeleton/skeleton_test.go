package main

import (
	"context"
	"flag"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/agentstest"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts")

// TestScenario plays the scenario with every policy over several seeds and
// checks troupe's contracts: valid samples, replayable, deterministic
// episodes, output that does not depend on the concurrency.
func TestScenario(t *testing.T) {
	scenariotest.Check(t, Scenario(), scenariotest.Options{
		Params: []map[string]string{{}, {"players": "5", "rounds": "1"}},
	})
}

// TestRole checks the role's compiled machine against looplab/fsm itself.
func TestRole(t *testing.T) { agentstest.Check(t, player) }

// TestDoc keeps the package doc's state diagram in step with the role.
func TestDoc(t *testing.T) { scenariotest.CheckDoc(t, ".", player) }

// TestGolden pins one whole episode, a follower among random players, as
// a transcript in testdata: a change of the rules shows in review.
func TestGolden(t *testing.T) {
	sc := Scenario()
	p, err := sc.Info().ParseParams(nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: func(s env.Seat) agents.Policy {
			if s.ID == "player-0" {
				return colours.Scripted(follow)
			}
			return agents.Random()
		}},
		Seed:       1,
		PolicySeed: 2,
	})
	scenariotest.Golden(t, "testdata/seed1.golden", trajectories.Transcript(trajectories.NewEpisode(ep)), *update)
}
