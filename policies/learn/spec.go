package learn

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/internal/finite"
)

// ErrUnknownLearner is returned by Parse for a name it does not know.
var ErrUnknownLearner = errors.New("unknown learner")

// param is one parameter of a named learner.
type param struct {
	name, def, doc string
}

type entry struct {
	doc    string
	params []param
	make   func(p map[string]float64, opts Options) (Learner, error)
}

// learners returns the learners a spec can name. It is a function rather
// than a package variable so that nothing can change the table.
func learners() map[string]entry {
	return map[string]entry{
		"egreedy": {
			doc: "action values Q(s,a) ← Q + α(r − Q), ε-greedy selection (ties at random)",
			params: []param{
				{"alpha", "0.1", "learning rate α in (0, 1]"},
				{"epsilon", "0.05", "exploration probability ε in [0, 1]"},
				{"init", "0", "initial action value: optimistic when above the rewards, so that every action is tried early (with unbiased=0 it also biases the values)"},
				{"unbiased", "1", "1: unbiased constant step size, each action's first reward replaces init, so no reward's scale or sign locks agents into their first choice; 0: plain α steps from init"},
			},
			make: func(p map[string]float64, opts Options) (Learner, error) {
				return NewValues(ValueConfig{Alpha: p["alpha"], Init: p["init"], Unbiased: p["unbiased"] != 0, Select: EpsilonGreedy{Epsilon: p["epsilon"]}, Options: opts})
			},
		},
		"boltzmann": {
			doc: "action values Q(s,a) ← Q + α(r − Q), Boltzmann selection p(a) ∝ exp(Q(a)/τ)",
			params: []param{
				{"alpha", "0.1", "learning rate α in (0, 1]"},
				{"temperature", "0.1", "temperature τ > 0, in the units of the reward"},
				{"init", "0", "initial action value: optimistic when above the rewards"},
				{"unbiased", "1", "1: unbiased constant step size (see egreedy); 0: plain α steps from init"},
			},
			make: func(p map[string]float64, opts Options) (Learner, error) {
				return NewValues(ValueConfig{Alpha: p["alpha"], Init: p["init"], Unbiased: p["unbiased"] != 0, Select: Boltzmann{Temperature: p["temperature"]}, Options: opts})
			},
		},
		"reinforce": {
			doc: "softmax policy gradient: θ ← θ + η(r − b)∇log π(a), b the running-mean reward of the state",
			params: []param{
				{"rate", "0.1", "step size η > 0"},
				{"baseline", "0", "baseline step β in [0, 1]; 0 is the running mean"},
			},
			make: func(p map[string]float64, opts Options) (Learner, error) {
				return NewGradient(GradientConfig{Rate: p["rate"], Baseline: p["baseline"], Options: opts})
			},
		},
		"pg-table":  softmaxEntry(TabularModel),
		"pg-linear": softmaxEntry(LinearModel),
		"pg-mlp":    softmaxEntry(MLPModel),
	}
}

// softmaxEntry is the spec of a Softmax learner of model m.
func softmaxEntry(m Model) entry {
	docs := map[Model]string{
		TabularModel: "softmax policy over a table of logits per agent, state and action, by REINFORCE or PPO-clip",
		LinearModel:  "softmax policy z(a) = w_a·φ + b_a over the scenario's numeric observation φ (env.Features), by REINFORCE or PPO-clip",
		MLPModel:     "softmax policy z(a) = w_a·tanh(Wφ + c) + b_a over the scenario's numeric observation φ (env.Features), by REINFORCE or PPO-clip",
	}
	params := []param{
		{"rate", "0.1", "step size η > 0 of gradient ascent; each turn's gradient is summed"},
		{"clip", "0", "0: REINFORCE, one step of A∇log π per episode; in (0, 1): PPO's ratio clip ε"},
		{"epochs", "1", "steps over each episode's turns: 1 for REINFORCE, several for PPO"},
		{"baseline", "1", "1: the advantage is the credit less its running mean (per agent and state for pg-table, per agent otherwise); 0: the credit is the advantage, as grpo, rloo, magrpo and at-grpo give it"},
		{"entropy", "0", "weight β ≥ 0 of the entropy bonus β H(π)"},
	}
	if m == MLPModel {
		params = append(params,
			param{"hidden", "16", "hidden tanh units"},
			param{"seed", "1", "seed of the first layer's initial weights"})
	}
	return entry{doc: docs[m], params: params, make: func(p map[string]float64, opts Options) (Learner, error) {
		cfg := SoftmaxConfig{Model: m, Rate: p["rate"], Clip: p["clip"], Entropy: p["entropy"], Options: opts}
		var err error
		if cfg.Epochs, err = wholeParam(p, "epochs"); err != nil {
			return nil, err
		}
		switch p["baseline"] {
		case 0:
			cfg.Baseline = NoBaseline
		case 1:
			cfg.Baseline = MeanBaseline
		default:
			return nil, fmt.Errorf("%w: baseline=%v: want 0 or 1", ErrBadConfig, p["baseline"])
		}
		if m == MLPModel {
			if cfg.Hidden, err = wholeParam(p, "hidden"); err != nil {
				return nil, err
			}
			seed, err := wholeParam(p, "seed")
			if err != nil || seed < 0 {
				return nil, fmt.Errorf("%w: seed=%v: want a whole number ≥ 0", ErrBadConfig, p["seed"])
			}
			cfg.Seed = uint64(seed)
		}
		return NewSoftmax(cfg)
	}}
}

// wholeParam returns parameter k of p as an int, refusing a fraction or
// a number beyond ±2^31.
func wholeParam(p map[string]float64, k string) (int, error) {
	v := p[k]
	if v != math.Trunc(v) || math.Abs(v) > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s=%v: want a whole number", ErrBadConfig, k, v)
	}
	return int(v), nil
}

// Names returns the learners a spec can name, sorted.
func Names() []string { return slices.Sorted(maps.Keys(learners())) }

// Spec is a parsed learner specification: a learner's name and all its
// parameters. Its zero value is not usable; use Parse.
type Spec struct {
	name   string
	values map[string]float64
	text   map[string]string
}

// Parse reads a spec, "name" or "name:key=value,key=value" (for example
// "egreedy:alpha=0.2,epsilon=0.1"), and checks it by building a learner
// once. Parameters left out take their defaults; see Usage.
func Parse(spec string) (Spec, error) {
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%w: learner spec %q: %s", ErrBadConfig, spec, fmt.Sprintf(format, args...))
	}
	name, rest, hasParams := strings.Cut(strings.TrimSpace(spec), ":")
	name = strings.TrimSpace(name)
	e, ok := learners()[name]
	if !ok {
		return Spec{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownLearner, name, strings.Join(Names(), ", "))
	}
	s := Spec{name: name, values: map[string]float64{}, text: map[string]string{}}
	for _, p := range e.params {
		s.text[p.name] = p.def
	}
	if hasParams {
		if strings.TrimSpace(rest) == "" {
			return bad("nothing after ':'")
		}
		given := map[string]bool{}
		for piece := range strings.SplitSeq(rest, ",") {
			k, v, ok := strings.Cut(piece, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch _, known := s.text[k]; {
			case !ok || k == "" || v == "":
				return bad("%q is not key=value", piece)
			case !known:
				names := make([]string, len(e.params))
				for i, p := range e.params {
					names[i] = p.name
				}
				return bad("%s has no parameter %q (it takes %s)", name, k, strings.Join(names, ", "))
			case given[k]:
				return bad("%s given twice", k)
			}
			given[k] = true
			s.text[k] = v
		}
	}
	for k, v := range s.text {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !finite.Is(f) {
			return bad("%s=%q is not a finite number", k, v)
		}
		s.values[k] = f
	}
	if u, ok := s.values["unbiased"]; ok && u != 0 && u != 1 {
		return bad("unbiased=%s: want 0 or 1", s.text["unbiased"])
	}
	if _, err := s.New(Options{}); err != nil {
		return Spec{}, fmt.Errorf("learner spec %q: %w", spec, err)
	}
	return s, nil
}

// Name returns the learner's name.
func (s Spec) Name() string { return s.name }

// New builds a fresh learner, with no values learned.
func (s Spec) New(opts Options) (Learner, error) {
	e, ok := learners()[s.name]
	if !ok {
		return nil, fmt.Errorf("%w %q: a Spec must come from Parse", ErrUnknownLearner, s.name)
	}
	return e.make(s.values, opts)
}

// String returns the spec with every parameter, sorted by name: a text
// Parse reads back to the same learner.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.name)
	for i, k := range slices.Sorted(maps.Keys(s.text)) {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + s.text[k])
	}
	return b.String()
}

// Usage writes the learners a spec can name, their parameters and
// defaults: the text of a command's --learner help.
func Usage(w io.Writer) error {
	var b strings.Builder
	b.WriteString("Learners, chosen by a spec: NAME or NAME:key=value,...\n")
	all := learners()
	for _, name := range Names() {
		e := all[name]
		fmt.Fprintf(&b, "\n%s\n    %s\n", name, e.doc)
		for _, p := range e.params {
			fmt.Fprintf(&b, "    %s=%s\n        %s\n", p.name, p.def, p.doc)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
