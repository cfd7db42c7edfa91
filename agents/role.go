// Package agents holds what an agent is: its role's finite-state machine
// (github.com/looplab/fsm) and the Policy that chooses its actions.
//
// A Role declares states, events and terminal states; a Machine is one
// agent's running instance of it. The environment fires events on machines as
// the scenario's rules dictate; no callback ever runs inside a transition, so
// the looplab/fsm traps (deadlocks from callbacks, wedging on a cancelled
// context, self-transitions reported as errors) cannot occur.
package agents

import (
	"errors"
	"fmt"
	"slices"

	"github.com/looplab/fsm"
)

// State is a role's FSM state.
type State string

// Event is a role's FSM event.
type Event string

// Transition lets Event move a machine from any state in From to To.
type Transition struct {
	Event Event
	From  []State
	To    State
}

// Role is the declaration of a role's state machine. A Role is immutable once
// validated and safe to share between episodes and goroutines.
type Role struct {
	Name        string
	Doc         string
	Initial     State
	Transitions []Transition
	// Terminal states: an agent in one of them is never scheduled again.
	Terminal []State
}

// ErrBadRole is wrapped by Role.Validate's errors.
var ErrBadRole = errors.New("bad role definition")

// Validate checks that the role is well formed: a name, an initial state,
// named events with at least one source state and a destination, no event
// that leads from one state to two different places, and terminal states that
// the transitions mention.
func (r *Role) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: role %q: %s", ErrBadRole, r.Name, fmt.Sprintf(format, args...))
	}
	if r.Name == "" {
		return fmt.Errorf("%w: a role has no name", ErrBadRole)
	}
	if r.Initial == "" {
		return bad("no initial state")
	}
	if len(r.Transitions) == 0 {
		return bad("no transitions")
	}
	states := map[State]bool{r.Initial: true}
	dst := map[[2]string]State{}
	for i, t := range r.Transitions {
		if t.Event == "" {
			return bad("transition %d has no event name", i)
		}
		if len(t.From) == 0 {
			return bad("event %q has no source state", t.Event)
		}
		if t.To == "" {
			return bad("event %q has no destination state", t.Event)
		}
		states[t.To] = true
		for _, from := range t.From {
			if from == "" {
				return bad("event %q has an empty source state", t.Event)
			}
			states[from] = true
			key := [2]string{string(t.Event), string(from)}
			if prev, ok := dst[key]; ok && prev != t.To {
				return bad("event %q leads from %q to both %q and %q", t.Event, from, prev, t.To)
			}
			dst[key] = t.To
		}
	}
	for _, s := range r.Terminal {
		if !states[s] {
			return bad("terminal state %q is not reached by any transition", s)
		}
	}
	return nil
}

// IsTerminal reports whether s is one of the role's terminal states.
func (r *Role) IsTerminal(s State) bool { return slices.Contains(r.Terminal, s) }

func (r *Role) events() []fsm.EventDesc {
	evs := make([]fsm.EventDesc, len(r.Transitions))
	for i, t := range r.Transitions {
		src := make([]string, len(t.From))
		for j, s := range t.From {
			src[j] = string(s)
		}
		evs[i] = fsm.EventDesc{Name: string(t.Event), Src: src, Dst: string(t.To)}
	}
	return evs
}

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
	f := fsm.NewFSM(string(r.Initial), r.events(), nil)
	if kind == Graphviz {
		return fsm.VisualizeWithType(f, fsm.GRAPHVIZ)
	}
	return fsm.VisualizeWithType(f, fsm.MermaidStateDiagram)
}

// TransitionError reports an event fired in a state that does not allow it.
type TransitionError struct {
	Agent string
	Role  string
	State State
	Event Event
	Err   error // the underlying looplab/fsm error
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("agent %q (role %q): event %q is impossible in state %q", e.Agent, e.Role, e.Event, e.State)
}

func (e *TransitionError) Unwrap() error { return ErrImpossibleTransition }

// ErrImpossibleTransition is what every TransitionError unwraps to.
var ErrImpossibleTransition = errors.New("impossible transition")

// Machine is one agent's instance of its role's state machine. It is not safe
// for concurrent use; the environment drives it from one goroutine.
type Machine struct {
	role  *Role
	agent string
	f     *fsm.FSM
	// state and done mirror f's current state: every change goes through
	// Fire or Reset, so reading them needs none of f's locks, which cost
	// more than the rest of an El Farol turn.
	state State
	done  bool
}

// NewMachine returns agent's machine in the role's initial state. The role
// must have passed Validate.
func (r *Role) NewMachine(agent string) *Machine {
	return &Machine{role: r, agent: agent, f: fsm.NewFSM(string(r.Initial), r.events(), nil), state: r.Initial, done: r.IsTerminal(r.Initial)}
}

// Role returns the machine's role.
func (m *Machine) Role() *Role { return m.role }

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Can reports whether ev is allowed in the current state.
func (m *Machine) Can(ev Event) bool { return m.f.Can(string(ev)) }

// Done reports whether the machine is in a terminal state.
func (m *Machine) Done() bool { return m.done }

// Reset puts the machine back in its initial state, for reuse by another
// episode.
func (m *Machine) Reset(agent string) {
	m.agent = agent
	if m.state != m.role.Initial {
		m.f.SetState(string(m.role.Initial))
		m.state, m.done = m.role.Initial, m.role.IsTerminal(m.role.Initial)
	}
}

// Fire moves the machine by ev. A self-transition (allowed, but reported by
// looplab/fsm's Event as NoTransitionError) is a success. An event the
// current state does not allow returns a *TransitionError naming agent,
// state and event, wrapping looplab/fsm's UnknownEventError or
// InvalidEventError.
//
// Fire does not go through looplab/fsm's Event. Event exists to run
// callbacks, and pays for them on every call (a cancellable context, an
// Event value and a closure: four allocations, ~400 ns), then wedges the
// machine for good if that context is cancelled (looplab/fsm issue #115).
// Roles register no callbacks, so Fire looks the transition up in the
// role's table (the one the looplab machine was built from, so the two
// agree on every (state, event)) and moves the looplab machine with
// SetState: the same transition, with no allocation and nothing to wedge.
// A test fires every event in every state of the built-in roles through
// both and compares. Cancellation is the environment's business, checked
// between steps.
func (m *Machine) Fire(ev Event) error {
	from := m.state
	to, ok := m.role.next(ev, from)
	if !ok {
		var err error = fsm.InvalidEventError{Event: string(ev), State: string(from)}
		if !m.role.hasEvent(ev) {
			err = fsm.UnknownEventError{Event: string(ev)}
		}
		return &TransitionError{Agent: m.agent, Role: m.role.Name, State: from, Event: ev, Err: err}
	}
	if to != from {
		m.f.SetState(string(to))
		m.state, m.done = to, m.role.IsTerminal(to)
	}
	return nil
}

func (r *Role) hasEvent(ev Event) bool {
	for _, t := range r.Transitions {
		if t.Event == ev {
			return true
		}
	}
	return false
}

// destination is where ev leads from state; Validate guarantees it is
// unique. Roles have a handful of transitions, so a scan beats a map.
// next returns the state ev leads to from from, and false when the role
// has no such transition: the table the machine's fsm was built from.
func (r *Role) next(ev Event, from State) (State, bool) {
	for _, t := range r.Transitions {
		if t.Event == ev && slices.Contains(t.From, from) {
			return t.To, true
		}
	}
	return from, false
}
