package viewer

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
)

// SeqDiagram is the bus over logical time: a lifeline per seat (and one
// for the environment when it sends), every step a band with its turns,
// then every message of the step as an arrow to each seat that received
// it.
type SeqDiagram struct {
	W, H  int
	Lanes []Lane
	Bands []Band
	Marks []TurnMark
	Msgs  []SeqMsg
	// Omitted counts the messages past maxDrawn, listed in the table only.
	Omitted int
}

// Lane is one lifeline.
type Lane struct {
	X     float64
	Seat  int // -1 for the environment
	Label string
	Role  string
}

// Band is one logical step.
type Band struct {
	Y, H float64
	Step int
	Odd  bool
}

// TurnMark is a turn on its agent's lifeline.
type TurnMark struct {
	X, Y  float64
	Turn  int
	Seat  int
	State string
	Title string
	Class string
}

// SeqMsg is one message: a line from its sender across its recipients,
// an arrowhead at each recipient.
type SeqMsg struct {
	Seq            int
	Y, X1, X2      float64
	From, To, Kind string
	Mode, Channel  string
	Recipients     string // seat numbers, space-separated
	Class          string
	Label, Title   string
	LabelX         float64
	Heads          []Head
	Nobody         bool // reached no one: a cross at the line's end
}

// Head is an arrowhead at one recipient's lifeline.
type Head struct {
	Seat int
	Path string
}

// maxDrawn bounds the messages drawn; the table lists them all.
const maxDrawn = 4000

// channelClasses is how many colours (app.css's ch-0 … ch-7) tell
// channels apart. A class, not a stroke attribute: the stylesheet's
// .msg-line rule outranks an SVG presentation attribute, so a stroke="…"
// on the line was never drawn, and the CSP forbids inline styles.
const channelClasses = 8

// sequence lays out e's sequence diagram: a lifeline per seat (and the
// environment's), and a band per step with turns or messages, its turns'
// marks on one row and each message on a row of its own; past maxDrawn
// messages it counts the rest as Omitted.
func sequence(e *Episode) SeqDiagram {
	var d SeqDiagram
	laneX, x0, laneW := seqLanes(e, &d)
	envX := 70.0
	channels := map[string]int{}
	const rowH, top = 22.0, 40.0
	y := top
	turnsAt, msgsAt, steps := seqSteps(e)
	drawn := 0
	labelRight := 0.0 // where the widest message label ends
	for b, step := range steps {
		band := Band{Y: y, Step: step, Odd: b%2 == 1}
		if ts := turnsAt[step]; len(ts) > 0 {
			d.Marks = appendTurnMarks(d.Marks, e, ts, laneX, y+rowH/2)
			y += rowH
		}
		for _, k := range msgsAt[step] {
			if drawn >= maxDrawn {
				d.Omitted++
				continue
			}
			drawn++
			m := &e.Messages[k]
			from := envX
			if m.FromSeat >= 0 {
				from = laneX[m.FromSeat]
			}
			sm := seqMessage(m, from, y+rowH/2, laneX, channels)
			labelRight = math.Max(labelRight, sm.LabelX+textWidth(sm.Label, 10))
			d.Msgs = append(d.Msgs, sm)
			y += rowH
		}
		band.H = y - band.Y
		d.Bands = append(d.Bands, band)
	}
	right := x0 + laneW*float64(max(len(e.Seats), 1))
	// The diagram is as wide as its longest label: a label cut by the
	// SVG's edge hid what a message announced (votes:, verdict:).
	d.W = int(math.Ceil(max(right+40, 400, labelRight+8)))
	d.H = int(y + 10)
	return d
}

// seqLanes adds the diagram's lifelines to d: the environment's first,
// when it sent a message, then a seat's each. It returns each seat's x,
// the first seat's and the width of a lane.
func seqLanes(e *Episode, d *SeqDiagram) (laneX []float64, x0, laneW float64) {
	env := slices.ContainsFunc(e.Messages, func(m MessageView) bool { return m.FromSeat < 0 })
	laneW = math.Max(56, math.Min(140, 1100/float64(max(len(e.Seats), 1))))
	x0 = 70.0
	if env {
		label := "environment"
		if e.Others {
			label = "environment, others"
		}
		d.Lanes = append(d.Lanes, Lane{X: x0, Seat: -1, Label: label})
		x0 += laneW
	}
	laneX = make([]float64, len(e.Seats))
	for i, s := range e.Seats {
		laneX[i] = x0 + laneW*float64(i)
		d.Lanes = append(d.Lanes, Lane{X: laneX[i], Seat: i, Label: s.ID, Role: s.Role})
	}
	return laneX, x0, laneW
}

// seqSteps returns the turns and the messages of each step, and the steps
// that have either, in order: each is a band of the diagram.
func seqSteps(e *Episode) (turnsAt, msgsAt map[int][]int, steps []int) {
	turnsAt, msgsAt = map[int][]int{}, map[int][]int{}
	for i := range e.Turns {
		turnsAt[e.Turns[i].Step] = append(turnsAt[e.Turns[i].Step], i)
	}
	for i := range e.Messages {
		msgsAt[e.Messages[i].Time] = append(msgsAt[e.Messages[i].Time], i)
	}
	steps = slices.Sorted(maps.Keys(turnsAt))
	for s := range msgsAt {
		if _, ok := turnsAt[s]; !ok {
			steps = append(steps, s)
		}
	}
	slices.Sort(steps)
	return turnsAt, msgsAt, steps
}

// appendTurnMarks appends the marks of one step's turns ts, at height y.
// A seat acting twice in one step (an async schedule) gets a mark per
// turn, side by side.
func appendTurnMarks(marks []TurnMark, e *Episode, ts []int, laneX []float64, y float64) []TurnMark {
	seen := map[int]int{}
	for _, k := range ts {
		t := &e.Turns[k]
		off := float64(seen[t.Seat]) * 7
		seen[t.Seat]++
		class := "turn-mark"
		if t.Invalid != "" {
			class += " invalid"
		}
		marks = append(marks, TurnMark{X: laneX[t.Seat] + off, Y: y, Turn: t.N, Seat: t.Seat, State: t.State, Class: class,
			Title: fmt.Sprintf("turn %d: %s (turn %d) in state %s played %q", t.N, t.Agent, t.Turn, t.State, clip(t.Action, 60))})
	}
	return marks
}

// seqMessage draws message m at height y, from the lifeline at x from to
// its recipients'. A channel's colour is its class in channels, which it
// numbers in order of first use.
func seqMessage(m *MessageView, from, y float64, laneX []float64, channels map[string]int) SeqMsg {
	sm := SeqMsg{Seq: m.Seq, Y: y, From: m.From, To: m.To, Kind: m.Kind, Mode: m.Mode, Channel: m.Channel,
		Class: "msg " + m.Mode}
	if m.Quiet {
		sm.Class += " quiet"
	}
	if m.Mode == "channel" {
		c, ok := channels[m.Channel]
		if !ok {
			c = len(channels) % channelClasses
			channels[m.Channel] = c
		}
		sm.Class += fmt.Sprintf(" ch-%d", c)
	}
	lo, hi := from, from
	for _, r := range m.Recipients {
		x := laneX[r]
		lo, hi = math.Min(lo, x), math.Max(hi, x)
		sm.Heads = append(sm.Heads, Head{Seat: r, Path: arrowHead(x, sm.Y, float64(cmp.Compare(x, from)))})
	}
	sm.Recipients = seatList(m.Recipients)
	if len(m.Recipients) == 0 {
		sm.Nobody = true
		hi = from + 30
	}
	sm.X1, sm.X2 = lo, hi
	to := m.To
	if m.Mode == "direct" && len(m.Recipients) == 1 {
		to += " (private)"
	}
	label := fmt.Sprintf("%s: %s", m.Kind, m.Payload)
	switch {
	case m.Mode == "channel":
		label = "#" + m.Channel + " " + label
	case m.Mode == "direct" && len(m.Recipients) == 1:
		label = "→ " + m.To + " " + label
	}
	sm.Label = clip(label, maxLabel)
	sm.LabelX = from + 6
	who := strings.Join(m.RecipientIDs, ", ")
	if who == "" {
		who = "no one"
	}
	quiet := ""
	if m.Quiet {
		quiet = " (quiet: informs without waking)"
	}
	sm.Title = fmt.Sprintf("#%d at t=%d: %s → %s (%s)%s: %s\nreceived by: %s", m.Seq, m.Time, m.From, to, m.Kind, quiet, clip(m.Payload, 400), who)
	return sm
}

// maxLabel is how many runes of a message a label shows: the kind and
// enough of the payload to read; the tooltip and the table have it all.
const maxLabel = 96

// textWidth bounds the width of s drawn at size px in the pages' sans-serif
// font, so that the SVG can be made wide enough for it: an upper bound of
// an ASCII glyph's advance (0.62 em), and a full em for the rest (CJK,
// emoji).
func textWidth(s string, size float64) float64 {
	w := 0.0
	for _, r := range s {
		if r < 0x80 {
			w += 0.62 * size
		} else {
			w += size
		}
	}
	return w
}

// arrowHead draws an arrowhead ending at (x, y) pointing along dir (0: a
// message to its own sender's lane, drawn as a dot).
func arrowHead(x, y, dir float64) string {
	if dir == 0 {
		return fmt.Sprintf("M%.1f %.1f m-4 0 a4 4 0 1 0 8 0 a4 4 0 1 0 -8 0", x, y)
	}
	return fmt.Sprintf("M%.1f %.1fL%.1f %.1fL%.1f %.1fZ", x, y, x-9*dir, y-4.5, x-9*dir, y+4.5)
}

// clip shortens s to n runes, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// RoleView is one role of an episode: its diagram, when the binary knows
// the scenario, and its agents' state timelines.
type RoleView struct {
	Role    string
	Known   bool   // the scenario's registry has the role
	Why     string // why there is no diagram
	Diagram Chart
	Nodes   []Node
	Edges   []Edge
	// Undeclared are the recorded transitions that this binary's role does
	// not declare (the scenario changed since the file was written), as
	// "from --event--> to": the timelines show them, the diagram cannot.
	Undeclared []string
	Timeline   Timeline
}

// Node is a state of a role's diagram.
type Node struct {
	X, Y, W, H float64
	State      string
	Class      string
	Fill       string
	// VisitedBy are the seats that were in the state (from transitions),
	// or that had turns in it (without), space-separated.
	VisitedBy string
}

// Edge is the arc of a role's diagram from one state to another: the
// role's events that lead there (Label), of which the episode's agents
// fired Taken, in the role's order.
type Edge struct {
	Path           string
	LabelX, LabelY float64
	Label          string
	From, To       string
	Taken          []string
	TakenBy        string // the seats that took it, space-separated
	Class          string
	Title          string
}

var stateColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// roleViews builds the roles of an episode in order of their first seat.
func roleViews(e *Episode, lookup func(scenario string) ([]*agents.Role, error)) []RoleView {
	var known []*agents.Role
	var why string
	if lookup == nil {
		why = "this viewer was started without a scenario registry"
	} else if rs, err := lookup(e.Scenario); err != nil {
		why = fmt.Sprintf("this troupe binary does not know scenario %q (%v): no diagram; a program that registers it with cli.WithScenarios shows one", e.Scenario, err)
	} else {
		known = rs
	}
	var order []string
	for _, s := range e.Seats {
		order = appendNew(order, s.Role)
	}
	maxStep := 0
	for _, t := range e.Turns {
		maxStep = max(maxStep, t.Step)
	}
	last := max(maxStep, e.Steps)
	for _, tr := range e.Transitions {
		last = max(last, tr.Step)
	}
	maxStep, last = min(maxStep, tlMaxStep), min(last, tlMaxStep)
	var out []RoleView
	for _, name := range order {
		rv := RoleView{Role: name, Why: why}
		var role *agents.Role
		for _, r := range known {
			if r.Name == name {
				role = r
			}
		}
		if known != nil && role == nil {
			rv.Why = fmt.Sprintf("scenario %q has no role %q in this binary: no diagram", e.Scenario, name)
		}
		h := history(e, name, role)
		// State colours: the role's order of states when known, then the
		// order the agents were in them.
		var states []string
		if role != nil {
			for _, s := range role.States() {
				states = append(states, string(s))
			}
		}
		states = appendNew(states, h.states...)
		color := func(s string) string { return stateColors[max(slices.Index(states, s), 0)%len(stateColors)] }
		if len(e.Transitions) > 0 {
			rv.Timeline = historyTimeline(e, name, last, h.initial, color)
		} else {
			rv.Timeline = turnTimeline(e, name, maxStep, color)
		}
		if role != nil {
			rv.Known = true
			rv.Nodes, rv.Edges, rv.Diagram = roleDiagram(role, e, h, color)
			for _, m := range h.moves {
				if !role.Allows(agents.State(m.from), agents.Event(m.event), agents.State(m.to)) {
					rv.Undeclared = append(rv.Undeclared, fmt.Sprintf("%s --%s--> %s", m.from, m.event, m.to))
				}
			}
		}
		out = append(out, rv)
	}
	return out
}

// roleHistory is what the episode's agents of one role went through: the
// states they were in and the transitions they took, each with the seats
// that did.
type roleHistory struct {
	// initial is a seat's state before its first transition: its role's
	// initial state when the binary knows the role, else what the record
	// says (the first transition's From, else its first turn's state);
	// "" when it cannot be known.
	initial func(seat int) string
	// recorded says whether the history is the transitions (else it is
	// the states of the turns, and no transition is known).
	recorded bool
	states   []string         // in order of first visit
	visited  map[string][]int // state → the seats that were in it
	moves    []move           // the transitions taken, in order of first
	taken    map[move]*use
}

// move is a transition: event from one state to another.
type move struct{ from, event, to string }

// use is who took a move, and how often.
type use struct {
	n     int
	seats []int
}

// history reads a role's history from the episode's transitions, or,
// without any, the states its agents acted in.
func history(e *Episode, name string, role *agents.Role) *roleHistory {
	h := &roleHistory{visited: map[string][]int{}, taken: map[move]*use{}}
	// A seat's first recorded state: its first transition's From, else,
	// when it never moved, the state of its turns; the role's, the first
	// transition's From of any of its seats, else a turn's state.
	first := map[int]string{}
	ofRole := func(seat int) bool { return e.Seats[seat].Role == name }
	roleFirst := ""
	for _, tr := range e.Transitions {
		if _, ok := first[tr.Seat]; !ok && ofRole(tr.Seat) {
			first[tr.Seat] = tr.From
			roleFirst = cmp.Or(roleFirst, tr.From)
		}
	}
	for _, t := range e.Turns {
		if _, ok := first[t.Seat]; !ok && ofRole(t.Seat) {
			first[t.Seat] = t.State
		}
	}
	for _, s := range e.Seats {
		if f, ok := first[s.Seat]; ok && s.Role == name && roleFirst == "" {
			roleFirst = f
		}
	}
	h.initial = func(seat int) string {
		if role != nil {
			return string(role.Initial)
		}
		if f, ok := first[seat]; ok {
			return f
		}
		return roleFirst
	}
	visit := func(state string, seat int) {
		if state == "" {
			return
		}
		if _, ok := h.visited[state]; !ok {
			h.states = append(h.states, state)
		}
		h.visited[state] = appendNew(h.visited[state], seat)
	}
	if len(e.Transitions) == 0 {
		for _, t := range e.Turns {
			if t.Role == name {
				visit(t.State, t.Seat)
			}
		}
		return h
	}
	h.recorded = true
	for _, s := range e.Seats {
		if s.Role == name {
			visit(h.initial(s.Seat), s.Seat)
		}
	}
	for _, tr := range e.Transitions {
		if !ofRole(tr.Seat) {
			continue
		}
		visit(tr.From, tr.Seat)
		visit(tr.To, tr.Seat)
		m := move{tr.From, tr.Event, tr.To}
		u, ok := h.taken[m]
		if !ok {
			u = &use{}
			h.taken[m] = u
			h.moves = append(h.moves, m)
		}
		u.n++
		u.seats = appendNew(u.seats, tr.Seat)
	}
	return h
}

// seatList writes seats space-separated, as the script reads them.
func seatList(seats []int) string {
	s := make([]string, len(seats))
	for i, v := range seats {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " ")
}

// roleDiagram lays a role's states out on a row, in breadth-first order
// from its initial state, with its transitions as arcs: forward ones
// above, backward ones below, self-loops as loops. The states the
// episode's agents of the role were in are marked visited, the arcs of the
// events they fired taken.
func roleDiagram(role *agents.Role, e *Episode, h *roleHistory, color func(string) string) ([]Node, []Edge, Chart) {
	states := role.States()
	adj := map[string][]string{}
	for _, ev := range role.Events {
		for _, src := range ev.Src {
			adj[src] = append(adj[src], ev.Dst)
		}
	}
	var order []string
	seen := map[string]bool{}
	queue := []string{string(role.Initial)}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if seen[s] {
			continue
		}
		seen[s] = true
		order = append(order, s)
		queue = append(queue, adj[s]...)
	}
	for _, s := range states {
		if !seen[string(s)] {
			order = append(order, string(s))
		}
	}
	pos := map[string]int{}
	for i, s := range order {
		pos[s] = i
	}
	type pair struct{ from, to string }
	labels := map[pair][]string{}
	var pairs []pair
	for _, ev := range role.Events {
		for _, src := range ev.Src {
			p := pair{src, ev.Dst}
			if _, ok := labels[p]; !ok {
				pairs = append(pairs, p)
			}
			labels[p] = appendNew(labels[p], ev.Name)
		}
	}
	// The nodes sit low enough for the longest forward arc above them.
	const nodeW, nodeH, gap = 110.0, 30.0, 60.0
	top := 40.0
	for _, p := range pairs {
		if d := pos[p.to] - pos[p.from]; d > 0 {
			top = math.Max(top, 18+14*float64(d-1)+16)
		}
	}
	var nodes []Node
	for i, s := range order {
		class := "state-node"
		if len(h.visited[s]) > 0 {
			class += " visited"
		}
		if s == string(role.Initial) {
			class += " initial"
		}
		if role.IsTerminal(agents.State(s)) {
			class += " terminal"
		}
		if role.ActsIn(agents.State(s)) {
			class += " acting"
		}
		nodes = append(nodes, Node{X: 30 + float64(i)*(nodeW+gap), Y: top, W: nodeW, H: nodeH, State: s, Class: class, Fill: color(s),
			VisitedBy: seatList(h.visited[s])})
	}
	var edges []Edge
	maxDown := 0.0
	for _, p := range pairs {
		a, b := nodes[pos[p.from]], nodes[pos[p.to]]
		ed := edgeUse(p.from, p.to, labels[p], h, e)
		ed.Label = clip(strings.Join(labels[p], ", "), 28)
		switch {
		case p.from == p.to:
			x, y := a.X+a.W/2, a.Y
			ed.Path, ed.LabelX, ed.LabelY = fmt.Sprintf("M%.1f %.1f c-22 -34 22 -34 4 0", x-2, y), x, y-30
		case pos[p.to] > pos[p.from]:
			x1, x2, y := a.X+a.W*0.6, b.X+b.W*0.4, a.Y
			hgt := 18 + 14*float64(pos[p.to]-pos[p.from]-1)
			ed.Path = fmt.Sprintf("M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f", x1, y, x1, y-hgt, x2, y-hgt, x2, y)
			ed.LabelX, ed.LabelY = (x1+x2)/2, y-hgt*0.75-2
		default:
			x1, x2, y := a.X+a.W*0.4, b.X+b.W*0.6, a.Y+a.H
			hgt := 18 + 14*float64(pos[p.from]-pos[p.to]-1)
			ed.Path = fmt.Sprintf("M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f", x1, y, x1, y+hgt, x2, y+hgt, x2, y)
			ed.LabelX, ed.LabelY = (x1+x2)/2, y+hgt*0.75+10
			maxDown = math.Max(maxDown, hgt)
		}
		edges = append(edges, ed)
	}
	w := int(30 + float64(len(nodes))*(nodeW+gap))
	hgt := int(top + nodeH + maxDown + 24)
	return nodes, edges, Chart{W: w, H: hgt}
}

// edgeUse is the arc from one state to another with events events: which
// of them the role's agents fired, how often and who.
func edgeUse(from, to string, events []string, h *roleHistory, e *Episode) Edge {
	ed := Edge{From: from, To: to, Taken: []string{}, Class: "edge"}
	var by []int
	var notes []string
	for _, ev := range events {
		u := h.taken[move{from, ev, to}]
		if u == nil {
			notes = append(notes, ev+": not taken")
			continue
		}
		ed.Taken = append(ed.Taken, ev)
		ids := make([]string, len(u.seats))
		for i, s := range u.seats {
			ids[i] = e.Seats[s].ID
			by = appendNew(by, s)
		}
		times := "once"
		if u.n > 1 {
			times = fmt.Sprintf("%d times", u.n)
		}
		notes = append(notes, fmt.Sprintf("%s: taken %s, by %s", ev, times, strings.Join(ids, ", ")))
	}
	slices.Sort(by)
	ed.TakenBy = seatList(by)
	switch {
	case !h.recorded:
		ed.Title = fmt.Sprintf("%s → %s: %s", from, to, strings.Join(events, ", "))
		return ed
	case len(ed.Taken) > 0:
		ed.Class += " taken"
	default:
		ed.Class += " not-taken"
	}
	ed.Title = fmt.Sprintf("%s → %s\n%s", from, to, strings.Join(notes, "\n"))
	return ed
}

// LogProbStrip is a turn's response tokens, one cell each, darker the
// less likely the model found the token.
type LogProbStrip struct {
	W, H  int
	Cells []Bar
}

func logProbStrip(t *TurnView) LogProbStrip {
	n := len(t.LogProbs)
	if n == 0 {
		return LogProbStrip{}
	}
	cw := math.Max(2, math.Min(12, 720/float64(n)))
	s := LogProbStrip{W: int(cw*float64(n)) + 2, H: 22}
	for i, lp := range t.LogProbs {
		p := math.Exp(lp)
		if math.IsNaN(p) {
			p = 0
		}
		// Lightness from 92% (p = 1) down to 30% (p → 0).
		light := 30 + 62*math.Max(0, math.Min(1, p))
		s.Cells = append(s.Cells, Bar{X: 1 + cw*float64(i), Y: 1, W: math.Max(cw-1, 1), H: 20, Class: "lp",
			Fill: fmt.Sprintf("hsl(215, 70%%, %.0f%%)", light), Value: fmt.Sprintf("%.4g", lp),
			Title: fmt.Sprintf("response token %d: log-prob %.4g (p = %.3g)", i, lp, p)})
	}
	return s
}
