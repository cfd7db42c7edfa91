package cli

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/trajectories"
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

// Play implements server.Remote: it queues the request's episodes, with the
// seeds and ids the service chose, under the request's resolved run spec
// (its RunConfig and natsrun.SpecOf, as troupe run --nats submits a run),
// waits for the workers' results, and purges the run.
func (r *natsRemote) Play(ctx context.Context, rr server.RemoteRequest) []*trajectories.Episode {
	reqs := rr.Requests
	id := fmt.Sprintf("serve-%x-%d", r.nonce, r.runs.Add(1))
	eps := make([]*trajectories.Episode, len(reqs))
	x, err := r.client.StartRequests(ctx, id, rr.Run.Config, natsrun.SpecOf(rr.Run, llmEndpointOf(rr.Run.Spec.Policies, "", r.llmURL)), reqs)
	if err != nil {
		for i, req := range reqs {
			eps[i] = &trajectories.Episode{Record: episode.Record{Scenario: req.Scenario, Params: req.Params, Seed: req.Seed, PolicySeed: req.PolicySeed,
				Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex,
				Status: protocol.StatusAborted, End: env.EndPolicyError, Err: fmt.Sprintf("queuing the episodes on NATS: %v", err)}}
		}
		return eps
	}
	defer x.Close()
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { eps[i] = trajectories.NewEpisode(x.Execute(ctx, reqs[i])) })
	}
	wg.Wait()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = r.client.Purge(pctx, id) // leftovers expire with the results' max age
	return eps
}
