package play

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

// The chunker starts with single groups, sizes chunks to take about
// chunkFor, and never hands out more than maxChunk or an even share of
// what is left.
func TestChunkerSizesChunksByTime(t *testing.T) {
	c := chunker{workers: 2}
	if k := c.next(1000); k != 1 {
		t.Fatalf("before any group was timed: chunks of %d, want 1", k)
	}
	for range 10 {
		c.took(10*time.Microsecond, 1) // 20 groups per chunkFor
	}
	if k := c.next(1000); k != 20 {
		t.Fatalf("10 µs groups: chunks of %d, want 20", k)
	}
	if k := c.next(40); k != 10 {
		t.Fatalf("40 groups left for 2 workers: chunks of %d, want 10", k)
	}
	if k := c.next(3); k != 1 {
		t.Fatalf("3 groups left: chunks of %d, want 1", k)
	}
	for range 1000 {
		c.took(time.Nanosecond, 1)
	}
	if k := c.next(1 << 20); k != maxChunk {
		t.Fatalf("very short groups: chunks of %d, want %d", k, maxChunk)
	}
	slow := chunker{workers: 2}
	slow.took(time.Second, 1)
	if k := slow.next(1000); k != 1 {
		t.Fatalf("slow groups (an LLM's): chunks of %d, want 1", k)
	}
}

// TestTally checks the summary's counters against a map, across the
// switch from the list to the index.
func TestTally(t *testing.T) {
	var tl tally[string, int]
	want := map[string]int{}
	for i := range 500 {
		k := fmt.Sprintf("role-%d", (i*7)%31)
		*tl.at(k) += i
		want[k] += i
	}
	got := map[string]int{}
	tl.into(got)
	if !maps.Equal(got, want) {
		t.Fatalf("tally %v, want %v", got, want)
	}
}
