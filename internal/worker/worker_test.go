package worker_test

import (
	"context"
	"testing"

	"github.com/troupe-rl/troupe/internal/worker"
)

func TestOfReadsWhatWithCarries(t *testing.T) {
	ctx := context.Background()
	if got := worker.Of(ctx); got != 0 {
		t.Errorf("a context without a worker: %d, want 0", got)
	}
	w := worker.With(ctx, 3)
	if got := worker.Of(w); got != 3 {
		t.Errorf("worker.Of(worker.With(ctx, 3)) = %d", got)
	}
	if got := worker.Of(worker.With(ctx, -1)); got != 0 {
		t.Errorf("a negative number: %d, want 0", got)
	}
	// A context derived from a worker's carries its number.
	child, cancel := context.WithCancel(w)
	defer cancel()
	if got := worker.Of(child); got != 3 {
		t.Errorf("a derived context: %d, want 3", got)
	}
}
