package experiment

import (
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// Optimum returns G*, the best team reward an episode of a scenario with
// parameters p can reach, so that results can be reported as G/G*.
type Optimum func(p env.Params) (float64, error)

// KnownOptimum returns the optimum the experiment package can compute for
// the named scenario: elfarol's, by dynamic programming, and committee's:
// 1 when an adviser is informed (the decider is always right when the
// informed advisers tell the truth and the others abstain), and chance,
// 1/options, when none is. False for any other scenario.
func KnownOptimum(scenario string) (Optimum, bool) {
	switch scenario {
	case "elfarol":
		return func(p env.Params) (float64, error) {
			return ElFarolOptimum(p.Int("agents"), p.Int("nights"), p.Float("capacity"))
		}, true
	case "committee":
		return func(p env.Params) (float64, error) {
			if p.Int("informed") == 0 {
				return 1 / float64(p.Int("options")), nil
			}
			return 1, nil
		}, true
	}
	return nil, false
}

// ElFarolOptimum returns the exact optimum of the multi-night El Farol
// bar: the largest G = Σ_k φ(x_k), φ(x) = x·e^(-x/c), over every way of
// spreading n patrons over k nights (each patron goes out exactly once; x_k
// ≥ 0, Σ x_k = n).
//
// φ is concave only up to 2c, so no greedy spreading is safe; dynamic
// programming over nights is exact: best_j(m), the best utility of m
// patrons on the first j nights, is max_x φ(x) + best_{j-1}(m − x). It
// costs O(k·n²) time and O(n) memory: 280,000 steps for 200 patrons on 7
// nights.
func ElFarolOptimum(n, k int, c float64) (float64, error) {
	if n < 0 || k < 1 || !(c > 0) || math.IsInf(c, 0) {
		return 0, fmt.Errorf("the optimum of El Farol: want agents >= 0, nights >= 1, capacity > 0; got %d, %d, %v", n, k, c)
	}
	phi := make([]float64, n+1)
	for x := range phi {
		phi[x] = elfarol.Utility(float64(x), c)
	}
	// best[m] after night j: the best of m patrons on nights 0..j.
	best := append([]float64(nil), phi...)
	next := make([]float64, n+1)
	for range k - 1 {
		for m := range next {
			top := math.Inf(-1)
			for x := 0; x <= m; x++ {
				top = max(top, phi[x]+best[m-x])
			}
			next[m] = top
		}
		best, next = next, best
	}
	return best[n], nil
}
