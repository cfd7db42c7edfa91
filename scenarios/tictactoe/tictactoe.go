// Package tictactoe is self-play tic-tac-toe: two seats, x and o, usually
// played by one policy, the zero-sum game SPIRAL (arXiv 2506.24119) trains
// LLMs on.
//
// The seats move in turn, x first (a Sequential schedule). A move names an
// empty cell, a1 to c3 (column letter, row number); the legal actions are
// exactly the empty cells, and every move is broadcast on the bus, so the
// opponent finds it in its inbox. Three marks in a row, column or diagonal
// win; a full board without a line is a draw.
//
// Scores are zero-sum: the winner gets +1, the loser -1, a draw 0 each. The
// team reward is the sum of the scores, so it is 0 for every legal game: in
// a zero-sum game the individual scores are the signal, and an allocator
// that reads agent scores (not the team reward) is the one to train with.
// A truncated game scores 0 for both.
//
// An answer that is not an empty cell (after trimming spaces and lower-
// casing) is illegal and ends the game at once. The parameter illegal says
// how it is scored:
//
//   - forfeit (default): the offender loses, -1, and the opponent wins, +1.
//     The game stays zero-sum, and an illegal move is exactly as bad as a
//     lost game.
//   - penalty: the offender gets -1.5, worse than any legal loss, so a
//     learner is pushed to legality first; the opponent gets 0, since it
//     won nothing on the board. The team reward becomes -1.5, which makes
//     such games easy to count.
//
// In both modes the offender's state machine ends lost and the opponent's
// won; only the scores differ. The offending sample's metadata carries
// "illegal": true.
//
// Both roles have the same state machine, and its states are the turn: the
// game keeps none of its own. x starts to_move (Start fires your_turn), o
// waiting; the engine asks a seat for its move only in to_move, and each
// move fires move on the mover and your_turn on the other:
//
//	stateDiagram-v2
//	    [*] --> waiting
//	    to_move --> waiting: move
//	    waiting --> drew: draw
//	    waiting --> lost: lose
//	    waiting --> won: win
//	    waiting --> to_move: your_turn
//
// Named policies: "minimax" plays perfectly (a game between two minimax
// players is always a draw), breaking ties by the quickest win, then the
// first cell in a1..c3 order; "center-first" wins when it can, blocks when
// it must, and otherwise takes the centre, then a corner, then a side. The
// default is "random". The scenario has no counterfactual declaration: in a
// sequential zero-sum game an absent player or a null move has no sensible
// meaning.
package tictactoe

import (
	"bytes"
	"fmt"
	"math/bits"
	"strings"
	"sync"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// Roles, states, events and message kinds of the game.
const (
	RoleX = "x"
	RoleO = "o"

	Waiting agents.State = "waiting"
	ToMove  agents.State = "to_move"
	Won     agents.State = "won"
	Lost    agents.State = "lost"
	Drew    agents.State = "drew"

	YourTurn agents.Event = "your_turn"
	Move     agents.Event = "move"
	Win      agents.Event = "win"
	Lose     agents.Event = "lose"
	Draw     agents.Event = "draw"

	// KindMove is the kind of the message a seat broadcasts with its move;
	// the payload is the cell.
	KindMove = "move"
	// KindIllegal is the environment's announcement of an illegal move.
	KindIllegal = "illegal"
	// KindResult is the environment's announcement of the outcome.
	KindResult = "result"

	// Forfeit and Penalty are the values of the illegal parameter.
	Forfeit = "forfeit"
	Penalty = "penalty"

	// PenaltyScore is the offender's score under illegal=penalty.
	PenaltyScore = -1.5
)

// cellNames holds the nine cell names back to back, row by row: cell i is
// cellNames[2i:2i+2].
const cellNames = "a1b1c1a2b2c2a3b3c3"

// CellName returns the name of cell i (0..8, row by row from a1).
func CellName(i int) string { return cellNames[2*i : 2*i+2] }

// ParseCell returns the index of the cell text names, ignoring case and
// surrounding spaces.
func ParseCell(text string) (int, bool) {
	t := text
	if len(t) != 2 || t[0] < 'a' || t[0] > 'c' {
		// Not the canonical form ("b2"): trimmed and lowered first.
		t = strings.ToLower(strings.TrimSpace(text))
	}
	if len(t) != 2 || t[0] < 'a' || t[0] > 'c' || t[1] < '1' || t[1] > '3' {
		return 0, false
	}
	return int(t[1]-'1')*3 + int(t[0]-'a'), true
}

// player declares a role; x and o differ by name only, so that per-role
// baselines (SPIRAL's role-conditioned advantage) can tell them apart.
func player(name, doc string) *agents.Role {
	return &agents.Role{
		Name:    name,
		Doc:     doc,
		Initial: Waiting,
		Events: fsm.Events{
			agents.Edge(Waiting, YourTurn, ToMove),
			agents.Edge(ToMove, Move, Waiting),
			agents.Edge(Waiting, Win, Won),
			agents.Edge(Waiting, Lose, Lost),
			agents.Edge(Waiting, Draw, Drew),
		},
		Terminal: []agents.State{Won, Lost, Drew},
		Acting:   []agents.State{ToMove},
	}
}

// Scenario is the tic-tac-toe scenario. Its zero value is not usable; use
// New.
type Scenario struct {
	info    *env.Info
	seats   []env.Seat // shared, read-only, by every episode
	results [2]string  // "x wins", "o wins": shared likewise
}

// New returns the tic-tac-toe scenario.
func New() *Scenario {
	return &Scenario{
		seats:   []env.Seat{{ID: RoleX, Role: RoleX}, {ID: RoleO, Role: RoleO}},
		results: [2]string{RoleX + " wins", RoleO + " wins"},
		info: &env.Info{
			Name:    "tictactoe",
			Summary: "self-play tic-tac-toe: zero-sum, +1 win, -1 loss, 0 draw; team reward 0",
			Doc: "Sequential. x moves first; a move names an empty cell a1..c3 and is broadcast to the opponent. " +
				"Three in a row wins. Scores: winner +1, loser -1, draw 0; the team reward is their sum, 0 for legal games, " +
				"so train on agent scores. An answer that is not an empty cell ends the game: with illegal=forfeit the " +
				"offender loses (-1, opponent +1), with illegal=penalty it gets -1.5 and the opponent 0.",
			Schedule: env.Sequential,
			Roles: []*agents.Role{
				player(RoleX, "places X marks and moves first"),
				player(RoleO, "places O marks and moves second"),
			},
			Params: []env.ParamSpec{
				env.String("illegal", Forfeit, "how an illegal move is scored: forfeit (offender -1, opponent +1) or penalty (offender -1.5, opponent 0)", Forfeit, Penalty),
			},
			Policies: map[string]env.PolicyMaker{
				"minimax":      func(env.PolicyRequest) (agents.Policy, error) { return Minimax(), nil },
				"center-first": func(env.PolicyRequest) (agents.Policy, error) { return CenterFirst(), nil },
			},
		},
	}
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// New implements env.Scenario. The game has no randomness: the seed is
// unused, and every episode starts from the empty board.
func (s *Scenario) New(p env.Params, _ uint64) (env.Game, error) {
	g := &game{}
	s.start(g, p)
	return g, nil
}

// Renew implements env.Renewer: a finished game starts again.
func (s *Scenario) Renew(old env.Game, p env.Params, seed uint64) (env.Game, error) {
	g, ok := old.(*game)
	if !ok {
		return s.New(p, seed)
	}
	s.start(g, p)
	return g, nil
}

// start sets g to the empty board, x to move.
func (s *Scenario) start(g *game, p env.Params) {
	*g = game{seats: s.seats, penalty: p.String("illegal") == Penalty, winner: -1, offender: -1, results: &s.results, views: moverViews(), empty: 1<<9 - 1}
}

// marks[i] is the mark of seat i.
const marks = "XO"

type game struct {
	results  *[2]string // results[i]: the announcement that seat i won
	scores   [2]float64 // Score's agent scores
	empty    uint16     // bit i set: cell i is empty (legalOf's mask)
	marked   [2]uint16  // bit i of marked[s] set: seat s's mark is on cell i
	pos      int        // the board's index (index), kept up to date
	seats    []env.Seat
	penalty  bool
	board    board
	winner   int        // the seat that made a line, or -1
	offender int        // the seat that moved illegally, or -1
	views    *viewTable // moverViews()
}

func (g *game) Seats() []env.Seat { return g.seats }

func (g *game) Start(s *env.Step) error { return s.Fire(0, YourTurn) }

// Observe returns the view of seat on the current board. Views are
// shared: the legal list of each set of empty cells is made once
// (legals), and the text of each position as its mover sees it once, on
// the first episode (viewTable), so a turn allocates nothing. The seat
// not to move, which the engine never asks, gets a view rendered afresh,
// as does a finished board, which the table does not hold.
func (g *game) Observe(seat int) env.View {
	legal := legals[g.empty]
	if seat == bits.OnesCount16(g.empty^(1<<9-1))&1 {
		if text := g.views.of(g.pos); text != "" {
			return env.View{Text: text, Legal: legal}
		}
	}
	return env.View{Text: viewText(seat, &g.board, legal), Legal: legal}
}

// viewTable holds the text of every position that legal play reaches with
// a move still to make (4,520 of them), as its mover sees it: the texts end
// to end in one string, and for each position, indexed like the solver
// (base 3), where its text starts and how long it is, packed in one
// uint32. A turn reads one word from a 79 KB table. A pointer per position
// to a view somewhere on the heap, which a turn loaded after the pointer,
// cost a tenth of a turn's CPU time in cache misses.
type viewTable struct {
	text  string
	spans [19683]uint32 // start<<spanBits | length; 0 where play never is
}

// spanBits is the bits of a span that hold the text's length.
const spanBits = 11

// of returns the mover's text of position pos, "" where play never reaches
// pos with a move to make.
func (t *viewTable) of(pos int) string {
	sp := t.spans[pos]
	lo := sp >> spanBits
	return t.text[lo : lo+sp&(1<<spanBits-1)]
}

// moverViews returns the view table, built on the first call (a few
// milliseconds, once per process: the first episode's) and read-only
// after, like legals: constant data, made lazily so that a program that
// never plays tic-tac-toe does not pay for it.
var moverViews = sync.OnceValue(newViewTable)

// newViewTable renders the mover's view of every position that legal play
// reaches with a move to make.
func newViewTable() *viewTable {
	t := &viewTable{}
	text := make([]byte, 0, 1<<21)
	var b board
	var walk func(me, pos int)
	walk = func(me, pos int) {
		if t.spans[pos] != 0 {
			return
		}
		lo := len(text)
		text = appendView(text, me, &b, legalOf(&b))
		if n := len(text) - lo; n >= 1<<spanBits || lo >= 1<<(32-spanBits) {
			panic("tictactoe: a view outgrew its span") // the texts' layout changed: widen spanBits
		}
		t.spans[pos] = uint32(lo)<<spanBits | uint32(len(text)-lo)
		for c := range b {
			if b[c] != 0 {
				continue
			}
			b[c] = marks[me]
			if !b.wins(marks[me]) && b.free() > 0 {
				walk(1-me, pos+(me+1)*pow3[8-c])
			}
			b[c] = 0
		}
	}
	walk(0, 0)
	t.text = string(text)
	return t
}

// legals[m] lists the cells of the 9-bit mask m (bit i: cell i empty), row
// by row; nil for the full board. Read-only once built.
var legals = func() (l [512][]string) {
	for m := range l {
		for i := range 9 {
			if m&(1<<i) != 0 {
				l[m] = append(l[m], CellName(i))
			}
		}
	}
	return l
}()

// pow3[i] is 3^i: cell c weighs pow3[8-c] in a board's index.
var pow3 = [9]int{1, 3, 9, 27, 81, 243, 729, 2187, 6561}

// legalOf returns the names of b's empty cells, row by row: a shared slice
// that no one may change.
func legalOf(b *board) []string {
	m := 0
	for i, c := range b {
		if c == 0 {
			m |= 1 << i
		}
	}
	return legals[m]
}

// viewText renders what seat sees on b: the rules, the board and the legal
// cells.
func viewText(seat int, b *board, legal []string) string {
	return string(appendView(make([]byte, 0, 256), seat, b, legal))
}

// appendView appends viewText's text to dst.
func appendView(dst []byte, seat int, b *board, legal []string) []byte {
	dst = append(dst, "Tic-tac-toe. You play "...)
	dst = append(dst, marks[seat])
	dst = append(dst, "; X moves first. Three of your marks in a row, column or diagonal win.\n\n"...)
	dst = b.appendTo(dst)
	dst = append(dst, '\n', marks[seat])
	dst = append(dst, " to move: that is you. Answer with one empty cell:"...)
	for _, cell := range legal {
		dst = append(dst, ' ')
		dst = append(dst, cell...)
	}
	return dst
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	m := moves[0]
	me, other := m.Seat, 1-m.Seat
	if err := s.Fire(me, Move); err != nil {
		return err
	}
	cell, ok := ParseCell(m.Action.Text)
	if !ok || g.board[cell] != 0 {
		g.offender = me
		s.Note(me, "illegal", true)
		if err := s.Announce(KindIllegal, fmt.Sprintf("%s answered %q, which is not an empty cell", g.seats[me].ID, m.Action.Text)); err != nil {
			return err
		}
		return g.finish(s)
	}
	g.board[cell] = marks[me]
	g.empty &^= 1 << cell
	g.marked[me] |= 1 << cell
	g.pos += (me + 1) * pow3[8-cell]
	if err := s.Send(g.seats[me].ID, protocol.Broadcast, KindMove, CellName(cell)); err != nil {
		return err
	}
	switch {
	case lineIn(g.marked[me]):
		g.winner = me
		return g.finish(s)
	case g.empty == 0:
		return g.finish(s)
	}
	return s.Fire(other, YourTurn)
}

// finish fires each seat's outcome event, announces the result and ends
// the episode. The machines record the game's outcome (an illegal move
// loses it, under either scoring); the scores say what it is worth.
func (g *game) finish(s *env.Step) error {
	loser := g.offender
	if g.winner >= 0 {
		loser = 1 - g.winner
	}
	for seat := range g.seats {
		ev := Draw
		switch {
		case loser < 0:
		case seat == loser:
			ev = Lose
		default:
			ev = Win
		}
		if err := s.Fire(seat, ev); err != nil {
			return err
		}
	}
	var result string
	switch {
	case g.offender >= 0 && g.penalty:
		result = g.seats[g.offender].ID + " moved illegally and is penalised"
	case g.offender >= 0:
		result = g.seats[1-g.offender].ID + " wins: " + g.seats[g.offender].ID + " moved illegally"
	case g.winner >= 0:
		result = g.results[g.winner]
	default:
		result = "draw"
	}
	s.End()
	return s.Announce(KindResult, result)
}

func (g *game) Score() env.Score {
	scores := g.scores[:]
	switch {
	case g.offender >= 0 && g.penalty:
		scores[g.offender] = PenaltyScore
	case g.offender >= 0:
		scores[g.offender], scores[1-g.offender] = -1, 1
	case g.winner >= 0:
		scores[g.winner], scores[1-g.winner] = 1, -1
	}
	return env.Score{Team: scores[0] + scores[1], Agents: scores}
}

// board holds 'X', 'O' or 0 (empty) per cell, row by row.
type board [9]byte

// lines are the eight winning lines, three cells each.
const lines = "012345678036147258048246"

func (b *board) wins(mark byte) bool {
	for l := 0; l < len(lines); l += 3 {
		if b[lines[l]-'0'] == mark && b[lines[l+1]-'0'] == mark && b[lines[l+2]-'0'] == mark {
			return true
		}
	}
	return false
}

// lineMasks are the eight winning lines as cell masks (bit i: cell i).
var lineMasks = [8]uint16{0007, 0070, 0700, 0111, 0222, 0444, 0421, 0124}

// lined has bit m set when the cell mask m holds a whole line: the eight
// masks tested once for each of the 512 sets of cells, so that a move's
// test is one load from a cache line rather than eight tests.
var lined = func() (l [8]uint64) {
	for m := range 1 << 9 {
		for _, line := range lineMasks {
			if uint16(m)&line == line {
				l[m>>6] |= 1 << (m & 63)
				break
			}
		}
	}
	return l
}()

// lineIn reports whether the cells of mask hold a whole line: the
// engine's per-move test, which board.wins states for a board.
func lineIn(mask uint16) bool { return lined[mask>>6&7]>>(mask&63)&1 != 0 }

// free returns the number of empty cells.
func (b *board) free() int { return bytes.Count(b[:], []byte{0}) }

// appendTo appends the board as a grid with row and column names, "."
// for an empty cell.
func (b *board) appendTo(dst []byte) []byte {
	dst = append(dst, "   a b c\n"...)
	for r := range 3 {
		dst = append(dst, byte('1'+r), ' ', ' ')
		for c := range 3 {
			if c > 0 {
				dst = append(dst, ' ')
			}
			if m := b[r*3+c]; m != 0 {
				dst = append(dst, m)
			} else {
				dst = append(dst, '.')
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// RenderState implements env.StateRenderer: the board, and who won or
// whose move it is.
func (g *game) RenderState() string {
	b := g.board.appendTo(nil)
	switch {
	case g.offender >= 0:
		b = fmt.Appendf(b, "%s (%c) moved illegally\n", g.seats[g.offender].ID, marks[g.offender])
	case g.winner >= 0:
		b = fmt.Appendf(b, "%s (%c) wins\n", g.seats[g.winner].ID, marks[g.winner])
	case g.empty == 0:
		b = append(b, "a draw\n"...)
	default:
		mover := bits.OnesCount16(g.empty^(1<<9-1)) & 1
		b = fmt.Appendf(b, "%s (%c) to move\n", g.seats[mover].ID, marks[mover])
	}
	return string(b)
}

// ActionSet implements env.ActionSets: the nine cells, a1 to c3, row by
// row, of which every turn's legal list is a subset.
func (s *Scenario) ActionSet(_ env.Params, role string) []string {
	if role != RoleX && role != RoleO {
		return nil
	}
	return legals[1<<9-1]
}

// ObservationSpace implements env.Features: a seat's board as PettingZoo's
// tictactoe_v3 gives it, 3×3×2 (row, column, plane), plane 0 its own marks
// and plane 1 its opponent's, 1 where a mark is.
func (s *Scenario) ObservationSpace(env.Params, string) env.Space {
	return env.Space{Shape: []int{3, 3, 2}, Low: 0, High: 1}
}

// StateSpace implements env.Features: the board as 3×3×3 (row, column,
// plane), plane 0 x's marks, plane 1 o's, and plane 2 all ones when o is to
// move (or moved last, once the game is over), zeros when x is.
func (s *Scenario) StateSpace(env.Params) env.Space {
	return env.Space{Shape: []int{3, 3, 3}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame: the board is public, so a
// seat sees all of it, its own marks first.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	mine, theirs := g.marked[seat&1], g.marked[1-seat&1]
	for c := range 9 {
		dst[2*c] = float32(mine >> c & 1)
		dst[2*c+1] = float32(theirs >> c & 1)
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	o := float32(bits.OnesCount16(g.marked[0]|g.marked[1]) & 1)
	for c := range 9 {
		dst[3*c] = float32(g.marked[0] >> c & 1)
		dst[3*c+1] = float32(g.marked[1] >> c & 1)
		dst[3*c+2] = o
	}
}
