// Package negotiation is a multi-issue bargaining game in the style of
// Deal or No Deal (Lewis et al. 2017, "Deal or No Deal? End-to-End
// Learning for Negotiation Dialogues"): two negotiators, alice and bob,
// split a pool of items on which each puts a private value.
//
// The episode's seed draws the pool (`items` item types among book, hat,
// ball, pen, cup, lamp, each with a count from 1 to `max_count`) and each
// negotiator's value per item (an integer from 0 to `max_value`, redrawn
// until the negotiator values the pool at more than 0). At time 0 the
// environment tells each negotiator its own values in a private "values"
// message (its View shows them too); neither ever sees the other's.
//
// The negotiators move in turn, alice first (a Sequential schedule), at
// most `rounds` times each. A move is one JSON object (see ParseAction):
//
//	{"type":"propose","take":{"book":1,"hat":0,"ball":2}}  I take these, you get the rest
//	{"type":"accept"}                                      I accept your standing offer
//	{"type":"walk"}                                        no deal
//
// any of them with an optional "say" text for the other negotiator. Every
// move is broadcast, in canonical form, as a message of its type. A new
// proposal replaces the standing offer; accepting the other's standing
// offer makes the deal and ends the episode; walking away, or the last
// allowed move passing without an accept, ends it with no deal. Accepting
// when no offer of the other's is on the table is illegal.
//
// Scores use each negotiator's value of what it gets, normalised by its
// value of the whole pool: u = V(own share) / V(pool), between 0 and 1, so
// that values drawn on different scales weigh the same. The parameter
// scoring says what the agents are paid:
//
//   - selfish (default, Lewis et al.'s own): each scores its u; the team
//     reward is u_alice + u_bob.
//   - cooperative: the team reward is u_alice + u_bob and both score it;
//     the best deal gives each item to whoever values it more, which the
//     negotiators can find only by telling each other their values.
//   - zero-sum: alice scores u_alice - u_bob, bob u_bob - u_alice; the
//     team reward is 0. Walking away scores 0, so a negotiator never gains
//     by accepting a deal that favours the other: expect few deals.
//
// No deal scores 0 for both, in every mode.
//
// An answer that breaks the grammar or the rules (bad JSON, a missing
// item, a count beyond the pool, an accept without an offer) is noted in
// its sample's metadata as "illegal" with the reason, is announced, and
// ends the episode. The parameter illegal says how it is scored: walk
// (default) treats it as walking away, no deal; penalty gives the offender
// -1 (worse than any legal outcome but a zero-sum loss) and the other the
// no-deal score, except under zero-sum, where the other gets +1 so the
// scores still sum to 0, and under cooperative, where both share the -1.
//
// Named policies: "fair" (the default) concedes from 80% to 50% of its own
// pool value over its turns, accepting a standing offer that gives it its
// current target and otherwise proposing to keep the items it values most
// until it reaches the target; "greedy" demands every item it values and
// accepts only an offer that gives it all of them; "random" accepts a
// standing offer one time in three, walks away one time in ten, and
// otherwise proposes a uniformly random split. All answer with valid JSON.
//
// Counterfactuals: a negotiator's null action is walking away, and an
// absent negotiator is the same: there is no deal and both score 0. The
// negotiators answer each other's offers, so counterfactuals must be
// re-simulated.
//
// Both roles have the same state machine; alice starts to_move, bob
// waiting. The states are the turn: a negotiator acts only in to_move, and
// each move sends the mover to waiting and the other to to_move:
//
//	stateDiagram-v2
//	    [*] --> waiting
//	    to_move --> waiting: move
//	    waiting --> agreed: agree
//	    waiting --> no_deal: break_off
//	    waiting --> to_move: your_turn
package negotiation

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// Roles, states, events and message kinds of the game.
const (
	RoleAlice = "alice"
	RoleBob   = "bob"

	Waiting agents.State = "waiting"
	ToMove  agents.State = "to_move"
	Agreed  agents.State = "agreed"
	NoDeal  agents.State = "no_deal"

	YourTurn agents.Event = "your_turn"
	Move     agents.Event = "move"
	Agree    agents.Event = "agree"
	BreakOff agents.Event = "break_off"

	// KindValues is the environment's private message to each negotiator
	// at time 0: its Briefing as JSON.
	KindValues = "values"
	// The negotiators' moves are broadcast with their action type as the
	// kind (Propose, Accept, Walk) and their canonical JSON as payload.

	// KindIllegal announces an illegal answer; KindResult the outcome.
	KindIllegal = "illegal"
	KindResult  = "result"

	// The values of the scoring parameter.
	Selfish     = "selfish"
	Cooperative = "cooperative"
	ZeroSum     = "zero-sum"

	// The values of the illegal parameter.
	IllegalWalk    = "walk"
	IllegalPenalty = "penalty"

	// PenaltyScore is the offender's score under illegal=penalty.
	PenaltyScore = -1.0

	// NullAction is walking away, the canonical walk.
	NullAction = `{"type":"walk"}`
)

// itemNames are the item types, in the order the items parameter takes
// them.
var itemNames = [...]string{"book", "hat", "ball", "pen", "cup", "lamp"}

// negotiator declares a role; alice and bob differ by name only, so that
// per-role policies and baselines can tell the opener from the responder.
func negotiator(name, doc string) *agents.Role {
	return &agents.Role{
		Name:    name,
		Doc:     doc,
		Initial: Waiting,
		Events: fsm.Events{
			agents.Edge(Waiting, YourTurn, ToMove),
			agents.Edge(ToMove, Move, Waiting),
			agents.Edge(Waiting, Agree, Agreed),
			agents.Edge(Waiting, BreakOff, NoDeal),
		},
		Terminal: []agents.State{Agreed, NoDeal},
		Acting:   []agents.State{ToMove},
	}
}

// Scenario is the negotiation scenario. Its zero value is not usable; use
// New.
type Scenario struct {
	info  *env.Info
	seats []env.Seat // shared, read-only, by every episode
}

// New returns the negotiation scenario.
func New() *Scenario {
	s := &Scenario{seats: []env.Seat{{ID: RoleAlice, Role: RoleAlice}, {ID: RoleBob, Role: RoleBob}}}
	s.info = &env.Info{
		Name:    "negotiation",
		Summary: "Deal or No Deal: two negotiators split a pool of items they value privately, by JSON offers",
		Doc: "Sequential, alice first, at most `rounds` moves each. Each negotiator privately knows its value per item. " +
			`A move is JSON: {"type":"propose","take":{ITEM:N,...}} (I take these, you the rest), {"type":"accept"} ` +
			`(the other's standing offer) or {"type":"walk"}, optionally with "say". u = value of own share / value of pool. ` +
			"scoring=selfish: each scores u, team u_a+u_b; cooperative: both score u_a+u_b; zero-sum: u_a-u_b and u_b-u_a, team 0. " +
			"No deal scores 0. An illegal answer ends the game: illegal=walk scores it as no deal, illegal=penalty gives the offender -1. " +
			"Null action: walk.",
		Schedule: env.Sequential,
		Roles: []*agents.Role{
			negotiator(RoleAlice, "opens the negotiation"),
			negotiator(RoleBob, "answers alice's opening"),
		},
		Params: []env.ParamSpec{
			env.Int("items", 3, 1, len(itemNames), "item types in the pool: book, hat, ball, pen, cup, lamp, from the first"),
			env.Int("max_count", 4, 1, 10, "each item type's count is drawn from 1..max_count"),
			env.Int("max_value", 5, 1, 100, "each negotiator's value per item is drawn from 0..max_value"),
			env.Int("rounds", 5, 1, 50, "moves each negotiator may make; no deal once they are spent"),
			env.String("scoring", Selfish, "what the agents are paid: selfish (own share), cooperative (both the sum) or zero-sum (own minus other's)", Selfish, Cooperative, ZeroSum),
			env.String("illegal", IllegalWalk, "how an illegal answer is scored: walk (as no deal) or penalty (offender -1)", IllegalWalk, IllegalPenalty),
		},
		Policies: map[string]env.PolicyMaker{
			"fair":   maker(Fair),
			"greedy": maker(Greedy),
			"random": maker(Random),
		},
		DefaultPolicy: "fair",
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleAlice: NullAction, RoleBob: NullAction},
			AbsentOK:   true,
			Doc:        "a negotiator that walks away at once and an absent one are the same: no deal, scored as no deal",
			// Each negotiator answers the other's offers: frozen replays
			// would accept offers that were never made.
			Resimulate: true,
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// ActionSchema returns the JSON Schema of role's answers under p, for a
// policy that can have its server enforce it (an LLM policy passes it as
// the json_schema response format). It bounds each count by max_count, the
// most any episode's pool holds; the game's rules check the episode's own
// counts. Both roles answer in the same grammar; an unknown role has
// none ("").
func (s *Scenario) ActionSchema(p env.Params, role string) string {
	if role != RoleAlice && role != RoleBob {
		return ""
	}
	n, maxCount := p.Int("items"), p.Int("max_count")
	pool := Pool{Items: itemNames[:n], Counts: make([]int, n)}
	for i := range pool.Counts {
		pool.Counts[i] = maxCount
	}
	return ActionSchema(pool)
}

// Briefing is what the environment privately tells a negotiator at time
// 0, the payload of its KindValues message.
type Briefing struct {
	Pool
	Values []int // the negotiator's value per item, in pool order
	Rounds int   // moves each negotiator may make
}

// Worth returns the briefed negotiator's value of counts.
func (b *Briefing) Worth(counts []int) int {
	v := 0
	for i, c := range counts {
		v += c * b.Values[i]
	}
	return v
}

// Total returns the negotiator's value of the whole pool.
func (b *Briefing) Total() int { return b.Worth(b.Counts) }

// briefingJSON is Briefing's wire form: objects keyed by item, plus the
// item order, so the payload reads naturally and still round-trips.
type briefingJSON struct {
	Items  []string       `json:"items"`
	Pool   map[string]int `json:"pool"`
	Values map[string]int `json:"values"`
	Rounds int            `json:"rounds"`
}

// MarshalJSON writes the briefing as {"items":[...],"pool":{...},"values":{...},"rounds":N}.
func (b *Briefing) MarshalJSON() ([]byte, error) {
	w := briefingJSON{Items: b.Items, Pool: map[string]int{}, Values: map[string]int{}, Rounds: b.Rounds}
	for i, it := range b.Items {
		w.Pool[it] = b.Counts[i]
		w.Values[it] = b.Values[i]
	}
	return json.Marshal(w) // maps are written with sorted keys: deterministic
}

// UnmarshalJSON reads MarshalJSON's form.
func (b *Briefing) UnmarshalJSON(data []byte) error {
	var w briefingJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	b.Items, b.Rounds = w.Items, w.Rounds
	b.Counts, b.Values = make([]int, len(w.Items)), make([]int, len(w.Items))
	for i, it := range w.Items {
		c, ok1 := w.Pool[it]
		v, ok2 := w.Values[it]
		if !ok1 || !ok2 {
			return fmt.Errorf("briefing: item %q has no count or value", it)
		}
		b.Counts[i], b.Values[i] = c, v
	}
	return nil
}

// New implements env.Scenario: it draws the pool and both valuations from
// seed.
func (s *Scenario) New(p env.Params, seed uint64) (env.Game, error) {
	rng := rand.New(rand.NewPCG(seed, 0x6e65_676f_7469_6174))
	n, maxCount, maxValue := p.Int("items"), p.Int("max_count"), p.Int("max_value")
	pool := Pool{Items: itemNames[:n], Counts: make([]int, n)}
	for i := range pool.Counts {
		pool.Counts[i] = 1 + rng.IntN(maxCount)
	}
	g := &game{
		seats:    s.seats,
		pool:     pool,
		rounds:   p.Int("rounds"),
		scoring:  p.String("scoring"),
		penalty:  p.String("illegal") == IllegalPenalty,
		offender: -1,
		maxCount: maxCount,
		maxValue: maxValue,
	}
	for seat := range g.brief {
		b := &g.brief[seat]
		b.Pool, b.Rounds, b.Values = pool, g.rounds, make([]int, n)
		// A negotiator that values nothing would score 0/0: redraw. Each
		// draw is all-zero with probability at most 1/2, so this ends.
		for b.Total() == 0 {
			for i := range b.Values {
				b.Values[i] = rng.IntN(maxValue + 1)
			}
		}
	}
	return g, nil
}

type game struct {
	seats    []env.Seat
	pool     Pool
	brief    [2]Briefing
	rounds   int
	scoring  string
	penalty  bool
	moves    int   // moves made, both seats together
	offer    []int // the standing offer: what its proposer takes; nil for none
	offerBy  int   // the seat that made the standing offer
	deal     []int // alice's share of the agreed split; nil for no deal
	offender int   // the seat whose answer was illegal, or -1
	// maxCount and maxValue are the parameters' bounds, which the
	// features are shares of.
	maxCount, maxValue int
}

func (g *game) Seats() []env.Seat { return g.seats }

// Start briefs both negotiators. With either absent there is no one to
// deal with: the episode ends at once, with no deal.
func (g *game) Start(s *env.Step) error {
	if s.Absent(0) || s.Absent(1) {
		s.End()
		return nil
	}
	for seat := range g.seats {
		payload, err := json.Marshal(&g.brief[seat])
		if err != nil {
			return err
		}
		if err := s.Tell(seat, KindValues, string(payload)); err != nil {
			return err
		}
	}
	return s.Fire(0, YourTurn)
}

func (g *game) Observe(seat int) env.View {
	b := &g.brief[seat]
	me, other := g.seats[seat].ID, g.seats[1-seat].ID
	var w strings.Builder
	fmt.Fprintf(&w, "Negotiation. You are %s; %s is the other negotiator. Split this pool of items between you: %s.\n",
		me, other, g.pool.Describe(g.pool.Counts))
	fmt.Fprintf(&w, "Your value per item (private: %s has values of its own, which you do not see): %s. The whole pool is worth %d to you.\n",
		other, g.pool.Describe(b.Values), b.Total())
	switch g.scoring {
	case Selfish:
		fmt.Fprintf(&w, "Your score is the value of your share divided by %d.", b.Total())
	case Cooperative:
		fmt.Fprintf(&w, "You and %s are a team: you both score the value of your share divided by %d plus the value of %s's share by its own values, divided by its pool value.", other, b.Total(), other)
	case ZeroSum:
		fmt.Fprintf(&w, "Your score is the value of your share divided by %d, minus %s's score computed the same way with its own values.", b.Total(), other)
	}
	w.WriteString(" No deal scores 0 for both.\n")
	fmt.Fprintf(&w, "This is your move %d of %d; you take turns, %s first. When the last move passes without an accept, there is no deal.\n",
		g.moves/2+1, g.rounds, g.seats[0].ID)
	if g.offer != nil {
		mine := g.pool.Rest(g.offer)
		fmt.Fprintf(&w, "Standing offer from %s: %s takes %s; you get %s, worth %d to you.\n",
			other, other, g.pool.Describe(g.offer), g.pool.Describe(mine), b.Worth(mine))
	} else {
		w.WriteString("No offer is on the table.\n")
	}
	fmt.Fprintf(&w, "Answer with exactly one JSON object: {\"type\":\"propose\",\"take\":{%s}} to propose that you take these counts and %s the rest",
		exampleTake(g.pool), other)
	if g.offer != nil {
		w.WriteString(`, {"type":"accept"} to accept the standing offer`)
	}
	fmt.Fprintf(&w, `, or {"type":"walk"} to walk away. You may add "say":"..." to tell %s something.`, other)
	return env.View{Text: w.String()}
}

// exampleTake renders `"book":N,"hat":N,...` for the view's grammar.
func exampleTake(pool Pool) string {
	parts := make([]string, len(pool.Items))
	for i, it := range pool.Items {
		parts[i] = strconv.Quote(it) + ":N"
	}
	return strings.Join(parts, ",")
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	m := moves[0]
	me, other := m.Seat, 1-m.Seat
	if err := s.Fire(me, Move); err != nil {
		return err
	}
	g.moves++
	a, err := ParseAction(m.Action.Text, g.pool)
	if err == nil && a.Type == Accept && g.offer == nil {
		err = fmt.Errorf("%w: %s has made no offer", ErrNoOffer, g.seats[other].ID)
	}
	if err != nil {
		g.offender = me
		s.Note(me, "illegal", err.Error())
		if err := s.Announce(KindIllegal, fmt.Sprintf("%s's answer is illegal: %v", g.seats[me].ID, err)); err != nil {
			return err
		}
		return g.finish(s, g.seats[me].ID+" answered illegally")
	}
	if err := s.Send(g.seats[me].ID, protocol.Broadcast, a.Type, a.Encode(g.pool)); err != nil {
		return err
	}
	switch a.Type {
	case Accept:
		g.deal = g.offer
		if g.offerBy == 1 {
			g.deal = g.pool.Rest(g.offer)
		}
		return g.finish(s, "")
	case Walk:
		return g.finish(s, g.seats[me].ID+" walked away")
	}
	g.offer, g.offerBy = a.Take, me
	if g.moves == 2*g.rounds {
		return g.finish(s, "the last move passed without an accept")
	}
	return s.Fire(other, YourTurn)
}

// finish fires both seats' outcome events, announces the result and ends
// the episode. why says why there is no deal; it is ignored for a deal.
func (g *game) finish(s *env.Step, why string) error {
	ev := BreakOff
	result := "no deal: " + why
	if g.deal != nil {
		ev = Agree
		result = fmt.Sprintf("deal: %s gets %s; %s gets %s",
			g.seats[0].ID, g.pool.Describe(g.deal), g.seats[1].ID, g.pool.Describe(g.pool.Rest(g.deal)))
	}
	if err := s.FireAll(ev); err != nil {
		return err
	}
	s.End()
	return s.Announce(KindResult, result)
}

// Utilities returns each seat's normalised value of the deal, alice's
// first: V(own share) / V(pool). Both are 0 without a deal.
func (g *game) utilities() [2]float64 {
	var u [2]float64
	if g.deal == nil {
		return u
	}
	shares := [2][]int{g.deal, g.pool.Rest(g.deal)}
	for seat := range u {
		b := &g.brief[seat]
		u[seat] = float64(b.Worth(shares[seat])) / float64(b.Total())
	}
	return u
}

func (g *game) Score() env.Score {
	if g.offender >= 0 && g.penalty {
		return g.penaltyScore()
	}
	u := g.utilities()
	switch g.scoring {
	case Cooperative:
		team := u[0] + u[1]
		return env.Score{Team: team, Agents: []float64{team, team}}
	case ZeroSum:
		return env.Score{Team: 0, Agents: []float64{u[0] - u[1], u[1] - u[0]}}
	}
	return env.Score{Team: u[0] + u[1], Agents: []float64{u[0], u[1]}}
}

// penaltyScore scores an illegal answer under illegal=penalty: the
// offender gets PenaltyScore; the other what no deal gives it, except
// that zero-sum stays zero-sum and cooperative agents share the penalty.
func (g *game) penaltyScore() env.Score {
	scores := make([]float64, 2)
	scores[g.offender] = PenaltyScore
	switch g.scoring {
	case ZeroSum:
		scores[1-g.offender] = -PenaltyScore
	case Cooperative:
		scores[1-g.offender] = PenaltyScore
		return env.Score{Team: PenaltyScore, Agents: scores}
	}
	return env.Score{Team: scores[0] + scores[1], Agents: scores}
}

// RenderState implements env.StateRenderer: the pool, each negotiator's
// private values, the standing offer and the deal.
func (g *game) RenderState() string {
	var w strings.Builder
	fmt.Fprintf(&w, "pool: %s\n", g.pool.Describe(g.pool.Counts))
	for seat := range g.seats {
		fmt.Fprintf(&w, "%s values each", g.seats[seat].ID)
		for i, it := range g.pool.Items {
			fmt.Fprintf(&w, " %s %d", it, g.brief[seat].Values[i])
		}
		fmt.Fprintf(&w, " (the pool is worth %d to it)\n", g.brief[seat].Total())
	}
	fmt.Fprintf(&w, "moves: %d of %d\n", g.moves, 2*g.rounds)
	switch {
	case g.deal != nil:
		u := g.utilities()
		fmt.Fprintf(&w, "deal: %s gets %s (%.3g), %s gets %s (%.3g)\n", g.seats[0].ID, g.pool.Describe(g.deal), u[0],
			g.seats[1].ID, g.pool.Describe(g.pool.Rest(g.deal)), u[1])
	case g.offer != nil:
		by := g.offerBy
		fmt.Fprintf(&w, "standing offer: %s takes %s, %s would get %s\n", g.seats[by].ID, g.pool.Describe(g.offer),
			g.seats[1-by].ID, g.pool.Describe(g.pool.Rest(g.offer)))
	default:
		w.WriteString("no offer on the table\n")
	}
	if g.offender >= 0 {
		fmt.Fprintf(&w, "%s answered illegally\n", g.seats[g.offender].ID)
	}
	return w.String()
}

// maxActionSet bounds the proposals ActionSet lists: (max_count+1)^items
// grows fast (11^6 at the parameters' bounds).
const maxActionSet = 1 << 14

// ActionSet implements env.ActionSets: every proposal of counts 0 to
// max_count of each item, in the canonical JSON Encode writes (the last
// item's count varying fastest), then accept and walk; nil when there are
// more than 16,384. The episode's pool holds at most max_count of each
// item: CheckAnswer accepts, each turn, the proposals within it (and accept
// only when an offer stands).
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	if role != RoleAlice && role != RoleBob {
		return nil
	}
	n, maxCount := p.Int("items"), p.Int("max_count")
	size := 1
	for range n {
		size *= maxCount + 1
		if size > maxActionSet {
			return nil
		}
	}
	pool := Pool{Items: itemNames[:n]}
	set := make([]string, 0, size+2)
	take := make([]int, n)
	for k := range size {
		for i, r := n-1, k; i >= 0; i-- {
			take[i], r = r%(maxCount+1), r/(maxCount+1)
		}
		set = append(set, Action{Type: Propose, Take: take}.Encode(pool))
	}
	return append(set, Action{Type: Accept}.Encode(pool), Action{Type: Walk}.Encode(pool))
}

// ObservationSpace implements env.Features: 3·I+4 numbers for I items,
// each a share of its bound: the pool's counts (of max_count), the
// negotiator's own values (of max_value; never the other's), the standing
// offer's take for its proposer (of max_count; zeros for none), whether
// the standing offer is the negotiator's own and whether it is the
// other's, the share of the moves made (of both negotiators' 2·rounds),
// and whether the negotiator is alice.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{3*p.Int("items") + 4}, Low: 0, High: 1}
}

// StateSpace implements env.Features: the true state, 4·I+3 numbers: the
// pool's counts, alice's values, bob's values, the standing offer's take,
// whether alice or bob made it, and the share of the moves made.
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{4*p.Int("items") + 3}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	n := len(g.pool.Counts)
	clear(dst)
	for i, c := range g.pool.Counts {
		dst[i] = float32(c) / float32(g.maxCount)
		dst[n+i] = float32(g.brief[seat].Values[i]) / float32(g.maxValue)
	}
	if g.offer != nil {
		for i, c := range g.offer {
			dst[2*n+i] = float32(c) / float32(g.maxCount)
		}
		if g.offerBy == seat {
			dst[3*n] = 1
		} else {
			dst[3*n+1] = 1
		}
	}
	dst[3*n+2] = float32(g.moves) / float32(2*g.rounds)
	if seat == 0 {
		dst[3*n+3] = 1
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	n := len(g.pool.Counts)
	clear(dst)
	for i, c := range g.pool.Counts {
		dst[i] = float32(c) / float32(g.maxCount)
		dst[n+i] = float32(g.brief[0].Values[i]) / float32(g.maxValue)
		dst[2*n+i] = float32(g.brief[1].Values[i]) / float32(g.maxValue)
	}
	if g.offer != nil {
		for i, c := range g.offer {
			dst[3*n+i] = float32(c) / float32(g.maxCount)
		}
		dst[4*n+g.offerBy] = 1
	}
	dst[4*n+2] = float32(g.moves) / float32(2*g.rounds)
}
