package credit

import (
	"math"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// treeAdvantages writes into dst, for every sample of the tree-sampled
// episode ep that is a candidate, its advantage within its group: the K
// candidates drawn for one seat at one turn, from the same history
// (episode.Tree). R_c is reward(candidate c), and the advantage
//
//	NormStd:         A_c = (R_c − mean) / (std + eps), std with K−1
//	NormCentre:      A_c = R_c − mean
//	NormLeaveOneOut: A_c = R_c − mean of the other K−1
//
// A group whose rewards are all equal gets 0. The samples that are not
// candidates (the turns of seats that were not tree-sampled) are left as
// they are.
func treeAdvantages(ep *trajectories.Episode, dst []float64, mode NormMode, eps float64, reward func(c *episode.Candidate) float64) {
	refs := ep.SampleRefs(nil)
	var r []float64
	for lo := 0; lo < len(refs); {
		if refs[lo].Candidate < 0 {
			lo++
			continue
		}
		hi := lo
		for hi < len(refs) && refs[hi].Candidate >= 0 && refs[hi].Turn == refs[lo].Turn {
			hi++
		}
		r = r[:0]
		for _, ref := range refs[lo:hi] {
			r = append(r, reward(&ep.Candidates[ref.Candidate]))
		}
		normalise(r, mode, eps)
		copy(dst[lo:hi], r)
		lo = hi
	}
}

// normalise replaces the rewards r of one group by their advantages under
// mode (see treeAdvantages); a group of one gets 0.
func normalise(r []float64, mode NormMode, eps float64) {
	n := float64(len(r))
	if len(r) < 2 {
		clear(r)
		return
	}
	// Deviations from the first: equal rewards give exactly 0.
	shift, sum := r[0], 0.0
	for i := range r {
		r[i] -= shift
		sum += r[i]
	}
	mean := sum / n
	switch mode {
	case NormStd:
		ss := 0.0
		for _, v := range r {
			ss += (v - mean) * (v - mean)
		}
		den := math.Sqrt(ss/(n-1)) + eps
		for i := range r {
			if den == 0 {
				r[i] = 0
			} else {
				r[i] = (r[i] - mean) / den
			}
		}
	case NormCentre:
		for i := range r {
			r[i] -= mean
		}
	case NormLeaveOneOut:
		for i := range r {
			r[i] -= (sum - r[i]) / (n - 1)
		}
	}
}

// splitTrees returns the indexes of group's episodes that are not
// tree-sampled and of those that are.
func splitTrees(group []*trajectories.Episode) (plain, trees []int) {
	for e, ep := range group {
		if len(ep.Candidates) > 0 {
			trees = append(trees, e)
		} else {
			plain = append(plain, e)
		}
	}
	return plain, trees
}
