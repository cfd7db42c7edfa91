package natsrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
)

// PolicyMaker builds the policy called name for one role of a scenario, on
// a worker. NamedPolicies is the default.
type PolicyMaker func(info *env.Info, params env.Params, role, name string) (agents.Policy, error)

// ErrUnknownPolicy is returned by NamedPolicies for a name the scenario
// does not offer.
var ErrUnknownPolicy = env.ErrUnknownPolicy

// NamedPolicies makes the scenario's own named policies, and "random"
// (env.Info.MakePolicy).
func NamedPolicies(info *env.Info, params env.Params, role, name string) (agents.Policy, error) {
	return info.MakePolicy(params, role, name)
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Registry resolves the scenarios requests name. Required.
	Registry *env.Registry
	// Policies builds the policies a run's spec names; nil is
	// NamedPolicies.
	Policies PolicyMaker
	// Concurrency is how many episodes the worker plays at once; 0 means
	// GOMAXPROCS.
	Concurrency int
	// Drain is how long Run lets the episodes in hand finish after its
	// context ends; what is still running then is cancelled and handed
	// back to the queue for another worker. 0 hands them back at once.
	Drain time.Duration
	// Name identifies the worker in the metrics and in done markers; the
	// default is HOSTNAME-PID.
	Name string
	// PollWait is how long one pull for work waits before it is renewed:
	// how long Run may take to notice its context ended while idle. The
	// default is 2s.
	PollWait time.Duration
}

// Worker pulls episode requests from the work queue and plays them. See
// Run.
type Worker struct {
	c        *Client
	cfg      WorkerConfig
	id       string
	hb       time.Duration
	work     jetstream.Consumer
	execs    execCache
	specs    sync.Map // run id -> *record
	busy     atomic.Int64
	counters struct {
		played, failed, rejected, redelivered, skipped, handedBack, givenUp atomic.Int64
	}
}

// WorkerStats counts what a worker did since it started.
type WorkerStats struct {
	Name        string
	Slots       int   // its concurrency
	Busy        int64 // episodes in hand now
	Played      int64 // episodes played and stored
	Failed      int64 // of those, episodes that ended failed
	Rejected    int64 // requests it could not set up, stored as failed
	Redelivered int64 // requests it got that another delivery had held before
	Skipped     int64 // requests it found already done
	HandedBack  int64 // requests it gave back unfinished (shutdown, storage trouble)
	GivenUp     int64 // requests it recorded as failed after MaxDeliver deliveries
}

var nameRE = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// NewWorker returns a worker of the client's deployment.
func (c *Client) NewWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("%w: a worker needs a scenario registry", ErrBadConfig)
	}
	if cfg.Concurrency < 0 || cfg.Drain < 0 || cfg.PollWait < 0 {
		return nil, fmt.Errorf("%w: worker concurrency %d, drain %v, poll wait %v: none may be negative", ErrBadConfig, cfg.Concurrency, cfg.Drain, cfg.PollWait)
	}
	setDefault(&cfg.Concurrency, runtime.GOMAXPROCS(0))
	setDefault(&cfg.PollWait, 2*time.Second)
	if cfg.Policies == nil {
		cfg.Policies = NamedPolicies
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	w := &Worker{c: c, cfg: cfg, id: nameRE.ReplaceAllString(cfg.Name, "_") + "-" + nuid.Next()}
	var err error
	if w.work, err = c.js.Consumer(ctx, c.n.workStream, c.n.workers); err != nil {
		return nil, fmt.Errorf("natsrun: the work consumer: %w", err)
	}
	// The consumer's own ack wait rules, whoever configured it.
	w.hb = max(w.work.CachedInfo().Config.AckWait/3, 10*time.Millisecond)
	w.execs.max = 64
	return w, nil
}

// Stats returns what the worker did so far.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{
		Name:        w.cfg.Name,
		Slots:       w.cfg.Concurrency,
		Busy:        w.busy.Load(),
		Played:      w.counters.played.Load(),
		Failed:      w.counters.failed.Load(),
		Rejected:    w.counters.rejected.Load(),
		Redelivered: w.counters.redelivered.Load(),
		Skipped:     w.counters.skipped.Load(),
		HandedBack:  w.counters.handedBack.Load(),
		GivenUp:     w.counters.givenUp.Load(),
	}
}

// Run plays episodes until ctx ends (SIGTERM, say), then stops pulling,
// gives the episodes in hand Drain to finish, hands back the rest and
// returns nil. It acknowledges a request only after its episode is stored,
// so a worker that dies (SIGKILL, a lost machine) loses nothing: its
// requests go to another worker once AckWait passes without a heartbeat.
//
// A request delivered more than MaxDeliver times (its workers kept dying
// on it) is not played again: the worker that gets it next records it as
// failed with the reason. The worker keeps a presence key that the
// deployment's Stats count.
func (w *Worker) Run(ctx context.Context) error {
	// Episodes get their own context: the run's ending stops the pulling,
	// not the playing, until Drain runs out.
	epCtx, stopEpisodes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEpisodes()

	var slots sync.WaitGroup
	for range w.cfg.Concurrency {
		slots.Go(func() { w.slot(ctx, epCtx) })
	}
	var aux sync.WaitGroup
	aux.Go(func() { w.presence(ctx) })
	w.c.log.Info("natsrun: worker started", "worker", w.cfg.Name, "slots", w.cfg.Concurrency)

	<-ctx.Done()
	drained := make(chan struct{})
	go func() { slots.Wait(); close(drained) }()
	if w.cfg.Drain > 0 {
		t := time.NewTimer(w.cfg.Drain)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
	stopEpisodes()
	<-drained
	aux.Wait()
	w.c.log.Info("natsrun: worker stopped", "worker", w.cfg.Name, "played", w.counters.played.Load(), "handed_back", w.counters.handedBack.Load())
	return nil
}

// slot pulls one request at a time and plays it, until ctx ends.
func (w *Worker) slot(ctx, epCtx context.Context) {
	for ctx.Err() == nil {
		msg, err := w.work.Next(jetstream.FetchMaxWait(w.cfg.PollWait))
		if err != nil {
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.c.log.Debug("natsrun: pulling work", "err", err)
				pause(ctx, 100*time.Millisecond)
			}
			continue
		}
		if ctx.Err() != nil {
			// Pulled as the worker was stopping: give it straight back.
			_ = msg.Nak()
			w.counters.handedBack.Add(1)
			return
		}
		w.busy.Add(1)
		w.handle(epCtx, msg)
		w.busy.Add(-1)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handle plays one request and stores its episode, or records why it could
// not, or hands it back.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	if meta.NumDelivered > 1 {
		w.counters.redelivered.Add(1)
	}
	id, idx, ok := w.c.n.parseWorkSubject(msg.Subject())
	if !ok {
		w.c.log.Warn("natsrun: a request on a malformed subject was dropped", "subject", msg.Subject())
		_ = msg.TermWithReason("malformed subject")
		return
	}
	// Bookkeeping must outlive a shutdown (the episode in hand is finished
	// or handed back, never dropped) but not hang it.
	store, cancel := w.storeContext(ctx)
	defer cancel()
	run, rec, err := w.resolve(store, id, msg.Headers().Get(headerSpec))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) && meta.NumDelivered > uint64(w.c.cfg.MaxDeliver):
		// Still no spec after MaxDeliver tries: the run was purged, and
		// this request outlived it. Nobody waits for it.
		w.c.log.Warn("natsrun: dropping a request of a run that no longer exists", "subject", msg.Subject())
		_ = msg.TermWithReason("its run has no spec")
		return
	case err != nil:
		w.handBack(store, msg, runRef{id: id}, idx, err)
		return
	}
	var req env.Request
	if err := json.Unmarshal(msg.Data(), &req); err != nil || req.Index != idx {
		if err == nil {
			err = fmt.Errorf("it names episode %d", req.Index)
		}
		req = env.Request{Index: idx}
		w.reject(store, msg, run, req, meta.NumDelivered, fmt.Sprintf("natsrun: undecodable request on %s: %v", msg.Subject(), err))
		return
	}
	// A request handed out before may have been played by a worker that
	// died before acknowledging it. (One handed out for the first time may
	// be a re-queued duplicate, which the done marker's creation catches.)
	if meta.NumDelivered > 1 {
		if _, err := w.c.runs.Get(store, run.doneKey(idx)); err == nil {
			w.counters.skipped.Add(1)
			_ = msg.Ack()
			return
		}
	}
	if max := uint64(w.c.cfg.MaxDeliver); meta.NumDelivered > max {
		w.giveUp(store, msg, run, req, meta.NumDelivered)
		return
	}
	exec, err := w.executor(run, rec, req)
	if err != nil {
		w.reject(store, msg, run, req, meta.NumDelivered, err.Error())
		return
	}

	w.c.log.Debug("natsrun: playing", "run", run, "episode", idx, "delivery", meta.NumDelivered, "worker", w.cfg.Name)
	stop := w.heartbeat(msg)
	t0 := time.Now()
	ep := exec.Execute(ctx, req)
	t1 := time.Now()
	if ep.End == env.EndInterrupted && ctx.Err() != nil {
		stop()
		_ = msg.Nak()
		w.counters.handedBack.Add(1)
		return
	}
	store, cancel = w.storeContext(ctx) // a fresh deadline: the episode took its time
	defer cancel()
	// Counted before the result is stored, and taken back if it is not
	// this worker's: a submitter that sees the result finds it in the
	// worker's stats.
	w.counters.played.Add(1)
	won, err := w.c.commit(store, run, idx, ep, meta.NumDelivered, w.cfg.Name)
	stop()
	w.c.log.Debug("natsrun: played", "run", run, "episode", idx, "play", t1.Sub(t0), "store", time.Since(t1), "won", won)
	if err != nil || !won {
		w.counters.played.Add(-1)
	}
	if err != nil {
		w.handBack(store, msg, run, idx, err)
		return
	}
	if won {
		if ep.Status == protocol.StatusFailed {
			w.counters.failed.Add(1)
		}
	} else {
		w.counters.skipped.Add(1)
	}
	// A lost ack only means a redelivery that finds the episode done.
	_ = msg.Ack()
}

// storeContext bounds the bookkeeping around an episode: the retries of a
// store that cannot reach the servers give up after twice the ack wait (a
// minute at least), by which time another worker has the request anyway.
func (w *Worker) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(2*w.c.cfg.AckWait, time.Minute))
}

// heartbeat tells the server, every third of the ack wait, that msg is
// still being worked on, until the returned function is called.
func (w *Worker) heartbeat(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(w.hb)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					w.c.log.Debug("natsrun: heartbeat", "subject", msg.Subject(), "err", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// reject stores req's episode as failed (EndRejected) with the reason and
// acknowledges the request: it could never be played.
func (w *Worker) reject(ctx context.Context, msg jetstream.Msg, run runRef, req env.Request, deliveries uint64, reason string) {
	w.c.log.Warn("natsrun: request rejected", "run", run, "episode", req.Index, "reason", reason)
	ep := failed(req, EndRejected, reason)
	// Counted before the store: a submitter that sees the stored result and
	// then reads Stats finds it counted. A store that fails takes it back.
	w.counters.rejected.Add(1)
	if _, err := w.c.commit(ctx, run, req.Index, ep, deliveries, w.cfg.Name); err != nil {
		w.counters.rejected.Add(-1)
		w.handBack(ctx, msg, run, req.Index, err)
		return
	}
	_ = msg.Ack()
}

// giveUp stores req's episode as failed (EndMaxDeliver) after its
// delivery number deliveries found it never finished.
func (w *Worker) giveUp(ctx context.Context, msg jetstream.Msg, run runRef, req env.Request, deliveries uint64) {
	reason := fmt.Sprintf("natsrun: given up after %d deliveries: every worker that took it died, hung or handed it back before storing it", deliveries-1)
	if e, err := w.c.runs.Get(ctx, run.errorKey(req.Index)); err == nil {
		reason += "; last error: " + string(e.Value())
	}
	w.c.log.Warn("natsrun: request given up", "run", run, "episode", req.Index, "deliveries", deliveries-1)
	won, err := w.c.commit(ctx, run, req.Index, failed(req, EndMaxDeliver, reason), deliveries, w.cfg.Name)
	if err != nil {
		w.handBack(ctx, msg, run, req.Index, err)
		return
	}
	if won {
		w.counters.givenUp.Add(1)
	}
	_ = msg.Ack()
}

// handBack returns a request to the queue after an error that another try
// may not have, noting the error for the failure record MaxDeliver would
// write.
func (w *Worker) handBack(ctx context.Context, msg jetstream.Msg, run runRef, idx int64, cause error) {
	w.c.log.Warn("natsrun: handing a request back", "run", run, "episode", idx, "err", cause)
	if run.rev != "" {
		if _, err := w.c.runs.Put(ctx, run.errorKey(idx), []byte(cause.Error())); err != nil {
			w.c.log.Debug("natsrun: noting an error", "err", err)
		}
	}
	_ = msg.NakWithDelay(time.Second)
	w.counters.handedBack.Add(1)
}

// executor returns the executor of run's episodes of req's scenario and
// parameters, building it on first use. Its errors are the reasons a
// request can never be played: an unknown scenario or policy, bad
// parameters.
func (w *Worker) executor(run runRef, rec *record, req env.Request) (env.Executor, error) {
	key := run.String() + "\x00" + req.Scenario
	for _, k := range slices.Sorted(maps.Keys(req.Params)) {
		key += "\x00" + k + "=" + req.Params[k]
	}
	return w.execs.get(key, func() (env.Executor, error) {
		// The worker resolves the run's spec as every other runner does;
		// only the seeds and ids, which the requests carry, are left out.
		spec := runspec.Spec{
			Scenario:  req.Scenario,
			Params:    req.Params,
			Policies:  runspec.Named(rec.Policies),
			Emit:      rec.Emit,
			Limits:    runspec.LimitsOf(env.Limits{MaxSteps: rec.MaxSteps, MaxTurns: rec.MaxTurns, MaxMessages: rec.MaxMessages, Timeout: rec.Timeout}),
			OnInvalid: runspec.InvalidOf(env.InvalidRule{Mode: rec.InvalidMode, Penalty: rec.InvalidPenalty, Bonus: rec.InvalidBonus}),
			Episodes:  1,
		}
		res, err := spec.Resolve(runspec.Resolvers{
			Scenarios: w.cfg.Registry,
			Policies: func(pr runspec.PolicyRequest) (agents.Policy, bool, error) {
				p, err := w.cfg.Policies(pr.Info, pr.Params, pr.Role, pr.Policy.Name)
				return p, true, err
			},
		})
		if err != nil {
			return nil, fmt.Errorf("natsrun: %w", err)
		}
		x := res.Executor()
		x.ParallelPolicies = rec.ParallelPolicies // the submitter's choice
		return x, nil
	})
}

// resolve returns the run a request belongs to and its spec: the spec
// revision the request names, or the run's latest when it names none (a
// request queued by hand). Specs are cached: a revision never changes.
func (w *Worker) resolve(ctx context.Context, id, revision string) (runRef, *record, error) {
	rev, _ := strconv.ParseUint(revision, 10, 64)
	if rev > 0 {
		if r, ok := w.specs.Load(id + "@" + revision); ok {
			return runRef{id, revision}, r.(*record), nil
		}
	}
	rec, rev, err := w.c.spec(ctx, id, rev)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// The spec is stored before any request; a replica that lags may
		// not have it yet, or the run was purged. Either way, not ours to
		// fail: hand it back, and MaxDeliver ends it if it never appears.
		return runRef{}, nil, fmt.Errorf("natsrun: run %s has no spec (purged, or not replicated yet): %w", id, err)
	}
	if err != nil {
		return runRef{}, nil, err
	}
	run := runRef{id, strconv.FormatUint(rev, 10)}
	w.specs.Store(run.String(), &rec)
	return run, &rec, nil
}

// execCache keeps built executors, so that a run's episodes share one
// engine pool and one set of policies. It holds at most max of them.
type execCache struct {
	mu  sync.Mutex
	max int
	m   map[string]env.Executor
}

func (c *execCache) get(key string, build func() (env.Executor, error)) (env.Executor, error) {
	c.mu.Lock()
	if x, ok := c.m[key]; ok {
		c.mu.Unlock()
		return x, nil
	}
	c.mu.Unlock()
	// Built outside the lock: making a policy may take a while (an LLM
	// client), and two builds of one key are harmless.
	x, err := build()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = map[string]env.Executor{}
	}
	c.m[key] = x
	return x, nil
}

// presence keeps the worker's key in the presence bucket fresh, and
// deletes it when ctx ends.
func (w *Worker) presence(ctx context.Context) {
	put := func(ctx context.Context) {
		val, _ := json.Marshal(w.Stats())
		if _, err := w.c.alive.Put(ctx, w.id, val); err != nil {
			w.c.log.Debug("natsrun: refreshing presence", "err", err)
		}
	}
	put(ctx)
	t := time.NewTicker(presenceTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			put(ctx)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = w.c.alive.Delete(dctx, w.id)
			cancel()
			return
		}
	}
}
