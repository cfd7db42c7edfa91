package learn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/internal/seeds"
)

// Errors of the softmax policy learners' numeric observations.
var (
	// ErrNoFeatures: a learner of features (LinearModel, MLPModel) was
	// asked to act on an observation that carries none: the scenario
	// declares no numeric observation (env.Features), or the policy was
	// asked by a driver that does not write them.
	ErrNoFeatures = errors.New("observation without numeric features")
	// ErrFeaturesChanged: an agent's numeric observations changed length
	// from one turn to another; the weights have one per feature.
	ErrFeaturesChanged = errors.New("the number of features changed")
)

// Model is what a Softmax learner's logits are a function of.
type Model int

const (
	// TabularModel keeps one logit per agent, state and legal action:
	// the state is the prompt, as for the other learners (Options.State).
	TabularModel Model = iota
	// LinearModel computes the logit of a legal action a from the
	// agent's numeric observation φ (Observation.Features):
	// z(a) = w_a·φ + b_a, one weight row per action text, each made, all
	// zeros, when the agent is first offered that action.
	LinearModel
	// MLPModel is LinearModel on a hidden layer:
	// z(a) = w_a·tanh(W φ + c) + b_a, with W and c shared by the agent's
	// actions. W starts uniform in ±1/√len(φ), drawn from
	// SoftmaxConfig.Seed (the same for every agent); the action rows start
	// at zero, so the first
	// policy is uniform, as the other models' is.
	MLPModel
)

// String names the model as the learner specs do.
func (m Model) String() string {
	switch m {
	case TabularModel:
		return "table"
	case LinearModel:
		return "linear"
	case MLPModel:
		return "mlp"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// Baseline is what a Softmax learner subtracts from a turn's credit to
// make its advantage.
type Baseline int

const (
	// NoBaseline takes the credit as the advantage, as the allocator gave
	// it: what the group-relative allocators (grpo, rloo, magrpo, at-grpo)
	// give is an advantage already, and a second baseline would change
	// the published algorithm.
	NoBaseline Baseline = iota
	// MeanBaseline subtracts the running mean of the credit seen before
	// the turn: per agent and state for TabularModel (as Gradient does),
	// per agent for the models of features.
	MeanBaseline
)

// SoftmaxConfig configures a Softmax learner.
type SoftmaxConfig struct {
	Model Model
	// Hidden is the MLPModel's number of hidden units, > 0; the other
	// models take none (0).
	Hidden int
	// Rate is the step size η of gradient ascent, > 0.
	Rate float64
	// Clip is PPO's ratio clip ε, in (0, 1): the update then maximises
	// the clipped surrogate min(ρA, clip(ρ, 1−ε, 1+ε)A), ρ = π(a)/π_old(a),
	// for Epochs steps over the episode's turns. 0 is REINFORCE: one step
	// of A ∇log π(a) per episode.
	Clip float64
	// Epochs is the number of gradient steps over an episode's turns, at
	// least 1; REINFORCE (Clip 0) takes exactly one, since its gradient
	// is that of the policy that played.
	Epochs int
	// Baseline makes the advantage from the credit.
	Baseline Baseline
	// Entropy is the weight β ≥ 0 of the entropy bonus β H(π(·|s)) added
	// to every turn's objective: it keeps the policy from collapsing onto
	// an action before the credit has told the actions apart.
	Entropy float64
	// Seed draws the MLPModel's first-layer weights.
	Seed uint64
	Options
}

// Softmax is a softmax policy learned by policy gradient, per agent: from
// a table of logits (TabularModel) or from the scenario's numeric
// observations, by a linear function or a one-hidden-layer network
// (LinearModel, MLPModel). An agent plays a legal action a with
// probability π(a) = exp z(a) / Σ exp z over the legal actions, drawn from
// the turn's seed as Gradient draws (stream 1), so that the same
// parameters and observation give the same action.
//
// It learns from each finished episode as one batch (Learn): each emitted
// turn k of its agents, with advantage A_k (the allocator's credit, less
// the baseline if any), contributes to the gradient of the objective
//
//	REINFORCE: A_k log π(a_k|s_k)
//	PPO-clip:  min(ρ_k A_k, clip(ρ_k, 1−ε, 1+ε) A_k),  ρ_k = π(a_k|s_k)/π_old(a_k|s_k)
//
// plus β H(π(·|s_k)), and the parameters take Epochs steps of ascent
// θ ← θ + η Σ_k ∇_θ objective_k, in the turns' order of play. π_old is the
// probability the agent had of the action when it played it, kept at Act,
// so a turn played before earlier episodes of its group were learned is
// weighed as importance sampling requires. The gradient is summed, not
// averaged, over the turns: a turn weighs one step of η, as with
// Gradient.
//
// Its Act, ActBatch and Learn follow the package's rules (see the package
// documentation): deterministic draws from the turn's seed, episodes
// learned one at a time, safe for concurrent use under one mutex. What Act
// played is kept, by the turn's seed, until Learn reads it: the features
// it saw and π_old. A seed's first turn is kept: a counterfactual replay
// (difference rewards that resimulate) asks the learner again with the
// episode's seeds before the episode is learned. Turns Learn never reads
// (episodes that did not finish, replays with other seeds) are dropped
// after staleAfter episodes.
type Softmax struct {
	mu      sync.Mutex
	cfg     SoftmaxConfig
	agents  map[string]*pgAgent
	pending map[uint64]*pgTurn
	// learns counts the episodes Learn was given; a pending turn is
	// stamped with it.
	learns int64
	// batch, grads and the logits, probs and hidden scratch are reused
	// from call to call, under mu.
	batch                     []pgSample
	touched                   []*pgAgent
	rows                      []*pgRow
	logits, probs, hidden, dz []float64
}

// staleAfter is how many episodes a turn Act played waits for Learn
// before it is dropped: far more than any group of episodes played
// before the first of them is learned.
const staleAfter = 1024

// pgAgent is one agent's parameters.
type pgAgent struct {
	id string
	// rows are TabularModel's logits, by state.
	rows map[string]*pgRow
	// inputs is the length of the agent's features, fixed at its first
	// turn (0 before); width is the length of what the action rows weigh:
	// inputs (LinearModel) or the hidden units (MLPModel).
	inputs, width int
	// actions numbers the action texts the agent was offered; out holds,
	// per action number, its row of width weights and its bias, last.
	actions map[string]int
	out     [][]float64
	// w1 is MLPModel's first layer, hidden rows of inputs weights and a
	// bias, last.
	w1 []float64
	// gout and gw1 accumulate the gradient of out and w1 in an update.
	gout    [][]float64
	gw1     []float64
	touched bool
	// baseline is the running mean of the agent's credit (MeanBaseline,
	// the models of features), over updates turns.
	baseline float64
	updates  int
}

// pgRow is TabularModel's row of one agent in one state.
type pgRow struct {
	legal    []string
	logits   []float64
	grad     []float64
	baseline float64
	updates  int
	touched  bool
}

// pgTurn is what Act played at one turn, kept for Learn.
type pgTurn struct {
	agent *pgAgent
	row   *pgRow // TabularModel
	// features is a copy of the turn's numeric observation and outs the
	// action number of each legal action (the models of features).
	features []float64
	outs     []int
	legal    []string
	action   int
	old      float64 // π_old(action)
	stamp    int64   // Softmax.learns when it was played
}

// pgSample is one turn of an update.
type pgSample struct {
	turn      *pgTurn
	advantage float64
}

// NewSoftmax returns a softmax policy-gradient learner.
func NewSoftmax(cfg SoftmaxConfig) (*Softmax, error) {
	bad := func(format string, args ...any) (*Softmax, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Model < TabularModel || cfg.Model > MLPModel:
		return bad("model %v: want table, linear or mlp", cfg.Model)
	case cfg.Model == MLPModel && cfg.Hidden < 1:
		return bad("hidden %d: an mlp needs at least one hidden unit", cfg.Hidden)
	case cfg.Model != MLPModel && cfg.Hidden != 0:
		return bad("hidden %d: only an mlp has hidden units", cfg.Hidden)
	case !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 0):
		return bad("rate %v: want a positive number", cfg.Rate)
	case !(cfg.Clip >= 0 && cfg.Clip < 1):
		return bad("clip %v: want 0 (REINFORCE) or PPO's ε in (0, 1)", cfg.Clip)
	case cfg.Epochs < 1:
		return bad("epochs %d: want at least 1", cfg.Epochs)
	case cfg.Clip == 0 && cfg.Epochs != 1:
		return bad("epochs %d: REINFORCE (clip 0) takes one step per episode; several epochs need PPO's clip", cfg.Epochs)
	case cfg.Baseline != NoBaseline && cfg.Baseline != MeanBaseline:
		return bad("baseline %d: want none or mean", cfg.Baseline)
	case !(cfg.Entropy >= 0) || math.IsInf(cfg.Entropy, 0):
		return bad("entropy %v: want a number ≥ 0", cfg.Entropy)
	}
	return &Softmax{cfg: cfg, agents: map[string]*pgAgent{}, pending: map[uint64]*pgTurn{}}, nil
}

// ReadsFeatures implements agents.FeatureReader: the models of features
// read Observation.Features, which the engine then writes.
func (l *Softmax) ReadsFeatures() bool { return l.cfg.Model != TabularModel }

// Act implements agents.Policy: it samples an action from the softmax of
// the logits. An observation without legal actions is an error wrapping
// agents.ErrNoLegalActions; one without features, for a model of
// features, wraps ErrNoFeatures.
func (l *Softmax) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.act(obs)
}

// ActBatch implements agents.BatchPolicy: Act for each observation, under
// one lock.
func (l *Softmax) ActBatch(_ context.Context, obs []agents.Observation, acts []agents.Action, errs []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range obs {
		acts[k], errs[k] = l.act(&obs[k])
	}
}

// act is Act under l.mu: it finds the turn's parameters, samples the
// action and keeps the turn for Learn.
func (l *Softmax) act(obs *agents.Observation) (agents.Action, error) {
	t, err := l.turnOf(obs)
	if err != nil {
		return agents.Action{}, err
	}
	probs := l.policy(t)
	t.action = sampleSoftmax(l.logits, 1, obs.Float64(streamExplore))
	t.old = probs[t.action]
	t.stamp = l.learns
	if _, played := l.pending[obs.Seed]; !played {
		// The first turn of a seed is the episode's: a counterfactual
		// replay of it, played before it is learned, asks again with the
		// same seeds, in another state.
		l.pending[obs.Seed] = t
	}
	return agents.Action{Text: t.legal[t.action]}, nil
}

// Probabilities returns the probability the learner's policy gives each
// of obs.Legal now, playing nothing and keeping nothing.
func (l *Softmax) Probabilities(obs *agents.Observation) ([]float64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, err := l.turnOf(obs)
	if err != nil {
		return nil, err
	}
	return append([]float64(nil), l.policy(t)...), nil
}

// turnOf returns the turn of obs, its agent's parameters found or made:
// its row (TabularModel) or its features and action numbers.
func (l *Softmax) turnOf(obs *agents.Observation) (*pgTurn, error) {
	if len(obs.Legal) == 0 {
		return nil, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, agents.ErrNoLegalActions)
	}
	ag := l.agents[obs.Agent]
	if ag == nil {
		ag = &pgAgent{id: obs.Agent}
		l.agents[obs.Agent] = ag
	}
	t := &pgTurn{agent: ag, legal: obs.Legal}
	if l.cfg.Model == TabularModel {
		state := l.cfg.state(episode.RenderObservation(obs.View, obs.Inbox))
		r := ag.rows[state]
		switch {
		case r == nil:
			if ag.rows == nil {
				ag.rows = map[string]*pgRow{}
			}
			r = &pgRow{legal: obs.Legal, logits: make([]float64, len(obs.Legal)), grad: make([]float64, len(obs.Legal))}
			ag.rows[state] = r
		case !sameStrings(r.legal, obs.Legal):
			return nil, fmt.Errorf("agent %q state %.60q: %w: %q, then %q", obs.Agent, state, ErrLegalChanged, r.legal, obs.Legal)
		}
		t.row = r
		return t, nil
	}
	if len(obs.Features) == 0 {
		return nil, fmt.Errorf("agent %q turn %d: %w: the %s model reads the scenario's numeric observation (env.Features)", obs.Agent, obs.Turn, ErrNoFeatures, l.cfg.Model)
	}
	if ag.inputs == 0 {
		l.initAgent(ag, len(obs.Features))
	} else if len(obs.Features) != ag.inputs {
		return nil, fmt.Errorf("agent %q turn %d: %w: %d, then %d", obs.Agent, obs.Turn, ErrFeaturesChanged, ag.inputs, len(obs.Features))
	}
	t.features = make([]float64, len(obs.Features))
	for i, x := range obs.Features {
		if !finite.Is(float64(x)) {
			return nil, fmt.Errorf("agent %q turn %d: feature %d is %v", obs.Agent, obs.Turn, i, x)
		}
		t.features[i] = float64(x)
	}
	t.outs = make([]int, len(obs.Legal))
	for i, a := range obs.Legal {
		t.outs[i] = ag.action(a)
	}
	return t, nil
}

// initAgent sizes ag's parameters for inputs features and draws MLPModel's
// first layer.
func (l *Softmax) initAgent(ag *pgAgent, inputs int) {
	ag.inputs, ag.width = inputs, inputs
	ag.actions = map[string]int{}
	if l.cfg.Model != MLPModel {
		return
	}
	ag.width = l.cfg.Hidden
	ag.w1 = make([]float64, l.cfg.Hidden*(inputs+1))
	ag.gw1 = make([]float64, len(ag.w1))
	scale := 1 / math.Sqrt(float64(inputs))
	for j := range l.cfg.Hidden {
		for i := range inputs { // the biases, last in each row, start at 0
			k := j*(inputs+1) + i
			ag.w1[k] = scale * (2*seeds.Float64(seeds.Mix1(l.cfg.Seed, uint64(k))) - 1)
		}
	}
}

// action returns the number of action text a, making its row.
func (ag *pgAgent) action(a string) int {
	n, ok := ag.actions[a]
	if !ok {
		n = len(ag.out)
		ag.actions[a] = n
		ag.out = append(ag.out, make([]float64, ag.width+1))
		ag.gout = append(ag.gout, make([]float64, ag.width+1))
	}
	return n
}

// policy computes the logits of turn t's legal actions with the current
// parameters into l.logits (and MLPModel's hidden layer into l.hidden),
// and returns their softmax, l.probs.
func (l *Softmax) policy(t *pgTurn) []float64 {
	n := len(t.legal)
	l.logits = resizeFloats(l.logits, n)
	switch l.cfg.Model {
	case TabularModel:
		copy(l.logits, t.row.logits)
	default:
		in := t.features
		if l.cfg.Model == MLPModel {
			in = l.hiddenOf(t.agent, t.features)
		}
		for b, o := range t.outs {
			w := t.agent.out[o]
			z := w[len(in)]
			for j, x := range in {
				z += w[j] * x
			}
			l.logits[b] = z
		}
	}
	l.probs = resizeFloats(l.probs, n)
	softmaxInto(l.probs, l.logits)
	return l.probs
}

// hiddenOf computes tanh(W φ + c) into l.hidden.
func (l *Softmax) hiddenOf(ag *pgAgent, phi []float64) []float64 {
	l.hidden = resizeFloats(l.hidden, l.cfg.Hidden)
	for j := range l.hidden {
		w := ag.w1[j*(ag.inputs+1) : (j+1)*(ag.inputs+1)]
		s := w[ag.inputs]
		for i, x := range phi {
			s += w[i] * x
		}
		l.hidden[j] = math.Tanh(s)
	}
	return l.hidden
}

// softmaxInto writes the softmax of z into p, shifted by the largest
// logit so that no exponential overflows.
func softmaxInto(p, z []float64) {
	top := math.Inf(-1)
	for _, v := range z {
		top = max(top, v)
	}
	total := 0.0
	for i, v := range z {
		p[i] = math.Exp(v - top)
		total += p[i]
	}
	for i := range p {
		p[i] /= total
	}
}

// resizeFloats returns s with length n, reallocated if need be; its
// contents are the caller's to write.
func resizeFloats(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}
