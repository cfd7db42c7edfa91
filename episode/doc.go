// Package episode is the record of a played episode: the engine's output and
// the input of everything downstream (credit assignment, the slime samples
// projected from it, transcripts, analysis tools).
//
// A Record holds the episode's identity (scenario, parameters, seeds,
// index, rollout_id, group_index), how it ended, its seats (and, in a
// scenario of several teams, each seat's team: Seat.Team, Record.Teams),
// every turn in
// order of play (Turn: who acted, when, in which state, what it saw and
// answered, with what seed, tokens and notes), the bus's message log with
// who received each message (Message), the scenario's score (each team's
// reward, Score.Teams, in a scenario with teams) and label, and
// a Replayer that re-runs it under a Counterfactual.
//
// The package is a leaf: it imports only protocol and agents, so that the
// environment (env) and the output layer (trajectories) share these types
// without depending on each other.
package episode
