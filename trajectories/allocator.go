package trajectories

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/protocol"
)

// Allocator decides how an episode's team reward is split among its samples.
//
// Allocate receives one group of episodes (the episodes that share a
// GroupIndex; a single episode when the run has no groups) and writes, for
// every episode e and every sample s of it (its s-th emitted turn), the
// reward into dst[e][s], a finite number (NaN or an infinity fails the
// group with ErrBadCredit). dst is sized by the caller. An episode's samples
// may not be projected (Samples nil, see RecordOnly): an allocator reads
// the record, and the samples' seats and times from the emitted turns then.
// Allocate must not change the episodes. A tree-sampled episode (its
// Candidates) is given only to allocators that say how they credit its
// candidates (TreeCrediter); see TreeCredit.
type Allocator interface {
	Name() string
	Allocate(ctx context.Context, group []*Episode, dst [][]float64) error
}

// Sequential is implemented by allocators whose result depends on the groups
// they saw before (a running baseline, say). Output calls them on one
// goroutine, in output order, so their state evolves the same way whatever
// the concurrency. Allocators without it must be safe for concurrent use.
type Sequential interface {
	Sequential() bool
}

// AnySequential reports whether one of allocs must see groups one at a time,
// in output order.
func AnySequential(allocs []Allocator) bool {
	for _, a := range allocs {
		if s, ok := a.(Sequential); ok && s.Sequential() {
			return true
		}
	}
	return false
}

// ErrDuplicateAllocator is returned by Allocate when two allocators share a
// name: their values would overwrite each other in a dict reward.
var ErrDuplicateAllocator = errors.New("two allocators with one name")

// ErrBadCredit reports an allocator that gave a sample a reward that is
// not a finite number: written as JSON null, it would reach a trainer as
// no reward at all.
var ErrBadCredit = errors.New("credit is not a finite number")

// Noter is implemented by allocators that report facts about how they
// allocated an episode, such as an estimate cut short by its budget.
// AllocateNoted is Allocate that may also set notes[e] (one map per episode
// of the group, nil until the allocator has something to say); Allocate
// merges notes[e] into the Metadata.Extra of every sample of episode e. A
// nil notes slice means the caller keeps no notes.
type Noter interface {
	Allocator
	AllocateNoted(ctx context.Context, group []*Episode, dst [][]float64, notes []map[string]any) error
}

// RewardFormat says how allocated rewards are written into samples.
type RewardFormat int

const (
	// RewardScalar writes the first allocator's value as the scalar reward.
	RewardScalar RewardFormat = iota
	// RewardDict writes every allocator's value into a dict keyed by the
	// allocator's name, for slime's --reward-key.
	RewardDict
)

// ParseRewardFormat parses "scalar" or "dict".
func ParseRewardFormat(s string) (RewardFormat, error) {
	switch s {
	case "scalar", "":
		return RewardScalar, nil
	case "dict":
		return RewardDict, nil
	}
	return 0, fmt.Errorf("reward format %q: want scalar or dict", s)
}

// Credit is what the allocators gave one episode: for each allocator, in
// the run's order, one value per emitted turn (that is, per sample, in
// order), and the notes the allocators made about the episode (Noter).
type Credit struct {
	Allocators []string    // the allocators' names, parameters included
	Values     [][]float64 // Values[a][k]: allocator a's value for emitted turn k
	Notes      map[string]any
}

// Value returns allocator a's value for emitted turn k, and whether there is
// one.
func (c *Credit) Value(a, k int) (float64, bool) {
	if c == nil || a < 0 || a >= len(c.Values) || k < 0 || k >= len(c.Values[a]) {
		return 0, false
	}
	return c.Values[a][k], true
}

// Allocate runs the allocators over one group, keeps their values in each
// episode's Credit, and writes them into the samples' Reward (scalar: the
// first allocator's; dict: all of them) and Metadata.Allocator, their notes
// into Metadata.Extra. Samples of failed or aborted episodes get a reward
// too: what the allocators give them (usually from a team reward of 0), so
// that a trainer that keeps them sees a defined value. The candidates of a
// tree-sampled episode are credited as each allocator's TreeCredit says;
// an allocator that cannot credit them fails the group with ErrTreeCredit.
func Allocate(ctx context.Context, group []*Episode, allocs []Allocator, format RewardFormat) error {
	if len(allocs) == 0 {
		return nil
	}
	names, err := allocatorNames(allocs)
	if err != nil {
		return err
	}
	return allocate(ctx, group, allocs, names, format)
}

// allocatorNames returns the allocators' names, or an error when two share
// one.
func allocatorNames(allocs []Allocator) ([]string, error) {
	names := make([]string, len(allocs))
	for i, a := range allocs {
		names[i] = a.Name()
		if slices.Contains(names[:i], names[i]) {
			return nil, fmt.Errorf("%w: %q given twice", ErrDuplicateAllocator, names[i])
		}
	}
	return names, nil
}

// allocate is Allocate with the allocators' names (allocatorNames) given,
// shared read-only by every Credit. It allocates three arrays per group,
// whatever its size: the credits, the slice headers (every episode's
// values, then dst), and the values; or none when buf, kept from an
// earlier group, has room.
func allocate(ctx context.Context, group []*Episode, allocs []Allocator, names []string, format RewardFormat) error {
	return allocateInto(ctx, nil, group, allocs, names, format)
}

// creditArrays are the arrays behind a group's credits, kept by an Output
// that recycles its groups.
type creditArrays struct {
	credits []Credit
	headers [][]float64
	values  []float64
	counts  []int // each episode's samples, counted once
}

// allocateInto is allocate, writing the credits into buf's arrays when buf
// is not nil.
func allocateInto(ctx context.Context, buf *creditArrays, group []*Episode, allocs []Allocator, names []string, format RewardFormat) error {
	if buf == nil {
		buf = &creditArrays{}
	}
	// Each episode's samples are counted once: counting them reads every
	// turn.
	counts := grow(buf.counts, len(group))
	buf.counts = counts
	total := 0
	for e, ep := range group {
		counts[e] = ep.SampleCount()
		total += counts[e]
	}
	// Credits and headers are written whole below; values are cleared,
	// since an allocator leaves an unfinished episode's at zero.
	credits := grow(buf.credits, len(group))
	headers := grow(buf.headers, len(group)*(len(allocs)+1))
	values := grown(buf.values, len(allocs)*total)
	buf.credits, buf.headers, buf.values = credits, headers, values
	for e := range group {
		credits[e] = Credit{Allocators: names, Values: headers[e*len(allocs) : (e+1)*len(allocs) : (e+1)*len(allocs)]}
		// One stretch of values for every allocator's values of the
		// episode.
		n := counts[e]
		all := values[:len(allocs)*n]
		values = values[len(allocs)*n:]
		for i := range allocs {
			credits[e].Values[i] = all[i*n : (i+1)*n : (i+1)*n]
		}
	}
	dst := headers[len(group)*len(allocs):]
	trees := hasTrees(group)
	for i, a := range allocs {
		for e := range dst {
			dst[e] = credits[e].Values[i]
		}
		if trees && TreeCreditOf(a) == TreeRefused {
			return fmt.Errorf("allocator %s: %w: its value depends on other episodes than a candidate's own continuation (use at-grpo or magrpo, which compare a turn's candidates)", a.Name(), ErrTreeCredit)
		}
		var notes []map[string]any
		var err error
		if n, ok := a.(Noter); ok {
			notes = make([]map[string]any, len(group))
			err = n.AllocateNoted(ctx, group, dst, notes)
		} else {
			err = a.Allocate(ctx, group, dst)
		}
		if err == nil && trees && TreeCreditOf(a) == TreeByFork {
			err = creditForks(ctx, a, group, dst)
		}
		if err != nil {
			return fmt.Errorf("allocator %s: %w", a.Name(), err)
		}
		for e, values := range dst {
			if finite.All(values) {
				continue
			}
			for k, v := range values {
				if !finite.Is(v) {
					return fmt.Errorf("allocator %s: %w: sample %d of episode %d got %v", a.Name(), ErrBadCredit, k, group[e].Index, v)
				}
			}
		}
		for e, m := range notes {
			if len(m) == 0 {
				continue
			}
			if credits[e].Notes == nil {
				credits[e].Notes = make(map[string]any, len(m))
			}
			maps.Copy(credits[e].Notes, m)
		}
	}
	for e, ep := range group {
		ApplyCredit(ep, &credits[e], format)
	}
	return nil
}

// ApplyCredit sets ep.Credit to c and writes it into ep's samples: their
// rewards (scalar: the first allocator's value; dict: every allocator's),
// Metadata.Allocator and the allocators' notes. With Samples, it is the
// projection of a record and its credit into slime samples (an episode file
// read back gives the samples of its run).
func ApplyCredit(ep *Episode, c *Credit, format RewardFormat) {
	ep.Credit = c
	if c == nil || len(c.Allocators) == 0 {
		return
	}
	// Allocator names may hold commas (their parameters) but never spaces.
	joined := c.Allocators[0]
	if format == RewardDict {
		joined = strings.Join(c.Allocators, " ")
	}
	for s := range ep.Samples {
		sm := &ep.Samples[s]
		if format == RewardScalar {
			sm.Reward = protocol.Scalar(c.Values[0][s])
		} else {
			sm.Reward = protocol.Reward{Kind: protocol.RewardDict, Dict: make(map[string]float64, len(c.Allocators))}
			for i, name := range c.Allocators {
				sm.Reward.Dict[name] = c.Values[i][s]
			}
		}
		sm.Metadata.Allocator = joined
		if len(c.Notes) > 0 {
			// A copy: a sample's Extra may be its turn's Notes.
			extra := make(map[string]any, len(sm.Metadata.Extra)+len(c.Notes))
			maps.Copy(extra, sm.Metadata.Extra)
			maps.Copy(extra, c.Notes)
			sm.Metadata.Extra = extra
		}
	}
}

// grown returns s with length n and zero elements, reusing its array when
// it is large enough (grow, then cleared).
func grown[T any](s []T, n int) []T {
	s = grow(s, n)
	clear(s)
	return s
}
