package env

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// HiddenState is implemented by a game whose state holds what some seats do
// not observe (hidden roles, a right answer only some were told, a target
// only the speaker knows), in the manner of OpenSpiel's
// ResampleFromInfostate. Episode.ForkFor calls it on a fork of the episode
// so that a seat's search, sampling or what-if sees a world drawn from its
// information set, not the true one (Episode.Fork, a replay, is a
// perfect-information copy).
type HiddenState interface {
	// Resample re-draws, in place and from rng alone, the part of the
	// game's current state that seat has not observed, consistently with
	// everything seat has observed: seat's views and legal actions at this
	// step and after, given the same moves, must be those of the true
	// game, and whatever the seat was told (its messages) must stay true
	// in the re-drawn one. The same rng draws give the same state: it
	// must read no clock, no global random numbers and no map order.
	//
	// It is called between steps, at the logical time of the step about
	// to be decided (s.Time()), and may join and leave channels through s
	// (the re-drawn wolves' channel); it must send no message, fire no
	// event and not end the episode. It may change seats' roles and teams
	// by changing the elements of the slice Seats returns, in place (ids
	// stay): each seat whose role changes is given a machine of its new
	// role, in the same state when that role has it, else in the role's
	// initial state. The other seats' past observations are not rewritten:
	// the re-drawn world is the forking seat's, not a consistent history
	// for every seat.
	Resample(s *Step, seat int, rng *rand.Rand) error
}

// ErrNoHiddenState is returned by Episode.ForkFor for a scenario whose
// game does not implement HiddenState: a game that declares no hidden
// state, whose Fork is the only fork.
var ErrNoHiddenState = errors.New("the scenario declares no hidden state")

// resampleStream is the second word of the PCG a resample draws from, its
// first the seed ForkFor is given.
const resampleStream = 0x6869_6464_656e // "hidden"

// resample is an information-set fork's re-draw, kept so that a Fork of
// the fork replays it: before history[at], for seat, from seed.
type resample struct {
	at   int
	seat int
	seed uint64
}

// ForkFor returns a fork of the episode from seat's information set: a
// copy at the start of the current step whose hidden state the game
// re-draws from seed, consistently with what seat has observed
// (HiddenState). Seat observes in the fork what it observes in the
// original (the same view, legal actions, inbox, state and turn); what it
// has not observed (others' roles, the right answer) is drawn afresh, so a
// driver that searches over ForkFor's forks learns nothing the seat does
// not know, where Fork's copies, replays of the true game, see it all.
//
// The moves of the current step given so far are not carried into the
// fork: at a simultaneous step, they are others' moves the seat has not
// observed, and the step's actors are decided again on the re-drawn state
// (who acts may be hidden: the wolves hunt at night). The same seed gives
// the same fork; Fork of the fork replays the re-draw. ForkFor returns
// ErrNoHiddenState for a game that is not a HiddenState, ErrEpisodeOver
// for an episode that is over; an error of the game's Resample, or a role
// it gives that the scenario does not declare, is returned and fails the
// fork, not the episode. A fork is for search: its record's Replay (the
// counterfactuals of credit) replays the true game from the seed, not the
// re-drawn one.
func (ep *Episode) ForkFor(seat int, seed uint64) (*Episode, error) {
	if ep.done {
		return nil, ErrEpisodeOver
	}
	if _, ok := ep.e.current.(HiddenState); !ok {
		return nil, fmt.Errorf("%w: scenario %s", ErrNoHiddenState, ep.e.info.Name)
	}
	if seat < 0 || seat >= len(ep.rec.Seats) {
		return nil, fmt.Errorf("fork for seat %d: the episode has %d seats", seat, len(ep.rec.Seats))
	}
	at := len(ep.history) - (len(ep.actors) - ep.left) // the step's start
	f, err := ep.replay(ep.history[:at])
	if err != nil {
		return nil, err
	}
	r := resample{at: at, seat: seat, seed: seed}
	if err := f.resample(r); err != nil {
		return nil, err
	}
	f.resamples = append(f.resamples, r)
	return f, nil
}

// resample re-draws the hidden state of ep, which is at the start of a
// step (no move of it given), as r says, and decides the step again.
func (ep *Episode) resample(r resample) error {
	e := ep.e
	hs, ok := e.current.(HiddenState)
	if !ok || ep.done || ep.left != len(ep.actors) {
		// Unreachable for a fork of a game that resampled before.
		return fmt.Errorf("fork for seat %d: %w, or not at the start of a step", r.seat, ErrNoHiddenState)
	}
	rng := rand.New(rand.NewPCG(r.seed, resampleStream))
	if err := catch(func() error { return hs.Resample(&e.step, r.seat, rng) }); err != nil {
		return fmt.Errorf("fork for seat %d: resample: %w", r.seat, err)
	}
	if err := ep.reseat(e.current.Seats()); err != nil {
		return fmt.Errorf("fork for seat %d: resample: %w", r.seat, err)
	}
	// Undo the step's decision (its time, its turns, the actors' read
	// inboxes), then decide it again on the re-drawn state.
	for k, i := range ep.actors {
		e.cursor[i] -= len(e.obs[k].Inbox)
	}
	e.step.time--
	e.played -= len(ep.actors)
	ep.phase(func() bool { return false })
	return nil
}

// catch runs f, making of a panic an error.
func catch(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			_, _, err = gamePanic(r, panicAt())
		}
	}()
	return f()
}

// reseat gives each seat whose role the game changed a machine of its new
// role, in the same state when the role has it, else in its initial one.
func (ep *Episode) reseat(seats []Seat) error {
	e := ep.e
	if len(seats) != len(e.machines) {
		return fmt.Errorf("%w: %d seats, were %d", ErrBadSeats, len(seats), len(e.machines))
	}
	for i, s := range seats {
		if s.ID != e.seats[i].ID {
			return fmt.Errorf("%w: seat %d is now %q, was %q", ErrBadSeats, i, s.ID, e.seats[i].ID)
		}
		old := e.machines[i]
		if old.Role().Name == s.Role {
			continue
		}
		role := e.info.Role(s.Role)
		if role == nil {
			return fmt.Errorf("%w: seat %q has role %q, which scenario %s does not declare", ErrBadSeats, s.ID, s.Role, e.info.Name)
		}
		m := role.NewMachine(s.ID)
		m.Bind(i, &e.step)
		state := old.State()
		if !slices.Contains(role.States(), state) {
			state = role.Initial
		}
		if err := m.SetState(state); err != nil {
			return err
		}
		e.machines[i] = m
	}
	e.seats, e.rec.Seats = seats, seats
	return nil
}
