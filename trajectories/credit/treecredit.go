package credit

import "github.com/troupe-rl/troupe/trajectories"

// How each allocator credits the candidates of a tree-sampled episode
// (trajectories.TreeCredit). The allocators whose value for an episode
// depends on that episode alone credit a candidate from its own
// continuation (episode.Candidate.Fork); at-grpo, magrpo and team read
// what the candidate records of it; grpo, rloo, dr-grpo and rae, whose
// values depend on the group's other episodes or on earlier groups, are
// refused: a candidate's continuation is an episode of its own, in no
// group.

// TreeCredit implements trajectories.TreeCrediter: a candidate's team
// reward is its continuation's (episode.Candidate.Team).
func (Team) TreeCredit() trajectories.TreeCredit { return trajectories.TreeOwn }

// TreeCredit implements trajectories.TreeCrediter.
func (EqualSplit) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter.
func (Individual) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter.
func (Difference) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter.
func (LeaveOneOut) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter.
func (Shapley) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter: the estimate's
// permutations are drawn from the continuation's seeds, which are the
// main line's.
func (MonteCarloShapley) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter: the alternative
// actions are drawn in the continuation's replays.
func (COMA) TreeCredit() trajectories.TreeCredit { return trajectories.TreeByFork }

// TreeCredit implements trajectories.TreeCrediter: the candidates of
// one turn are compared with one another.
func (MAGRPO) TreeCredit() trajectories.TreeCredit { return trajectories.TreeOwn }

// TreeCredit implements trajectories.TreeCrediter: the candidates of
// one agent at one turn are compared with one another.
func (ATGRPO) TreeCredit() trajectories.TreeCredit { return trajectories.TreeOwn }

// TreeCredit implements trajectories.TreeCrediter: a discount credits
// candidates as what it discounts does, discounting by the turns of the
// episode it is given (a continuation's, under TreeByFork).
func (d Discount) TreeCredit() trajectories.TreeCredit { return trajectories.TreeCreditOf(d.of()) }

// treeTeam gives every candidate sample of ep, a finished tree-sampled
// episode, its continuation's reward for the candidate's seat's side
// (episode.Candidate.Team): what Team gives that turn in the
// continuation.
func treeTeam(ep *trajectories.Episode, dst []float64) {
	for s, ref := range ep.SampleRefs(nil) {
		if ref.Candidate >= 0 {
			dst[s] = ep.Candidates[ref.Candidate].Team
		}
	}
}
