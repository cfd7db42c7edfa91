package learn

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
)

// SnapshotFormat is the format of a learner snapshot file.
const SnapshotFormat = "troupe.learner/v1"

// ErrBadSnapshot is wrapped by the errors of DecodeSnapshot and Restore
// for a snapshot that is not one Snapshot wrote.
var ErrBadSnapshot = errors.New("bad learner snapshot")

// Snapshot is what a learner has learned, as data: its spec and, per agent
// and state, the legal actions and one number per action (action values
// for egreedy and boltzmann, softmax preferences for reinforce, logits for
// pg-table), with the count of rewards learned there and the baseline; or,
// for the learners of features (pg-linear, pg-mlp), per agent, the
// weights of its model (AgentSnapshot.Model).
// Agents are sorted by id and states by text, so that a learner's snapshot
// encodes to the same bytes whatever order it learned them in, and a
// restored learner snapshots back to the bytes it was restored from.
//
// A snapshot holds no State function (Options.State): a learner restored
// from it must be given the one it was trained with.
type Snapshot struct {
	Format  string          `json:"format"`
	Learner string          `json:"learner"` // the spec, Spec.String
	Agents  []AgentSnapshot `json:"agents"`
}

// AgentSnapshot is one agent's table.
type AgentSnapshot struct {
	ID     string          `json:"id"`
	States []StateSnapshot `json:"states"`
	// Model is the agent's weights, for pg-linear and pg-mlp alone.
	Model *ModelSnapshot `json:"model,omitempty"`
}

// StateSnapshot is one agent's row in one state.
type StateSnapshot struct {
	State    string    `json:"state"`
	Legal    []string  `json:"legal"`
	Values   []float64 `json:"values"`
	Updates  int       `json:"updates"`
	Baseline float64   `json:"baseline"`
	// Trace is the unbiased step size's trace per action (ValueConfig's
	// Unbiased), absent when the learner has none.
	Trace []float64 `json:"trace,omitempty"`
	// Greedy, Best and Switched are the row's lock-in bookkeeping (Lock):
	// the greedy action after its first update (-1 before), the greedy
	// action now, and whether it ever changed.
	Greedy   int  `json:"greedy"`
	Best     int  `json:"best"`
	Switched bool `json:"switched,omitempty"`
}

// bookOf returns the storage of a learner this package made.
func bookOf(l Learner) (*book, string, error) {
	switch l := l.(type) {
	case *Values:
		return &l.book, "values", nil
	case *Gradient:
		return &l.book, "reinforce", nil
	}
	return nil, "", fmt.Errorf("%w: a %T is not one of package learn's learners", ErrBadSnapshot, l)
}

// kindOf is the learner type a spec's name builds.
func kindOf(name string) string {
	if _, ok := softmaxModels()[name]; ok {
		return "softmax"
	}
	if name == "reinforce" {
		return "reinforce"
	}
	return "values"
}

// TakeSnapshot returns what l has learned. spec must be the spec l was
// built from (Spec.New): the snapshot records it so that Restore builds
// the same learner; a learner of another type than spec's is an error. It
// takes l's mutex, so it may be called while l is in use.
func TakeSnapshot(spec Spec, l Learner) (*Snapshot, error) {
	if sm, ok := l.(*Softmax); ok {
		switch m, known := softmaxModels()[spec.name]; {
		case spec.name == "":
			return nil, fmt.Errorf("%w: the spec is empty (use Parse)", ErrBadSnapshot)
		case !known || m != sm.cfg.Model:
			return nil, fmt.Errorf("%w: the learner is a %s softmax, which spec %s does not build", ErrBadSnapshot, sm.cfg.Model, spec)
		}
		return sm.snapshot(spec), nil
	}
	b, kind, err := bookOf(l)
	if err != nil {
		return nil, err
	}
	if spec.name == "" {
		return nil, fmt.Errorf("%w: the spec is empty (use Parse)", ErrBadSnapshot)
	}
	if kind != kindOf(spec.name) {
		return nil, fmt.Errorf("%w: the learner is a %T, which spec %s does not build", ErrBadSnapshot, l, spec)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, len(b.states))
	for key, n := range b.states {
		names[n] = key
	}
	s := &Snapshot{Format: SnapshotFormat, Learner: spec.String(), Agents: make([]AgentSnapshot, 0, len(b.agents))}
	for _, id := range slices.Sorted(maps.Keys(b.agents)) {
		t := b.agents[id]
		a := AgentSnapshot{ID: id, States: make([]StateSnapshot, 0, t.rows.len())}
		for n, r := range t.rows.all {
			a.States = append(a.States, StateSnapshot{State: names[n], Legal: slices.Clone(r.legal),
				Values: slices.Clone(r.values), Updates: r.updates, Baseline: r.baseline,
				Trace: slices.Clone(r.trace), Greedy: r.greedy, Best: r.best, Switched: r.switched})
		}
		slices.SortFunc(a.States, func(x, y StateSnapshot) int { return cmp.Compare(x.State, y.State) })
		s.Agents = append(s.Agents, a)
	}
	return s, nil
}

// Encode writes s as one JSON document and a newline. The encoding is
// canonical: the same snapshot always gives the same bytes (floats in
// their shortest exact form), and DecodeSnapshot reads them back exactly.
func (s *Snapshot) Encode(w io.Writer) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("learner snapshot: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Bytes is Encode into a byte slice.
func (s *Snapshot) Bytes() ([]byte, error) {
	var b bytes.Buffer
	err := s.Encode(&b)
	return b.Bytes(), err
}

// DecodeSnapshot reads a snapshot strictly (unknown fields are refused)
// and checks it (Check).
func DecodeSnapshot(r io.Reader) (*Snapshot, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Snapshot
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrBadSnapshot)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	// null and [] mean the same: no agents, no states.
	if s.Agents == nil {
		s.Agents = []AgentSnapshot{}
	}
	for i := range s.Agents {
		if s.Agents[i].States == nil {
			s.Agents[i].States = []StateSnapshot{}
		}
		if m := s.Agents[i].Model; m != nil && m.Actions == nil {
			m.Actions = []ActionSnapshot{}
		}
	}
	return &s, nil
}

// Check reports what is wrong with s, naming the agent and state: the
// format, the spec, duplicate or unsorted agents and states, rows without
// legal actions or whose values do not match them, numbers that are not
// finite, negative counts.
func (s *Snapshot) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	if s.Format != SnapshotFormat {
		return bad("format %q: want %q", s.Format, SnapshotFormat)
	}
	spec, err := Parse(s.Learner)
	if err != nil {
		return bad("learner: %v", err)
	}
	for i, a := range s.Agents {
		if i > 0 && s.Agents[i-1].ID >= a.ID {
			return bad("agents[%d] %q: agents must be sorted by id, each once", i, a.ID)
		}
		if err := checkModel(spec, &s.Agents[i]); err != nil {
			return bad("agent %q: %v", a.ID, err)
		}
		for j, st := range a.States {
			where := fmt.Sprintf("agent %q state %d (%.40q)", a.ID, j, st.State)
			switch {
			case j > 0 && a.States[j-1].State >= st.State:
				return bad("%s: states must be sorted, each once", where)
			case len(st.Legal) == 0:
				return bad("%s: no legal actions", where)
			case len(st.Values) != len(st.Legal):
				return bad("%s: %d values for %d legal actions", where, len(st.Values), len(st.Legal))
			case st.Updates < 0:
				return bad("%s: updates %d", where, st.Updates)
			case !finite.Is(st.Baseline):
				return bad("%s: baseline %v", where, st.Baseline)
			case st.Trace != nil && len(st.Trace) != len(st.Legal):
				return bad("%s: %d trace entries for %d legal actions", where, len(st.Trace), len(st.Legal))
			case st.Greedy < -1 || st.Greedy >= len(st.Legal):
				return bad("%s: greedy action %d of %d", where, st.Greedy, len(st.Legal))
			case st.Best < 0 || st.Best >= len(st.Legal):
				return bad("%s: best action %d of %d", where, st.Best, len(st.Legal))
			}
			for _, o := range st.Trace {
				if !finite.Is(o) || o < 0 || o > 1 {
					return bad("%s: trace %v: want a number in [0, 1]", where, o)
				}
			}
			for _, v := range st.Values {
				if !finite.Is(v) {
					return bad("%s: value %v", where, v)
				}
			}
		}
	}
	return nil
}

// Restore builds the learner s was taken from, with everything it had
// learned, and opts (which must hold the State function it was trained
// with). Its later actions and updates are those the original learner
// would have made.
func (s *Snapshot) Restore(opts Options) (Learner, Spec, error) {
	if err := s.Check(); err != nil {
		return nil, Spec{}, err
	}
	spec, err := Parse(s.Learner)
	if err != nil {
		return nil, Spec{}, err
	}
	l, err := spec.New(opts)
	if err != nil {
		return nil, Spec{}, err
	}
	if sm, ok := l.(*Softmax); ok {
		sm.restore(s)
		return sm, spec, nil
	}
	b, _, err := bookOf(l)
	if err != nil {
		return nil, Spec{}, err
	}
	for _, a := range s.Agents {
		t := &agentTable{id: a.ID}
		b.agents[a.ID] = t
		for _, st := range a.States {
			r := &row{legal: slices.Clone(st.Legal), values: append(valuesWithRoom(len(st.Values))[:0], st.Values...), updates: st.Updates, baseline: st.Baseline,
				trace: slices.Clone(st.Trace), greedy: st.Greedy, switched: st.Switched, distinct: distinct(st.Legal)}
			r.scan() // best and ties: from the values, whatever Best says
			t.rows.set(b.state(st.State, true), r)
		}
	}
	// The caches of the book's lookups start empty, as in a new learner.
	b.lastKey, b.lastState, b.acted = "", -1, nil
	b.view, b.viewState = "", -1
	return l, spec, nil
}

// Greedy returns a policy that plays, in every state s knows, the action
// of largest value (egreedy, boltzmann), preference (reinforce) or logit
// (pg-table), ties broken from the turn's seed as Greedy does; in a state
// it does not know, a uniformly random legal action. For pg-linear and
// pg-mlp it plays the largest logit of the restored model, from the
// observation's features (an error wrapping ErrNoFeatures without). It never learns and never
// changes: a frozen opponent, and what exploitability is measured on.
// A state whose legal actions differ from the snapshot's is an error
// wrapping ErrLegalChanged.
func (s *Snapshot) Greedy(opts Options) (agents.Policy, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	if name, _, _ := strings.Cut(s.Learner, ":"); name == "pg-linear" || name == "pg-mlp" {
		// The largest logit of the restored model, from its features.
		l, _, err := s.Restore(opts)
		if err != nil {
			return nil, err
		}
		return softmaxGreedy{l.(*Softmax)}, nil
	}
	g := &greedy{opts: opts, rows: make(map[string]map[string]*StateSnapshot, len(s.Agents))}
	for i := range s.Agents {
		a := &s.Agents[i]
		m := make(map[string]*StateSnapshot, len(a.States))
		for j := range a.States {
			m[a.States[j].State] = &a.States[j]
		}
		g.rows[a.ID] = m
	}
	return g, nil
}

// greedy is Snapshot.Greedy's policy. It only reads its maps, so it is
// safe for concurrent use without a lock.
type greedy struct {
	opts Options
	rows map[string]map[string]*StateSnapshot
}

func (g *greedy) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	if len(obs.Legal) == 0 {
		return agents.Action{}, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, agents.ErrNoLegalActions)
	}
	key := g.opts.state(episode.RenderObservation(obs.View, obs.Inbox))
	st := g.rows[obs.Agent][key]
	if st == nil {
		return agents.Action{Text: obs.Legal[obs.Intn(streamRandom, len(obs.Legal))]}, nil
	}
	if !slices.Equal(st.Legal, obs.Legal) {
		return agents.Action{}, fmt.Errorf("agent %q state %.60q: %w: %q, then %q", obs.Agent, key, ErrLegalChanged, st.Legal, obs.Legal)
	}
	return agents.Action{Text: st.Legal[Greedy(st.Values, obs)]}, nil
}

// Probabilities is the chance the policy plays each of obs.Legal: its
// best actions share it equally (ties are broken uniformly at random),
// and in a state it does not know every legal action is equally likely.
// It lets an exact search take the expectation over what the policy's
// seed would decide (league.NashConv).
func (g *greedy) Probabilities(obs *agents.Observation) ([]float64, error) {
	probs := make([]float64, len(obs.Legal))
	st := g.rows[obs.Agent][g.opts.state(episode.RenderObservation(obs.View, obs.Inbox))]
	if st == nil {
		for i := range probs {
			probs[i] = 1 / float64(len(probs))
		}
		return probs, nil
	}
	if !slices.Equal(st.Legal, obs.Legal) {
		return nil, fmt.Errorf("agent %q: %w: %q, then %q", obs.Agent, ErrLegalChanged, st.Legal, obs.Legal)
	}
	best := slices.Max(st.Values)
	ties := 0
	for _, v := range st.Values {
		if v == best {
			ties++
		}
	}
	for i, v := range st.Values {
		if v == best {
			probs[i] = 1 / float64(ties)
		}
	}
	return probs, nil
}
