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
	nonce  uint64       // tells this service's run ids from another's
	runs   atomic.Int64 // numbers this service's runs
}

func newNATSRemote(c *natsrun.Client) (*natsRemote, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &natsRemote{client: c, nonce: binary.LittleEndian.Uint64(b[:])}, nil
}

// Play implements server.Remote: it queues the request's episodes, with the
// seeds and ids the service chose, waits for the workers' results, and
// purges the run.
func (r *natsRemote) Play(ctx context.Context, rr server.RemoteRequest) []*trajectories.Episode {
	s0 := rr.Setups[0]
	info := rr.Scenario.Info()
	params := s0.Params.Map()
	reqs := make([]env.Request, len(rr.Setups))
	for i, s := range rr.Setups {
		reqs[i] = env.Request{Scenario: info.Name, Params: params, Seed: s.Seed, PolicySeed: s.PolicySeed,
			Index: int64(i), RolloutID: s.RolloutID, GroupIndex: s.GroupIndex}
	}
	cfg := env.RunConfig{Scenario: rr.Scenario, Params: s0.Params, Policy: s0.Policy, Limits: s0.Limits,
		Invalid: s0.Invalid, Emit: s0.Emit, ParallelPolicies: s0.ParallelPolicies, Episodes: len(reqs)}
	id := fmt.Sprintf("serve-%x-%d", r.nonce, r.runs.Add(1))
	eps := make([]*trajectories.Episode, len(reqs))
	x, err := r.client.StartRequests(ctx, id, cfg, natsrun.Spec{Policies: rr.Policies, Emit: rr.Emit}, reqs)
	if err != nil {
		for i, req := range reqs {
			eps[i] = &trajectories.Episode{Record: episode.Record{Scenario: info.Name, Params: params, Seed: req.Seed, PolicySeed: req.PolicySeed,
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
