package experiment

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// ModeRule says which clusters of the seeds' final results FindModes
// reports as modes. The zero value is the default rule.
type ModeRule struct {
	// MinShare is the least share of the values that a mode holds; a
	// cluster with fewer is a stray, reported in no mode. 0 means
	// DefaultModeMinShare. Whatever the share, a mode among others holds
	// at least two values: one seed that ended elsewhere is not a mode.
	MinShare float64
	// Significance is the level of the gap test that splits values into
	// clusters (see FindModes); 0 means DefaultModeSignificance.
	Significance float64
}

// Defaults of ModeRule, and the noise floor of every rule.
const (
	// DefaultModeMinShare: a mode holds a tenth of the seeds (2 of 20).
	DefaultModeMinShare = 0.1
	// DefaultModeSignificance: values spread at random over an interval
	// are split in fewer than 1% of draws.
	DefaultModeSignificance = 0.01
	// ModeResolution is the least gap, as a share of the largest
	// magnitude among the values, that separates two modes: values that
	// all lie within noise of each other (0.989 to 0.990 of G*) are one
	// mode however they are spread.
	ModeResolution = 0.02
	// minModeValues is the least number of values in a mode.
	minModeValues = 2
)

func (r ModeRule) minShare() float64 {
	if r.MinShare > 0 {
		return r.MinShare
	}
	return DefaultModeMinShare
}

func (r ModeRule) significance() float64 {
	if r.Significance > 0 {
		return r.Significance
	}
	return DefaultModeSignificance
}

// check reports a rule whose numbers are not shares.
func (r ModeRule) check() error {
	if !(r.MinShare >= 0 && r.MinShare <= 1) {
		return fmt.Errorf("mode min share %g: want a share of the seeds, from 0 (the default, %g) to 1", r.MinShare, DefaultModeMinShare)
	}
	if !(r.Significance >= 0 && r.Significance < 1) {
		return fmt.Errorf("mode significance %g: want a level from 0 (the default, %g) to below 1", r.Significance, DefaultModeSignificance)
	}
	return nil
}

// Mode is one cluster of the seeds' final results.
type Mode struct {
	// Center is the mean of the values in the mode; Low and High bound
	// them.
	Center float64 `json:"center"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	// Seeds counts the values in the mode, Share is their share of all
	// the (finite) values; the shares of the modes sum to less than 1
	// when some values are strays, in no mode.
	Seeds int     `json:"seeds"`
	Share float64 `json:"share"`
}

// FindModes clusters xs in one dimension, by the gaps between them that
// are too wide for values spread at random, and returns as the modes, in
// increasing order, the clusters that hold at least the rule's share of
// the values and two of them, or the one cluster when the values do not
// split; none for no finite value. Values that are not finite are left
// out; those in a smaller cluster (a seed that ended apart) are strays,
// in no mode.
//
// The gap test: sorted, n values have n − 1 gaps, and were the inner
// n − 2 values spread uniformly at random between the outer two, the gaps
// as shares of the range would be uniform on the simplex, where any j
// given gaps sum to at least s with probability P(Binomial(n−2, s) ≤
// j−1) (their sum is Beta(j, n−1−j)). So the j widest gaps, summing to
// s_j of the range, have p_j = C(n−1, j)·P(Binomial(n−2, s_j) ≤ j−1) (a
// union bound), and the values split at the j widest gaps for the j with
// the least p_j when it is below the rule's Significance; each part is
// then tested on its own range in turn. Gaps below ModeResolution of the
// largest |x| never split. A continuous spread, even or random, thus
// stays one mode (split in 1 to 3% of uniform draws of 5 to 200 values at
// the default Significance, 1%: the least p_j is taken), while
// tight clusters apart are split however few their values: three
// clusters of three or four seeds whose two gaps are 0.85 of the range
// have p_2 ≈ 4·10⁻⁴, where no single gap is significant (p_1 ≈ 0.09).
// Values that tie exactly (a game of few outcomes) have gaps of 0, which
// random values would not: a few distinct values are split into them,
// each a mode with enough seeds. The method is deterministic and needs no
// bandwidth or number of clusters; with fewer than 3 values nothing can
// be tested, and they are one mode.
func FindModes(xs []float64, rule ModeRule) []Mode {
	sorted := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			sorted = append(sorted, x)
		}
	}
	if len(sorted) == 0 {
		return nil
	}
	slices.Sort(sorted)
	scale := max(math.Abs(sorted[0]), math.Abs(sorted[len(sorted)-1]))
	least := max(minModeValues, int(math.Ceil(rule.minShare()*float64(len(sorted))-1e-9)))
	var modes []Mode
	parts := splitByGaps(sorted, ModeResolution*scale, rule.significance(), nil)
	for _, part := range parts {
		if len(part) < least && len(parts) > 1 {
			continue // a stray
		}
		modes = append(modes, Mode{Center: mean(part), Low: part[0], High: part[len(part)-1], Seeds: len(part), Share: float64(len(part)) / float64(len(sorted))})
	}
	return modes
}

// splitByGaps appends to parts the clusters of sorted (see FindModes):
// sorted itself when no set of its widest gaps, each at least resolution,
// is significant at level alpha, else the clusters of each part between
// the gaps of the most significant set.
func splitByGaps(sorted []float64, resolution, alpha float64, parts [][]float64) [][]float64 {
	n := len(sorted)
	span := sorted[n-1] - sorted[0]
	if n < 3 || span <= 0 {
		return append(parts, sorted)
	}
	// The gaps that may split, widest first (the lower one first among
	// equals, so that the split does not depend on the sort).
	var at []int // at[k]: the gap between sorted[at[k]-1] and sorted[at[k]]
	for i := 1; i < n; i++ {
		if g := sorted[i] - sorted[i-1]; g > 0 && g >= resolution {
			at = append(at, i)
		}
	}
	gap := func(i int) float64 { return sorted[i] - sorted[i-1] }
	slices.SortStableFunc(at, func(a, b int) int { return cmp.Compare(gap(b), gap(a)) })
	logFact := make([]float64, n)
	for k := 1; k < n; k++ {
		logFact[k] = logFact[k-1] + math.Log(float64(k))
	}
	logChoose := func(n, k int) float64 { return logFact[n] - logFact[k] - logFact[n-k] }
	best, bestJ := 0.0, 0 // log p of the best set, and its size
	sum := 0.0
	for j := 1; j <= len(at); j++ {
		sum += gap(at[j-1])
		// P(j given gaps sum to at least share) = P(Binomial(n−2, share) ≤ j−1).
		share := min(1, sum/span)
		logP := logChoose(n-1, j) + logBinomialCDF(n-2, j-1, share, logChoose)
		if logP < best {
			best, bestJ = logP, j
		}
	}
	if bestJ == 0 || best >= math.Log(alpha) {
		return append(parts, sorted)
	}
	cuts := slices.Clone(at[:bestJ])
	slices.Sort(cuts)
	start := 0
	for _, c := range append(cuts, n) {
		parts = splitByGaps(sorted[start:c], resolution, alpha, parts)
		start = c
	}
	return parts
}

// logBinomialCDF is log P(Binomial(n, q) ≤ k), given log C(n, ·).
func logBinomialCDF(n, k int, q float64, logChoose func(n, k int) float64) float64 {
	if k >= n || q <= 0 {
		return 0
	}
	lq, lr := math.Log(q), math.Log1p(-q)
	top := math.Inf(-1)
	terms := make([]float64, 0, k+1)
	for i := 0; i <= k; i++ {
		t := logChoose(n, i) + float64(n-i)*lr
		if i > 0 {
			t += float64(i) * lq
		}
		terms = append(terms, t)
		top = max(top, t)
	}
	if math.IsInf(top, -1) {
		return top
	}
	sum := 0.0
	for _, t := range terms {
		sum += math.Exp(t - top)
	}
	return top + math.Log(sum)
}
