package trajectories

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/protocol"
)

// Allocator decides how an episode's team reward is split among its samples.
//
// Allocate receives one group of episodes (the episodes that share a
// GroupIndex; a single episode when the run has no groups) and writes, for
// every episode e and every sample s of it, the reward into dst[e][s]. dst is
// sized by the caller. Allocate must not change the episodes.
type Allocator interface {
	Name() string
	Allocate(ctx context.Context, group []*Episode, dst [][]float64) error
}

// Sequential is implemented by allocators whose result depends on the groups
// they saw before (a running baseline, say). The runner calls them on one
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

// Allocate runs the allocators over one group and writes their values into
// the samples' Reward (scalar: the first allocator's; dict: all of them) and
// Metadata.Allocator. Samples of failed or aborted episodes get a reward too:
// what the allocators give them (usually from a team reward of 0), so that a
// trainer that keeps them sees a defined value.
func Allocate(ctx context.Context, group []*Episode, allocs []Allocator, format RewardFormat) error {
	if len(allocs) == 0 {
		return nil
	}
	dst := make([][]float64, len(group))
	for e, ep := range group {
		dst[e] = make([]float64, len(ep.Samples))
	}
	names := make([]string, len(allocs))
	for i, a := range allocs {
		names[i] = a.Name()
		if slices.Contains(names[:i], names[i]) {
			return fmt.Errorf("%w: %q given twice", ErrDuplicateAllocator, names[i])
		}
	}
	// Allocator names may hold commas (their parameters) but never spaces.
	joined := strings.Join(names, " ")
	for i, a := range allocs {
		for e := range dst {
			clear(dst[e])
		}
		var notes []map[string]any
		var err error
		if n, ok := a.(Noter); ok {
			notes = make([]map[string]any, len(group))
			err = n.AllocateNoted(ctx, group, dst, notes)
		} else {
			err = a.Allocate(ctx, group, dst)
		}
		if err != nil {
			return fmt.Errorf("allocator %s: %w", a.Name(), err)
		}
		for e, m := range notes {
			if len(m) == 0 {
				continue
			}
			for s := range group[e].Samples {
				// A copy: a sample's Extra may be its turn's Notes.
				md := &group[e].Samples[s].Metadata
				extra := make(map[string]any, len(md.Extra)+len(m))
				maps.Copy(extra, md.Extra)
				maps.Copy(extra, m)
				md.Extra = extra
			}
		}
		for e, ep := range group {
			for s := range ep.Samples {
				sm := &ep.Samples[s]
				switch {
				case format == RewardScalar:
					if i == 0 {
						sm.Reward = protocol.Scalar(dst[e][s])
						sm.Metadata.Allocator = names[0]
					}
				default:
					if i == 0 {
						sm.Reward = protocol.Reward{Kind: protocol.RewardDict, Dict: make(map[string]float64, len(allocs))}
						sm.Metadata.Allocator = joined
					}
					sm.Reward.Dict[names[i]] = dst[e][s]
				}
			}
		}
	}
	return nil
}
