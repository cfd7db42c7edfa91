package learn

import (
	"math"
	"testing"
	"unsafe"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// TestTrackIsTheScan checks row.track, which scans a row only when an
// update may have moved its best action, and keeps the count of actions
// tied with it and the others' largest value, against a full scan after every
// update: random updates of one action (whole false), and of every value of
// the row (whole true, the gradient learner's).
func TestTrackIsTheScan(t *testing.T) {
	known, updates := 0, 0
	defer func() {
		// The cache must be of use, not only right: known most of the time.
		if known < updates/2 {
			t.Errorf("the others' largest was known after %d of %d updates", known, updates)
		}
	}()
	for _, whole := range []bool{false, true} {
		for trial := range 200 {
			n := 1 + seeds.Intn(seeds.Mix(uint64(trial), 0), 6)
			r := newRow(make([]string, n), 0)
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
				want, ties := 0, 0
				for i, v := range r.values {
					if v > r.values[want] {
						want = i
					}
				}
				for _, v := range r.values {
					if v == r.values[want] {
						ties++
					}
				}
				if r.best != want || r.ties != ties {
					t.Fatalf("whole=%v trial %d update %d: best %d of %d tied, the scan says %d of %d (values %v)", whole, trial, u, r.best, r.ties, want, ties, r.values)
				}
				second := math.Inf(-1)
				for i, v := range r.values {
					if i != want {
						second = max(second, v)
					}
				}
				if r.secondOK && r.second != second {
					t.Fatalf("whole=%v trial %d update %d: the others' largest is %v, the scan says %v (values %v, best %d)", whole, trial, u, r.second, second, r.values, want)
				}
				if r.secondOK {
					known++
				}
				updates++
			}
		}
	}
}

// A table is four cache lines, its first row the last two: Act reads the
// first line of every agent's table and its row, Learn the row, so a
// field added or moved that spreads them over more lines costs every turn
// a cache miss or two. (Allocations of 256 bytes start on a 256-byte
// boundary, hence on a cache line.)
func TestTableLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is a 64-bit machine's")
	}
	if s := unsafe.Sizeof(row{}); s != 128 {
		t.Errorf("a row is %d bytes, want 128", s)
	}
	if s := unsafe.Sizeof(agentTable{}); s != 256 {
		t.Errorf("a table is %d bytes, want 256", s)
	}
	if o := unsafe.Offsetof(agentTable{}.rows) + unsafe.Offsetof(stateRows{}.own); o != 128 {
		t.Errorf("a table's first row is at offset %d, want 128", o)
	}
	// What Act reads: of a table, the id, next, the cached row and its
	// state, and where it notes the turn; of a row, the legal actions,
	// the values, best and ties.
	for name, end := range map[string]uintptr{
		"a table's id":        unsafe.Offsetof(agentTable{}.id) + unsafe.Sizeof(agentTable{}.id),
		"a table's next":      unsafe.Offsetof(agentTable{}.next) + unsafe.Sizeof(agentTable{}.next),
		"a table's last":      unsafe.Offsetof(agentTable{}.last) + unsafe.Sizeof(agentTable{}.last),
		"a table's lastState": unsafe.Offsetof(agentTable{}.lastState) + unsafe.Sizeof(agentTable{}.lastState),
		"a table's played":    unsafe.Offsetof(agentTable{}.played) + unsafe.Sizeof(agentTable{}.played),
		"a row's legal":       unsafe.Offsetof(row{}.legal) + unsafe.Sizeof(row{}.legal),
		"a row's values":      unsafe.Offsetof(row{}.values) + unsafe.Sizeof(row{}.values),
		"a row's best":        unsafe.Offsetof(row{}.best) + unsafe.Sizeof(row{}.best),
		"a row's ties":        unsafe.Offsetof(row{}.ties) + unsafe.Sizeof(row{}.ties),
	} {
		if end > 64 {
			t.Errorf("%s ends at byte %d, past the first cache line", name, end)
		}
	}
}
