package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/trajectories"
)

// MinTurnser is implemented by scenarios that know, from their parameters
// alone, the fewest turns each role takes in an episode played to its end
// (in El Farol every patron decides once: agents turns of role patron).
// The service uses it to refuse, before playing anything, a request whose
// answer would hold more than MaxSamplesPerAnswer samples. Scenarios that
// do not implement it are checked while they play.
type MinTurnser interface {
	MinTurns(p env.Params) map[string]int
}

// errTooManySamples cancels a request's episodes once they have taken more
// turns of emitted roles than an answer may hold samples.
var errTooManySamples = errors.New("the request's episodes took more turns than an answer may hold samples")

func (s *Server) tooManySamples(p *plan, what string) *rollout.Error {
	return &rollout.Error{Status: http.StatusUnprocessableEntity, Code: rollout.CodeTooManySamples,
		Message: fmt.Sprintf("%s more than the service's limit of %d samples per answer (troupe serve --max-samples-per-answer; MaxSamplesPerAnswer): ask for fewer episodes (n = %d), fewer agents, or fewer samples (emit, limits.max_turns)",
			what, s.cfg.MaxSamplesPerAnswer, p.n)}
}

// planSamples refuses a request whose answer is known, before playing, to
// hold more samples than MaxSamplesPerAnswer: n episodes, each at least
// the scenario's minimum turns of the emitted roles (MinTurnser), bounded
// by the request's turn limit when every role is emitted. A step or
// message limit may end episodes at any point, so with one no bound is
// known.
func (s *Server) planSamples(p *plan) *rollout.Error {
	limit := s.cfg.MaxSamplesPerAnswer
	mt, ok := p.run.Scenario.(MinTurnser)
	// A merged answer holds a sample per agent (per segment of its
	// turns), which the turns do not bound from below: checked after play.
	if !ok || p.limits.MaxSteps > 0 || p.limits.MaxMessages > 0 || p.run.Spec.MergeTurns {
		return nil
	}
	emit, tree := p.run.Config.Emit, p.run.Config.Tree
	per := 0
	for role, turns := range mt.MinTurns(p.run.Config.Params) {
		if turns > 0 && (emit == nil || emit(env.Seat{Role: role})) {
			if tree != nil && (len(tree.Roles) == 0 || slices.Contains(tree.Roles, role)) {
				turns *= tree.K // every candidate is a sample
			}
			per += turns
		}
	}
	if p.limits.MaxTurns > 0 {
		if emit != nil || tree != nil {
			return nil // the limit may fall on turns that are not emitted, or not sampled
		}
		per = min(per, p.limits.MaxTurns)
	}
	if per > 0 && int64(per)*int64(p.n) > int64(limit) {
		return s.tooManySamples(p, fmt.Sprintf("scenario %s with these params plays at least %d emitted turns per episode: %d episodes make %d samples,",
			p.run.Info.Name, per, p.n, int64(per)*int64(p.n)))
	}
	return nil
}

// turnCounter counts the turns of emitted roles that a request's episodes
// take while they play, and cancels the request once they pass the
// samples limit, so that a request over it stops early rather than
// building the whole answer first.
type turnCounter struct {
	limit   int64
	n       atomic.Int64
	playing atomic.Bool
	cancel  context.CancelCauseFunc
}

// countTurns returns the request's context, cancelled when its episodes
// take too many turns, and the counter.
// A merged or tree-sampled answer's turns are not its samples: they are
// not counted (checkSamples counts the samples once the episodes are
// played).
func (s *Server) countTurns(parent context.Context, p *plan) (context.Context, *turnCounter) {
	ctx, cancel := context.WithCancelCause(parent)
	c := &turnCounter{limit: int64(s.cfg.MaxSamplesPerAnswer), cancel: cancel}
	// Nor are a tree's: its policies are asked K times per turn and again
	// in every play-out.
	c.playing.Store(!p.run.Spec.MergeTurns && p.run.Spec.Tree == nil)
	return ctx, c
}

// stop ends the counting: counterfactual allocators that ask the policies
// again afterwards are not counted.
func (c *turnCounter) stop() { c.playing.Store(false) }

// over reports whether the episodes passed the limit.
func (c *turnCounter) over() bool { return c.n.Load() > c.limit }

// wrap counts the turns of the seats whose turns become samples.
func (c *turnCounter) wrap(policy env.PolicyFor, emit env.EmitFilter) env.PolicyFor {
	return func(seat env.Seat) agents.Policy {
		p := policy(seat)
		if p == nil || (emit != nil && !emit(seat)) {
			return p
		}
		return agents.Wrap(p, agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
			if c.playing.Load() && c.n.Add(1) > c.limit {
				c.cancel(errTooManySamples)
				return agents.Action{}, errTooManySamples
			}
			return p.Act(ctx, obs)
		}))
	}
}

// checkSamples refuses an answer with more samples than the limit: the
// episodes were stopped by the turn counter or the turn cap, or (played
// remotely, or with non-emitted roles) they came back with too many.
func (s *Server) checkSamples(p *plan, group []*episode.Record, count *turnCounter) *rollout.Error {
	if count.over() {
		return s.tooManySamples(p, "the episodes took")
	}
	total := 0
	for _, rec := range group {
		if p.capTurns && rec.End == env.EndMaxTurns {
			return s.tooManySamples(p, fmt.Sprintf("episode %d would have taken", rec.Index))
		}
		if p.run.Spec.MergeTurns {
			total += trajectories.MergedCount(rec) // its samples, merged
		} else {
			total += rec.Emitted() // its samples
		}
	}
	if total > s.cfg.MaxSamplesPerAnswer {
		return s.tooManySamples(p, fmt.Sprintf("the episodes made %d samples,", total))
	}
	return nil
}
