package server_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout/server"
)

// elsewhere is a Remote that plays the episodes in this process, as a
// worker would from the request's resolved run spec, and sends them back
// as records from another process come: without a Replayer.
type elsewhere struct {
	fail             error
	started, closed  atomic.Int32
	executed         atomic.Int32
	requestsPerStart atomic.Int32
}

func (r *elsewhere) Start(_ context.Context, rr server.RemoteRequest) (server.RemoteExecutor, error) {
	r.started.Add(1)
	if r.fail != nil {
		return nil, r.fail
	}
	r.requestsPerStart.Store(int32(len(rr.Requests)))
	return &elsewhereRun{r: r, x: rr.Run.Executor()}, nil
}

type elsewhereRun struct {
	r *elsewhere
	x *env.LocalExecutor
}

func (e *elsewhereRun) Execute(ctx context.Context, req env.Request) *episode.Record {
	e.r.executed.Add(1)
	rec := *e.x.Execute(ctx, req)
	rec.Replay = nil // it cannot travel
	return &rec
}

func (e *elsewhereRun) Close() error {
	e.r.closed.Add(1)
	return nil
}

// TestRemoteAnswersAsLocally: a Remote's executor plays each of the
// request's episodes once, is closed once they are back, and the answer is
// the bytes of a local one, counterfactual credit included (the records
// come back without a Replayer: the service gives them one).
func TestRemoteAnswersAsLocally(t *testing.T) {
	body := `{"scenario":"signal","n":3,"allocators":["coma","difference:c=average"],"reward_format":"dict","rollout_id":1,"group_index":1,"index":5}`
	local := post(t, newServer(t, server.Config{}), body)
	require.Equal(t, http.StatusOK, local.status, "%s", local.body)
	r := &elsewhere{}
	remote := post(t, newServer(t, server.Config{Remote: r}), body)
	require.Equal(t, http.StatusOK, remote.status, "%s", remote.body)
	assert.Equal(t, string(local.body), string(remote.body))
	assert.Equal(t, int32(1), r.started.Load())
	assert.Equal(t, int32(3), r.requestsPerStart.Load())
	assert.Equal(t, int32(3), r.executed.Load())
	assert.Equal(t, int32(1), r.closed.Load())
}

// TestRemoteThatCannotStartAnswersAbortedRollouts: when the Remote cannot
// take the request's episodes, each is answered aborted with its error.
func TestRemoteThatCannotStartAnswersAbortedRollouts(t *testing.T) {
	r := &elsewhere{fail: errors.New("queuing the episodes on NATS: no servers available")}
	s := newServer(t, server.Config{Remote: r})
	res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":2,"rollout_id":7,"group_index":3,"seed":11}`))
	require.Len(t, res.Rollouts, 2)
	for i, ro := range res.Rollouts {
		assert.Equal(t, int64(7+i), ro.RolloutID)
		assert.Equal(t, int64(3), ro.GroupIndex)
		assert.Equal(t, uint64(11), ro.Seed)
		assert.Equal(t, protocol.StatusAborted, ro.Status)
		assert.Equal(t, env.EndPolicyError, ro.End)
		assert.Equal(t, r.fail.Error(), ro.Error)
		assert.Empty(t, ro.Samples)
	}
	assert.Equal(t, int32(0), r.closed.Load(), "nothing to close")
}
