package episode

import (
	"context"
	"errors"
)

// Errors of counterfactual replays that allocators test for: the scenario
// does not say what the counterfactual means.
var (
	ErrNoAbsence    = errors.New("the scenario does not declare what an absent agent means")
	ErrNoNullAction = errors.New("the scenario declares no null action for this role")
)

// Counterfactual describes how to re-run an episode differently. Seat indexes
// refer to Record.Seats.
type Counterfactual struct {
	// Absent seats take no part: they are never scheduled and the scenario
	// treats them as it declares for an absent agent.
	Absent []int
	// Null seats play their role's null action (the scenario's "doing
	// nothing") at every turn. A scenario that declares none for the role
	// makes the replay fail with an error naming scenario and role.
	Null []int
	// Replace maps a seat to the action text it plays instead of its
	// recorded or policy action, at every turn. The scenario's null action is
	// the usual choice.
	Replace map[int]string
	// Reseed asks the given seats' own policies again at every turn, with
	// the turn's seed mixed with the salt, instead of replaying their
	// recorded actions: M alternative actions of one agent are M salts.
	// Null and Replace take precedence.
	Reseed map[int]uint64
	// Resimulate asks the other agents' policies again (with the same seeds)
	// instead of replaying their recorded actions.
	Resimulate bool
	// TeamOnly says the caller reads only the team rewards of the result
	// (Team, and Teams in a scenario with teams): the replayer may leave
	// Score.Agents nil, which lets a scenario
	// rescore the counterfactual in O(1) instead of O(agents)
	// (env.Rescorer).
	TeamOnly bool
}

// Replayer re-runs an episode under a counterfactual and returns the team
// reward and per-agent scores it would have earned.
type Replayer interface {
	Replay(ctx context.Context, cf Counterfactual) (Score, error)
}

// StepReplayer is an optional interface of a Replayer that says what a
// counterfactual costs: ReplaySteps is Replay that also returns the
// logical steps of the counterfactual episode, what an environment plays
// to score it. A counterfactual the scenario scored without playing it
// (a frozen one, from the finished game) counts the steps of the
// recorded turns, which that episode would have played: the cost is the
// environment's, whatever shortcut the simulator took. Experiments count
// it to compare allocators at equal cost.
type StepReplayer interface {
	ReplaySteps(ctx context.Context, cf Counterfactual) (score Score, steps int, err error)
}

// RecordedSteps is the number of logical steps the turns record: the
// step of the last one, 0 for none. It is what a frozen counterfactual of
// them costs (StepReplayer).
func RecordedSteps(turns []Turn) int {
	if len(turns) == 0 {
		return 0
	}
	return turns[len(turns)-1].Step
}

// OneOutReplayer is an optional interface of a Replayer: it scores, in one
// call, the frozen counterfactuals that each take one seat out of the
// coalition, which difference rewards and leave-one-out ask for every agent
// of every episode. A replayer whose game can answer them all at once
// (env.OneOutRescorer) saves building, validating and dispatching one
// Counterfactual per agent.
type OneOutReplayer interface {
	// ReplayOneOut writes into team[k], for every k, the team reward that
	// Replay gives the counterfactual {Null: {seats[k]}} when null is set,
	// {Absent: {seats[k]}} otherwise, with TeamOnly set and Resimulate not:
	// the same value, bit for bit. It reports false when it cannot answer
	// every one of them so, for whatever reason (a seat out of range, a
	// role without a null action, a game that must be replayed); team then
	// holds nothing meaningful, and the caller replays them one by one,
	// which also reports what was wrong. len(team) is len(seats).
	ReplayOneOut(null bool, seats []int, team []float64) bool
}

// ReplayerFunc adapts a function to Replayer.
type ReplayerFunc func(ctx context.Context, cf Counterfactual) (Score, error)

// Replay calls f.
func (f ReplayerFunc) Replay(ctx context.Context, cf Counterfactual) (Score, error) {
	return f(ctx, cf)
}
