package cputime_test

import (
	"testing"

	"github.com/troupe-rl/troupe/internal/cputime"
)

// TestSecondsCountsWork: burning CPU makes Seconds grow, where the
// platform measures it.
func TestSecondsCountsWork(t *testing.T) {
	if !cputime.Available {
		t.Skip("no CPU time on this platform")
	}
	start := cputime.Seconds()
	x := uint64(1)
	for cputime.Seconds()-start < 0.02 {
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 0 {
		t.Log(x) // keeps the loop
	}
	if got := cputime.Seconds() - start; got < 0.02 || got > 60 {
		t.Errorf("Seconds grew by %v over a 20 ms busy loop", got)
	}
}
