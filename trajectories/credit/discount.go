package credit

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/troupe-rl/troupe/trajectories"
)

// Unit is what turn discounting counts.
type Unit int

const (
	// UnitTurn counts the agent's own turns: t is the sample's turn number
	// (Metadata.Turn, from 0) and T the agent's last turn number in the
	// episode, counting every turn it took, emitted or not.
	UnitTurn Unit = iota
	// UnitStep counts the episode's logical steps: t is the step at which
	// the sample's turn was taken (Metadata.Step) and T the episode's last
	// step (Episode.Steps).
	UnitStep
)

var unitNames = []string{"turn", "step"}

// String returns "turn" or "step", the values of the unit parameter.
func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return fmt.Sprintf("Unit(%d)", int(u))
	}
	return unitNames[u]
}

// DefaultGamma is discount's default γ.
const DefaultGamma = 0.95

// Discount scales another allocator's values by turn: the sample of turn t
// gets γ^(T-t) times what Of gave it, so an agent's last turn keeps its
// full value and earlier turns less (see Unit for what t and T count). It
// composes with any allocator: Of's value is computed per agent (or per
// sample) first, then discounted.
type Discount struct {
	Of    trajectories.Allocator // the allocator discounted; nil means Team
	Gamma float64                // γ, in [0, 1]
	Unit  Unit
}

func (d Discount) of() trajectories.Allocator {
	if d.Of == nil {
		return Team{}
	}
	return d.Of
}

// Name implements trajectories.Allocator: a spec of the discount and,
// nested, of the allocator it discounts.
func (d Discount) Name() string {
	return specName("discount",
		kv{"gamma", ftoa(d.Gamma), ftoa(DefaultGamma)},
		kv{"unit", d.Unit.String(), UnitTurn.String()},
		kv{"of", nested(d.of().Name()), Team{}.Name()})
}

// Sequential implements trajectories.Sequential: a discount is sequential
// when what it discounts is.
func (d Discount) Sequential() bool {
	s, ok := d.of().(trajectories.Sequential)
	return ok && s.Sequential()
}

// Needs implements Needer.
func (d Discount) Needs() Needs { return NeedsOf(d.of()) }

// Close closes the discounted allocator when it has state to save.
func (d Discount) Close() error {
	if c, ok := d.of().(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Allocate implements trajectories.Allocator.
func (d Discount) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	return d.AllocateNoted(ctx, group, dst, nil)
}

// AllocateNoted implements Noter, passing on the notes of what it
// discounts.
func (d Discount) AllocateNoted(ctx context.Context, group []*trajectories.Episode, dst [][]float64, notes []map[string]any) error {
	if math.IsNaN(d.Gamma) || d.Gamma < 0 || d.Gamma > 1 {
		return fmt.Errorf("%w: discount: gamma %g is not in [0, 1]", ErrBadAllocatorParam, d.Gamma)
	}
	if d.Unit != UnitTurn && d.Unit != UnitStep {
		return fmt.Errorf("%w: discount: unknown unit %v", ErrBadAllocatorParam, d.Unit)
	}
	of := d.of()
	var err error
	if n, ok := of.(Noter); ok {
		err = n.AllocateNoted(ctx, group, dst, notes)
	} else {
		err = of.Allocate(ctx, group, dst)
	}
	if err != nil {
		return err
	}
	for e, ep := range group {
		steps, turns := sampleTimes(ep)
		if d.Unit == UnitStep {
			for s := range dst[e] {
				dst[e][s] *= pow(d.Gamma, ep.Steps-steps[s])
			}
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		last := make([]int, len(ep.Seats))
		for k := range ep.Turns {
			if a := &ep.Turns[k]; a.Seat >= 0 && a.Seat < len(last) {
				last[a.Seat] = max(last[a.Seat], a.Turn)
			}
		}
		for s, i := range seats {
			dst[e][s] *= pow(d.Gamma, last[i]-turns[s])
		}
	}
	return nil
}

// pow returns γ^k, with γ^0 = 1 (also for γ = 0) and k < 0 read as 0.
func pow(gamma float64, k int) float64 {
	if k <= 0 {
		return 1
	}
	return math.Pow(gamma, float64(k))
}
