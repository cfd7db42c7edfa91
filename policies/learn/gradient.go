package learn

import (
	"context"
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// GradientConfig configures a softmax policy-gradient learner.
type GradientConfig struct {
	// Rate is the step size η of the preferences, > 0.
	Rate float64
	// Baseline is the step of the baseline b ← b + β (r − b), in [0, 1];
	// 0 makes b the running mean of the rewards seen in the state.
	Baseline float64
	Options
}

// Gradient is REINFORCE with a baseline on a softmax policy, per agent and
// state: preferences θ(a), policy π(a) = exp θ(a) / Σ exp θ, and for each
// sample with action a and reward r
//
//	θ(b) ← θ(b) + η (r − b_s) (1[b = a] − π(b))  for every action b,
//
// the gradient of log π(a) scaled by the advantage r − b_s. The baseline
// b_s is used before it is updated with r, so a sample never judges itself.
// Preferences start at 0: the uniform policy.
type Gradient struct {
	rate, baseline float64
	probs          []float64 // scratch for π, under the book's mutex
	book
}

// NewGradient returns a policy-gradient learner.
func NewGradient(cfg GradientConfig) (*Gradient, error) {
	if !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 0) {
		return nil, fmt.Errorf("%w: rate %v: want a positive number", ErrBadConfig, cfg.Rate)
	}
	if !(cfg.Baseline >= 0 && cfg.Baseline <= 1) {
		return nil, fmt.Errorf("%w: baseline %v: want a number in [0, 1]", ErrBadConfig, cfg.Baseline)
	}
	return &Gradient{rate: cfg.Rate, baseline: cfg.Baseline, book: newBook(cfg.Options, 0)}, nil
}

// Act implements agents.Policy: it samples an action from the softmax of
// the preferences. An observation without legal actions is an error
// wrapping agents.ErrNoLegalActions.
func (l *Gradient) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	// The softmax of the preferences is Boltzmann's at temperature 1.
	return l.act(obs, Boltzmann{Temperature: 1})
}

// ActBatch implements agents.BatchPolicy: Act for each observation, under
// one lock.
func (l *Gradient) ActBatch(_ context.Context, obs []agents.Observation, acts []agents.Action, errs []error) {
	l.actBatch(obs, acts, errs, Boltzmann{Temperature: 1})
}

// Learn implements Learner.
func (l *Gradient) Learn(rec *episode.Record, credit *trajectories.Credit) error {
	return l.learn(rec, credit, func(turns []learned) {
		for i := range turns {
			s := &turns[i]
			r := s.row
			old := r.values[s.action]
			pi := l.policy(r.values)
			adv := s.reward - r.baseline
			for b := range r.values {
				grad := -pi[b]
				if b == s.action {
					grad++
				}
				r.values[b] += l.rate * adv * grad
			}
			r.updates++
			step := l.baseline
			if step == 0 {
				step = 1 / float64(r.updates)
			}
			r.baseline += step * (s.reward - r.baseline)
			r.track(s.action, old, true) // every preference moved
		}
	})
}

// policy computes π from preferences into the scratch slice.
func (l *Gradient) policy(prefs []float64) []float64 {
	if cap(l.probs) < len(prefs) {
		l.probs = make([]float64, len(prefs))
	}
	pi := l.probs[:len(prefs)]
	softmaxInto(pi, prefs)
	return pi
}

// Policy returns agent's legal actions in state and its current
// probabilities of playing them, or false when it never acted there.
func (l *Gradient) Policy(agent, state string) (legal []string, probs []float64, ok bool) {
	legal, prefs, ok := l.values(agent, state)
	if !ok {
		return nil, nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return legal, append([]float64(nil), l.policy(prefs)...), true
}
