package natsrun

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
)

// StartWithRequests is StartRequests, under the name the tests use.
func (c *Client) StartWithRequests(ctx context.Context, run string, cfg play.Config, spec Spec, reqs []env.Request) (*Executor, error) {
	return c.StartRequests(ctx, run, cfg, spec, reqs)
}

// DoneKeys lists the run's done markers, of every incarnation.
func (c *Client) DoneKeys(ctx context.Context, run string) ([]string, error) {
	lister, err := c.runs.ListKeysFiltered(ctx, run+".*.done.*")
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// ResultMessages counts the messages stored for the run's results.
func (c *Client) ResultMessages(ctx context.Context, run string) (uint64, error) {
	info, err := c.results.Info(ctx, jetstream.WithSubjectFilter(c.n.resultFilter(run)))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range info.State.Subjects {
		n += v
	}
	return n, nil
}

// WorkStreamLeader names the server leading the work stream.
func (c *Client) WorkStreamLeader(ctx context.Context) (string, error) {
	info, err := c.work.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil {
		return "", nil
	}
	return info.Cluster.Leader, nil
}

// PurgeResults drops the run's stored results, as ResultsMaxAge would.
func (c *Client) PurgeResults(ctx context.Context, run string) error {
	return c.results.Purge(ctx, jetstream.WithPurgeSubject(c.n.resultFilter(run)))
}

// NewOlderWorker is NewWorker for a worker built from an older troupe: it
// speaks protocol version protocol.
func (c *Client) NewOlderWorker(ctx context.Context, cfg WorkerConfig, protocol int) (*Worker, error) {
	w, err := c.NewWorker(ctx, cfg)
	if err != nil {
		return nil, err
	}
	w.speaks.protocol = protocol
	return w, nil
}

// ExecutorsCached is how many executors the worker keeps.
func (w *Worker) ExecutorsCached() int { return w.execs.Len() }

// RunsFollowed is how many runs the worker plays.
func (w *Worker) RunsFollowed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// StoreSize is what the deployment's runs bucket, work stream and results
// stream hold: messages and consumers.
func (c *Client) StoreSize(ctx context.Context) (kv, work, results uint64, consumers int, err error) {
	kvs, err := c.js.Stream(ctx, "KV_"+c.n.runsBucket)
	if err != nil {
		return
	}
	for _, s := range []struct {
		st jetstream.Stream
		n  *uint64
	}{{kvs, &kv}, {c.work, &work}, {c.results, &results}} {
		info, ierr := s.st.Info(ctx)
		if ierr != nil {
			return 0, 0, 0, 0, ierr
		}
		*s.n = info.State.Msgs
	}
	info, err := c.work.Info(ctx)
	if err != nil {
		return
	}
	return kv, work, results, info.State.Consumers, nil
}

// Stall stops (true) or resumes (false) the executor's lease renewals, as
// a process stopped (SIGSTOP) or cut off by a partition would.
func (x *Executor) Stall(stalled bool) { x.stalled.Store(stalled) }
