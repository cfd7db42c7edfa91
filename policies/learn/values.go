package learn

import (
	"context"
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/trajectories"
)

// Selector chooses an action from the action values of a state. It must
// draw its randomness from obs alone (obs.Float64, obs.Intn), so that it is
// deterministic, and must not keep values or obs.
type Selector interface {
	Select(values []float64, obs *agents.Observation) int
}

// EpsilonGreedy plays a uniformly random action with probability Epsilon
// and the best one otherwise, ties broken uniformly at random.
type EpsilonGreedy struct {
	Epsilon float64 // in [0, 1]
}

// Select implements Selector.
func (e EpsilonGreedy) Select(values []float64, obs *agents.Observation) int {
	if e.Epsilon > 0 && obs.Float64(streamExplore) < e.Epsilon {
		return obs.Intn(streamRandom, len(values))
	}
	return Greedy(values, obs)
}

// Greedy returns the index of the largest value; ties are broken uniformly
// at random from the turn's seed, so that agents with equal values (at the
// start, say) do not all pick the first action.
func Greedy(values []float64, obs *agents.Observation) int {
	best, ties := 0, 1
	for i := 1; i < len(values); i++ {
		switch {
		case values[i] > values[best]:
			best, ties = i, 1
		case values[i] == values[best]:
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	k := obs.Intn(streamTie, ties)
	for i, v := range values {
		if v == values[best] {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return best // unreachable: k < ties
}

// Boltzmann plays action a with probability proportional to
// exp(Q(a)/Temperature): the higher the temperature, the more uniform. It is
// sensitive to the scale of the rewards, where ε-greedy is not.
type Boltzmann struct {
	Temperature float64 // > 0
}

// Select implements Selector.
func (b Boltzmann) Select(values []float64, obs *agents.Observation) int {
	return sampleSoftmax(values, 1/b.Temperature, obs.Float64(streamExplore))
}

// sampleSoftmax draws from the softmax of values·beta with the uniform u,
// without allocating.
func sampleSoftmax(values []float64, beta, u float64) int {
	top := math.Inf(-1)
	for _, v := range values {
		top = max(top, v)
	}
	total := 0.0
	for _, v := range values {
		total += math.Exp((v - top) * beta)
	}
	target := u * total
	acc := 0.0
	for i, v := range values {
		acc += math.Exp((v - top) * beta)
		if target < acc {
			return i
		}
	}
	return len(values) - 1 // rounding: u·total reached the last boundary
}

// ValueConfig configures a tabular action-value learner.
type ValueConfig struct {
	// Alpha is the learning rate, in (0, 1]: Q(s,a) ← Q(s,a) + α (r − Q(s,a)).
	Alpha float64
	// Init is every action's value before any reward: an optimistic value
	// (above the rewards) makes every action tried early.
	Init float64
	// Unbiased uses Sutton & Barto's unbiased constant step size (eq.
	// 2.9): the step of an action's n-th update is α/ō_n, with ō_n =
	// ō_(n−1) + α(1 − ō_(n−1)) and ō_0 = 0, so its first reward replaces
	// Init outright and later ones are weighted as with α. The values then
	// carry no trace of Init once tried, whatever the scale of the reward:
	// with Init 0 and rewards that are always positive, plain α steps
	// leave an action tried once at α·r, below the one played all along,
	// and the learner never switches (lock-in).
	Unbiased bool
	// Select chooses the action from the values; nil is greedy.
	Select Selector
	Options
}

// Values is a tabular action-value learner: per agent and state, one value
// per legal action, the running estimate of the reward a sample with that
// action gets. The allocator's reward is the sample's whole return (use the
// discount allocator for turn discounting), so there is no bootstrapping:
// for one-shot scenarios such as El Farol it is the action-value learner
// of Wolpert & Tumer and Agogino & Tumer.
type Values struct {
	alpha    float64
	unbiased bool
	sel      Selector
	book
}

// NewValues returns an action-value learner.
func NewValues(cfg ValueConfig) (*Values, error) {
	if !(cfg.Alpha > 0 && cfg.Alpha <= 1) {
		return nil, fmt.Errorf("%w: alpha %v: want a number in (0, 1]", ErrBadConfig, cfg.Alpha)
	}
	if !finite.Is(cfg.Init) {
		return nil, fmt.Errorf("%w: init %v: want a finite number", ErrBadConfig, cfg.Init)
	}
	switch s := cfg.Select.(type) {
	case nil:
		cfg.Select = EpsilonGreedy{}
	case EpsilonGreedy:
		if !(s.Epsilon >= 0 && s.Epsilon <= 1) {
			return nil, fmt.Errorf("%w: epsilon %v: want a number in [0, 1]", ErrBadConfig, s.Epsilon)
		}
	case Boltzmann:
		if !(s.Temperature > 0) || math.IsInf(s.Temperature, 0) {
			return nil, fmt.Errorf("%w: temperature %v: want a positive number", ErrBadConfig, s.Temperature)
		}
	}
	return &Values{alpha: cfg.Alpha, unbiased: cfg.Unbiased, sel: cfg.Select, book: newBook(cfg.Options, cfg.Init)}, nil
}

// Act implements agents.Policy: it picks a legal action with the selector.
// An observation without legal actions is an error wrapping
// agents.ErrNoLegalActions.
func (l *Values) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	return l.act(obs, l.sel)
}

// ActBatch implements agents.BatchPolicy: Act for each observation, under
// one lock.
func (l *Values) ActBatch(_ context.Context, obs []agents.Observation, acts []agents.Action, errs []error) {
	l.actBatch(obs, acts, errs, l.sel)
}

// Learn implements Learner.
func (l *Values) Learn(rec *episode.Record, credit *trajectories.Credit) error {
	return l.learn(rec, credit, func(turns []learned) {
		alpha, unbiased := l.alpha, l.unbiased
		for i := range turns {
			s := &turns[i]
			r := s.row
			q := &r.values[s.action]
			old := *q
			step := alpha
			if unbiased {
				o := &r.traceOf()[s.action]
				*o += alpha * (1 - *o)
				step /= *o
			}
			*q += step * (s.reward - *q)
			r.updates++
			r.track(s.action, old, false)
		}
	})
}

// Values returns a copy of agent's legal actions and action values in
// state, or false when it never acted there.
func (l *Values) Values(agent, state string) (legal []string, values []float64, ok bool) {
	return l.values(agent, state)
}
