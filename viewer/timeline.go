package viewer

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Timeline is every agent of a role over logical time, a row each.
//
// From an episode record's transitions (FromTransitions), a row is the
// agent's whole state-machine history: a segment per state it was in, from
// the transition that entered it to the one that left it (the initial state
// from the start, the final state to the end, named after the row), a tick
// per self-transition and a dot per turn. A turn of step t is played in the
// state the transitions of the steps before t left its agent in; the
// transitions of step t come after its turns, at the step's right edge.
// When one agent moves several times in a step (a callback moving on), the
// step is widened so that every state passed through has a segment.
//
// Without transitions (sample files hold none) a row is a segment per
// turn, in the state the turn was played in.
type Timeline struct {
	W, H            int
	FromTransitions bool
	Rows            []TimelineRow
	Segs            []Seg
	Selfs           []SelfTick
	Turns           []TurnDot
	Ticks           []Text
}

// TimelineRow is one agent.
type TimelineRow struct {
	Y    float64
	Seat int
	ID   string
	// Final is the state the agent ended in, written (clipped: FinalLabel)
	// at FinalX; from transitions only.
	Final, FinalLabel string
	FinalX            float64
}

// Seg is a segment of a row: a state the agent was in (from transitions),
// or one turn (without).
type Seg struct {
	X, Y, W, H float64
	Seat       int
	// Step is the step of the transition that entered the state (-1 for
	// the initial state), or the turn's step.
	Step int
	// K is the transition that entered the state (-1: the initial state,
	// or a turn's segment); Turn the turn's position (-1 from transitions).
	K, Turn      int
	State, Event string
	Fill         string
	Title        string
	Label        string
	Class        string
}

// SelfTick is a self-transition: event Event fired at Step left the agent
// in State.
type SelfTick struct {
	X, Y1, Y2    float64
	Seat, Step   int
	K            int
	State, Event string
	Title        string
}

// TurnDot is a turn on a row drawn from transitions, at its step.
type TurnDot struct {
	X, Y       float64
	Seat, Step int
	Turn       int
	State      string
	Class      string
	Title      string
}

// Timeline geometry: the agents' names left of tlLabel, rows of tlRowH;
// steps past tlMaxStep (a damaged record's) are drawn at it.
const (
	tlLabel   = 110.0
	tlRowH    = 16.0
	tlTop     = 20.0
	tlMaxStep = 1 << 30
)

// timelineRows starts the timeline of a role: a row per seat of it, and
// the row of each of those seats.
func timelineRows(e *Episode, role string) (Timeline, map[int]int) {
	var tl Timeline
	rowOf := map[int]int{}
	for _, s := range e.Seats {
		if s.Role == role {
			rowOf[s.Seat] = len(tl.Rows)
			tl.Rows = append(tl.Rows, TimelineRow{Y: tlTop + tlRowH*float64(len(tl.Rows)), Seat: s.Seat, ID: s.ID})
		}
	}
	tl.H = int(tlTop + tlRowH*float64(len(tl.Rows)) + 18)
	return tl, rowOf
}

// maxTicks bounds a timeline's step labels.
const maxTicks = 200

// stepTicks labels the steps 0..last, centred at center(s), at most one
// every 40 pixels and maxTicks in all.
func stepTicks(last int, stepW float64, center func(s int) float64) []Text {
	var out []Text
	every := max(1, int(math.Ceil(40/stepW)), last/maxTicks+1)
	for i := 0; i <= last/every; i++ {
		s := i * every
		out = append(out, Text{X: center(s), Y: 12, Anchor: "middle", Class: "tick", S: fmt.Sprintf("t=%d", s)})
	}
	return out
}

// eachTurn calls f with every turn of a timeline's seats, its row, and how
// many turns its agent had before it in the same step.
func eachTurn(e *Episode, rowOf map[int]int, f func(t *TurnView, row, n int)) {
	perStep := map[[2]int]int{}
	for i := range e.Turns {
		t := &e.Turns[i]
		if r, ok := rowOf[t.Seat]; ok {
			k := [2]int{t.Seat, t.Step}
			f(t, r, perStep[k])
			perStep[k]++
		}
	}
}

// turnClass is the class of a turn's mark: base, and invalid for an
// invalid answer.
func turnClass(base string, t *TurnView) string {
	if t.Invalid != "" {
		return base + " invalid"
	}
	return base
}

// turnTitle says what a turn's mark is.
func turnTitle(t *TurnView) string {
	return fmt.Sprintf("%s at t=%d, its turn %d: state %s, played %q", t.Agent, t.Step, t.Turn, t.State, clip(t.Action, 60))
}

// stepWidth is the width of a step when count columns share the timeline.
func stepWidth(count int) float64 {
	return math.Max(6, math.Min(60, 800/float64(max(count, 1))))
}

// turnTimeline is a role's timeline without transitions: a segment per
// turn, at its step, in the state it was played in.
func turnTimeline(e *Episode, role string, maxStep int, color func(string) string) Timeline {
	stepW := stepWidth(maxStep + 1)
	tl, rowOf := timelineRows(e, role)
	eachTurn(e, rowOf, func(t *TurnView, r, n int) {
		// Several turns of one agent in one step share the step's width.
		w := stepW - 1
		x := tlLabel + stepW*float64(min(max(t.Step, 0), maxStep))
		if n > 0 {
			x += math.Min(float64(n)*3, stepW/2)
			w = math.Max(w-math.Min(float64(n)*3, stepW/2), 2)
		}
		seg := Seg{X: x, Y: tl.Rows[r].Y, W: w, H: tlRowH - 3, Seat: t.Seat, Step: t.Step, K: -1, Turn: t.N, State: t.State, Fill: color(t.State),
			Class: turnClass("state-seg", t), Title: turnTitle(t)}
		if stepW >= 50 {
			seg.Label = clip(t.State, 8)
		}
		tl.Segs = append(tl.Segs, seg)
	})
	tl.W = int(tlLabel + stepW*float64(maxStep+1) + 20)
	tl.Ticks = stepTicks(maxStep, stepW, func(s int) float64 { return tlLabel + stepW*float64(s) + stepW/2 })
	return tl
}

// historyTimeline is a role's timeline from the episode's transitions;
// initial gives each seat's state before its first transition ("" when it
// cannot be known). last is the episode's last step.
func historyTimeline(e *Episode, role string, last int, initial func(seat int) string, color func(string) string) Timeline {
	tl, rowOf := timelineRows(e, role)
	tl.FromTransitions = true
	ax := newChainAxis(e, rowOf, last)
	end := ax.x0(last+1) + ax.stepW

	name := func(seat int) string { return e.Seats[seat].ID }
	// Each row's stay in its current state, closed by the next move.
	cur := make([]stay, len(tl.Rows))
	for r := range tl.Rows {
		cur[r] = stay{state: initial(tl.Rows[r].Seat), k: -1, step: -1, x: tlLabel}
	}
	closeStay := func(r int, x float64, until string) {
		row := &tl.Rows[r]
		tl.Segs = append(tl.Segs, cur[r].seg(row, name(row.Seat), x, until, color))
	}
	seen := map[[2]int]int{}
	// Turns are counted in the stay they were played in: that of the
	// transitions of the steps before theirs.
	ti := 0
	turnsBefore := func(stepLimit int) {
		for ; ti < len(e.Turns) && e.Turns[ti].Step <= stepLimit; ti++ {
			if r, ok := rowOf[e.Turns[ti].Seat]; ok {
				cur[r].turns++
			}
		}
	}
	for _, tr := range e.Transitions {
		r, ok := rowOf[tr.Seat]
		if !ok {
			continue
		}
		turnsBefore(tr.Step)
		s := ax.step(tr.Step)
		k := [2]int{tr.Seat, s}
		x := math.Max(ax.x0(s)+ax.stepW+ax.chainW*float64(seen[k]), cur[r].x+1) // never back: a record out of step order stays drawable
		seen[k]++
		if tr.From == tr.To && tr.To == cur[r].state {
			cur[r].selfs++
			row := tl.Rows[r]
			tl.Selfs = append(tl.Selfs, SelfTick{X: x, Y1: row.Y - 2, Y2: row.Y + tlRowH - 1, Seat: tr.Seat, Step: tr.Step, K: tr.K, State: tr.To, Event: tr.Event,
				Title: fmt.Sprintf("%s at t=%d: event %s, a self-transition (stays in %s)", name(tr.Seat), tr.Step, tr.Event, tr.To)})
			continue
		}
		closeStay(r, x, fmt.Sprintf("to t=%d (event %s)", tr.Step, tr.Event))
		cur[r] = stay{state: tr.To, event: tr.Event, from: tr.From, k: tr.K, step: tr.Step, x: x, broken: tr.From != cur[r].state}
	}
	turnsBefore(math.MaxInt)
	for r := range tl.Rows {
		closeStay(r, end, "to the end (its final state)")
		tl.Rows[r].Final, tl.Rows[r].FinalLabel, tl.Rows[r].FinalX = cur[r].state, clip(orUnknown(cur[r].state), 24), end+4
	}

	eachTurn(e, rowOf, func(t *TurnView, r, n int) {
		// On the bar's lower edge, clear of its label; several turns of one
		// agent in a step side by side.
		tl.Turns = append(tl.Turns, TurnDot{X: ax.x0(ax.step(t.Step)) + ax.stepW/2 + math.Min(float64(n)*4, ax.stepW/3), Y: tl.Rows[r].Y + tlRowH - 3,
			Seat: t.Seat, Step: t.Step, Turn: t.N, State: t.State, Class: turnClass("turn-dot", t), Title: turnTitle(t)})
	})

	longest := 0
	for _, row := range tl.Rows {
		longest = max(longest, len([]rune(row.FinalLabel)))
	}
	tl.W = int(end + 10 + 6.5*float64(longest))
	tl.Ticks = stepTicks(last, ax.stepW, func(s int) float64 { return ax.x0(s) + ax.stepW/2 })
	tl.Ticks = append(tl.Ticks, Text{X: ax.x0(last+1) + ax.stepW/2, Y: 12, Anchor: "middle", Class: "tick", S: "end"})
	return tl
}

// chainAxis places the steps of a timeline drawn from transitions. A
// step's transitions are laid out at its right edge, one chainW apart, so
// the step is widened by chainW for each transition of one agent past its
// first. Only the widened steps are stored, so a record's step numbers,
// however large, cost no memory.
type chainAxis struct {
	last          int     // the episode's last step
	wide          []int   // the widened steps, in order
	before        []int   // before[i]: the widening of wide[:i]
	stepW, chainW float64 // a step's width, and a transition's
}

// newChainAxis is the axis of the transitions of the seats in rowOf, the
// steps up to last and a column for the final states.
func newChainAxis(e *Episode, rowOf map[int]int, last int) chainAxis {
	ax := chainAxis{last: last}
	moves := map[int]int{} // step → the most transitions one agent made in it
	count := map[[2]int]int{}
	for _, tr := range e.Transitions {
		if _, ok := rowOf[tr.Seat]; ok {
			k := [2]int{tr.Seat, ax.step(tr.Step)}
			count[k]++
			moves[k[1]] = max(moves[k[1]], count[k])
		}
	}
	for s, n := range moves {
		if n > 1 {
			ax.wide = append(ax.wide, s)
		}
	}
	slices.Sort(ax.wide)
	ax.before = make([]int, len(ax.wide)+1)
	for i, s := range ax.wide {
		ax.before[i+1] = ax.before[i] + moves[s] - 1
	}
	ax.stepW = stepWidth(last + 2) // the steps and the final states' column
	ax.chainW = math.Max(4, math.Min(36, ax.stepW*0.6))
	return ax
}

// step is the column step s is drawn in: the first or last step for one
// out of the episode's range.
func (ax *chainAxis) step(s int) int { return min(max(s, 0), ax.last) }

// x0 is step s's left edge; x0(last+1) the final column's.
func (ax *chainAxis) x0(s int) float64 {
	i, _ := slices.BinarySearch(ax.wide, s)
	return tlLabel + ax.stepW*float64(s) + ax.chainW*float64(ax.before[i])
}

// stay is a row's stay in one state, from the transition that entered it
// (k < 0: from the start) until the next that leaves it.
type stay struct {
	state, event, from string
	k, step            int
	x                  float64
	selfs, turns       int
	broken             bool
}

// seg draws s, agent's stay on row, as a segment ending at x; until says
// how the stay ended.
func (s *stay) seg(row *TimelineRow, agent string, x float64, until string, color func(string) string) Seg {
	seg := Seg{X: s.x, Y: row.Y, W: x - s.x, H: tlRowH - 3, Seat: row.Seat, Step: s.step, K: s.k, Turn: -1,
		State: s.state, Event: s.event, Fill: color(s.state), Class: "state-seg"}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in state %s", agent, orUnknown(s.state))
	if s.k < 0 {
		b.WriteString(" from the start (its initial state)")
	} else {
		fmt.Fprintf(&b, " from t=%d (event %s, from %s)", s.step, s.event, s.from)
	}
	fmt.Fprintf(&b, " %s; ", until)
	switch s.turns {
	case 0:
		b.WriteString("no turn in it")
	case 1:
		b.WriteString("1 turn in it")
	default:
		fmt.Fprintf(&b, "%d turns in it", s.turns)
	}
	if s.selfs > 0 {
		fmt.Fprintf(&b, ", %d self-transitions", s.selfs)
	}
	if s.broken {
		fmt.Fprintf(&b, "\nthe record is inconsistent: the transition says it left %s, but the agent was in another state", s.from)
		seg.Class += " broken"
	}
	if s.state == "" {
		seg.Class += " unknown"
		b.WriteString("\nthis troupe binary does not know the role, and the record has no transition or turn of this agent that names its state")
	}
	seg.Title = b.String()
	if seg.W >= 30 {
		seg.Label = clip(s.state, int(seg.W/6))
	}
	return seg
}

// orUnknown names a state that cannot be known.
func orUnknown(state string) string {
	if state == "" {
		return "?"
	}
	return state
}
