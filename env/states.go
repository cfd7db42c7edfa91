package env

import (
	"context"
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// StateRenderer is implemented by games that can draw their state for a
// person: a board, the offers on the table. RenderState returns it as
// plain text, drawn in a fixed-width font (a tic-tac-toe board's three
// lines); it must not change the game.
//
// It is never called while episodes are played, so it costs a run
// nothing and the record stays as it was: a viewer gets the states by
// replaying the record (States).
type StateRenderer interface {
	RenderState() string
}

// StepState is a game's state drawn after a step: Step 0 is the state
// after Start, before any move.
type StepState struct {
	Step  int
	State string
}

// ErrNoStates is returned by States for a scenario whose game is not a
// StateRenderer.
var ErrNoStates = errors.New("the scenario's game draws no state (env.StateRenderer)")

// States replays the recorded episode rec of scenario sc, its own moves
// from its own seeds, and returns the game's state after its start and
// after every step. The replay is deterministic (the engine's counterfactual
// replay with nothing changed), so these are the states the episode went
// through; one whose replay ends otherwise than the record (a scenario
// changed since the file was written) is an error.
func States(ctx context.Context, sc Scenario, rec *episode.Record) ([]StepState, error) {
	info := sc.Info()
	params, err := info.ParseParams(rec.Params)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", info.Name, err)
	}
	var states []StepState
	var notRenderer bool
	setup := Setup{
		Play: Play{Scenario: sc, Params: params}, Seed: rec.Seed, PolicySeed: rec.PolicySeed,
		Index: rec.Index, RolloutID: rec.RolloutID, GroupIndex: rec.GroupIndex,
		Counterfactual: &episode.Counterfactual{}, Recorded: rec.Turns,
		onState: func(step int, g Game) {
			r, ok := g.(StateRenderer)
			if !ok {
				notRenderer = true
				return
			}
			states = append(states, StepState{Step: step, State: r.RenderState()})
		},
	}
	// A replay runs to the recorded end unless the record's limits cut it:
	// the steps it played bound it.
	setup.Limits.MaxSteps = max(rec.Steps, 1)
	replayed := NewEngine().Run(ctx, setup)
	if notRenderer {
		return nil, ErrNoStates
	}
	if replayed.Status == protocol.StatusFailed {
		return states, fmt.Errorf("scenario %s: the replay failed at step %d: %s", info.Name, replayed.Steps, replayed.Err)
	}
	if replayed.Steps != rec.Steps {
		return states, fmt.Errorf("scenario %s: the replay played %d steps, the record %d (the scenario changed since the file was written?)", info.Name, replayed.Steps, rec.Steps)
	}
	return states, nil
}

// ReplayRecord replays the recorded episode rec of scenario sc under the
// counterfactual cf, from its own seeds and its recorded moves, and returns
// its score: what a counterfactual allocator asked of the episode's
// replayer, asked again afterwards (troupe view computes v(∅) so). A
// counterfactual that re-simulates a seat needs its policy, which a
// record does not have: only absent, null and replaced seats are replayed.
func ReplayRecord(ctx context.Context, sc Scenario, rec *episode.Record, cf episode.Counterfactual) (Score, error) {
	info := sc.Info()
	params, err := info.ParseParams(rec.Params)
	if err != nil {
		return Score{}, fmt.Errorf("scenario %s: %w", info.Name, err)
	}
	r := NewReplayer(Setup{
		Play: Play{Scenario: sc, Params: params}, Seed: rec.Seed, PolicySeed: rec.PolicySeed,
		Index: rec.Index, RolloutID: rec.RolloutID, GroupIndex: rec.GroupIndex,
	}, rec.Seats, rec.Turns)
	return r.Replay(ctx, cf)
}
