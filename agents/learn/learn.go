// Package learn holds in-process learning policies: tabular action-value
// learners with ε-greedy or Boltzmann selection, and a softmax policy-
// gradient learner (REINFORCE with a running-mean baseline). No neural
// networks: they are the simple independent learners of the credit-
// assignment literature, and they make troupe's allocators comparable on a
// laptop in seconds.
//
// A learner is an agents.Policy that one run shares among its agents: it
// keeps a table per agent (Observation.Agent) and per state. It learns from
// the reward an allocator wrote into its agents' samples, one finished
// episode at a time (Learn), which is what lets the same learner be trained
// on team, individual, difference or Shapley rewards and the results be
// compared.
//
// # States
//
// A state is a string: by default the turn's whole prompt, the text the
// sample records (env.RenderObservation of the view and the messages
// received). Options.State maps a prompt to a coarser state. At Act the
// learner renders the prompt from the observation; at Learn it reads the
// sample's; both go through the same State function, so they agree by
// construction.
//
// # Determinism
//
// A learner draws its exploration from the turn's seed (Observation.Seed,
// streams 1 to 3), never from a clock or a global source: the same values
// and the same observation give the same action on any goroutine. Updates
// are plain arithmetic in the order Learn sees the samples. A run is
// therefore reproducible when every episode is played after the previous
// one was learned, which is how experiment.Run drives it.
//
// # Concurrency
//
// Act and Learn are safe for concurrent use: a learner holds one mutex,
// taken for each Act and for each Learn. Concurrent episodes then see
// whatever was learned so far, which depends on timing: safe, but not
// reproducible.
package learn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Learner is a policy that learns from the rewards allocators gave its
// agents' samples.
type Learner interface {
	agents.Policy
	// Learn updates the learner with the samples of a finished episode,
	// in order of play. Episodes that did not finish (aborted, failed) are
	// skipped: they have no outcome to learn from. A sample the learner did
	// not act for, or one without a reward, is an error; the samples before
	// it have been learned.
	Learn(ep *trajectories.Episode) error
}

// Errors of learners. They are wrapped with the agent, state and sample
// they concern.
var (
	// ErrBadConfig: a learner's parameters are out of range.
	ErrBadConfig = errors.New("bad learner configuration")
	// ErrUnknownSample: Learn got a sample of an agent, state or action
	// this learner never acted for (a sample of another policy, or a
	// State function that does not give the same state at Act and Learn).
	ErrUnknownSample = errors.New("sample the learner did not act for")
	// ErrNoReward: a sample has no reward, or none under Options.RewardKey
	// (the run has no allocator, or not the one named).
	ErrNoReward = errors.New("sample without a reward")
	// ErrLegalChanged: one state offered two different lists of legal
	// actions; the State function must tell such turns apart.
	ErrLegalChanged = errors.New("the legal actions of a state changed")
)

// Options are what every learner shares.
type Options struct {
	// State maps a turn's prompt to the state the learner keeps values
	// for. Nil uses the whole prompt.
	State func(prompt string) string
	// RewardKey names the reward a learner reads from a dict reward
	// (--reward-format dict): an allocator's name. Empty reads the scalar
	// reward.
	RewardKey string
}

func (o Options) state(prompt string) string {
	if o.State == nil {
		return prompt
	}
	return o.State(prompt)
}

// row is what a learner knows of one agent in one state: the legal
// actions and one number per action (an action value, or a preference).
type row struct {
	legal    []string
	values   []float64
	updates  int     // rewards learned in this state
	baseline float64 // REINFORCE: mean reward so far
}

// agentTable holds one agent's rows. The last row used is cached: most
// scenarios ask an agent about the same state turn after turn.
type agentTable struct {
	rows    map[string]*row
	lastKey string
	last    *row
}

// book is the per-agent, per-state storage both learners share, with the
// mutex that makes them safe for concurrent use.
type book struct {
	mu     sync.Mutex
	opts   Options
	init   float64 // the values a new row starts with
	agents map[string]*agentTable
}

func newBook(opts Options, init float64) book {
	return book{opts: opts, init: init, agents: map[string]*agentTable{}}
}

// actRow returns the row of the observation's agent and state, creating it
// with the observation's legal actions. The caller holds b.mu.
func (b *book) actRow(obs *agents.Observation) (*row, error) {
	if len(obs.Legal) == 0 {
		return nil, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, agents.ErrNoLegalActions)
	}
	t := b.agents[obs.Agent]
	if t == nil {
		t = &agentTable{rows: map[string]*row{}}
		b.agents[obs.Agent] = t
	}
	key := b.opts.state(env.RenderObservation(obs.View, obs.Inbox))
	r := t.find(key)
	if r == nil {
		r = &row{legal: slices.Clone(obs.Legal), values: make([]float64, len(obs.Legal))}
		for i := range r.values {
			r.values[i] = b.init
		}
		t.rows[key] = r
		t.lastKey, t.last = key, r
		return r, nil
	}
	if !sameStrings(r.legal, obs.Legal) {
		return nil, fmt.Errorf("agent %q state %.60q: %w: %q, then %q", obs.Agent, key, ErrLegalChanged, r.legal, obs.Legal)
	}
	return r, nil
}

func (t *agentTable) find(key string) *row {
	if t.last != nil && t.lastKey == key {
		// Keep the caller's copy: the samples of this turn carry the same
		// string, which then compares by pointer.
		t.lastKey = key
		return t.last
	}
	r := t.rows[key]
	if r != nil {
		t.lastKey, t.last = key, r
	}
	return r
}

// sameStrings is slices.Equal, quick when the scenario shares one slice
// among its turns.
func sameStrings(a, b []string) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// learned is one sample as a learner reads it.
type learned struct {
	row    *row
	action int
	reward float64
}

// learn calls update for every sample of a finished episode, in order,
// holding b.mu.
func (b *book) learn(ep *trajectories.Episode, update func(learned)) error {
	if ep.Status != protocol.StatusCompleted && ep.Status != protocol.StatusTruncated {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range ep.Samples {
		s := &ep.Samples[k]
		l, err := b.read(s)
		if err != nil {
			return fmt.Errorf("episode %d sample %d (agent %q turn %d): %w", ep.Index, k, s.Metadata.Agent, s.Metadata.Turn, err)
		}
		update(l)
	}
	return nil
}

func (b *book) read(s *protocol.Sample) (learned, error) {
	t := b.agents[s.Metadata.Agent]
	if t == nil {
		return learned{}, fmt.Errorf("%w: an agent it never played", ErrUnknownSample)
	}
	key := b.opts.state(s.Prompt.String())
	r := t.find(key)
	if r == nil {
		return learned{}, fmt.Errorf("%w: state %.60q, in which it never acted", ErrUnknownSample, key)
	}
	a := slices.Index(r.legal, s.Response)
	if a < 0 {
		return learned{}, fmt.Errorf("%w: action %q is not one of its legal actions %q", ErrUnknownSample, s.Response, r.legal)
	}
	v, ok := s.Reward.Get(b.opts.RewardKey)
	if !ok {
		if b.opts.RewardKey != "" {
			return learned{}, fmt.Errorf("%w %q", ErrNoReward, b.opts.RewardKey)
		}
		return learned{}, ErrNoReward
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return learned{}, fmt.Errorf("%w: the reward is %v", ErrNoReward, v)
	}
	return learned{row: r, action: a, reward: v}, nil
}

// values returns a copy of agent's row in state: its legal actions and
// values, or false when the learner has none.
func (b *book) values(agent, state string) ([]string, []float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.agents[agent]
	if t == nil {
		return nil, nil, false
	}
	r := t.rows[state]
	if r == nil {
		return nil, nil, false
	}
	return slices.Clone(r.legal), slices.Clone(r.values), true
}

// act picks an action for obs with choose, under b.mu.
func (b *book) act(obs *agents.Observation, choose func(r *row) int) (agents.Action, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, err := b.actRow(obs)
	if err != nil {
		return agents.Action{}, err
	}
	return agents.Action{Text: r.legal[choose(r)]}, nil
}

// Seed streams of a turn (Observation.Float64/Intn) that learners draw
// from. Stream 0 is agents.Random's.
const (
	streamExplore = 1 // ε-greedy's coin, Boltzmann's and softmax's draw
	streamRandom  = 2 // ε-greedy's random action
	streamTie     = 3 // a tie among the best actions
)
