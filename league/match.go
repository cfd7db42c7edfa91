package league

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrBadRule is wrapped by ParseRule's errors.
var ErrBadRule = errors.New("bad matchmaking rule")

// Choice is what a matchmaking rule chooses from: the opponents of the
// focal player for one role of one match.
type Choice struct {
	// Focal is the player the opponent is drawn for (the learner).
	Focal string
	// Pool are the candidate opponents, in the order they joined the
	// league: every player but the focal one and external ones.
	Pool []string
	// Latest is the focal player's most recent snapshot, "" when it has
	// none.
	Latest string
	// WinRate is the focal player's rate of wins against opp (a draw
	// counting half), with a prior of one draw: 0.5 before they met.
	WinRate func(opp string) float64
	// Draw returns the k-th uniform number in [0, 1) of this choice: a
	// function of the league's seed, the match and the role, so every
	// draw is reproducible.
	Draw func(k uint64) float64
}

// Rule is a matchmaking rule: it chooses a focal player's opponent in one
// role of a match.
type Rule interface {
	Choose(c *Choice) (string, error)
	// String is the rule's spec, which ParseRule reads back.
	String() string
}

// ErrNoOpponent is returned by a rule that has no player to choose.
var ErrNoOpponent = errors.New("no opponent to choose")

// ParseRule reads a matchmaking rule:
//
//	uniform                  every player of the pool equally often
//	self                     the focal player itself (pure self-play)
//	latest                   the focal player's latest snapshot (self while it has none)
//	pfsp[:weighting=hard,p=2]  prioritised fictitious self-play: opponent o
//	                         with weight f(x), x the focal player's win rate
//	                         against o; hard f = (1−x)^p (the opponents it
//	                         loses to), variance f = x(1−x) (those it is
//	                         even with), linear f = 1−x; all weights 0 is
//	                         uniform
//	fixed:NAME=W,NAME=W      the named players with those weights
//	mix:RULE=W,RULE=W        each match's role draws one of the rules (uniform,
//	                         self, latest, pfsp) with those weights, then its
//	                         opponent; AlphaStar's main agents play
//	                         mix:self=0.35,pfsp=0.5,uniform=0.15 or so
func ParseRule(spec string) (Rule, error) {
	spec = strings.TrimSpace(spec)
	name, rest, hasArgs := strings.Cut(spec, ":")
	bad := func(format string, args ...any) (Rule, error) {
		return nil, fmt.Errorf("%w %q: %s", ErrBadRule, spec, fmt.Sprintf(format, args...))
	}
	args := map[string]string{}
	var order []string
	if hasArgs {
		for piece := range strings.SplitSeq(rest, ",") {
			k, v, ok := strings.Cut(piece, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || k == "" || v == "" {
				return bad("%q is not key=value", piece)
			}
			if _, dup := args[k]; dup {
				return bad("%s given twice", k)
			}
			args[k] = v
			order = append(order, k)
		}
	}
	noArgs := func(r Rule) (Rule, error) {
		if hasArgs {
			return bad("%s takes no parameters", name)
		}
		return r, nil
	}
	weight := func(k string) (float64, error) {
		w, err := strconv.ParseFloat(args[k], 64)
		if err != nil || !(w >= 0) || math.IsInf(w, 0) {
			return 0, fmt.Errorf("weight %s=%q: want a number ≥ 0", k, args[k])
		}
		return w, nil
	}
	switch name {
	case "uniform":
		return noArgs(uniform{})
	case "self":
		return noArgs(self{})
	case "latest":
		return noArgs(latest{})
	case "pfsp":
		r := pfsp{weighting: "hard", p: 2}
		for _, k := range order {
			switch k {
			case "weighting":
				if !slices.Contains([]string{"hard", "variance", "linear"}, args[k]) {
					return bad("weighting %q: want hard, variance or linear", args[k])
				}
				r.weighting = args[k]
			case "p":
				p, err := strconv.ParseFloat(args[k], 64)
				if err != nil || !(p > 0) || math.IsInf(p, 0) {
					return bad("p=%q: want a positive number", args[k])
				}
				r.p = p
			default:
				return bad("pfsp has no parameter %q (it takes weighting, p)", k)
			}
		}
		return r, nil
	case "fixed", "mix":
		if len(order) == 0 {
			return bad("%s needs NAME=WEIGHT pairs", name)
		}
		total := 0.0
		m := mixture{kind: name}
		for _, k := range order {
			w, err := weight(k)
			if err != nil {
				return bad("%v", err)
			}
			total += w
			m.names = append(m.names, k)
			m.weights = append(m.weights, w)
			if name == "mix" {
				sub, err := ParseRule(k)
				if err != nil {
					return bad("%v", err)
				}
				if _, nested := sub.(mixture); nested {
					return bad("%s: a mix mixes uniform, self, latest and pfsp", k)
				}
				m.rules = append(m.rules, sub)
			}
		}
		if !(total > 0) {
			return bad("the weights sum to 0")
		}
		return m, nil
	}
	return bad("unknown rule (known: uniform, self, latest, pfsp, fixed, mix)")
}

type uniform struct{}

func (uniform) String() string { return "uniform" }
func (uniform) Choose(c *Choice) (string, error) {
	if len(c.Pool) == 0 {
		return "", fmt.Errorf("%w: the league has no player besides %q", ErrNoOpponent, c.Focal)
	}
	return c.Pool[pick(len(c.Pool), c.Draw(0))], nil
}

type self struct{}

func (self) String() string                   { return "self" }
func (self) Choose(c *Choice) (string, error) { return c.Focal, nil }

type latest struct{}

func (latest) String() string { return "latest" }
func (latest) Choose(c *Choice) (string, error) {
	if c.Latest == "" {
		return c.Focal, nil
	}
	return c.Latest, nil
}

type pfsp struct {
	weighting string
	p         float64
}

func (r pfsp) String() string {
	return "pfsp:weighting=" + r.weighting + ",p=" + strconv.FormatFloat(r.p, 'g', -1, 64)
}

// Weight is the PFSP weight of an opponent the focal player beats at rate
// x.
func (r pfsp) Weight(x float64) float64 {
	switch r.weighting {
	case "variance":
		return x * (1 - x)
	case "linear":
		return 1 - x
	}
	return math.Pow(1-x, r.p)
}

func (r pfsp) Choose(c *Choice) (string, error) {
	if len(c.Pool) == 0 {
		return "", fmt.Errorf("%w: the league has no player besides %q", ErrNoOpponent, c.Focal)
	}
	w := make([]float64, len(c.Pool))
	for i, o := range c.Pool {
		w[i] = r.Weight(c.WinRate(o))
	}
	i, ok := weighted(w, c.Draw(0))
	if !ok {
		i = pick(len(c.Pool), c.Draw(1))
	}
	return c.Pool[i], nil
}

// mixture is fixed (players) or mix (rules) with weights.
type mixture struct {
	kind    string
	names   []string
	weights []float64
	rules   []Rule
}

func (m mixture) String() string {
	parts := make([]string, len(m.names))
	for i, n := range m.names {
		parts[i] = n + "=" + strconv.FormatFloat(m.weights[i], 'g', -1, 64)
	}
	return m.kind + ":" + strings.Join(parts, ",")
}

func (m mixture) Choose(c *Choice) (string, error) {
	i, _ := weighted(m.weights, c.Draw(0))
	if m.kind == "fixed" {
		name := m.names[i]
		if name != c.Focal && !slices.Contains(c.Pool, name) {
			return "", fmt.Errorf("%w: fixed rule names %q, which is not a player of the league (players: %s)", ErrNoOpponent, name, strings.Join(c.Pool, ", "))
		}
		return name, nil
	}
	// The sub-rule draws from streams of its own.
	sub := *c
	sub.Draw = func(k uint64) float64 { return c.Draw(k + 16) }
	return m.rules[i].Choose(&sub)
}

// Weights are the probabilities with which r chooses each opponent of c:
// what a rule's frequencies must match. Choose(c) draws from them.
func Weights(r Rule, c *Choice) map[string]float64 {
	out := map[string]float64{}
	addAll := func(names []string, w []float64, scale float64) {
		total := 0.0
		for _, x := range w {
			total += x
		}
		for i, n := range names {
			if total > 0 {
				out[n] += scale * w[i] / total
			} else {
				out[n] += scale / float64(len(names))
			}
		}
	}
	var visit func(r Rule, scale float64)
	visit = func(r Rule, scale float64) {
		switch r := r.(type) {
		case uniform:
			addAll(c.Pool, make([]float64, len(c.Pool)), scale)
		case self:
			out[c.Focal] += scale
		case latest:
			out[cmp.Or(c.Latest, c.Focal)] += scale
		case pfsp:
			w := make([]float64, len(c.Pool))
			for i, o := range c.Pool {
				w[i] = r.Weight(c.WinRate(o))
			}
			addAll(c.Pool, w, scale)
		case mixture:
			total := 0.0
			for _, w := range r.weights {
				total += w
			}
			for i, w := range r.weights {
				if r.kind == "fixed" {
					out[r.names[i]] += scale * w / total
				} else {
					visit(r.rules[i], scale*w/total)
				}
			}
		}
	}
	visit(r, 1)
	maps.DeleteFunc(out, func(_ string, w float64) bool { return w == 0 })
	return out
}

// pick is a uniform index in [0, n) from u in [0, 1).
func pick(n int, u float64) int { return min(int(u*float64(n)), n-1) }

// weighted is the index u falls on in the cumulative weights; false when
// they sum to 0.
func weighted(w []float64, u float64) (int, bool) {
	total := 0.0
	for _, x := range w {
		total += x
	}
	if !(total > 0) {
		return 0, false
	}
	target, acc := u*total, 0.0
	last := 0
	for i, x := range w {
		if x <= 0 {
			continue
		}
		acc += x
		last = i
		if target < acc {
			return i, true
		}
	}
	return last, true
}
