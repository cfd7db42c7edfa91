package env

import (
	"errors"
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Episode is a stepped episode: one episode of a scenario that its caller
// drives, in the manner of etcd-io/raft's RawNode. It owns no goroutine, no
// clock and no policy. At each decision point it says who must act and what
// each of them observes (Pending); it takes their moves (Act, one seat at a
// time, or Step, all of them at once) and, once every seat of the step has
// moved, applies the step with the scenario's rules and moves on to the
// next decision. When the episode is over (Done), Record is its record:
// the same record, byte for byte, as the engine writes when its policies
// give the same answers (Engine.Run is the standard driver of the same
// phases). Fork copies the episode at a decision point, so that several
// continuations of one history can be played; it copies the hidden state
// too, where ForkFor re-draws what one seat has not observed.
//
// Limits are counted inside the episode (steps, turns, messages); wall
// time is its driver's, which ends an episode it gave up on with Stop. An
// Episode is not safe for concurrent use. It never panics because of the
// game: a panic of the scenario's code fails the episode (status failed,
// end "game_error"), as in every run.
type Episode struct {
	e     *Engine
	setup Setup
	rec   *episode.Record
	// actors are the seats of the current step, in seat order, and moved
	// says which of them have given their move (Act).
	actors []int
	moved  []bool
	left   int
	// decision counts the steps readied (Decision).
	decision int
	// history is every move applied, in order of play, then those of the
	// current step given so far: what Fork replays.
	history []givenMove
	// resamples are the information-set re-draws of the hidden state
	// that made this episode (ForkFor), in order: Fork replays them too.
	resamples []resample
	done      bool
}

// givenMove is a move given to an episode: its seat and action.
type givenMove struct {
	seat   int
	action agents.Action
}

// Errors of a stepped episode's driver; the moves a scenario's rules
// refuse are the scenario's to judge, not errors.
var (
	// ErrEpisodeOver is returned for a move given to an episode that is
	// over.
	ErrEpisodeOver = errors.New("the episode is over")
	// ErrNotPending is returned for a move of a seat that does not act at
	// this step, or that has moved already.
	ErrNotPending = errors.New("the seat does not act now")
)

// NewEpisode starts the episode of setup: it makes the game, seats its
// agents, runs Start and stops at the first decision (or at the end, for
// an episode that ends before anyone acts). setup's Policy, which may be
// nil, is asked only by the counterfactual replays of the record (its
// Replay), for live moves. The error is for a setup that names no
// scenario, a scenario whose Info is invalid, a counterfactual, or a
// setup that sets Drive (the wall clock, how policies are asked, tree
// sampling), which is the caller's business as the episode's driver: a
// game that breaks while starting ends the episode failed, in its record.
func NewEpisode(setup Setup) (*Episode, error) {
	switch {
	case setup.Scenario == nil:
		return nil, fmt.Errorf("%w: no scenario", ErrBadConfig)
	case setup.Drive != (Drive{}):
		return nil, fmt.Errorf("%w: Setup.Drive is set (%+v), but a stepped episode's caller is its driver, which keeps the clock and asks the policies: leave Drive zero, or play the setup with Engine.Run or PlayTree", ErrBadConfig, setup.Drive)
	case setup.Counterfactual != nil:
		return nil, fmt.Errorf("%w: a stepped episode is played as recorded; its record's Replay plays counterfactuals", ErrBadConfig)
	}
	if err := setup.Scenario.Info().Validate(); err != nil {
		return nil, err
	}
	setup.stepped = true
	ep := &Episode{e: NewEngine(), setup: setup}
	ep.rec = ep.e.open(&ep.setup)
	ep.phase(ep.e.begin)
	return ep, nil
}

// phase runs one phase of the engine, recovering a panic of the game, and
// moves on to the next decision; it finishes the episode when the phase or
// the decision ends it.
func (ep *Episode) phase(f func() bool) {
	e := ep.e
	over := guard(e, f) || guard(e, func() bool {
		actors := e.decide()
		if actors == nil {
			return true
		}
		e.observe(actors)
		ep.actors = append(ep.actors[:0], actors...)
		ep.moved = resize(ep.moved, len(actors))
		ep.left = len(actors)
		ep.decision++
		return false
	})
	if over {
		ep.end(e.out)
	}
}

// guard runs the phase f of e, making of a panic what every run makes of
// one: the end of the episode, failed.
func guard(e *Engine, f func() bool) (over bool) {
	defer func() {
		if r := recover(); r != nil {
			over = e.over(gamePanic(r, panicAt()))
		}
	}()
	return f()
}

// end finishes the episode with the outcome out.
func (ep *Episode) end(out outcome) {
	ep.actors, ep.left = ep.actors[:0], 0
	ep.done = true
	if guard(ep.e, func() bool {
		ep.e.finish(out.status, out.end, out.err)
		return false
	}) {
		// The game panicked while the record was finished (Label).
		rec, failed := ep.rec, ep.e.out
		rec.Status, rec.End, rec.Err, rec.Stack = failed.status, failed.end, failed.err.Error(), stackOf(failed.err)
	}
}

// Done reports whether the episode is over: its record is then final.
func (ep *Episode) Done() bool { return ep.done }

// Seats returns the episode's seats, in seat order: nil when the game
// failed before it seated anyone.
func (ep *Episode) Seats() []Seat { return ep.rec.Seats }

// Time returns the logical time of the current step: 0 before the first
// (during Start), then 1, 2, ....
func (ep *Episode) Time() int { return ep.e.step.time }

// PendingSeat is one seat an episode waits for: its index, the key Act
// takes (and table sessions, and every driver), and what it observes, whose
// Agent is the seat's id. A driver answers it with Act(p.Seat, ...): no
// driver needs to map ids to seats.
type PendingSeat struct {
	Seat int
	agents.Observation
}

// Pending returns what the episode waits for: the seats that act at this
// step and have not moved yet, in seat order, each with its observation
// (view, legal actions, inbox, state, turn and the turn's policy seed);
// none when the episode is over. The slice is the caller's; the
// observations' views, legal lists and inboxes are the episode's, to read
// and not to change, valid until the step is applied.
func (ep *Episode) Pending() []PendingSeat {
	out := make([]PendingSeat, 0, ep.left)
	for k, i := range ep.actors {
		if !ep.moved[k] {
			out = append(out, PendingSeat{Seat: i, Observation: ep.e.obs[k]})
		}
	}
	return out
}

// Decision numbers the step the episode waits for: it changes when a step
// is applied (and the next readied), never while the step's moves come
// in. A driver that has moved its own seats of a step asks it to know
// whether there is anything new to move, without reading Pending.
func (ep *Episode) Decision() int { return ep.decision }

// Observation returns what seat observes when it acts at this step and
// has not moved yet, as Pending holds it; false otherwise. It costs the
// same whatever the seats: a driver that checks one seat's move among
// thousands (a table's session, the environment server) asks for that
// seat's alone, where Pending copies every seat's.
func (ep *Episode) Observation(seat int) (agents.Observation, bool) {
	k, ok := slices.BinarySearch(ep.actors, seat)
	if !ok || ep.moved[k] {
		return agents.Observation{}, false
	}
	return ep.e.obs[k], true
}

// Act gives seat's move at this step: seat is the index Pending names
// (PendingSeat.Seat). Once every seat of the step has
// moved, the step is applied and the episode moves on to the next
// decision (or ends). A seat that does not act now, or has moved already,
// is refused with ErrNotPending, and any move once the episode is over
// with ErrEpisodeOver; the episode is unchanged by a refused move. An
// action the scenario's rules refuse is not an error here: the game judges
// it, as in every run (and its Invalid, if set, is judged by the setup's
// InvalidRule).
func (ep *Episode) Act(seat int, a agents.Action) error {
	if ep.done {
		return ErrEpisodeOver
	}
	k, ok := slices.BinarySearch(ep.actors, seat)
	if !ok || ep.moved[k] {
		return fmt.Errorf("%w: seat %d (%s) at step %d", ErrNotPending, seat, ep.seatName(seat), ep.Time())
	}
	ep.e.acts[k] = a
	ep.moved[k] = true
	ep.left--
	ep.history = append(ep.history, givenMove{seat, a})
	if ep.left == 0 {
		ep.apply()
	}
	return nil
}

// Step gives the moves of every pending seat at once, in the order of
// Pending: a simultaneous step in one call, or the one mover of a
// sequential one. It is Act for each in turn, and refuses a number of
// actions other than the number of pending seats, changing nothing.
func (ep *Episode) Step(actions ...agents.Action) error {
	if ep.done {
		return ErrEpisodeOver
	}
	if len(actions) != ep.left {
		return fmt.Errorf("%w: %d actions for %d pending seats at step %d", ErrNotPending, len(actions), ep.left, ep.Time())
	}
	n := 0
	for k, i := range ep.actors {
		if ep.moved[k] {
			continue
		}
		if err := ep.Act(i, actions[n]); err != nil {
			return err // unreachable: i is pending
		}
		n++
	}
	return nil
}

// apply applies the step whose moves are all in, then readies the next.
func (ep *Episode) apply() {
	// The actors' slice is the engine's buffer or the episode's own: the
	// engine reads its own copy, ep.actors, as play does.
	actors := ep.actors
	ep.phase(func() bool { return ep.e.apply(actors) })
}

// Stop ends the episode now, as its driver decides: end names why (a
// driver's own reason, or one of the engine's: EndDeadline for its wall
// clock, EndPolicyError for a policy that failed, EndInterrupted), status
// is the outcome (completed and truncated episodes are scored, as every
// truncated episode is), and err, when not nil, is written in the record.
// The moves of the current step given so far are not applied, nor
// recorded. It does nothing to an episode that is over.
func (ep *Episode) Stop(status protocol.Status, end string, err error) {
	if ep.done {
		return
	}
	if status == "" {
		status = protocol.StatusAborted
	}
	ep.history = ep.history[:len(ep.history)-(len(ep.actors)-ep.left)]
	ep.end(outcome{status, end, err})
}

// Record returns the episode's record once it is over (Done), nil before.
// Its Replay re-plays counterfactuals of it (with setup's Policy for
// moves beyond the record), as a record of any run does.
func (ep *Episode) Record() *episode.Record {
	if !ep.done {
		return nil
	}
	return ep.rec
}

// Fork returns a copy of the episode at this point: a new episode of the
// same setup, given the same moves, including those of the current step
// given so far. The two then go on independently: each continuation's
// record is the record of a fresh episode given its moves. A fork replays
// the history (games are not copied), so it costs about what the history
// cost to play. Forking an episode that is over returns a copy of it.
//
// A fork is a perfect-information copy: its game is rebuilt from the same
// seed, so it holds the same hidden state (roles, the right answer) as the
// original, and a driver that plays forks out and reads their scores
// learns what its seats have not observed. ForkFor forks from one seat's
// information set instead. A fork of a ForkFor fork replays its re-draws.
func (ep *Episode) Fork() (*Episode, error) {
	f, err := ep.replay(ep.history)
	if err != nil {
		return nil, err
	}
	if ep.done && !f.done {
		// Stopped by its driver.
		f.Stop(ep.rec.Status, ep.rec.End, errorOf(ep.rec.Err))
	}
	return f, nil
}

// replay plays moves, a prefix of ep's history, into a new episode of ep's
// setup, with ep's re-draws of the hidden state that fall within it.
func (ep *Episode) replay(moves []givenMove) (*Episode, error) {
	f, err := NewEpisode(ep.setup)
	if err != nil {
		return nil, err
	}
	rs := ep.resamples
	redraw := func(at int) error {
		for ; len(rs) > 0 && rs[0].at == at; rs = rs[1:] {
			if err := f.resample(rs[0]); err != nil {
				return fmt.Errorf("fork: replaying the history: %w", err)
			}
			f.resamples = append(f.resamples, rs[0])
		}
		return nil
	}
	for j, m := range moves {
		if err := redraw(j); err != nil {
			return nil, err
		}
		if err := f.Act(m.seat, m.action); err != nil {
			// A game that is not a function of its seed and moves.
			return nil, fmt.Errorf("fork: replaying the history: %w", err)
		}
	}
	if err := redraw(len(moves)); err != nil {
		return nil, err
	}
	return f, nil
}

// errorOf is the error whose text is s, or nil for "".
func errorOf(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// seatName names seat i for an error.
func (ep *Episode) seatName(i int) string {
	if i >= 0 && i < len(ep.rec.Seats) {
		return ep.rec.Seats[i].ID
	}
	return "no such seat"
}
