// Package agents holds what an agent is: its role's finite-state machine and
// the Policy that chooses its actions.
//
// A Role is declared in github.com/looplab/fsm's own vocabulary: its
// transitions are fsm.Events, its callbacks are keyed by looplab's names
// (before_<event>, leave_<state>, enter_<state>, after_<event>, the generic
// before_event, leave_state, enter_state, after_event, and the short forms
// <state> and <event>). Validate compiles a role once into a dense table
// (state × event → state, states and events numbered), so Machine.Fire is an
// array lookup that allocates nothing; looplab's own machine is built only to
// draw diagrams and, in the tests, as the oracle Fire must agree with.
//
// Callbacks run synchronously inside Fire, in looplab's order, with a
// Transition that names the agent, the event, both states and the step
// (Env) it happens in. A before_ or leave_ callback that returns an error
// cancels the transition (looplab's CanceledError); enter_ and after_
// callbacks run once the state has changed. There is no context and no
// goroutine, so none of looplab's traps (deadlocks, wedging on a cancelled
// context, self-transitions reported as errors) can occur.
//
// A role also says in which states its agents act (Acting): the
// environment asks an agent for a move only in one of them, so a game's
// turn-taking is the agents' states, not a field of its own.
//
// A Policy answers one observation (Act); a BatchPolicy also answers the
// agents of a step that share it in one call (ActBatch), as the learners
// of policies/learn do, which spares them a call and a lock per agent in a
// game of many agents.
//
// Finite action spaces are values too: IntRange(0, 10) and
// Enum("cooperate", "defect") give a view's legal list once (Legal), read a
// move's text as a number (Parse, ErrNotInSpace) and write one back (Text),
// so games and scripted policies (Always, Scripted) work with integers while
// observations, samples and an LLM's answer schema keep the strings.
package agents

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/protocol"
)

// State is a role's FSM state.
type State string

// Event is a role's FSM event.
type Event string

// Edge returns looplab's declaration of event ev leading from state from to
// state to, as the diagrams draw it ("from --> to: ev"), for roles whose
// states and events are typed constants. An event with several source
// states takes one Edge each, or one fsm.EventDesc listing them.
func Edge(from State, ev Event, to State) fsm.EventDesc {
	return fsm.EventDesc{Name: string(ev), Src: []string{string(from)}, Dst: string(to)}
}

// Env is the step a transition happens in, as a callback sees it: the
// subset of *env.Step that callbacks need (env.Step implements it; a
// callback that needs more may assert its type). agents does not import
// env, which imports agents.
type Env interface {
	// Time is the logical time of the step.
	Time() int
	// State and Fire read and move seat's machine (Fire may be called on
	// another seat from any callback, and on the transition's own seat from
	// enter_ and after_ callbacks).
	State(seat int) State
	Fire(seat int, ev Event) error
	// Send, Tell and Announce put messages on the bus.
	Send(from string, to protocol.Address, kind, payload string) error
	Tell(seat int, kind, payload string) error
	Announce(kind, payload string) error
	// Note records a fact in seat's latest sample's metadata.
	Note(seat int, key string, value any)
	// End ends the episode once the current call returns.
	End()
}

// Transition is what a callback is given: the transition under way (looplab's
// fsm.Event, minus the FSM) and the step it happens in.
type Transition struct {
	// Env is the step; nil when the machine is fired outside an episode.
	Env   Env
	Seat  int
	Agent string
	Role  *Role
	Event Event
	Src   State // the state the event was fired in
	Dst   State // the state it leads to (Src for a self-transition)
}

// Callback is a role's callback. Returning an error from a before_ or leave_
// callback cancels the transition, as looplab's e.Cancel(err) does; from an
// enter_ or after_ callback it is returned by Fire once the transition is
// done.
type Callback func(t Transition) error

// Callbacks maps looplab/fsm callback names to callbacks.
type Callbacks map[string]Callback

// Role is the declaration of a role's state machine. A Role is immutable
// once validated and safe to share between episodes and goroutines.
type Role struct {
	Name    string
	Doc     string
	Initial State
	// Events are the transitions, as looplab/fsm's NewFSM takes them (Edge
	// builds them from typed constants).
	Events fsm.Events
	// Callbacks run inside Fire; keys follow looplab's naming, and a key
	// that names no event or state is an error (looplab ignores it).
	Callbacks Callbacks
	// Terminal states: an agent in one of them is never scheduled again.
	Terminal []State
	// Acting are the states in which the environment asks an agent of this
	// role to act. Empty means every state that is not terminal.
	Acting []State

	compiled atomic.Pointer[table]
}

// ErrBadRole is wrapped by Role.Validate's errors.
var ErrBadRole = errors.New("bad role definition")

// Validate checks that the role is well formed and compiles it: a name, an
// initial state, named events with at least one source state and a
// destination, no event that leads from one state to two different places,
// terminal and acting states that the role has (an acting state must not be
// terminal), and callbacks whose keys name an event or state of the role.
func (r *Role) Validate() error {
	if r.compiled.Load() != nil {
		return nil
	}
	t, err := r.compile()
	if err != nil {
		return err
	}
	r.compiled.CompareAndSwap(nil, t)
	return nil
}

// table is a compiled role. States and events are numbered in order of
// first mention (the initial state is 0); next[s*len(events)+e] is the
// destination of event e from state s, or -1.
type table struct {
	states   []State
	events   []Event
	next     []int16
	terminal []bool
	acting   []bool
	// Callbacks by kind: indexed by event (before, after) or state (leave,
	// enter); the generic ones apart. Keys are kept for errors.
	before, after             []hook
	leave, enter              []hook
	anyBefore, anyLeave       hook
	anyEnter, anyAfter        hook
	hasCallbacks, hasEventMap bool
	byName                    map[Event]int16 // for roles with many events
}

type hook struct {
	key string
	fn  Callback
}

// compile checks r and builds its table: transitions, terminal and
// acting states, callbacks. Its errors wrap ErrBadRole and name the role.
func (r *Role) compile() (*table, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: role %q: %s", ErrBadRole, r.Name, fmt.Sprintf(format, args...))
	}
	if r.Name == "" {
		return nil, fmt.Errorf("%w: a role has no name", ErrBadRole)
	}
	if r.Initial == "" {
		return nil, bad("no initial state")
	}
	if len(r.Events) == 0 {
		return nil, bad("no events")
	}
	t := &table{}
	stateID, eventID, edges, err := t.number(r, bad)
	if err != nil {
		return nil, err
	}
	if _, ok := stateID["state"]; ok {
		return nil, bad(`a state must not be called "state": leave_state and enter_state are looplab's callbacks for every state`)
	}
	if len(t.states) > 1<<14 || len(t.events) > 1<<14 {
		return nil, bad("too many states or events")
	}
	ns, ne := len(t.states), len(t.events)
	t.next = make([]int16, ns*ne)
	for i := range t.next {
		t.next[i] = -1
	}
	for _, e := range edges {
		k := int(e.from)*ne + int(e.ev)
		if prev := t.next[k]; prev >= 0 && prev != e.to {
			return nil, bad("event %q leads from %q to both %q and %q", t.events[e.ev], t.states[e.from], t.states[prev], t.states[e.to])
		}
		t.next[k] = e.to
	}
	if err := t.markStates(r, stateID, bad); err != nil {
		return nil, err
	}
	if err := t.bindCallbacks(r, eventID, bad); err != nil {
		return nil, err
	}
	if ne > 8 {
		t.hasEventMap = true
		t.byName = eventID
	}
	return t, nil
}

// roleEdge is one transition of a role: an event from a state to a
// state, by their numbers in its table.
type roleEdge struct{ ev, from, to int16 }

// number numbers r's states (the initial one first) and events in t, in
// order of first mention, and returns their numbers and the role's
// transitions; it refuses an event without a name, a source or a
// destination.
func (t *table) number(r *Role, bad func(string, ...any) error) (stateID map[State]int16, eventID map[Event]int16, edges []roleEdge, err error) {
	stateID, eventID = map[State]int16{}, map[Event]int16{}
	addState := func(s State) int16 {
		if id, ok := stateID[s]; ok {
			return id
		}
		id := int16(len(t.states))
		stateID[s] = id
		t.states = append(t.states, s)
		return id
	}
	addState(r.Initial)
	for i, d := range r.Events {
		switch {
		case d.Name == "":
			return nil, nil, nil, bad("event %d has no name", i)
		case len(d.Src) == 0:
			return nil, nil, nil, bad("event %q has no source state", d.Name)
		case d.Dst == "":
			return nil, nil, nil, bad("event %q has no destination state", d.Name)
		case d.Name == "event":
			return nil, nil, nil, bad(`an event must not be called "event": before_event and after_event are looplab's callbacks for every event`)
		}
		ev, ok := eventID[Event(d.Name)]
		if !ok {
			ev = int16(len(t.events))
			eventID[Event(d.Name)] = ev
			t.events = append(t.events, Event(d.Name))
		}
		for _, src := range d.Src {
			if src == "" {
				return nil, nil, nil, bad("event %q has an empty source state", d.Name)
			}
			edges = append(edges, roleEdge{ev, addState(State(src)), -1})
		}
		to := addState(State(d.Dst))
		for k := len(edges) - len(d.Src); k < len(edges); k++ {
			edges[k].to = to
		}
	}
	return stateID, eventID, edges, nil
}

// markStates marks r's terminal and acting states in t (every state not
// terminal acts when r names none), refusing a state t does not have and
// a terminal state that acts.
func (t *table) markStates(r *Role, stateID map[State]int16, bad func(string, ...any) error) error {
	ns := len(t.states)
	t.terminal = make([]bool, ns)
	for _, s := range r.Terminal {
		id, ok := stateID[s]
		if !ok {
			return bad("terminal state %q is not reached by any transition", s)
		}
		t.terminal[id] = true
	}
	t.acting = make([]bool, ns)
	for _, s := range r.Acting {
		id, ok := stateID[s]
		switch {
		case !ok:
			return bad("acting state %q is not a state of the role", s)
		case t.terminal[id]:
			return bad("acting state %q is terminal", s)
		}
		t.acting[id] = true
	}
	if len(r.Acting) == 0 {
		for i := range t.acting {
			t.acting[i] = !t.terminal[i]
		}
	}
	return nil
}

// bindCallbacks resolves the role's callback keys the way looplab/fsm's
// NewFSM does, but refuses the keys looplab silently drops.
func (t *table) bindCallbacks(r *Role, eventID map[Event]int16, bad func(string, ...any) error) error {
	t.before = make([]hook, len(t.events))
	t.after = make([]hook, len(t.events))
	t.leave = make([]hook, len(t.states))
	t.enter = make([]hook, len(t.states))
	// looplab knows the states that events mention, not an initial state
	// no event leaves or reaches.
	inEvents := map[State]bool{}
	for _, d := range r.Events {
		for _, s := range d.Src {
			inEvents[State(s)] = true
		}
		inEvents[State(d.Dst)] = true
	}
	stateOf := func(name string) (int16, bool) {
		if !inEvents[State(name)] {
			return 0, false
		}
		return int16(slices.Index(t.states, State(name))), true
	}
	keys := make([]string, 0, len(r.Callbacks))
	for k := range r.Callbacks {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors name the same key every time
	set := func(slot *hook, key string, fn Callback) error {
		if slot.fn != nil {
			return bad("callbacks %q and %q are the same callback (looplab keeps one of them at random)", slot.key, key)
		}
		*slot = hook{key, fn}
		return nil
	}
	for _, key := range keys {
		fn := r.Callbacks[key]
		if fn == nil {
			return bad("callback %q is nil", key)
		}
		var err error
		switch prefix, target, _ := strings.Cut(key, "_"); {
		case prefix == "before" && target == "event":
			err = set(&t.anyBefore, key, fn)
		case prefix == "after" && target == "event":
			err = set(&t.anyAfter, key, fn)
		case prefix == "leave" && target == "state":
			err = set(&t.anyLeave, key, fn)
		case prefix == "enter" && target == "state":
			err = set(&t.anyEnter, key, fn)
		case prefix == "before" || prefix == "after":
			ev, ok := eventID[Event(target)]
			if !ok {
				return bad("callback %q: the role has no event %q (events: %v)", key, target, t.events)
			}
			if prefix == "before" {
				err = set(&t.before[ev], key, fn)
			} else {
				err = set(&t.after[ev], key, fn)
			}
		case prefix == "leave" || prefix == "enter":
			s, ok := stateOf(target)
			if !ok {
				return bad("callback %q: no event of the role leaves or reaches state %q", key, target)
			}
			if prefix == "leave" {
				err = set(&t.leave[s], key, fn)
			} else {
				err = set(&t.enter[s], key, fn)
			}
		default:
			// looplab's short forms: a state's name is enter_<state>,
			// an event's after_<event>; the state wins a tie.
			if s, ok := stateOf(key); ok {
				err = set(&t.enter[s], key, fn)
			} else if ev, ok := eventID[Event(key)]; ok {
				err = set(&t.after[ev], key, fn)
			} else {
				return bad("callback %q names no event or state of the role: use before_<event>, leave_<state>, enter_<state>, after_<event>, before_event, leave_state, enter_state or after_event", key)
			}
		}
		if err != nil {
			return err
		}
	}
	t.hasCallbacks = len(r.Callbacks) > 0
	return nil
}

// table returns the compiled role, compiling it on first use. A role that
// does not validate panics here: Info.Validate checks every role before
// any episode runs.
func (r *Role) table() *table {
	if t := r.compiled.Load(); t != nil {
		return t
	}
	if err := r.Validate(); err != nil {
		panic(err)
	}
	return r.compiled.Load()
}

// IsTerminal reports whether s is one of the role's terminal states.
func (r *Role) IsTerminal(s State) bool { return slices.Contains(r.Terminal, s) }

// ActsIn reports whether an agent of the role acts in state s: s is one of
// Acting or, when the role declares none, any state that is not terminal.
func (r *Role) ActsIn(s State) bool {
	t := r.table()
	i := slices.Index(t.states, s)
	return i >= 0 && t.acting[i]
}

// Allows reports whether event ev takes the role's machine from state
// from to state to.
func (r *Role) Allows(from State, ev Event, to State) bool {
	t := r.table()
	e, ok := t.event(ev)
	f := slices.Index(t.states, from)
	if !ok || f < 0 {
		return false
	}
	next := t.next[f*len(t.events)+int(e)]
	return next >= 0 && t.states[next] == to
}

// DeclaresActing reports whether the role lists its acting states, so that
// the state alone says when its agents act.
func (r *Role) DeclaresActing() bool { return len(r.Acting) > 0 }

// States lists the role's states: the initial state, then the others in
// order of first mention in Events.
func (r *Role) States() []State { return slices.Clone(r.table().states) }

// EventNames lists the role's events in order of first mention.
func (r *Role) EventNames() []Event { return slices.Clone(r.table().events) }

// DiagramKind selects the notation of Role.Diagram.
type DiagramKind int

// The notations looplab/fsm's visualizer draws.
const (
	Mermaid DiagramKind = iota
	Graphviz
)

// Diagram draws the role's state machine with looplab/fsm's visualizer,
// deterministically (the visualizer sorts states and transitions).
func (r *Role) Diagram(kind DiagramKind) (string, error) {
	f := fsm.NewFSM(string(r.Initial), r.Events, nil)
	if kind == Graphviz {
		return fsm.VisualizeWithType(f, fsm.GRAPHVIZ)
	}
	return fsm.VisualizeWithType(f, fsm.MermaidStateDiagram)
}

// TransitionError reports an event fired in a state that does not allow it.
// It unwraps both to ErrImpossibleTransition and to looplab/fsm's error for
// the same case (Err), so errors.Is and errors.As work for either.
type TransitionError struct {
	Agent string
	Role  string
	State State
	Event Event
	// Err is looplab/fsm's error: fsm.InvalidEventError (the role has the
	// event, not from this state), fsm.UnknownEventError (the role has no
	// such event) or fsm.InTransitionError (fired on the machine from its
	// own before_ or leave_ callback, where looplab deadlocks).
	Err error
}

func (e *TransitionError) Error() string {
	if _, ok := e.Err.(fsm.InTransitionError); ok {
		return fmt.Sprintf("agent %q (role %q): event %q fired while another event is leaving state %q", e.Agent, e.Role, e.Event, e.State)
	}
	return fmt.Sprintf("agent %q (role %q): event %q is impossible in state %q", e.Agent, e.Role, e.Event, e.State)
}

// Unwrap returns ErrImpossibleTransition and looplab's error.
func (e *TransitionError) Unwrap() []error { return []error{ErrImpossibleTransition, e.Err} }

// ErrImpossibleTransition is what every TransitionError unwraps to.
var ErrImpossibleTransition = errors.New("impossible transition")

// ErrCanceled is what a CallbackError unwraps to when its callback
// cancelled the transition.
var ErrCanceled = errors.New("transition canceled")

// CallbackError is a callback's error, as Fire returns it. When the
// callback was a before_ or leave_ one the transition did not happen
// (Canceled): the error unwraps to ErrCanceled and to looplab's
// fsm.CanceledError, which unwraps to Err. Otherwise the machine is in Dst
// and the error unwraps to Err alone.
type CallbackError struct {
	Agent    string
	Role     string
	Event    Event
	Src, Dst State
	Callback string // the failing callback's key, e.g. "before_move"
	Err      error
}

// Canceled reports whether the callback cancelled the transition.
func (e *CallbackError) Canceled() bool {
	return strings.HasPrefix(e.Callback, "before_") || strings.HasPrefix(e.Callback, "leave_")
}

func (e *CallbackError) Error() string {
	what := "failed after"
	if e.Canceled() {
		what = "canceled"
	}
	return fmt.Sprintf("agent %q (role %q): %s %s %q from %q to %q: %v", e.Agent, e.Role, e.Callback, what, e.Event, e.Src, e.Dst, e.Err)
}

// Unwrap returns ErrCanceled and fsm.CanceledError for a cancelled
// transition, else the callback's error.
func (e *CallbackError) Unwrap() []error {
	if e.Canceled() {
		return []error{ErrCanceled, fsm.CanceledError{Err: e.Err}}
	}
	return []error{e.Err}
}

// Machine is one agent's instance of its role's state machine. It is not safe
// for concurrent use; the environment drives it from one goroutine.
type Machine struct {
	role  *Role
	t     *table
	agent string
	seat  int
	env   Env
	state int16
	// leaving is set while before_ and leave_ callbacks run: firing the
	// machine then is refused (looplab deadlocks).
	leaving bool
}

// NewMachine returns agent's machine in the role's initial state. A role
// that does not pass Validate panics.
func (r *Role) NewMachine(agent string) *Machine {
	return &Machine{role: r, t: r.table(), agent: agent}
}

// Bind tells the machine its seat and the step its callbacks see as
// Transition.Env. The environment binds every machine it seats.
func (m *Machine) Bind(seat int, env Env) { m.seat, m.env = seat, env }

// Role returns the machine's role.
func (m *Machine) Role() *Role { return m.role }

// State returns the current state.
func (m *Machine) State() State { return m.t.states[m.state] }

// Can reports whether ev is allowed in the current state (callbacks may
// still cancel it).
func (m *Machine) Can(ev Event) bool {
	e, ok := m.t.event(ev)
	return ok && m.t.next[int(m.state)*len(m.t.events)+int(e)] >= 0
}

// Done reports whether the machine is in a terminal state.
func (m *Machine) Done() bool { return m.t.terminal[m.state] }

// Acting reports whether the machine is in a state in which its agent acts.
func (m *Machine) Acting() bool { return m.t.acting[m.state] }

// HasCallbacks reports whether the machine's role has callbacks: without
// them, a Fire runs no code of the game's and fires nothing else.
func (m *Machine) HasCallbacks() bool { return m.t.hasCallbacks }

// Reset puts the machine back in its initial state, for reuse by another
// episode, without running callbacks.
func (m *Machine) Reset(agent string) {
	m.agent, m.state, m.leaving = agent, 0, false
}

// SetState moves the machine to s without running callbacks, as looplab's
// SetState does; s must be a state of the role.
func (m *Machine) SetState(s State) error {
	i := slices.Index(m.t.states, s)
	if i < 0 {
		return fmt.Errorf("%w: role %q has no state %q", ErrBadRole, m.role.Name, s)
	}
	m.state = int16(i)
	return nil
}

func (t *table) event(ev Event) (int16, bool) {
	if t.hasEventMap {
		e, ok := t.byName[ev]
		return e, ok
	}
	// A game fires the constants its role was declared with, whose bytes
	// are the table's own: comparing pointers first finds them without a
	// call to compare bytes.
	for i, name := range t.events {
		if strcmp.Same(string(name), string(ev)) {
			return int16(i), true
		}
	}
	for i, name := range t.events {
		if name == ev {
			return int16(i), true
		}
	}
	return -1, false
}

// Fire moves the machine by ev, running the role's callbacks in
// looplab/fsm's order:
//
//  1. before_<event>, then before_event: an error cancels the transition;
//  2. for a self-transition (Dst == Src) only after_<event> and
//     after_event run, and the result is a success (looplab's
//     NoTransitionError with no error);
//  3. leave_<src>, then leave_state: an error cancels the transition;
//  4. the state changes;
//  5. enter_<dst>, enter_state, after_<event>, after_event: all run; an
//     error among them is returned (the last, as looplab returns the last
//     Cancel's) and the state stays Dst.
//
// A cancellation returns a *CallbackError that unwraps to ErrCanceled and
// fsm.CanceledError. An event the current state does not allow returns a
// *TransitionError that unwraps to ErrImpossibleTransition and to
// looplab's fsm.InvalidEventError or fsm.UnknownEventError; no callback
// runs. Without callbacks, Fire is a table lookup and allocates nothing.
func (m *Machine) Fire(ev Event) error {
	if _, _, ok := m.Move(ev); ok {
		return nil
	}
	return m.fire(ev)
}

// Move is Fire's usual transition, without a call to Fire, for the
// environment that records each transition: a role without callbacks, and
// a game that fires the constant its role declared, whose bytes are the
// table's own (event's first loop). Then it moves the machine and returns
// the states it left and entered, and true. Otherwise it changes nothing
// and returns false: the caller fires ev with Fire, which takes the
// general path (any event string, callbacks, refusals).
func (m *Machine) Move(ev Event) (from, to State, ok bool) {
	t := m.t
	if t.hasEventMap || t.hasCallbacks || m.leaving {
		return "", "", false
	}
	for i, name := range t.events {
		if strcmp.Same(string(name), string(ev)) {
			next := t.next[int(m.state)*len(t.events)+i]
			if next < 0 {
				break
			}
			from = t.states[m.state]
			m.state = next
			return from, t.states[next], true
		}
	}
	return "", "", false
}

// fire is Fire's general path: any event string, callbacks, refusals.
func (m *Machine) fire(ev Event) error {
	t := m.t
	from := m.state
	e, ok := t.event(ev)
	if !ok || m.leaving {
		return m.refused(ev, ok)
	}
	to := t.next[int(from)*len(t.events)+int(e)]
	if to < 0 {
		return m.refused(ev, ok)
	}
	if !t.hasCallbacks {
		m.state = to
		return nil
	}
	return m.fireWithCallbacks(e, from, to)
}

// refused is the error of a Fire of ev that the machine refuses: ev is not
// one of the role's events (known false), callbacks are running, or the
// current state does not allow it. It is made apart from Fire, whose frame
// it would otherwise enlarge for every transition (hence noinline: the
// compiler would inline it back).
//
//go:noinline
func (m *Machine) refused(ev Event, known bool) error {
	state := m.t.states[m.state]
	var err error
	switch {
	case !known:
		err = fsm.UnknownEventError{Event: string(ev)}
	case m.leaving:
		err = fsm.InTransitionError{Event: string(ev)}
	default:
		err = fsm.InvalidEventError{Event: string(ev), State: string(state)}
	}
	return &TransitionError{Agent: m.agent, Role: m.role.Name, State: state, Event: ev, Err: err}
}

func (m *Machine) fireWithCallbacks(e, from, to int16) error {
	t := m.t
	tr := Transition{Env: m.env, Seat: m.seat, Agent: m.agent, Role: m.role, Event: t.events[e], Src: t.states[from], Dst: t.states[to]}
	if err := m.guard(&tr, t.before[e], t.anyBefore); err != nil {
		return err
	}
	if from == to {
		return m.notify(&tr, nil, t.after[e], t.anyAfter)
	}
	if err := m.guard(&tr, t.leave[from], t.anyLeave); err != nil {
		return err
	}
	m.state = to
	last := m.notify(&tr, nil, t.enter[to], t.anyEnter)
	return m.notify(&tr, last, t.after[e], t.anyAfter)
}

// guard runs a before_ or leave_ pair of callbacks; the first error cancels
// the transition.
func (m *Machine) guard(tr *Transition, named, generic hook) error {
	m.leaving = true
	defer func() { m.leaving = false }()
	if err := m.call(tr, named); err != nil {
		return err
	}
	return m.call(tr, generic)
}

// notify runs an enter_ or after_ pair of callbacks, all of them, and
// returns the last error, or last when none fails.
func (m *Machine) notify(tr *Transition, last error, named, generic hook) error {
	if err := m.call(tr, named); err != nil {
		last = err
	}
	if err := m.call(tr, generic); err != nil {
		last = err
	}
	return last
}

func (m *Machine) call(tr *Transition, h hook) error {
	if h.fn == nil {
		return nil
	}
	if err := h.fn(*tr); err != nil {
		return &CallbackError{Agent: tr.Agent, Role: m.role.Name, Event: tr.Event, Src: tr.Src, Dst: tr.Dst, Callback: h.key, Err: err}
	}
	return nil
}
