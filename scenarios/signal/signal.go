// Package signal is a Lewis signalling game: a cooperative referential game
// in which a speaker must tell a listener which of a few objects is the
// target, with a single word.
//
// The episode's seed draws `candidates` distinct objects, each described by
// `attributes` attributes (shape, then color, then pattern) of `values`
// values each ("red circle", "striped blue star"), and picks one as the
// target. At time 0 the environment privately tells the speaker the target
// and the candidates. The speaker answers with one word of the vocabulary,
// which goes to the listener on the bus. The listener sees the candidates
// in its own seed-shuffled order, so their position carries no
// information, reads the word, and names one candidate. Both score 1 if it
// is the target and 0 otherwise: the team reward and both agent scores are
// equal.
//
// The schedule is Async, and the states say who acts: the speaker while
// briefed, the listener once it is choosing (the speaker's word, or its
// silence, fires listen), so a listener still chooses when the speaker stays
// silent or is absent.
//
// Success needs communication. The word is the only channel between who
// knows the target and who picks, so a speaker whose word does not depend
// on the target leaves the listener at chance, 1/candidates, whatever the
// listener does. The parameter vocab sets the words:
//
//   - words (default): the attribute values themselves ("red", "circle"),
//     so an LLM pair can succeed zero-shot by naming a distinguishing
//     attribute;
//   - symbols: w1..wK (K = attributes x values), symbols with no given
//     meaning: a pair must settle on a convention by playing, as in Lewis's
//     original game.
//
// The named policy "scripted" plays either role with the convention that
// symbol k means the k-th word of the words vocabulary. Its speaker names
// the target's rarest value among the candidates (ties: the value listed
// first), its listener picks the first candidate that has the value heard
// (the first candidate when none has it). It succeeds whenever the target
// has a value no other candidate shares, and at chance among the sharers
// otherwise. The default policy is "random".
//
// An answer outside the legal list is noted as "illegal" in its sample's
// metadata. An illegal word counts as silence; an illegal pick fails the
// episode. The listener's sample notes the target ("target").
//
// Counterfactuals: the speaker's null action is silence, the empty answer
// "": no word is sent. An absent speaker is the same as a silent one; an
// absent listener picks nothing, so the episode fails. The listener's pick
// depends on the word, so a counterfactual replay must re-simulate it
// (episode.Counterfactual.Resimulate): replayed frozen, it repeats the
// pick it made on hearing the word. Re-simulated, the speaker's difference
// reward is G minus what the listener achieves without a word.
//
// The speaker's state machine:
//
//	stateDiagram-v2
//	    [*] --> briefed
//	    briefed --> waiting: speak
//	    waiting --> failed: fail
//	    waiting --> succeeded: succeed
//
// The listener's:
//
//	stateDiagram-v2
//	    [*] --> waiting
//	    choosing --> failed: fail
//	    choosing --> succeeded: succeed
//	    waiting --> choosing: listen
package signal

import (
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

// Roles, states, events and message kinds of the game.
const (
	RoleSpeaker  = "speaker"
	RoleListener = "listener"

	Briefed   agents.State = "briefed"
	Waiting   agents.State = "waiting"
	Choosing  agents.State = "choosing"
	Succeeded agents.State = "succeeded"
	Failed    agents.State = "failed"

	Speak   agents.Event = "speak"
	Listen  agents.Event = "listen"
	Succeed agents.Event = "succeed"
	Fail    agents.Event = "fail"

	// KindTarget and KindCandidates are the environment's private messages
	// to the speaker at time 0. The candidates' payload lists them
	// separated by ", ".
	KindTarget     = "target"
	KindCandidates = "candidates"
	// KindWord is the speaker's message to the listener.
	KindWord = "word"
	// KindResult is the environment's announcement of the outcome.
	KindResult = "result"

	// Silence is the speaker's null action: nothing is said.
	Silence = ""

	// Words and Symbols are the values of the vocab parameter.
	Words   = "words"
	Symbols = "symbols"

	speakerSeat, listenerSeat = 0, 1
)

// attributeValues lists each attribute's values, in the order the
// parameters take them: attribute a uses the first `values` of line a.
// Descriptions name the attributes in reverse ("striped red circle").
const attributeValues = `circle square triangle star heart diamond
red green blue yellow purple orange
plain striped dotted checked wavy spotted`

// Scenario is the signalling game. Its zero value is not usable; use New.
type Scenario struct {
	info   *env.Info
	values [][]string // per attribute, every value it can take
	seats  []env.Seat
}

// New returns the signalling scenario.
func New() *Scenario {
	s := &Scenario{
		seats: []env.Seat{{ID: RoleSpeaker, Role: RoleSpeaker}, {ID: RoleListener, Role: RoleListener}},
	}
	for line := range strings.SplitSeq(attributeValues, "\n") {
		s.values = append(s.values, strings.Fields(line))
	}
	maxValues := len(s.values[0])
	s.info = &env.Info{
		Name:    "signal",
		Summary: "Lewis signalling: a speaker names the target in one word, a listener picks it; both score 1 on success",
		Doc: "Async. The speaker is privately told the target among the candidates and says one word of the vocabulary; " +
			"the listener sees the candidates in its own order, hears the word and names one. Team reward and both scores: " +
			"1 if the listener picked the target, else 0. A speaker whose word ignores the target leaves the listener at " +
			"chance, 1/candidates. vocab=words speaks in attribute values, vocab=symbols in meaningless symbols w1..wK " +
			"that a pair must give a meaning by playing. Null action: the speaker's silence \"\".",
		Schedule: env.Async,
		Roles: []*agents.Role{
			{
				Name:    RoleSpeaker,
				Doc:     "knows the target and says one word to the listener",
				Initial: Briefed,
				Events: fsm.Events{
					agents.Edge(Briefed, Speak, Waiting),
					agents.Edge(Waiting, Succeed, Succeeded),
					agents.Edge(Waiting, Fail, Failed),
				},
				Terminal: []agents.State{Succeeded, Failed},
				Acting:   []agents.State{Briefed},
			},
			{
				Name:    RoleListener,
				Doc:     "hears the speaker's word and picks one candidate",
				Initial: Waiting,
				Events: fsm.Events{
					agents.Edge(Waiting, Listen, Choosing),
					agents.Edge(Choosing, Succeed, Succeeded),
					agents.Edge(Choosing, Fail, Failed),
				},
				Terminal: []agents.State{Succeeded, Failed},
				Acting:   []agents.State{Choosing},
			},
		},
		Params: []env.ParamSpec{
			env.Int("candidates", 4, 2, 16, "objects the listener chooses among; at most values^attributes"),
			env.Int("attributes", 2, 1, len(s.values), "attributes per object: shape, then color, then pattern"),
			env.Int("values", 4, 2, maxValues, "values each attribute can take"),
			env.String("vocab", Words, "what the speaker may say: words (attribute values) or symbols (w1..wK, no given meaning)", Words, Symbols),
		},
		Policies: map[string]env.PolicyMaker{"scripted": s.scripted},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleSpeaker: Silence},
			AbsentOK:   true,
			Doc:        "a silent or absent speaker sends no word and the listener picks without one; an absent listener picks nothing, and the episode fails",
			// The listener answers the speaker's word: a counterfactual
			// that keeps its recorded pick would credit the speaker nothing.
			Resimulate: true,
		},
	}
	s.info.CheckParams = func(p env.Params) error {
		_, err := vocabulary(s.values, p)
		return err
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// rules are the parameters' consequences, shared by the game and the
// scripted policy.
type rules struct {
	attributes, values, candidates int
	words                          []string // the words vocabulary, in listing order
	vocab                          []string // what the speaker may say: words or symbols
	symbols                        bool     // vocab is symbols, vocab[i] standing for nothing given
}

// vocabulary returns the rules the parameters set, or an error naming the
// parameters that contradict each other.
func vocabulary(all [][]string, p env.Params) (*rules, error) {
	r := &rules{attributes: p.Int("attributes"), values: p.Int("values"), candidates: p.Int("candidates")}
	distinct := 1
	for range r.attributes {
		distinct *= r.values
	}
	if r.candidates > distinct {
		return nil, fmt.Errorf("candidates=%d, but attributes=%d with values=%d make only %d distinct objects",
			r.candidates, r.attributes, r.values, distinct)
	}
	// List words in description order (pattern, color, shape), so the
	// vocabulary reads the way objects are described.
	for a := r.attributes - 1; a >= 0; a-- {
		r.words = append(r.words, all[a][:r.values]...)
	}
	r.vocab = r.words
	if p.String("vocab") == Symbols {
		r.symbols = true
		r.vocab = make([]string, len(r.words))
		for i := range r.vocab {
			r.vocab[i] = "w" + strconv.Itoa(i+1)
		}
	}
	return r, nil
}

// New implements env.Scenario: it draws the candidates, the target and the
// listener's order from seed.
func (s *Scenario) New(p env.Params, seed uint64) (env.Game, error) {
	r, err := vocabulary(s.values, p)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x5167_6e61_6c00_0001))
	distinct := 1
	for range r.attributes {
		distinct *= r.values
	}
	// Object k of the distinct ones has value (k / values^a) % values for
	// attribute a; a permutation's prefix is a draw without replacement.
	g := &game{rules: r, seats: s.seats, pick: -1}
	for _, k := range rng.Perm(distinct)[:r.candidates] {
		g.candidates = append(g.candidates, s.object(r, k))
	}
	g.target = rng.IntN(r.candidates)
	for _, i := range rng.Perm(r.candidates) {
		g.shown = append(g.shown, g.candidates[i])
	}
	return g, nil
}

type game struct {
	*rules
	seats      []env.Seat
	candidates []string // the speaker's order
	target     int      // index in candidates
	shown      []string // the listener's order: its legal actions
	heard      string   // the word the listener received, "" for none
	pick       int      // index in candidates of the listener's pick, -1 before
}

func (g *game) Seats() []env.Seat { return g.seats }

// Start briefs the speaker. Without a speaker the listener is asked to
// choose at once; without either there is nothing to play.
func (g *game) Start(s *env.Step) error {
	if !s.Absent(speakerSeat) {
		if err := s.Tell(speakerSeat, KindTarget, g.candidates[g.target]); err != nil {
			return err
		}
		return s.Tell(speakerSeat, KindCandidates, strings.Join(g.candidates, ", "))
	}
	if s.Absent(listenerSeat) {
		s.End()
		return nil
	}
	return s.Fire(listenerSeat, Listen)
}

func (g *game) Observe(seat int) env.View {
	var b strings.Builder
	if seat == speakerSeat {
		fmt.Fprintf(&b, "Signalling game. You are the speaker: your messages say which of %d objects is the target. "+
			"The listener sees the same objects in another order but not which one is the target; it hears one word from you, "+
			"then picks one object. You both score 1 if it picks the target, 0 otherwise.\n", len(g.candidates))
		if g.symbols {
			b.WriteString("The symbols have no given meaning: you and the listener settle what they mean by playing.\n")
		}
		fmt.Fprintf(&b, "Answer with exactly one word of: %s", strings.Join(g.vocab, " "))
		return env.View{Text: b.String(), Legal: g.vocab}
	}
	fmt.Fprintf(&b, "Signalling game. You are the listener. The speaker knows which of these %d objects is the target "+
		"and may send you one word. You both score 1 if you pick the target, 0 otherwise.\nObjects:\n", len(g.shown))
	for _, c := range g.shown {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	if g.heard == "" {
		b.WriteString("The speaker said nothing.\n")
	}
	b.WriteString("Answer with one object exactly as listed.")
	return env.View{Text: b.String(), Legal: g.shown}
}

// normal is an answer as the game compares it: lower case, single spaces.
func normal(text string) string { return strings.Join(strings.Fields(strings.ToLower(text)), " ") }

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		var err error
		if m.Seat == speakerSeat {
			err = g.speak(s, m.Action.Text)
		} else {
			err = g.choose(s, m.Action.Text)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *game) speak(s *env.Step, text string) error {
	if err := s.Fire(speakerSeat, Speak); err != nil {
		return err
	}
	word := normal(text)
	if word != Silence && !slices.Contains(g.vocab, word) {
		s.Note(speakerSeat, "illegal", true)
		word = Silence
	}
	if s.Absent(listenerSeat) {
		return g.finish(s)
	}
	if word != Silence {
		g.heard = word
		if err := s.Send(g.seats[speakerSeat].ID, protocol.To(g.seats[listenerSeat].ID), KindWord, word); err != nil {
			return err
		}
	}
	return s.Fire(listenerSeat, Listen)
}

func (g *game) choose(s *env.Step, text string) error {
	s.Note(listenerSeat, "target", g.candidates[g.target])
	g.pick = slices.Index(g.candidates, normal(text))
	if g.pick < 0 {
		s.Note(listenerSeat, "illegal", true)
	}
	return g.finish(s)
}

// finish fires every present seat's outcome event, announces the result and
// ends the episode.
func (g *game) finish(s *env.Step) error {
	ev, result := Fail, "failure: the target was "+g.candidates[g.target]
	if g.success() {
		ev, result = Succeed, "success: the target was "+g.candidates[g.target]
	}
	for seat := range g.seats {
		if s.Active(seat) {
			if err := s.Fire(seat, ev); err != nil {
				return err
			}
		}
	}
	s.End()
	return s.Announce(KindResult, result)
}

func (g *game) success() bool { return g.pick == g.target }

// Resample implements env.HiddenState. The listener has observed the
// candidates (in its own order) and the word, not the target: for it the
// target is re-drawn among the candidates. The speaker has observed the
// target and the candidates, not the listener's order: for it the order
// is re-drawn. The speaker's briefing, already delivered, is not
// rewritten.
func (g *game) Resample(_ *env.Step, seat int, rng *rand.Rand) error {
	if seat == speakerSeat {
		// A new slice: the old one is a legal list handed out.
		shown := make([]string, 0, len(g.candidates))
		for _, i := range rng.Perm(len(g.candidates)) {
			shown = append(shown, g.candidates[i])
		}
		g.shown = shown
		return nil
	}
	g.target = rng.IntN(len(g.candidates))
	return nil
}

func (g *game) Score() env.Score {
	r := 0.0
	if g.success() {
		r = 1
	}
	return env.Score{Team: r, Agents: []float64{r, r}}
}

// featureWidth is the length of a features row: the words vocabulary's
// size W (attributes × values).
func featureWidth(p env.Params) int { return p.Int("attributes") * p.Int("values") }

// ObservationSpace implements env.Features: (candidates+1) rows of W
// numbers, an object being the multi-hot of its words (in the words
// vocabulary's order). The speaker's rows are the target, then the
// candidates in its order; the listener's the word it heard (one-hot over
// the vocabulary, the i-th word or symbol at i; zeros for silence or
// before the speaker spoke), then the candidates in its own order, among
// which it picks: never the target.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{p.Int("candidates") + 1, featureWidth(p)}, Low: 0, High: 1}
}

// StateSpace implements env.Features: (candidates+2) rows of W numbers:
// the target, the candidates in the speaker's order, and the word heard.
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{p.Int("candidates") + 2, featureWidth(p)}, Low: 0, High: 1}
}

// object writes the multi-hot of object's words into row.
func (g *game) object(row []float32, object string) {
	for _, w := range strings.Fields(object) {
		if i := slices.Index(g.words, w); i >= 0 {
			row[i] = 1
		}
	}
}

// word writes the one-hot of the word heard into row.
func (g *game) word(row []float32) {
	if i := slices.Index(g.vocab, g.heard); g.heard != "" && i >= 0 {
		row[i] = 1
	}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	clear(dst)
	w := len(g.words)
	objects := g.shown
	if seat == speakerSeat {
		g.object(dst[:w], g.candidates[g.target])
		objects = g.candidates
	} else {
		g.word(dst[:w])
	}
	for k, o := range objects {
		g.object(dst[(k+1)*w:(k+2)*w], o)
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	clear(dst)
	w := len(g.words)
	g.object(dst[:w], g.candidates[g.target])
	for k, o := range g.candidates {
		g.object(dst[(k+1)*w:(k+2)*w], o)
	}
	g.word(dst[(len(g.candidates)+1)*w:])
}

// ActionSet implements env.ActionSets: the speaker's vocabulary (every
// word it may say; silence, its null action, is not a move of its own),
// and for the listener every object the parameters can make, in the order
// of their numbers (the first attribute's value varying slowest): each
// episode's candidates are among them.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	r, err := vocabulary(s.values, p)
	if err != nil {
		return nil
	}
	switch role {
	case RoleSpeaker:
		return r.vocab
	case RoleListener:
		distinct := 1
		for range r.attributes {
			distinct *= r.values
		}
		out := make([]string, distinct)
		for k := range out {
			out[k] = s.object(r, k)
		}
		return out
	}
	return nil
}

// object is the description of object k of the distinct ones r allows:
// value (k / values^a) % values of attribute a, named in reverse.
func (s *Scenario) object(r *rules, k int) string {
	var fields []string
	for a := r.attributes - 1; a >= 0; a-- {
		v := k
		for range a {
			v /= r.values
		}
		fields = append(fields, s.values[a][v%r.values])
	}
	return strings.Join(fields, " ")
}
