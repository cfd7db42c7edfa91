// Package credit holds troupe's reward allocators: the ways an episode's
// team reward is split among its samples, and a registry that names them.
//
// Every allocator writes one value per sample. Unless an allocator says
// otherwise, a value computed per agent (a share, an advantage) goes to every
// sample of that agent: an agent's samples are its turns, and slime trains
// an episode's samples as one rollout. Discount is the allocator that makes
// the values of one agent's turns differ; it composes with any other.
//
// The allocators fall in three families:
//
//   - stateless: Team, EqualSplit, Individual, Discount and GroupNorm (GRPO,
//     Dr.GRPO, RLOO);
//   - stateful: RAE, whose baselines evolve across groups and runs;
//   - counterfactual: Difference, LeaveOneOut, Shapley, MonteCarloShapley
//     and COMA, which re-simulate the episode through Episode.Replay.
//
// A tree-sampled episode (env.PlayTree, episode.Tree) has K samples per
// sampled turn, one per candidate, in the order of
// episode.Record.SampleRefs: an allocator that computes a value per agent
// gives it to all of them, and ATGRPO and MAGRPO compare the candidates of
// each turn, as their papers do (docs/credit.md).
//
// In a scenario with teams (episode.Record.Teams: werewolf's village and
// wolves), every allocator works per team: a seat's reward is its own
// team's, G_T (episode.Score.Of), its counterfactuals are valued by G_T,
// Shapley's coalitions are those of its team's members with the other
// teams present, and group normalisation never puts two teams' units in
// one group (docs/credit.md#teams).
//
// Samples of episodes that did not finish (aborted, failed) get what Team
// gives them, G = 0, from Team and EqualSplit, and 0 from every other
// allocator: such an episode has no outcome to compare or re-simulate.
package credit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Errors of allocation. They are wrapped with the allocator, the episode
// and the cause.
var (
	// ErrBadEpisode: an episode is inconsistent (a sample whose agent is
	// not one of its seats).
	ErrBadEpisode = errors.New("bad episode")
	// ErrNoAgentScores: the scenario gives no per-agent scores and the
	// allocator needs them.
	ErrNoAgentScores = errors.New("the scenario gives no per-agent scores")
	// ErrNoReplay: a counterfactual allocator got an episode that cannot be
	// re-simulated (Episode.Replay is nil: it was read back from a file, or
	// made by an executor that cannot replay).
	ErrNoReplay = errors.New("the episode cannot be re-simulated")
	// ErrBudget: an allocator needs more re-simulations for an episode than
	// its budget allows.
	ErrBudget = errors.New("re-simulation budget too small")
	// ErrTooManyAgents: exact Shapley was asked for an episode with more
	// agents than its limit.
	ErrTooManyAgents = errors.New("too many agents for exact Shapley")
)

// Team gives every sample the episode's team reward G: r_i = G(z). In a
// scenario with teams, a sample gets its agent's team's reward, r_i =
// G_T(z) for i on team T. A candidate of a tree-sampled turn gets its own
// continuation's (episode.Candidate.Team).
type Team struct{}

// Name implements trajectories.Allocator.
func (Team) Name() string { return "team" }

// Allocate implements trajectories.Allocator.
func (Team) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		if ep.Teams == nil {
			for s := range dst[e] {
				dst[e][s] = ep.Score.Team
			}
		} else {
			seats, err := sampleSeats(ep)
			if err != nil {
				return err
			}
			for s, i := range seats {
				dst[e][s] = ep.SeatReward(i)
			}
		}
		if len(ep.Candidates) > 0 && finished(ep) {
			treeTeam(ep, dst[e])
		}
	}
	return nil
}

// EqualSplit divides the team reward equally: among the episode's agents
// (G/K, every sample of an agent gets its agent's share) or, PerSample,
// among its emitted samples (G / number of samples).
//
// Per agent, K counts every seat, emitted or not, so the shares of all
// agents sum to G; per sample, the emitted samples' values sum to G.
//
// In a scenario with teams, each team's reward is split among its own
// members: G_T/K_T per agent, K_T the seats of team T, or G_T/S_T per
// sample, S_T the samples of T's agents.
type EqualSplit struct {
	PerSample bool
}

// Name implements trajectories.Allocator.
func (a EqualSplit) Name() string {
	if a.PerSample {
		return "equal-split-sample"
	}
	return "equal-split"
}

// Allocate implements trajectories.Allocator.
func (a EqualSplit) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		if ep.Teams != nil {
			if err := a.teams(ep, dst[e]); err != nil {
				return err
			}
			continue
		}
		n := len(ep.Seats)
		if a.PerSample {
			n = len(dst[e])
		}
		if n == 0 {
			continue
		}
		share := ep.Score.Team / float64(n)
		for s := range dst[e] {
			dst[e][s] = share
		}
	}
	return nil
}

// teams is Allocate for an episode of a scenario with teams.
func (a EqualSplit) teams(ep *trajectories.Episode, dst []float64) error {
	seats, err := sampleSeats(ep)
	if err != nil {
		return err
	}
	n := make([]int, ep.TeamCount())
	if a.PerSample {
		for _, i := range seats {
			n[ep.Seats[i].Team]++
		}
	} else {
		for _, seat := range ep.Seats {
			n[seat.Team]++
		}
	}
	for s, i := range seats {
		dst[s] = ep.SeatReward(i) / float64(n[ep.Seats[i].Team])
	}
	return nil
}

// Individual gives every sample its agent's own score from the scenario,
// r_i = L_i(z) (Score.Agents; the "local" reward of the literature). A
// finished episode of a scenario without per-agent scores is an error
// wrapping ErrNoAgentScores.
type Individual struct{}

// Name implements trajectories.Allocator.
func (Individual) Name() string { return "individual" }

// Needs implements Needer.
func (Individual) Needs() Needs { return Needs{AgentScores: true} }

// Allocate implements trajectories.Allocator.
func (a Individual) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeatsInto(sc.seats, ep)
		if err != nil {
			return err
		}
		sc.seats = seats
		// sampleSeatsInto checked the seats against ep.Seats: when every
		// seat has its score, none is looked up with a check of its own.
		if agents := ep.Score.Agents; len(agents) == len(ep.Seats) {
			out := dst[e][:len(seats)]
			for s, i := range seats {
				out[s] = agents[i]
			}
			continue
		}
		for s, i := range seats {
			v, err := agentScore(ep, i)
			if err != nil {
				return err
			}
			dst[e][s] = v
		}
	}
	return nil
}

// finished reports whether the episode has an outcome: it completed or
// was truncated, and was scored.
func finished(ep *trajectories.Episode) bool {
	return ep.Status == protocol.StatusCompleted || ep.Status == protocol.StatusTruncated
}

// agentScore returns seat i's individual score, or an error naming the
// scenario when it has none.
func agentScore(ep *trajectories.Episode, i int) (float64, error) {
	v, ok := ep.AgentScore(i)
	if !ok {
		return 0, fmt.Errorf("episode %d of %s: %w (use a team-based or counterfactual allocator)", ep.Index, ep.Scenario, ErrNoAgentScores)
	}
	return v, nil
}

// sampleTimes returns, for every sample of ep, its step and its agent's
// turn number (see sampleSeats).
func sampleTimes(ep *trajectories.Episode) (steps, turns []int) {
	if ep.Samples == nil && len(ep.Candidates) > 0 {
		for _, ref := range ep.SampleRefs(nil) {
			t := &ep.Turns[ref.Turn]
			steps, turns = append(steps, t.Step), append(turns, t.Turn)
		}
		return steps, turns
	}
	if ep.Samples == nil {
		for k := range ep.Turns {
			if t := &ep.Turns[k]; t.Emit {
				steps, turns = append(steps, t.Step), append(turns, t.Turn)
			}
		}
		return steps, turns
	}
	steps, turns = make([]int, len(ep.Samples)), make([]int, len(ep.Samples))
	for s := range ep.Samples {
		steps[s], turns[s] = ep.Samples[s].Metadata.Step, ep.Samples[s].Metadata.Turn
	}
	return steps, turns
}

// sampleSeats returns, for every sample of ep, the seat index of its agent:
// read from the samples when they are projected, from the emitted turns
// when not (a run whose sinks need no samples).
func sampleSeats(ep *trajectories.Episode) ([]int, error) {
	return sampleSeatsInto(nil, ep)
}

// sampleSeatsInto is sampleSeats, written into dst's array when it is
// large enough.
func sampleSeatsInto(dst []int, ep *trajectories.Episode) ([]int, error) {
	// Projected samples are the emitted turns, in order (Samples): the
	// turns say their seats without a map from agent to seat. Samples
	// without their turns (read back from a file) name their agents.
	if len(ep.Candidates) > 0 && (ep.Samples == nil || ep.Record.Emitted() == len(ep.Samples)) {
		// A tree-sampled turn is several samples (SampleRefs).
		out := dst[:0]
		for _, ref := range ep.SampleRefs(nil) {
			t := &ep.Turns[ref.Turn]
			if t.Seat < 0 || t.Seat >= len(ep.Seats) {
				return nil, fmt.Errorf("%w: episode %d of %s: turn %d names seat %d of %d", ErrBadEpisode, ep.Index, ep.Scenario, ref.Turn, t.Seat, len(ep.Seats))
			}
			out = append(out, t.Seat)
		}
		return out, nil
	}
	if ep.Samples == nil || (len(ep.Turns) > 0 && ep.Record.Emitted() == len(ep.Samples)) {
		// At most a seat per turn: sized without counting the emitted
		// ones, which reads every turn.
		out := dst[:0]
		if cap(out) < len(ep.Turns) {
			out = make([]int, 0, len(ep.Turns))
		}
		for k := range ep.Turns {
			t := &ep.Turns[k]
			if !t.Emit {
				continue
			}
			if t.Seat < 0 || t.Seat >= len(ep.Seats) {
				return nil, fmt.Errorf("%w: episode %d of %s: turn %d names seat %d of %d", ErrBadEpisode, ep.Index, ep.Scenario, k, t.Seat, len(ep.Seats))
			}
			out = append(out, t.Seat)
		}
		return out, nil
	}
	out := dst[:0]
	if cap(out) < len(ep.Samples) {
		out = make([]int, 0, len(ep.Samples))
	}
	out = out[:len(ep.Samples)]
	if len(ep.Samples) == 0 {
		return out, nil
	}
	index := make(map[string]int, len(ep.Seats))
	for i, s := range ep.Seats {
		index[s.ID] = i
	}
	for s := range ep.Samples {
		i, ok := index[ep.Samples[s].Metadata.Agent]
		if !ok {
			return nil, fmt.Errorf("%w: episode %d of %s: sample %d belongs to agent %q, which has no seat", ErrBadEpisode, ep.Index, ep.Scenario, s, ep.Samples[s].Metadata.Agent)
		}
		out[s] = i
	}
	return out, nil
}

// scratch holds the per-episode working arrays of an allocation (the
// samples' seats, the seats to credit, the re-simulated values), reused
// through scratchPool: an allocator called once per episode would
// otherwise allocate several arrays the size of the episode's seats every
// time, and a learning run's garbage collector would spend its time on
// them. The pool holds no state that any result depends on.
type scratch struct {
	seats, who  []int
	want        []bool
	vals, share []float64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// sized returns s with length n, reusing its array when it can; the
// elements are not cleared.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
