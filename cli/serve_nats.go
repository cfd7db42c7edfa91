package cli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/rollout/server"
)

// natsRemote is troupe serve --nats: each rollout request becomes a small
// distributed run whose episodes troupe workers play.
type natsRemote struct {
	client *natsrun.Client
	llmURL string       // the service's LLM server: its runs' endpoint
	nonce  uint64       // tells this service's run ids from another's
	runs   atomic.Int64 // numbers this service's runs
}

func newNATSRemote(c *natsrun.Client, llmURL string) (*natsRemote, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &natsRemote{client: c, llmURL: llmURL, nonce: binary.LittleEndian.Uint64(b[:])}, nil
}

// Start implements server.Remote: it queues the request's episodes, with
// the seeds and ids the service chose, under the request's resolved run
// spec (its play.Config and natsrun.SpecOf, as troupe run --nats submits a
// run), and returns their executor, which waits for the workers' results;
// closing it purges the run.
func (r *natsRemote) Start(ctx context.Context, rr server.RemoteRequest) (server.RemoteExecutor, error) {
	id := fmt.Sprintf("serve-%x-%d", r.nonce, r.runs.Add(1))
	x, err := r.client.StartRequests(ctx, id, rr.Run.Config, natsrun.SpecOf(rr.Run, llmEndpointOf(rr.Run.Spec.Policies, "", r.llmURL)), rr.Requests)
	if err != nil {
		return nil, fmt.Errorf("queuing the episodes on NATS: %w", err)
	}
	return &natsRequest{Executor: x, client: r.client, id: id, ctx: ctx}, nil
}

// natsRequest is one rollout request's run on NATS.
type natsRequest struct {
	*natsrun.Executor
	client *natsrun.Client
	id     string
	ctx    context.Context // the request's
}

// Close purges the run, then closes its executor.
func (q *natsRequest) Close() error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(q.ctx), 30*time.Second)
	defer cancel()
	_ = q.client.Purge(pctx, q.id) // leftovers expire with the results' max age
	return q.Executor.Close()
}
