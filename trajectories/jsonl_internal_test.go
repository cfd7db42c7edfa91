package trajectories

import (
	"strconv"
	"testing"
)

// TestCountUpCounts counts from 1 to a million in decimal digits, through
// every run of nines that makes a number a digit longer.
func TestCountUpCounts(t *testing.T) {
	d := []byte("0")
	for n := 1; n <= 1_000_000; n++ {
		d = countUp(d)
		if want := strconv.Itoa(n); string(d) != want {
			t.Fatalf("countUp after %d = %s, want %s", n-1, d, want)
		}
	}
}
