package trajectories

import (
	"io"
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

// A buffer grown for a large group is kept while the groups fill a quarter
// of it, so that a run of large episodes reuses it, and let go at the
// first flush of a small group, so that one huge episode does not pin it.
func TestLineWriterKeepsItsBufferWhileWellUsed(t *testing.T) {
	lw := &lineWriter{w: io.Discard, what: "test"}
	write := func(n int) {
		t.Helper()
		lw.buf = append(lw.buf, make([]byte, n)...)
		if err := lw.EndGroup(); err != nil {
			t.Fatal(err)
		}
		if len(lw.buf) != 0 {
			t.Fatalf("a group of %d bytes was not flushed", n)
		}
	}
	large := 10 * flushThreshold
	write(large)
	c := cap(lw.buf)
	if c < large {
		t.Fatalf("cap %d after a group of %d bytes: the buffer was dropped", c, large)
	}
	write(large)
	if cap(lw.buf) != c {
		t.Fatalf("cap %d after a second large group, want the same %d", cap(lw.buf), c)
	}
	write(flushThreshold)
	if lw.buf != nil {
		t.Fatalf("cap %d kept after a group of %d bytes", cap(lw.buf), flushThreshold)
	}
	write(flushThreshold)
	if cap(lw.buf) > 4*flushThreshold {
		t.Fatalf("cap %d after a small group", cap(lw.buf))
	}
}

// The prepared buffers go back to the pool when small or well used.
func TestKeepPreparedBuffers(t *testing.T) {
	for _, c := range []struct {
		used, capacity int
		want           bool
	}{
		{0, maxPooled, true},
		{10, maxPooled, true},
		{maxPooled, 8 * maxPooled, false},
		{2 * maxPooled, 8 * maxPooled, true},
		{7 * maxPooled, 8 * maxPooled, true},
	} {
		if got := keep(c.used, c.capacity); got != c.want {
			t.Errorf("keep(%d, %d) = %v, want %v", c.used, c.capacity, got, c.want)
		}
	}
}
