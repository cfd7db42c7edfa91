package env

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/agents"
)

// Space is the space of a numeric observation or state: a tensor of
// float32 values of the given shape (row-major), every element within
// [Low, High]. It is what Gymnasium calls a Box, in the dtype every
// learner's network eats. A scalar bound for all elements keeps the
// declaration small; a feature that needs a wider range widens both.
type Space struct {
	// Shape is the tensor's dimensions, each at least 1; one dimension
	// for a feature vector.
	Shape []int
	// Low and High bound every element (Low <= High; infinite bounds are
	// allowed for unbounded features).
	Low, High float32
}

// Size returns the number of elements of a tensor of the space: the
// product of its dimensions (1 for a scalar, whose Shape is empty).
func (sp Space) Size() int {
	n := 1
	for _, d := range sp.Shape {
		n *= d
	}
	return n
}

// String writes the space as "float32[3,3,2] in [0,1]".
func (sp Space) String() string {
	dims := make([]string, len(sp.Shape))
	for i, d := range sp.Shape {
		dims[i] = strconv.Itoa(d)
	}
	return fmt.Sprintf("float32[%s] in [%g,%g]", strings.Join(dims, ","), sp.Low, sp.High)
}

// MaxFeatures bounds the elements of one declared space, so that a typo in
// a scenario's shape is an error rather than an allocation of gigabytes per
// step.
const MaxFeatures = 1 << 24

// Validate checks the space: every dimension at least 1, at most
// MaxFeatures elements, bounds that are not NaN and in order.
func (sp Space) Validate() error {
	n := 1
	for i, d := range sp.Shape {
		if d < 1 {
			return fmt.Errorf("%w: space %v: dimension %d is %d (at least 1)", ErrBadScenario, sp, i, d)
		}
		n *= d
		if n > MaxFeatures {
			return fmt.Errorf("%w: space %v: over %d elements", ErrBadScenario, sp, MaxFeatures)
		}
	}
	if math.IsNaN(float64(sp.Low)) || math.IsNaN(float64(sp.High)) || sp.Low > sp.High {
		return fmt.Errorf("%w: space %v: bounds must be ordered numbers", ErrBadScenario, sp)
	}
	return nil
}

// Features is implemented by scenarios that declare numeric observations
// beside their text views, for learners whose networks read tensors (a
// board's planes, a week's attendance) rather than text. The scenario
// declares the spaces, which a learner needs before any episode starts;
// its games, FeatureGame, write the values.
//
// ObservationSpace is the space of the features of a seat of role under
// p; StateSpace the space of the global state, the true state of the game
// that a centralised critic (MAPPO's, QMIX's mixer) reads in training and
// no seat sees in play. Both must return the same space for the same
// arguments, every time.
type Features interface {
	ObservationSpace(p Params, role string) Space
	StateSpace(p Params) Space
}

// FeatureGame is implemented by the games of a Features scenario: it writes
// the current values of the spaces its scenario declares. Both write every
// element of dst, whose length is the declared space's Size, and must not
// keep it; they change nothing in the game, and may be called at any
// moment between the engine's calls (before the first decision, between
// steps, after the end).
//
// ObserveFeatures writes what seat observes, from what seat may know and
// nothing more: its own hidden role but not others', the moves it was
// shown but not those it was not. The same rule binds its text view, and
// HiddenState's resampling must leave it unchanged, as it leaves the view.
// WriteState writes the true, global state, hidden parts included.
type FeatureGame interface {
	ObserveFeatures(seat int, dst []float32)
	WriteState(dst []float32)
}

// ErrNoFeatures is returned by Episode.Features and Episode.State for an
// episode whose game writes no numeric observation (its scenario is not a
// Features, or the game failed before it was made).
var ErrNoFeatures = errors.New("the scenario declares no numeric observation (env.Features)")

// Features writes seat's numeric observation now into dst, whose length
// must be the size of the space the scenario declares for seat's role. It
// returns ErrNoFeatures for a game that is not a FeatureGame, an error for
// a bad seat or length, and an error naming the panic when the game's code
// panics (the episode itself is unchanged).
func (ep *Episode) Features(seat int, dst []float32) error {
	g, ok := ep.e.current.(FeatureGame)
	if !ok {
		return fmt.Errorf("%w: scenario %s", ErrNoFeatures, ep.setup.Scenario.Info().Name)
	}
	if seat < 0 || seat >= len(ep.rec.Seats) {
		return fmt.Errorf("features of seat %d: the episode has %d seats", seat, len(ep.rec.Seats))
	}
	return ep.writeFeatures(func() { g.ObserveFeatures(seat, dst) })
}

// FeaturesFor gives o, the observation of seat that its driver is about
// to ask policy p, the seat's numeric observation now (Features, in a new
// buffer) when p reads it (agents.ReadsFeatures) and the episode's game
// writes it, as the engine does for the policies it asks; otherwise it
// leaves o as it is. Drivers that ask house policies on a stepped episode
// (a table, the environment server's vectors) call it before asking.
func (ep *Episode) FeaturesFor(p agents.Policy, seat int, o *agents.Observation) error {
	fs, declared := ep.setup.Scenario.(Features)
	if _, writes := ep.e.current.(FeatureGame); !declared || !writes || !agents.ReadsFeatures(p) {
		return nil
	}
	if seat < 0 || seat >= len(ep.rec.Seats) {
		return fmt.Errorf("features of seat %d: the episode has %d seats", seat, len(ep.rec.Seats))
	}
	buf := make([]float32, fs.ObservationSpace(ep.setup.Params, ep.rec.Seats[seat].Role).Size())
	if err := ep.Features(seat, buf); err != nil {
		return err
	}
	o.Features = buf
	return nil
}

// State writes the game's global state now into dst, whose length must be
// the size of the scenario's StateSpace: for a centralised critic, never
// for a seat's policy. Its errors are Features'.
func (ep *Episode) State(dst []float32) error {
	g, ok := ep.e.current.(FeatureGame)
	if !ok {
		return fmt.Errorf("%w: scenario %s", ErrNoFeatures, ep.setup.Scenario.Info().Name)
	}
	return ep.writeFeatures(func() { g.WriteState(dst) })
}

// writeFeatures runs f, making of a panic of the game's code an error.
func (ep *Episode) writeFeatures(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			_, _, perr := gamePanic(r, panicAt())
			err = fmt.Errorf("scenario %s: writing features: %w", ep.setup.Scenario.Info().Name, perr)
		}
	}()
	f()
	return nil
}
