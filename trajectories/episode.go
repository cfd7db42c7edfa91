// Package trajectories turns finished episodes into training data: the
// Episode record the environment produces, the Allocator that splits the team
// reward among an episode's samples, and the sinks that store samples (JSONL,
// nested JSONL, in memory) and read them back.
package trajectories

import (
	"github.com/troupe-rl/troupe/protocol"
)

// Seat is one agent of an episode: its id and its role. An episode's seats
// are in a fixed order; that order breaks every tie.
type Seat struct {
	ID   string
	Role string
}

// Score is a scenario's verdict on a finished episode: the team reward G and,
// for scenarios that have them, per-agent scores in seat order (nil when the
// scenario has none).
type Score struct {
	Team   float64
	Agents []float64
}

// ActionRecord is one turn as it was played: who acted, when, and what they
// answered. Every turn is recorded here, including those of agents whose
// samples are not emitted, so an episode can be replayed exactly.
type ActionRecord struct {
	Step   int
	Agent  int // seat index
	Turn   int // the agent's own turn number
	Action string
}

// Episode is one finished episode: its identity, how it ended, its score, the
// full action and message record, and its samples.
type Episode struct {
	Scenario   string
	Params     map[string]string // the scenario parameters, as given
	Seed       uint64            // scenario seed: equal for every episode of a group
	PolicySeed uint64            // the seed policies draw from

	Index      int64 // episode number within the run, from 0
	RolloutID  int64 // shared by all of this episode's samples
	GroupIndex int64 // the episodes of one GRPO group share it

	Status protocol.Status
	End    string // why it ended: "terminated", "max_steps", "interrupted", ...
	Err    string // for aborted and failed episodes

	Steps    int                // logical steps taken
	Seats    []Seat             // the agents, in seat order
	Actions  []ActionRecord     // every turn, in order of play
	Messages []protocol.Message // every message sent on the bus, in (Time, Seq) order
	Score    Score

	// Samples are the emitted turns, in order of play. Their Reward is set
	// by the allocators; the runner sets Index when the episode is written.
	Samples []protocol.Sample

	// Replay, when non-nil, re-runs this episode with some agents' actions
	// or presence changed; counterfactual allocators need it. The
	// environment sets it for episodes it can reproduce.
	Replay Replayer

	prepared *prepared // set by JSONLWriter.Prepare
}

// Turns returns the number of agent turns taken (emitted or not).
func (e *Episode) Turns() int { return len(e.Actions) }

// AgentScore returns seat i's individual score and whether the scenario has
// one.
func (e *Episode) AgentScore(i int) (float64, bool) {
	if i < 0 || i >= len(e.Score.Agents) {
		return 0, false
	}
	return e.Score.Agents[i], true
}
