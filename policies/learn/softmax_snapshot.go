package learn

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/finite"
)

// ModelSnapshot is what a Softmax learner of features (pg-linear, pg-mlp)
// has learned for one agent: its weights, and its running-mean baseline.
// The action rows are sorted by action text; the numbers the learner gave
// them, in the order it met them, change nothing it computes.
type ModelSnapshot struct {
	// Inputs is the length of the agent's features.
	Inputs int `json:"inputs"`
	// Hidden is the mlp's first layer: one row per hidden unit, Inputs
	// weights and the bias, last. Absent for pg-linear.
	Hidden [][]float64 `json:"hidden,omitempty"`
	// Actions are the action rows: the weights of what the last layer
	// reads (the features, or the hidden units) and the bias, last.
	Actions  []ActionSnapshot `json:"actions"`
	Baseline float64          `json:"baseline"`
	Updates  int              `json:"updates"`
}

// ActionSnapshot is one action's row of a ModelSnapshot.
type ActionSnapshot struct {
	Action  string    `json:"action"`
	Weights []float64 `json:"weights"`
}

// softmaxModels is the model each Softmax spec name builds.
func softmaxModels() map[string]Model {
	return map[string]Model{"pg-table": TabularModel, "pg-linear": LinearModel, "pg-mlp": MLPModel}
}

// snapshot is TakeSnapshot for l: pg-table's rows as states (their values
// the logits), the other models' weights as each agent's Model.
func (l *Softmax) snapshot(spec Spec) *Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &Snapshot{Format: SnapshotFormat, Learner: spec.String(), Agents: make([]AgentSnapshot, 0, len(l.agents))}
	for _, id := range slices.Sorted(maps.Keys(l.agents)) {
		ag := l.agents[id]
		a := AgentSnapshot{ID: id, States: make([]StateSnapshot, 0, len(ag.rows))}
		for _, state := range slices.Sorted(maps.Keys(ag.rows)) {
			r := ag.rows[state]
			a.States = append(a.States, StateSnapshot{State: state, Legal: slices.Clone(r.legal), Values: slices.Clone(r.logits),
				Updates: r.updates, Baseline: r.baseline, Greedy: -1, Best: argmax(r.logits)})
		}
		if ag.inputs > 0 {
			m := &ModelSnapshot{Inputs: ag.inputs, Baseline: ag.baseline, Updates: ag.updates, Actions: make([]ActionSnapshot, 0, len(ag.actions))}
			for j := range len(ag.w1) / (ag.inputs + 1) {
				m.Hidden = append(m.Hidden, slices.Clone(ag.w1[j*(ag.inputs+1):(j+1)*(ag.inputs+1)]))
			}
			for _, action := range slices.Sorted(maps.Keys(ag.actions)) {
				m.Actions = append(m.Actions, ActionSnapshot{Action: action, Weights: slices.Clone(ag.out[ag.actions[action]])})
			}
			a.Model = m
		}
		s.Agents = append(s.Agents, a)
	}
	return s
}

// argmax is the index of the largest value, the first of equals.
func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// checkModel reports what is wrong with agent a's model in a snapshot of
// spec: present exactly for the models of features, with rows of the
// lengths the spec's model and hidden units call for, sorted actions and
// finite numbers.
func checkModel(spec Spec, a *AgentSnapshot) error {
	m := a.Model
	model, isSoftmax := softmaxModels()[spec.name]
	features := isSoftmax && model != TabularModel
	if isSoftmax && model == TabularModel {
		// pg-table keeps no lock-in bookkeeping and no trace: its rows
		// say so, and name their largest logit.
		for _, st := range a.States {
			switch {
			case st.Trace != nil || st.Switched || st.Greedy != -1:
				return fmt.Errorf("state %.40q: pg-table keeps no trace and no lock-in (greedy -1)", st.State)
			case st.Best != argmax(st.Values):
				return fmt.Errorf("state %.40q: best action %d, but the largest logit is action %d's", st.State, st.Best, argmax(st.Values))
			}
		}
	}
	switch {
	case m == nil && !features:
		return nil
	case m == nil:
		// An agent that never played keeps no weights; one that did
		// has a model.
		if len(a.States) > 0 {
			return fmt.Errorf("%s keeps no states, only a model", spec.name)
		}
		return nil
	case !features:
		return fmt.Errorf("%s keeps no model of features", spec.name)
	case len(a.States) > 0:
		return fmt.Errorf("%s keeps no states, only a model", spec.name)
	case m.Inputs < 1:
		return fmt.Errorf("model inputs %d: want at least 1", m.Inputs)
	case m.Updates < 0:
		return fmt.Errorf("model updates %d", m.Updates)
	case !finite.Is(m.Baseline):
		return fmt.Errorf("model baseline %v", m.Baseline)
	}
	width := m.Inputs
	if model == MLPModel {
		width = int(spec.values["hidden"])
		if len(m.Hidden) != width {
			return fmt.Errorf("%d hidden rows for %d hidden units", len(m.Hidden), width)
		}
	} else if m.Hidden != nil {
		return fmt.Errorf("%s has no hidden layer", spec.name)
	}
	for j, w := range m.Hidden {
		if len(w) != m.Inputs+1 {
			return fmt.Errorf("hidden row %d: %d weights for %d inputs and a bias", j, len(w), m.Inputs)
		}
		if !finite.All(w) {
			return fmt.Errorf("hidden row %d: a weight is not finite", j)
		}
	}
	for k, r := range m.Actions {
		switch {
		case k > 0 && m.Actions[k-1].Action >= r.Action:
			return fmt.Errorf("action %q: actions must be sorted, each once", r.Action)
		case len(r.Weights) != width+1:
			return fmt.Errorf("action %q: %d weights for %d inputs and a bias", r.Action, len(r.Weights), width)
		case !finite.All(r.Weights):
			return fmt.Errorf("action %q: a weight is not finite", r.Action)
		}
	}
	return nil
}

// restore gives l, a new learner of s's spec, everything s holds.
func (l *Softmax) restore(s *Snapshot) {
	for _, a := range s.Agents {
		ag := &pgAgent{id: a.ID}
		l.agents[a.ID] = ag
		for _, st := range a.States {
			if ag.rows == nil {
				ag.rows = map[string]*pgRow{}
			}
			ag.rows[st.State] = &pgRow{legal: slices.Clone(st.Legal), logits: slices.Clone(st.Values),
				grad: make([]float64, len(st.Values)), baseline: st.Baseline, updates: st.Updates}
		}
		if m := a.Model; m != nil {
			l.initAgent(ag, m.Inputs)
			for j, w := range m.Hidden {
				copy(ag.w1[j*(m.Inputs+1):], w)
			}
			for _, r := range m.Actions {
				copy(ag.out[ag.action(r.Action)], r.Weights)
			}
			ag.baseline, ag.updates = m.Baseline, m.Updates
		}
	}
}

// softmaxGreedy is Snapshot.Greedy's policy for the models of features:
// the restored learner's largest logit, ties broken from the turn's seed.
// It never learns; its mutex is the learner's.
type softmaxGreedy struct{ l *Softmax }

// ReadsFeatures implements agents.FeatureReader.
func (g softmaxGreedy) ReadsFeatures() bool { return true }

func (g softmaxGreedy) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	t, err := g.l.turnOf(obs)
	if err != nil {
		return agents.Action{}, err
	}
	g.l.policy(t)
	return agents.Action{Text: obs.Legal[Greedy(g.l.logits, obs)]}, nil
}

// Probabilities is greedy's Probabilities: the best actions share the
// probability equally.
func (g softmaxGreedy) Probabilities(obs *agents.Observation) ([]float64, error) {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	t, err := g.l.turnOf(obs)
	if err != nil {
		return nil, err
	}
	g.l.policy(t)
	best := slices.Max(g.l.logits)
	probs := make([]float64, len(obs.Legal))
	ties := 0
	for _, v := range g.l.logits {
		if v == best {
			ties++
		}
	}
	for i, v := range g.l.logits {
		if v == best {
			probs[i] = 1 / float64(ties)
		}
	}
	return probs, nil
}
