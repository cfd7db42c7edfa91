package env

import (
	"errors"
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Step is the game's handle on the episode during Start and each step: the
// logical clock, the bus, the agents' state machines, and the episode's end.
// It is valid only during the call it is passed to.
type Step struct {
	e    *Engine
	time int
}

// Time returns the logical time: 0 during Start, then 1, 2, ... for each
// step.
func (s *Step) Time() int { return s.time }

// Seats returns the episode's seats, in seat order.
func (s *Step) Seats() []Seat { return s.e.seats }

// Send puts a message from an agent (its id) or from the environment
// (protocol.EnvSender) on the bus. It is delivered at the end of this step.
// Its recipients are fixed now (a channel's members at this moment); see
// Bus for the channel rules. A bad sender or address returns an error
// wrapping ErrBadMessage, naming both.
func (s *Step) Send(from string, to protocol.Address, kind, payload string) error {
	return s.e.send(from, to, kind, payload, false, s.time)
}

// Post puts m on the bus as Send does, with its From, To, Kind, Payload and
// Quiet as given; the bus stamps its Time and Seq.
func (s *Step) Post(m protocol.Message) error {
	return s.e.send(m.From, m.To, m.Kind, m.Payload, m.Quiet, s.time)
}

// Inform sends a quiet private message from the environment to one seat
// (protocol.Message.Quiet): it is logged and delivered at the end of this
// step, and the seat reads it in its Inbox at its next turn, but it does
// not wake the seat: under the Async schedule a role that declares no
// acting states acts on unread mail that is not quiet, so an informed agent
// acts only when something else wakes it. Under the other schedules, which
// never wake agents by mail, Inform is Tell.
func (s *Step) Inform(seat int, kind, payload string) error {
	return s.e.send(protocol.EnvSender, protocol.To(s.e.seats[seat].ID), kind, payload, true, s.time)
}

// InformAll broadcasts a quiet message from the environment to every
// agent: Announce without waking anyone (see Inform).
func (s *Step) InformAll(kind, payload string) error {
	return s.e.send(protocol.EnvSender, protocol.Broadcast, kind, payload, true, s.time)
}

// Tell sends a private message from the environment to one seat: the way to
// hand out private observations.
func (s *Step) Tell(seat int, kind, payload string) error {
	return s.Send(protocol.EnvSender, protocol.To(s.e.seats[seat].ID), kind, payload)
}

// Announce broadcasts a message from the environment to every agent.
func (s *Step) Announce(kind, payload string) error {
	return s.Send(protocol.EnvSender, protocol.Broadcast, kind, payload)
}

// Join adds seat to a channel (its name, without the "#" of
// protocol.Channel), creating the channel: messages sent to it from now on
// reach seat.
func (s *Step) Join(seat int, channel string) { s.e.bus.Join(seat, channel) }

// Leave removes seat from a channel: messages sent to it from now on do not
// reach seat (those already sent still do).
func (s *Step) Leave(seat int, channel string) { s.e.bus.Leave(seat, channel) }

// Fire moves seat's state machine by ev, running its role's callbacks
// (which see this Step as their Transition.Env). An event its state does
// not allow returns an *agents.TransitionError naming agent, state and
// event; a game should return it from Apply, which fails the episode. A
// before_ or leave_ callback that refuses the transition returns an
// *agents.CallbackError matching agents.ErrCanceled: the state is
// unchanged, and the game decides whether that breaks its rules. Firing
// is what moves the turn: the engine asks the agents whose states are
// acting ones.
func (s *Step) Fire(seat int, ev agents.Event) error {
	e := s.e
	m := e.machines[seat]
	if e.setup.Counterfactual != nil {
		return m.Fire(ev) // a replay records no transition
	}
	// The usual transition (agents.Machine.Move): nothing fires in
	// between, and it is recorded after, in place, field by field (extend).
	if from, to, ok := m.Move(ev); ok {
		rec := e.rec
		rec.Transitions = extend(rec.Transitions)
		t := &rec.Transitions[len(rec.Transitions)-1]
		t.Step, t.Seat, t.Event, t.From, t.To = s.time, seat, ev, from, to
		return nil
	}
	return s.fire(m, seat, ev)
}

// fire is Fire's general path, outside replays: an event Move leaves to
// Machine.Fire, and callbacks.
func (s *Step) fire(m *agents.Machine, seat int, ev agents.Event) error {
	rec := s.e.rec
	if !m.HasCallbacks() {
		// Nothing can fire in between: the transition is recorded after.
		from := m.State()
		if err := m.Fire(ev); err != nil {
			return err
		}
		rec.Transitions = append(rec.Transitions, episode.Transition{Step: s.time, Seat: seat, Event: ev, From: from, To: m.State()})
		return nil
	}
	// The transition's place in the record is taken before the machine
	// moves: a callback that fires again (an enter_ moving on) comes after
	// it, as it happens after it.
	k := len(rec.Transitions)
	from := m.State()
	rec.Transitions = append(rec.Transitions, episode.Transition{Step: s.time, Seat: seat, Event: ev, From: from})
	err := m.Fire(ev)
	if err == nil || moved(err) {
		// Taken, even when an enter_ or after_ callback failed after it.
		rec.Transitions[k].To = m.State()
		return err
	}
	// The machine did not move: its place goes, and what callbacks fired
	// meanwhile moves up.
	rec.Transitions = slices.Delete(rec.Transitions, k, k+1)
	return err
}

// moved reports whether a Fire that returned err moved the machine all the
// same: an enter_ or after_ callback failed after the transition.
func moved(err error) bool {
	var refused *agents.TransitionError
	return !errors.As(err, &refused) && !errors.Is(err, agents.ErrCanceled)
}

// FireAll fires ev on every seat that is present, stopping at the first
// error.
func (s *Step) FireAll(ev agents.Event) error {
	for i := range s.e.seats {
		if s.e.absent[i] {
			continue
		}
		if err := s.Fire(i, ev); err != nil {
			return err
		}
	}
	return nil
}

// State returns seat's FSM state.
func (s *Step) State(seat int) agents.State { return s.e.machines[seat].State() }

// Absent reports whether seat was taken out of this (counterfactual)
// episode. Absent seats are never scheduled.
func (s *Step) Absent(seat int) bool { return s.e.absent[seat] }

// Active reports whether seat can still act: present and not in a terminal
// state.
func (s *Step) Active(seat int) bool { return !s.e.absent[seat] && !s.e.machines[seat].Done() }

// HasMail reports whether seat has messages it has not yet observed that
// wake it: unread messages that are not quiet (protocol.Message.Quiet).
// The Async schedule acts on it; quiet messages wait in the mailbox until
// the seat acts for another reason.
func (s *Step) HasMail(seat int) bool {
	mail := s.e.mailbox(seat)
	for k := s.e.cursor[seat]; k < len(mail); k++ {
		if !mail[k].Quiet {
			return true
		}
	}
	return false
}

// End ends the episode by its rules (status completed) once the current call
// returns.
func (s *Step) End() { s.e.ended = true }

// Ended reports whether End was called.
func (s *Step) Ended() bool { return s.e.ended }

// Note records a scenario fact about seat's most recent turn in its Notes
// (for example that its move was illegal, or the night it attended): the
// metadata of the turn's sample. It does nothing when seat has not acted
// yet, and in counterfactual replays. key must not be one of troupe's own
// metadata keys.
func (s *Step) Note(seat int, key string, value any) {
	last := s.e.lastTurn[seat]
	if last == 0 {
		return
	}
	t := &s.e.rec.Turns[last-1]
	if t.Notes == nil {
		t.Notes = map[string]any{}
	}
	t.Notes[key] = value
}

// Errorf returns an error for a broken rule, naming the step.
func (s *Step) Errorf(format string, args ...any) error {
	return fmt.Errorf("step %d: %s", s.time, fmt.Sprintf(format, args...))
}

// Step is the Env that role callbacks see.
var _ agents.Env = (*Step)(nil)
