package envserver

import (
	"context"
	"errors"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// learnerReplay is the Replayer of an episode the server played, for its
// credit: a seat a session played (a learner's, whose policy the server
// cannot ask) replays its recorded moves, turn by turn, wherever a
// counterfactual asks its policy (resimulated, reseeded, or past the
// record), and the house policy of its role once those run out; the
// house's seats are asked their policies. Frozen counterfactuals that
// reseed no seat ask no policy within the record and past it the house's
// alike, so they go to the record's own Replayer, which rescores a
// finished game without replaying it where the scenario can.
//
// It is the Replayer of `troupe run` playing the same moves with the
// replay policy, settings {"moves": ..., "then": the house policy}: the
// two credit the episode alike, with every allocator.
type learnerReplay struct {
	recorded episode.Replayer // the record's own
	learners episode.Replayer // NewReplayer with the learners' seats replaying
}

// Replay implements episode.Replayer.
func (r *learnerReplay) Replay(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
	if !cf.Resimulate && len(cf.Reseed) == 0 {
		return r.recorded.Replay(ctx, cf)
	}
	return r.learners.Replay(ctx, cf)
}

// ReplayOneOut implements episode.OneOutReplayer: those counterfactuals
// are frozen.
func (r *learnerReplay) ReplayOneOut(null bool, seats []int, team []float64) bool {
	o, ok := r.recorded.(episode.OneOutReplayer)
	return ok && o.ReplayOneOut(null, seats, team)
}

// replayOf returns rec's Replayer for its credit (learnerReplay), rec's own
// when no session played a seat or rec has none.
func (ep *episodeEntry) replayOf(rec *episode.Record) episode.Replayer {
	return learnersReplay(rec, ep.tb.Setup(), ep.learners)
}

// learnersReplay returns rec's Replayer for its credit, the learners
// being the seats of setup's episode that sessions (or a vector's caller)
// played: learnerReplay, or rec's own when there are none or rec has none.
func learnersReplay(rec *episode.Record, setup env.Setup, learners []int) episode.Replayer {
	if rec.Replay == nil || len(learners) == 0 {
		return rec.Replay
	}
	moves := make(map[string][]string, len(learners))
	for _, i := range learners {
		moves[rec.Seats[i].ID] = []string{}
	}
	for k := range rec.Turns {
		t := &rec.Turns[k]
		if m, ok := moves[rec.Seats[t.Seat].ID]; ok {
			moves[rec.Seats[t.Seat].ID] = append(m, t.Action)
		}
	}
	house := setup.Policy
	setup.Policy = func(s env.Seat) agents.Policy {
		m, ok := moves[s.ID]
		if !ok {
			return house(s)
		}
		return replayThen(m, house(s))
	}
	return &learnerReplay{recorded: rec.Replay, learners: env.NewReplayer(setup, rec.Seats, rec.Turns)}
}

// replayThen is a policy that plays moves, one per turn of its agent
// (agents.Replay), and asks then once they run out.
func replayThen(moves []string, then agents.Policy) agents.Policy {
	replay := agents.Replay(moves...)
	return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
		a, err := replay.Act(ctx, obs)
		if errors.Is(err, agents.ErrReplayExhausted) && then != nil {
			return then.Act(ctx, obs)
		}
		return a, err
	})
}
