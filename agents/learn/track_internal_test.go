package learn

import (
	"testing"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// TestTrackIsTheScan checks row.track, which scans a row only when an
// update may have moved its best action, against a full scan after every
// update: random updates of one action (whole false), and of every value of
// the row (whole true, the gradient learner's).
func TestTrackIsTheScan(t *testing.T) {
	for _, whole := range []bool{false, true} {
		for trial := range 200 {
			n := 1 + seeds.Intn(seeds.Mix(uint64(trial), 0), 6)
			r := &row{values: make([]float64, n), greedy: -1}
			for u := range 50 {
				seed := seeds.Mix(uint64(trial), 1, uint64(u))
				a := seeds.Intn(seed, n)
				old := r.values[a]
				// Few distinct values, so that ties happen.
				if whole {
					for i := range r.values {
						r.values[i] = float64(seeds.Intn(seeds.Mix1(seed, uint64(i)+1), 4))
					}
				} else {
					r.values[a] = float64(seeds.Intn(seeds.Mix1(seed, 1), 4))
				}
				r.track(a, old, whole)
				want := 0
				for i, v := range r.values {
					if v > r.values[want] {
						want = i
					}
				}
				if r.best != want {
					t.Fatalf("whole=%v trial %d update %d: best %d, the scan says %d (values %v)", whole, trial, u, r.best, want, r.values)
				}
			}
		}
	}
}
