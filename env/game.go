package env

import (
	"slices"

	"github.com/troupe-rl/troupe/agents"
)

// Game is one episode of a scenario: its state and rules. The engine calls
// its methods from a single goroutine, in this order: Seats, Start, then for
// each step Next (for a Scheduler), Observe (for each actor), Apply, and
// finally Score.
//
// Who acts is the agents' state: the engine asks the agents whose machines
// are in one of their role's acting states (agents.Role.Acting; see
// Schedule), so a game moves turns by firing events, never by keeping a
// turn of its own.
//
// A game must be a deterministic function of its scenario seed and the
// moves it is given: no clocks, no global random numbers, no map-order
// dependence.
type Game interface {
	// Seats returns the episode's agents in seat order. Ids must be unique,
	// non-empty, and must not be "env", "*" or start with "#"; roles must
	// be declared by the scenario.
	Seats() []Seat
	// Start runs before the first step, at logical time 0: it may hand out
	// private observations as messages, put agents in channels, and fire
	// initial events.
	Start(s *Step) error
	// Observe renders what seat sees now, and its legal actions (a
	// StateObserver's ObserveIn is called instead, with seat's state; a
	// scenario with Info.PublicView is observed once per step).
	Observe(seat int) View
	// Apply applies the step's moves, given in seat order. It validates
	// them (an illegal move is the scenario's to punish, not an error),
	// updates the state, sends the messages the moves cause, fires the
	// agents' FSM events, and calls s.End when the episode is over. An
	// error means the game itself is broken; the episode then fails.
	Apply(s *Step, moves []Move) error
	// Score scores the episode. It is called once, after the last step,
	// for completed and truncated episodes. Its rewards are finite
	// numbers: one that is NaN or infinite fails the episode
	// (ErrBadScore), as a wrong number of agent scores does (ErrBadSeats).
	Score() Score
}

// Scheduler is implemented by games that name the actors of each step
// themselves, where the agents' states do not say it. Next returns the
// seats that act, in seat order; nil leaves it to the states. Every seat
// named must be in an acting state of its role. See Schedule for what each
// schedule expects.
type Scheduler interface {
	Next(s *Step) []int
}

// StateObserver is implemented by games whose views, and so legal actions,
// depend on the acting agent's state (a role that acts in several states:
// proposing, then answering). The engine calls ObserveIn, with the seat's
// current state, instead of Observe.
type StateObserver interface {
	ObserveIn(seat int, state agents.State) View
}

// Labeler is implemented by games that know a ground truth for the
// episode (the answer to a puzzle); the engine writes it into every
// sample's label, where a reward model or a verifier can read it.
type Labeler interface {
	Label() string
}

// View is what one agent sees: the scenario's rendering of the state and,
// for finite action spaces, the legal actions. Games should reuse strings
// and slices wherever agents see the same thing; the engine never modifies
// them, and keeps them in the episode's record (episode.Turn), so a game
// must not change a Legal slice it has handed out.
type View struct {
	Text  string
	Legal []string
}

// Move is one agent's answer at a step. Its Action is the engine's, valid
// during the Apply it is given to: a game reads it there, and keeps what
// it needs (the text, usually) rather than the pointer.
type Move struct {
	Seat   int
	Action *agents.Action
}

// IsLegal reports whether the move's text is one of legal. A nil legal list
// means free-form actions, all of them legal.
func (m Move) IsLegal(legal []string) bool {
	return legal == nil || slices.Contains(legal, m.Action.Text)
}
