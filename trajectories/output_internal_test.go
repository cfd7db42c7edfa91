package trajectories

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/worker"
	"github.com/troupe-rl/troupe/protocol"
)

// A group written goes back to the list of the worker that finished it,
// whichever goroutine wrote it, and that worker's next Finish takes it:
// its arrays are rewritten on the core that wrote them.
func TestAWrittenGroupGoesBackToItsWorker(t *testing.T) {
	o := &Output{Sink: Discard}
	require.True(t, o.Recycles())
	rec := &episode.Record{Status: protocol.StatusCompleted, Turns: []episode.Turn{{Emit: true}, {Emit: true}}}
	ctx := context.Background()
	free := func(k int) []*outGroup { return (*o.lists.Load())[k].free }

	w1 := worker.With(ctx, 1)
	write, err := o.Finish(w1, []*episode.Record{rec})
	require.NoError(t, err)
	done := make(chan int)
	go func() { // another worker writes it
		n, err := write(0)
		assert.NoError(t, err)
		done <- n
	}()
	assert.Equal(t, 2, <-done, "samples written")
	require.Len(t, free(1), 1, "back to worker 1's list")
	g := free(1)[0]

	_, err = o.Finish(worker.With(ctx, 0), []*episode.Record{rec})
	require.NoError(t, err)
	assert.Len(t, free(1), 1, "worker 0 took none of worker 1's")
	again, cancel := context.WithCancel(w1) // worker 1 still, another context
	defer cancel()
	_, err = o.Finish(again, []*episode.Record{rec})
	require.NoError(t, err)
	assert.Empty(t, free(1), "worker 1 took its own back")
	assert.Equal(t, again, g.ctx, "the group worker 1 finishes now is the one it gave back")
	assert.Equal(t, 2, g.eps[0].SampleCount())
}
