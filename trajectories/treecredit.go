package trajectories

import (
	"context"
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/episode"
)

// TreeCredit says how an allocator credits the candidates of a
// tree-sampled episode (episode.Tree): K samples per sampled turn, each an
// answer that the main line did not necessarily play.
type TreeCredit int

const (
	// TreeRefused is what an allocator that says nothing gets: it cannot
	// credit a candidate, and Allocate refuses a tree-sampled episode with
	// ErrTreeCredit naming it. A value that depends on the other episodes
	// of the group or on earlier groups (GRPO's group means, RAE's running
	// baselines) has no fork to be computed from.
	TreeRefused TreeCredit = iota
	// TreeByFork is an allocator whose value for an episode depends on
	// that episode alone (its record and its counterfactual replays):
	// Allocate gives each candidate the value the allocator gives the
	// candidate's turn in the candidate's own continuation
	// (episode.Candidate.Fork), allocated as a group of one. The samples
	// of turns that were not tree-sampled keep the main line's values.
	TreeByFork
	// TreeOwn is an allocator that credits the candidates itself, from
	// what each candidate records of its continuation (at-grpo, magrpo:
	// the advantage within the turn's candidates; team: its Team).
	TreeOwn
)

// TreeCrediter is implemented by allocators that can credit the
// candidates of tree-sampled episodes; see TreeCredit.
type TreeCrediter interface {
	TreeCredit() TreeCredit
}

// TreeCreditOf returns how a credits tree candidates: TreeRefused for an
// allocator that does not say.
func TreeCreditOf(a Allocator) TreeCredit {
	if t, ok := a.(TreeCrediter); ok {
		return t.TreeCredit()
	}
	return TreeRefused
}

// Errors of crediting tree-sampled episodes.
var (
	// ErrTreeCredit: an allocator that cannot credit tree candidates
	// (TreeRefused) got a tree-sampled episode.
	ErrTreeCredit = errors.New("the allocator cannot credit tree-sampled candidates")
	// ErrNoFork: an allocator that credits candidates from their
	// continuations (TreeByFork) got a candidate whose continuation was
	// not kept (episode.Candidate.Fork is nil: read back from a file, or
	// played on another machine).
	ErrNoFork = errors.New("the candidate's continuation was not kept")
)

// hasTrees reports whether one of group's episodes is tree-sampled.
func hasTrees(group []*Episode) bool {
	for _, ep := range group {
		if len(ep.Candidates) > 0 {
			return true
		}
	}
	return false
}

// creditForks overwrites, in dst, the value of every candidate sample of
// group's tree-sampled episodes with what a gives the candidate's turn in
// its own continuation (TreeByFork). Candidates of episodes that did not
// finish keep what a gave them: such an episode has no outcome.
func creditForks(ctx context.Context, a Allocator, group []*Episode, dst [][]float64) error {
	var refs []episode.SampleRef
	for e, ep := range group {
		if len(ep.Candidates) == 0 || !ep.Finished() {
			continue
		}
		refs = ep.SampleRefs(refs[:0])
		if len(refs) != len(dst[e]) {
			return fmt.Errorf("episode %d: %d samples for %d values", ep.Index, len(refs), len(dst[e]))
		}
		for s, ref := range refs {
			if ref.Candidate < 0 {
				continue
			}
			v, err := forkValue(ctx, a, ep, &ep.Candidates[ref.Candidate])
			if err != nil {
				return err
			}
			dst[e][s] = v
		}
	}
	return nil
}

// forkValue returns what a gives candidate c of ep: its value for the
// candidate's turn in c's continuation, allocated alone.
func forkValue(ctx context.Context, a Allocator, ep *Episode, c *episode.Candidate) (float64, error) {
	if c.Fork == nil {
		return 0, fmt.Errorf("episode %d turn %d candidate %d: %w (only a local run keeps it; at-grpo, magrpo and team credit candidates without it)", ep.Index, c.Turn, c.Index, ErrNoFork)
	}
	fork := RecordOnly(c.Fork)
	// The candidate's turn is the fork's turn of the same index: the
	// fork replays the main line's turns before it, then the step's in
	// seat order. Its sample is the fork's emitted turns before it.
	if c.Turn >= len(fork.Turns) || !fork.Turns[c.Turn].Emit || fork.Turns[c.Turn].Action != c.Action {
		return 0, fmt.Errorf("episode %d turn %d candidate %d: its continuation does not hold its turn", ep.Index, c.Turn, c.Index)
	}
	s := 0
	for k := range c.Turn {
		if fork.Turns[k].Emit {
			s++
		}
	}
	vals := make([]float64, fork.SampleCount())
	if err := a.Allocate(ctx, []*Episode{fork}, [][]float64{vals}); err != nil {
		return 0, fmt.Errorf("episode %d turn %d candidate %d's continuation: %w", ep.Index, c.Turn, c.Index, err)
	}
	return vals[s], nil
}
