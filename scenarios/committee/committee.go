// Package committee is a message-passing team game built for credit
// assignment: a committee of advisers, only some of whom know the answer,
// sends advice to a decider who follows the majority.
//
// The episode's seed draws the right option t among `options`. At time 0
// the environment privately briefs each of the `informed` advisers with t
// (a "brief" message); the `uninformed` advisers get no brief: they are the
// null players of the game, whose advice can only add noise. At step 1
// every adviser answers at once, either one option, sent to the decider as
// an "advice" message, or "abstain", which sends nothing. At step 2 the
// decider reads its inbox and names one option. The team reward, and every
// agent's score, is 1 when the decision is t and 0 otherwise.
//
// Credit assignment is the whole difficulty. An informed adviser that
// advises t helps; an uninformed adviser helps most by abstaining, yet under
// the team reward its choice barely moves the outcome next to the noise
// made by everyone else's. Counterfactual rewards (difference, leave-one-
// out, Shapley) compare the outcome with and without the adviser's advice,
// and so single out its own effect.
//
// The named policy "scripted" plays both roles optimally: an informed
// adviser advises its brief, an uninformed one abstains, and the decider
// takes the plurality of the advice (ties, and no advice at all, broken
// uniformly at random from the turn's seed). With at least one informed
// adviser it always wins: the optimum G* is 1.
//
// Counterfactuals: an adviser's null action is "abstain"; an absent adviser
// is the same as an abstaining one. An absent decider decides nothing, and
// the team scores 0. The decider reacts to the advice, so counterfactuals
// must re-simulate it (Resimulate): replayed frozen, it would repeat the
// decision it made.
//
// The states say who acts (the game has no Next): an adviser while
// briefed, the decider once deliberating. The adviser's state machine:
//
//	stateDiagram-v2
//	    [*] --> briefed
//	    briefed --> abstained: abstain
//	    briefed --> advised: advise
//
// The decider's:
//
//	stateDiagram-v2
//	    [*] --> waiting
//	    deliberating --> decided: decide
//	    waiting --> deliberating: deliberate
package committee

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// Roles, states, events, actions and message kinds of the game.
const (
	RoleAdviser = "adviser"
	RoleDecider = "decider"

	Briefed      agents.State = "briefed"
	Advised      agents.State = "advised"
	Abstained    agents.State = "abstained"
	Waiting      agents.State = "waiting"
	Deliberating agents.State = "deliberating"
	Decided      agents.State = "decided"

	Advise     agents.Event = "advise"
	Abstain    agents.Event = "abstain"
	Deliberate agents.Event = "deliberate"
	Decide     agents.Event = "decide"

	// NullAction is the adviser's abstention: no advice is sent.
	NullAction = "abstain"

	// KindBrief is the environment's private message to an informed
	// adviser, its payload the right option; KindAdvice an adviser's
	// message to the decider, its payload an option; KindResult the
	// announcement of the outcome.
	KindBrief  = "brief"
	KindAdvice = "advice"
	KindResult = "result"

	// DeciderID is the decider's seat id; advisers are adviser-0, ...
	DeciderID = "decider"
)

// Scenario is the committee game. Its zero value is not usable; use New.
type Scenario struct {
	info *env.Info
}

// New returns the committee scenario.
func New() *Scenario {
	s := &Scenario{}
	s.info = &env.Info{
		Name:    "committee",
		Summary: "advisers, some briefed with the right option, advise a decider who follows the majority; all score 1 if it decides right",
		Doc: "Async. The seed draws the right option among o0..o{options-1}. The first `informed` advisers are privately briefed " +
			"with it; the `uninformed` ones are not. Each adviser sends the decider one option or abstains; then the decider names " +
			"an option. Team reward and every agent's score: 1 if the decision is right, else 0. Null action: an adviser's \"abstain\".",
		Schedule: env.Async,
		Roles: []*agents.Role{
			{
				Name:    RoleAdviser,
				Doc:     "sends the decider one option, or abstains; only informed advisers know the right one",
				Initial: Briefed,
				Events: fsm.Events{
					agents.Edge(Briefed, Advise, Advised),
					agents.Edge(Briefed, Abstain, Abstained),
				},
				Terminal: []agents.State{Advised, Abstained},
				Acting:   []agents.State{Briefed},
			},
			{
				Name:    RoleDecider,
				Doc:     "reads the advice and names one option",
				Initial: Waiting,
				Events: fsm.Events{
					agents.Edge(Waiting, Deliberate, Deliberating),
					agents.Edge(Deliberating, Decide, Decided),
				},
				Terminal: []agents.State{Decided},
				Acting:   []agents.State{Deliberating},
			},
		},
		Params: []env.ParamSpec{
			env.Int("informed", 2, 0, 32, "advisers briefed with the right option"),
			env.Int("uninformed", 4, 0, 32, "advisers without a brief: the null players"),
			env.Int("options", 4, 2, 32, "options to decide among"),
		},
		Policies: map[string]env.PolicyMaker{"scripted": scripted},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleAdviser: NullAction},
			AbsentOK:   true,
			Doc:        "an absent adviser is one that abstains; an absent decider decides nothing, and the team scores 0",
			// The decider follows the advice: keeping its recorded
			// decision would credit the advisers nothing.
			Resimulate: true,
		},
	}
	s.info.CheckParams = func(p env.Params) error {
		if p.Int("informed")+p.Int("uninformed") == 0 {
			return fmt.Errorf("a committee needs at least one adviser: informed=0 and uninformed=0")
		}
		return nil
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// New implements env.Scenario: it draws the right option from seed.
func (s *Scenario) New(p env.Params, seed uint64) (env.Game, error) {
	informed, uninformed, options := p.Int("informed"), p.Int("uninformed"), p.Int("options")
	g := &game{informed: informed, decision: -1, briefed: make([]bool, informed+uninformed), advised: slices.Repeat([]int{-1}, informed+uninformed)}
	for i := range informed {
		g.briefed[i] = true
	}
	names := make([]string, options+1)
	names[0] = NullAction
	for i := range options {
		names[i+1] = Option(i)
	}
	g.options, g.advice = agents.Enum(names[1:]...), agents.Enum(names...)
	advisers := informed + uninformed
	g.seats = append(env.Numbered(RoleAdviser, advisers), env.Seat{ID: DeciderID, Role: RoleDecider})
	g.decider = advisers
	g.right = rand.New(rand.NewPCG(seed, 0x636f_6d6d_6974_7465)).IntN(options)
	g.briefedView = env.View{Text: "Committee. You are an adviser and were briefed with the right option (see the brief). " +
		"Send the decider one option, or abstain; everyone scores 1 if the decider picks the right option.", Legal: g.advice.Legal()}
	g.blindView = env.View{Text: "Committee. You are an adviser but were not briefed: you do not know the right option. " +
		"Send the decider one option, or abstain; everyone scores 1 if the decider picks the right option.", Legal: g.advice.Legal()}
	g.deciderView = env.View{Text: "Committee. You are the decider. Some advisers know the right option; their advice is below. " +
		"Name one option; everyone scores 1 if it is the right one.", Legal: g.options.Legal()}
	return g, nil
}

// Option is the name of option i: "o0", "o1", ...
func Option(i int) string { return "o" + strconv.Itoa(i) }

type game struct {
	informed int
	// briefed says which advisers are briefed: the first informed ones,
	// unless a resample re-drew them.
	briefed  []bool
	seats    []env.Seat
	decider  int             // the decider's seat
	options  *agents.Choices // the decider's legal answers
	advice   *agents.Choices // the advisers' legal answers: abstain, then the options
	right    int
	decision int // the option decided, -1 before or when none
	// advised is, per adviser, the option it advised, -1 before or when
	// it abstained: what the features show.
	advised []int

	briefedView, blindView, deciderView env.View
}

func (g *game) Seats() []env.Seat { return g.seats }

// Start briefs the informed advisers. With no adviser present, the decider
// deliberates at once, on no advice.
func (g *game) Start(s *env.Step) error {
	present := false
	for i := range g.decider {
		if s.Absent(i) {
			continue
		}
		present = true
		if g.briefed[i] {
			if err := s.Tell(i, KindBrief, g.options.Text(g.right)); err != nil {
				return err
			}
		}
	}
	if !present {
		return g.deliberate(s)
	}
	return nil
}

// deliberate moves the decider to decide, or ends the episode when it is
// absent.
func (g *game) deliberate(s *env.Step) error {
	if s.Absent(g.decider) {
		s.End()
		return nil
	}
	return s.Fire(g.decider, Deliberate)
}

func (g *game) Observe(seat int) env.View {
	switch {
	case seat == g.decider:
		return g.deciderView
	case g.briefed[seat]:
		return g.briefedView
	}
	return g.blindView
}

// Apply takes the advisers' answers (step 1) or the decision (step 2).
func (g *game) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		if m.Seat == g.decider {
			return g.decide(s, m.Action.Text)
		}
		if err := g.adviseOrAbstain(s, m.Seat, m.Action.Text); err != nil {
			return err
		}
	}
	return g.deliberate(s)
}

func (g *game) adviseOrAbstain(s *env.Step, seat int, text string) error {
	if _, err := g.options.Parse(text); err != nil {
		if text != NullAction {
			s.Note(seat, "illegal", true)
		}
		return s.Fire(seat, Abstain)
	}
	g.advised[seat], _ = g.options.Parse(text)
	if err := s.Send(g.seats[seat].ID, protocol.To(DeciderID), KindAdvice, text); err != nil {
		return err
	}
	return s.Fire(seat, Advise)
}

func (g *game) decide(s *env.Step, text string) error {
	decision, err := g.options.Parse(text)
	g.decision = decision
	if err != nil {
		g.decision = -1
		s.Note(g.decider, "illegal", true)
	}
	if err := s.Fire(g.decider, Decide); err != nil {
		return err
	}
	result := "wrong: the right option was " + g.options.Text(g.right)
	if g.decision == g.right {
		result = "right: " + g.options.Text(g.right)
	}
	s.End()
	return s.Announce(KindResult, result)
}

// Score gives the team and every agent 1 for a right decision, else 0.
func (g *game) Score() env.Score {
	r := 0.0
	if g.decision == g.right {
		r = 1
	}
	return env.Score{Team: r, Agents: slices.Repeat([]float64{r}, len(g.seats))}
}

// Resample implements env.HiddenState: it re-draws, from rng, the right
// option unless seat was briefed with it, and which of the other advisers
// are briefed (as many as were), keeping seat's own brief or its lack. A
// seat observes neither: the decider sees the advice, not who gave it
// knowingly. The briefs already delivered are not rewritten.
func (g *game) Resample(s *env.Step, seat int, rng *rand.Rand) error {
	me := seat != g.decider && g.briefed[seat] && !s.Absent(seat)
	if !me {
		g.right = rng.IntN(len(g.options.Legal()))
	}
	var others []int
	left := g.informed
	for i := range g.briefed {
		if i == seat {
			if g.briefed[i] {
				left--
			}
			continue
		}
		others = append(others, i)
	}
	rng.Shuffle(len(others), func(a, b int) { others[a], others[b] = others[b], others[a] })
	for k, i := range others {
		g.briefed[i] = k < left
	}
	return nil
}

// Label implements env.Labeler: the right option.
func (g *game) Label() string { return g.options.Text(g.right) }

// scripted is the optimal policy of either role.
func scripted(req env.PolicyRequest) (agents.Policy, error) {
	if req.Role == RoleDecider {
		return agents.PolicyFunc(plurality), nil
	}
	return agents.Scripted(func(obs *agents.Observation) string {
		for _, m := range obs.Seen {
			if m.Kind == KindBrief {
				return m.Payload
			}
		}
		return NullAction
	}), nil
}

// plurality names the option most advised, ties and silence broken
// uniformly at random from the turn's seed.
func plurality(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	votes := make([]int, len(obs.Legal))
	for _, m := range obs.Seen {
		if m.Kind != KindAdvice {
			continue
		}
		if i := slices.Index(obs.Legal, strings.TrimSpace(m.Payload)); i >= 0 {
			votes[i]++
		}
	}
	top := slices.Max(votes)
	var best []int
	for i, v := range votes {
		if v == top {
			best = append(best, i)
		}
	}
	return agents.Action{Text: obs.Legal[best[obs.Intn(0, len(best))]]}, nil
}

// ObservationSpace implements env.Features: 3+3·K numbers for K options,
// the same for both roles: the role one-hot (adviser, decider), whether
// the seat was briefed, the brief's option one-hot (zeros without one),
// the option the adviser advised one-hot (zeros before, when it
// abstained, and for the decider), and for the decider the share of the
// advisers that advised each option (the advice in its inbox, once given;
// zeros for an adviser).
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{3 + 3*p.Int("options")}, Low: 0, High: 1}
}

// StateSpace implements env.Features: the true state, K+A·(1+K) numbers
// for A advisers: the right option one-hot, then per adviser whether it
// was briefed and the option it advised, one-hot.
func (s *Scenario) StateSpace(p env.Params) env.Space {
	k := p.Int("options")
	return env.Space{Shape: []int{k + (p.Int("informed")+p.Int("uninformed"))*(1+k)}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	clear(dst)
	k := len(g.options.Legal())
	if seat == g.decider {
		dst[1] = 1
		for _, o := range g.advised {
			if o >= 0 {
				dst[3+2*k+o] += 1 / float32(len(g.advised))
			}
		}
		return
	}
	dst[0] = 1
	if g.briefed[seat] {
		dst[2] = 1
		dst[3+g.right] = 1
	}
	if o := g.advised[seat]; o >= 0 {
		dst[3+k+o] = 1
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	clear(dst)
	k := len(g.options.Legal())
	dst[g.right] = 1
	for i, b := range g.briefed {
		row := dst[k+i*(1+k) : k+(i+1)*(1+k)]
		if b {
			row[0] = 1
		}
		if o := g.advised[i]; o >= 0 {
			row[1+o] = 1
		}
	}
}

// ActionSet implements env.ActionSets: an adviser's abstain and options, the
// decider's options, every turn's legal answers.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	n := p.Int("options")
	names := make([]string, 0, n+1)
	switch role {
	case RoleAdviser:
		names = append(names, NullAction)
	case RoleDecider:
	default:
		return nil
	}
	for i := range n {
		names = append(names, Option(i))
	}
	return names
}
