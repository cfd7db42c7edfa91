package natsrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
)

// Why an episode that no worker could play ended, as written to
// Episode.End (its status is failed).
const (
	// EndRejected: a worker could not set the episode up (an unknown
	// scenario or policy, bad parameters, an undecodable request). Trying
	// again would fail the same way, so it is recorded at once.
	EndRejected = "rejected"
	// EndMaxDeliver: the episode was handed out Config.MaxDeliver times and
	// never finished (its workers died, hung, or could not store it).
	EndMaxDeliver = "max_deliver"
	// EndResultLost: the episode was recorded as done, but its stored
	// result could not be read back (it outlived ResultsMaxAge, say).
	EndResultLost = "result_lost"
)

// Executor is the submitter's side of a run: an env.Executor that queues
// each episode's request for the workers and returns the episode a worker
// stored. Plug it into play.Run (Run does), which keeps ordering, reward
// allocation and output exactly as in a local run.
//
// An Executor keeps Config.Ahead requests queued from the latest episode
// asked for on, so the workers stay busy however few episodes play.Run
// waits for at once. Finished episodes wait in the results stream, not in
// memory, until Execute asks for them.
type Executor struct {
	c   *Client
	run string
	// stopRun, set by Run before play.Run starts (nil when another runner
	// drives the executor), stops Run's play.Run: an episode this executor
	// hands back interrupted because the executor stopped (an unplayable
	// run, Close, a lost lease) must find the run interrupted too, or
	// play.Run would write it as an aborted episode (it cuts only for its
	// own interruption).
	stopRun context.CancelCauseFunc
	batch   int64 // requests per work message (Config.Batch, resolved)
	reqs    []env.Request
	cfg     play.Config
	engines env.EnginePool
	resumed bool
	// ref adds to the id the run spec's revision in the runs bucket, which
	// tells this run from an earlier one under the same id: it is part of
	// every request's message id (ids outlive a purge for the duplicate
	// window), of its done markers' keys, and names the spec workers must
	// play it with.
	ref runRef

	ctx    context.Context // lives until Close, or until the run cannot go on
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	delivery delivery           // the run's, as stored
	holder   string             // this submitter, in the run's lease
	epoch    string             // the lease's first revision: tells this holder's requests from earlier ones
	leaseRev atomic.Uint64      // the lease's revision: the fencing token
	stalled  atomic.Bool        // tests: renewals skipped, as by a stopped process
	refusals map[string]Refusal // by worker id; guarded by mu

	mu        sync.Mutex
	doneRaw   map[int64]marker        // done markers seen, not yet collected
	finished  []bool                  // a done marker exists: never (re)publish
	collected []bool                  // Execute returned it: ignore late markers
	queued    []bool                  // in the work queue when this executor attached
	waiters   map[int64]chan struct{} // Execute calls waiting for a marker

	target atomic.Int64 // publish requests below this index
	kick   chan struct{}
	stale  chan struct{} // Execute found a marker the watcher missed

	audit *auditor // nil: Config.AuditRate 0

	stats struct {
		published, collected, redelivered, failed, doneAtStart, queuedAtStart atomic.Int64
	}
}

// ExecutorStats counts what an executor did.
type ExecutorStats struct {
	Resumed     bool  // the run existed already: this executor re-attached to it
	DoneAtStart int64 // episodes already done when it attached
	// QueuedAtStart counts requests still queued, or held by a worker,
	// when it attached: it does not queue them again.
	QueuedAtStart int64
	Published     int64 // requests it queued (at most one per episode)
	Collected     int64 // episodes it returned from the results
	Redelivered   int64 // of those, episodes handed out more than once
	Failed        int64 // of those, episodes a worker recorded as failed
	// Refusals are the workers that found they cannot play the run, and
	// why, sorted by worker; they left its requests to the others.
	Refusals []Refusal
	// Audited counts the episodes the submitter re-played to check them
	// (Config.AuditRate), and AuditFailures those that differed, in the
	// order found: their workers are distrusted.
	Audited       int64
	AuditFailures []AuditFailure
}

// pollEvery is how often a waiting Execute asks the bucket directly, in
// case the watcher missed an update (it should not; this bounds the cost if
// it does).
const pollEvery = 2 * time.Second

// Start registers run (or re-attaches to it: an id already stored with an
// equal configuration) and returns the executor of its episodes. cfg is the
// run as play.Run will play it: its Scenario, Params, Limits, Timeout and
// Invalid travel to the workers with spec (how a worker asks its policies,
// ParallelPolicies, is the worker's: WorkerConfig.Parallel), and its Policy replays
// episodes here for counterfactual allocators (nil: episodes have no
// Replay). An id stored with a different configuration is ErrRunMismatch.
//
// Close the executor when the run ends.
func (c *Client) Start(ctx context.Context, run string, cfg play.Config, spec Spec) (*Executor, error) {
	if cfg.Scenario == nil {
		return nil, fmt.Errorf("%w: the run has no scenario", ErrBadConfig)
	}
	if cfg.Episodes < 0 {
		return nil, fmt.Errorf("%w: episodes %d < 0", ErrBadConfig, cfg.Episodes)
	}
	return c.start(ctx, run, cfg, spec, cfg.Requests())
}

// StartRequests is Start for a run whose episodes are reqs rather than
// cfg.Requests(): requests whose seeds and ids someone else chose (a
// rollout service playing a trainer's prompts). Call Execute with each of
// them (their Index is their position in reqs); Run does not apply.
func (c *Client) StartRequests(ctx context.Context, run string, cfg play.Config, spec Spec, reqs []env.Request) (*Executor, error) {
	if cfg.Scenario == nil {
		return nil, fmt.Errorf("%w: the run has no scenario", ErrBadConfig)
	}
	for i := range reqs {
		if reqs[i].Index != int64(i) {
			return nil, fmt.Errorf("%w: request %d has index %d", ErrBadConfig, i, reqs[i].Index)
		}
	}
	return c.start(ctx, run, cfg, spec, reqs)
}

func (c *Client) start(ctx context.Context, run string, cfg play.Config, spec Spec, reqs []env.Request) (*Executor, error) {
	if err := CheckRunID(run); err != nil {
		return nil, err
	}
	rec, err := recordOf(&cfg, spec)
	if err != nil {
		return nil, err
	}
	if c.cfg.AuditRate > 0 {
		switch {
		case spec.LLMEndpoint != "":
			return nil, fmt.Errorf("%w: audit rate %g: the run's roles play an LLM, whose answers a re-play does not reproduce; audit only runs of reproducible policies", ErrBadConfig, c.cfg.AuditRate)
		case cfg.Policy == nil:
			return nil, fmt.Errorf("%w: audit rate %g: the run has no Policy to re-play its episodes with", ErrBadConfig, c.cfg.AuditRate)
		}
	}
	if rec.Fingerprint, err = c.fps.of(ctx, cfg.Scenario, fingerprintInputOf(&rec)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if e, err := c.runs.Get(ctx, cancelKey(run)); err == nil {
		return nil, fmt.Errorf("%w: run %s: %s; purge it (troupe runs purge %s) to run it again", ErrCancelled, run, e.Value(), run)
	}
	want := storedRun{Run: rec, Created: time.Now().UTC(), Delivery: delivery{
		AckWait: c.cfg.AckWait, MaxDeliver: c.cfg.MaxDeliver, MaxAckPending: c.cfg.MaxAckPending,
	}}
	stored, revision, resumed, err := c.register(ctx, run, want)
	if err != nil {
		return nil, err
	}
	holder := newHolder()
	leaseRev, err := c.acquire(ctx, run, holder)
	if err != nil {
		return nil, err
	}
	if _, err := c.runConsumer(ctx, run, stored.Delivery); err != nil {
		c.release(context.WithoutCancel(ctx), run, leaseRev)
		return nil, err
	}

	x := &Executor{
		c: c, run: run, reqs: reqs, cfg: cfg, resumed: resumed, batch: int64(c.cfg.batchFor(spec)),
		ref:       runRef{id: run, rev: strconv.FormatUint(revision, 10)},
		holder:    holder,
		delivery:  stored.Delivery,
		epoch:     strconv.FormatUint(leaseRev, 10),
		doneRaw:   map[int64]marker{},
		finished:  make([]bool, len(reqs)),
		collected: make([]bool, len(reqs)),
		queued:    make([]bool, len(reqs)),
		waiters:   map[int64]chan struct{}{},
		refusals:  map[string]Refusal{},
		kick:      make(chan struct{}, 1),
		stale:     make(chan struct{}, 1),
	}
	x.leaseRev.Store(leaseRev)
	if c.cfg.AuditRate > 0 {
		local := &env.LocalExecutor{Play: cfg.Play, Drive: cfg.Drive}
		if x.audit, err = newAuditor(c.cfg.AuditRate, c.auditKey, local, x.stored, c.log); err != nil {
			c.release(context.WithoutCancel(ctx), run, leaseRev)
			return nil, err
		}
	}
	x.cfg.Executor = x
	x.ctx, x.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if err := x.watch(ctx); err != nil {
		x.Close()
		return nil, err
	}
	if resumed {
		// Requests still queued, or held by a worker, from before: queue
		// them again and an episode could be played twice.
		if err := x.markQueued(ctx); err != nil {
			x.Close()
			return nil, err
		}
	}
	x.wg.Add(3)
	go x.publish()
	go x.keepLease()
	go x.watchRefusals()
	c.log.Info("natsrun: run started", "run", run, "episodes", len(reqs), "resumed", resumed, "done", x.stats.doneAtStart.Load())
	return x, nil
}

// register stores want as run's spec, or, when the run is registered
// already, checks that it is the same run (a re-attach, resumed): stored
// is the registered spec, whose delivery settings the run keeps, and
// revision its revision.
func (c *Client) register(ctx context.Context, run string, want storedRun) (stored storedRun, revision uint64, resumed bool, err error) {
	revision, err = retryValue(ctx, func(ctx context.Context) (uint64, error) {
		return c.runs.Create(ctx, specKey(run), want.encode())
	})
	stored = want
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		var rev uint64
		stored, rev, err = c.spec(ctx, run, 0)
		if err != nil {
			return storedRun{}, 0, false, fmt.Errorf("natsrun: run %s: %w", run, err)
		}
		if !bytes.Equal(stored.Run.encode(), want.Run.encode()) {
			return storedRun{}, 0, false, fmt.Errorf("run %s: %w", run, want.Run.mismatch(&stored.Run))
		}
		if stored.Delivery != want.Delivery {
			c.log.Warn("natsrun: the run keeps the delivery settings it was registered with", "run", run,
				"ack_wait", stored.Delivery.AckWait, "max_deliver", stored.Delivery.MaxDeliver, "max_ack_pending", stored.Delivery.MaxAckPending)
		}
		return stored, rev, true, nil
	case err != nil:
		return storedRun{}, 0, false, fmt.Errorf("natsrun: registering run %s: %w", run, err)
	}
	return stored, revision, false, nil
}

// markQueued marks queued, for a resumed run, the requests the work
// stream still holds from before. A request whose result is already
// stored may still be listed, until its worker's ack removes it: it is
// done, not queued (the two counts are disjoint).
func (x *Executor) markQueued(ctx context.Context) error {
	c, run := x.c, x.run
	info, err := retryValue(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return c.work.Info(ctx, jetstream.WithSubjectFilter(c.n.workFilter(run)))
	})
	if err != nil {
		return fmt.Errorf("natsrun: run %s: listing queued requests: %w", run, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for subject := range info.State.Subjects {
		r, first, last, ok := c.n.parseWorkSubject(subject)
		if !ok || r != run {
			continue
		}
		// Some of a batch's episodes may have been done when it was
		// queued: marked queued here, they are skipped either way.
		// A done one is not counted as queued as well.
		for idx := first; idx <= min(last, int64(len(x.reqs))-1); idx++ {
			if !x.queued[idx] && !x.finished[idx] && !x.collected[idx] {
				x.queued[idx] = true
				x.stats.queuedAtStart.Add(1)
			}
		}
	}
	return nil
}

// headerSpec names, on a request, the revision of its run's spec.
const headerSpec = "Troupe-Spec"

// spec reads a run's stored record and its revision: the given revision,
// or the latest when it is 0.
func (c *Client) spec(ctx context.Context, run string, revision uint64) (storedRun, uint64, error) {
	entry, err := retryValue(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		if revision > 0 {
			return c.runs.GetRevision(ctx, specKey(run), revision)
		}
		return c.runs.Get(ctx, specKey(run))
	})
	if err != nil {
		return storedRun{}, 0, fmt.Errorf("reading the spec of run %s: %w", run, err)
	}
	rec, err := decodeStoredRun(entry.Value(), ours)
	if err != nil {
		return rec, 0, fmt.Errorf("run %s: %w", run, err)
	}
	return rec, entry.Revision(), nil
}

// watch follows the run's done markers: it reads those that exist, then
// hands each new one to the Execute waiting for it.
//
// The watcher is an ordered consumer, which notices that the server
// feeding it died only after missing its heartbeats (10s). Execute's
// polling notices sooner, when it finds a marker the watcher did not
// deliver; it then asks for a new watcher, which resumes where the old one
// stopped.
func (x *Executor) watch(ctx context.Context) error {
	w, err := x.c.runs.Watch(x.ctx, x.ref.doneFilter())
	if err != nil {
		return fmt.Errorf("natsrun: watching run %s: %w", x.run, err)
	}
	var last uint64 // the revision of the last marker the watcher delivered
	// The watcher sends nil once it has delivered what was already there.
initial:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("natsrun: watching run %s: the watcher stopped", x.run)
			}
			if e == nil {
				break initial
			}
			last = max(last, e.Revision())
			if x.offer(e) {
				x.stats.doneAtStart.Add(1)
			}
		case <-ctx.Done():
			_ = w.Stop()
			return fmt.Errorf("natsrun: watching run %s: %w", x.run, context.Cause(ctx))
		}
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		for {
			if !x.follow(w, &last) {
				return
			}
			x.c.log.Info("natsrun: renewing the done-marker watcher", "run", x.run, "after_revision", last)
			for {
				var err error
				if w, err = x.c.runs.Watch(x.ctx, x.ref.doneFilter(), jetstream.ResumeFromRevision(last+1)); err == nil {
					break
				}
				if x.ctx.Err() != nil {
					return
				}
				pause(x.ctx, pollEvery)
			}
		}
	}()
	return nil
}

// follow hands w's markers to offer until w ends (false: for good) or
// Execute asks for a new watcher (true).
func (x *Executor) follow(w jetstream.KeyWatcher, last *uint64) bool {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				// Closed: for good if the executor is closing, else the
				// watcher died and a new one is due.
				return x.ctx.Err() == nil
			}
			if e != nil {
				*last = max(*last, e.Revision())
				x.offer(e)
			}
		case <-x.stale:
			return true
		case <-x.ctx.Done():
			return false
		}
	}
}

// offer records a done marker and wakes its waiter. It reports whether the
// marker was new.
func (x *Executor) offer(e jetstream.KeyValueEntry) bool {
	if e.Operation() != jetstream.KeyValuePut {
		return false
	}
	idx, ok := x.ref.parseDoneKey(e.Key())
	if !ok || idx >= int64(len(x.reqs)) {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.collected[idx] || x.finished[idx] {
		return false
	}
	x.finished[idx] = true
	x.doneRaw[idx] = marker{e.Value(), e.Revision()}
	if ch, ok := x.waiters[idx]; ok {
		close(ch)
		delete(x.waiters, idx)
	}
	return true
}

// marker is a done marker's value and revision.
type marker struct {
	value    []byte
	revision uint64
}

// claim takes episode idx's done marker, or returns a channel closed when
// it arrives.
func (x *Executor) claim(idx int64) (*marker, <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if m, ok := x.doneRaw[idx]; ok {
		delete(x.doneRaw, idx)
		x.collected[idx] = true
		return &m, nil
	}
	ch, ok := x.waiters[idx]
	if !ok {
		ch = make(chan struct{})
		x.waiters[idx] = ch
	}
	return nil, ch
}

// want makes sure requests idx to idx+Ahead-1 get queued.
func (x *Executor) want(idx int64) {
	// Up to a whole batch: the requests of a batch are queued together.
	b := x.batch
	t := min((idx+int64(x.c.cfg.Ahead)+b-1)/b*b, int64(len(x.reqs)))
	for {
		cur := x.target.Load()
		if t <= cur || x.target.CompareAndSwap(cur, t) {
			break
		}
	}
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// publish queues requests in index order, up to the target, skipping those
// already done or queued. Each request's message id makes a publish
// repeated after a lost acknowledgement land once.
func (x *Executor) publish() {
	defer x.wg.Done()
	type pending struct {
		msg *nats.Msg
		f   jetstream.PubAckFuture
		n   int // requests in msg
	}
	next := int64(0)
	batch := make([]pending, 0, 256)
	for {
		target := x.target.Load()
		if next >= target {
			select {
			case <-x.kick:
				continue
			case <-x.ctx.Done():
				return
			}
		}
		batch = batch[:0]
		size := x.batch
		for end := min(target, next+int64(cap(batch))*size); next < end; {
			// One message per batch of requests: the indexes of a batch
			// are next's batch, those not done or queued.
			stop := min((next/size+1)*size, end)
			var idxs []int64
			for ; next < stop; next++ {
				if !x.skip(next) {
					idxs = append(idxs, next)
				}
			}
			if len(idxs) == 0 {
				continue
			}
			msg := x.requestMsg(idxs)
			f, err := x.c.js.PublishMsgAsync(msg)
			if err != nil {
				if !x.publishSync(msg, len(idxs)) {
					return
				}
				continue
			}
			batch = append(batch, pending{msg, f, len(idxs)})
		}
		for _, p := range batch {
			select {
			case <-p.f.Ok():
				x.stats.published.Add(int64(p.n))
			case <-p.f.Err():
				if !x.publishSync(p.msg, p.n) {
					return
				}
			case <-x.ctx.Done():
				return
			}
		}
	}
}

func (x *Executor) skip(idx int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.finished[idx] || x.collected[idx] || x.queued[idx]
}

func (x *Executor) requestMsg(idxs []int64) *nats.Msg {
	data := []byte{'['}
	for i, idx := range idxs {
		if i > 0 {
			data = append(data, ',')
		}
		b, err := json.Marshal(x.reqs[idx])
		if err != nil {
			// A Request is strings and numbers.
			panic(fmt.Sprintf("natsrun: encoding a request: %v", err))
		}
		data = append(data, b...)
	}
	data = append(data, ']')
	first, last := idxs[0], idxs[len(idxs)-1]
	msg := &nats.Msg{Subject: x.c.n.workSubject(x.run, first, last), Data: data, Header: nats.Header{}}
	// The epoch in the id: a request this holder queues again after an
	// earlier holder's was removed (an interrupted run's queue is emptied)
	// is not taken for that one by the duplicate window.
	msg.Header.Set(jetstream.MsgIDHeader, x.ref.id+"."+x.ref.rev+"."+x.epoch+"."+strconv.FormatInt(first, 10)+"."+strconv.FormatInt(last, 10))
	msg.Header.Set(headerSpec, x.ref.rev)
	return msg
}

// publishSync publishes msg, retrying until it is stored or the executor
// closes; it reports whether it was stored.
func (x *Executor) publishSync(msg *nats.Msg, n int) bool {
	_, err := retryValue(x.ctx, func(ctx context.Context) (*jetstream.PubAck, error) {
		return x.c.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(x.c.n.workStream))
	})
	if err != nil {
		if x.ctx.Err() == nil {
			x.c.log.Error("natsrun: queuing a request", "subject", msg.Subject, "err", err)
		}
		return false
	}
	x.stats.published.Add(int64(n))
	return true
}

// Execute implements env.Executor: it waits for req's episode to be played
// by a worker and returns it, rebuilt from the results stream. req must be
// one of the run's requests, each asked for once. When ctx ends first it
// returns the episode as interrupted (env.EndInterrupted), and the request
// stays queued for a later re-attach.
func (x *Executor) Execute(ctx context.Context, req env.Request) *episode.Record {
	idx := req.Index
	if idx < 0 || idx >= int64(len(x.reqs)) || !sameRequest(&req, &x.reqs[idx]) {
		return failed(req, EndRejected, fmt.Sprintf("natsrun: episode %d is not one of the %d requests of run %s", idx, len(x.reqs), x.run))
	}
	x.want(idx)
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	for {
		m, ch := x.claim(idx)
		if m != nil {
			ep, err := x.collect(ctx, req, m.value)
			if !errors.Is(err, errExpired) {
				return ep
			}
			if err := x.again(ctx, idx, m.revision); err != nil {
				return failed(req, EndResultLost, fmt.Sprintf("natsrun: the result of episode %d expired and it could not be queued again: %v", idx, err))
			}
			continue
		}
		select {
		case <-ch:
		case <-poll.C:
			if e, err := x.c.runs.Get(ctx, x.ref.doneKey(idx)); err == nil && x.offer(e) {
				select {
				case x.stale <- struct{}{}:
				default:
				}
			}
		case <-ctx.Done():
			return interrupted(req, context.Cause(ctx))
		case <-x.ctx.Done():
			if x.stopRun != nil {
				x.stopRun(context.Cause(x.ctx))
			}
			return interrupted(req, context.Cause(x.ctx))
		}
	}
}

// stored reads back the record a worker stored for episode idx, its
// encoding, and the worker's name.
func (x *Executor) stored(ctx context.Context, idx int64) (*episode.Record, []byte, string, error) {
	entry, err := retryValue(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return x.c.runs.Get(ctx, x.ref.doneKey(idx))
	})
	if err != nil {
		return nil, nil, "", fmt.Errorf("the done marker of episode %d: %w", idx, err)
	}
	rec, inline, err := parseMarker(entry.Value())
	if err != nil {
		return nil, nil, "", fmt.Errorf("the done marker of episode %d: %w", idx, err)
	}
	ep, raw, err := x.c.fetchRaw(ctx, rec, inline)
	return ep, raw, rec.Worker, err
}

// errExpired reports a done marker whose result is no longer stored: the
// results stream dropped it after ResultsMaxAge.
var errExpired = errors.New("natsrun: the result expired")

// collect reads back the episode a done marker points at and checks that it
// is req's. It returns errExpired, and no episode, when the result is gone.
func (x *Executor) collect(ctx context.Context, req env.Request, raw []byte) (*episode.Record, error) {
	rec, inline, err := parseMarker(raw)
	if err != nil {
		return failed(req, EndResultLost, fmt.Sprintf("natsrun: done marker of episode %d: %v", req.Index, err)), nil
	}
	ep, encoded, err := x.c.fetchRaw(ctx, rec, inline)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return interrupted(req, context.Cause(ctx)), nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, errExpired
	default:
		return failed(req, EndResultLost, fmt.Sprintf("natsrun: reading the result of episode %d: %v", req.Index, err)), nil
	}
	if ep.Index != req.Index || ep.RolloutID != req.RolloutID || ep.GroupIndex != req.GroupIndex ||
		ep.Seed != req.Seed || ep.PolicySeed != req.PolicySeed || ep.Scenario != req.Scenario || !maps.Equal(ep.Params, req.Params) {
		return failed(req, EndResultLost, fmt.Sprintf("natsrun: the stored result of episode %d is episode %d of %s (rollout %d): not this request", req.Index, ep.Index, ep.Scenario, ep.RolloutID)), nil
	}
	if x.audit != nil {
		if ep, err = x.audit.check(ctx, req, rec.Worker, ep, encoded); err != nil {
			if ctx.Err() != nil {
				return interrupted(req, context.Cause(ctx)), nil
			}
			// The output holds a lie: the run cannot go on.
			x.c.log.Error("natsrun: the run cannot go on", "run", x.run, "err", err)
			x.cancel(err)
			if x.stopRun != nil {
				x.stopRun(err)
			}
			return interrupted(req, err), nil
		}
	}
	if x.cfg.Policy != nil {
		ep.Replay = replayer(&x.cfg, &x.engines, ep)
	}
	x.stats.collected.Add(1)
	if rec.Deliveries > 1 {
		x.stats.redelivered.Add(1)
	}
	if ep.Status == protocol.StatusFailed {
		x.stats.failed.Add(1)
	}
	return ep, nil
}

// again queues episode idx once more after its stored result expired: it
// removes the done marker (unless a newer one replaced it) and publishes
// the request under a message id of its own, which the duplicate window
// cannot drop. A marker that is gone with the run itself (purged under
// this submitter) ends the run instead: nothing is there to collect.
func (x *Executor) again(ctx context.Context, idx int64, revision uint64) error {
	err := retry(ctx, func(ctx context.Context) error {
		return x.c.runs.Delete(ctx, x.ref.doneKey(idx), jetstream.LastRevision(revision))
	})
	if casConflict(err) {
		// The marker is not the one read: nats.go reports "wrong last
		// sequence" (as ErrKeyExists or ErrKeyRevisionMismatch), whether
		// a newer marker replaced it or the marker is gone.
		e, gerr := x.c.runs.Get(ctx, x.ref.doneKey(idx))
		switch {
		case gerr == nil && e.Revision() != revision:
			x.mu.Lock()
			x.finished[idx], x.collected[idx] = false, false
			x.mu.Unlock()
			x.offer(e)
			return nil
		case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound):
			return gerr
		}
		if _, rev, serr := x.c.spec(ctx, x.run, 0); serr != nil || strconv.FormatUint(rev, 10) != x.ref.rev {
			lost := fmt.Errorf("%w: run %s was purged while this submitter collected it", ErrLeaseLost, x.run)
			x.cancel(lost)
			return lost
		}
		err = nil // the marker alone is gone: play the episode again
	}
	if err != nil {
		return err
	}
	x.c.log.Warn("natsrun: a stored result expired; playing the episode again", "run", x.ref, "episode", idx)
	x.mu.Lock()
	x.finished[idx], x.collected[idx] = false, false
	x.mu.Unlock()
	msg := x.requestMsg([]int64{idx})
	msg.Header.Set(jetstream.MsgIDHeader, msg.Header.Get(jetstream.MsgIDHeader)+".again."+strconv.FormatUint(revision, 10))
	if !x.publishSync(msg, 1) {
		return errors.New("the request could not be published")
	}
	return nil
}

func sameRequest(a, b *env.Request) bool {
	return a.Scenario == b.Scenario && a.Seed == b.Seed && a.PolicySeed == b.PolicySeed &&
		a.Index == b.Index && a.RolloutID == b.RolloutID && a.GroupIndex == b.GroupIndex && maps.Equal(a.Params, b.Params)
}

// stub is the episode of req with nothing played.
func stub(req env.Request) *episode.Record {
	return &episode.Record{
		Scenario: req.Scenario, Params: maps.Clone(req.Params), Seed: req.Seed, PolicySeed: req.PolicySeed,
		Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex,
	}
}

func failed(req env.Request, end, reason string) *episode.Record {
	ep := stub(req)
	ep.Status, ep.End, ep.Err = protocol.StatusFailed, end, reason
	return ep
}

func interrupted(req env.Request, cause error) *episode.Record {
	ep := stub(req)
	ep.Status, ep.End, ep.Err = protocol.StatusAborted, env.EndInterrupted, cause.Error()
	return ep
}

// Run plays the executor's run with play.Run (cfg as given to Start, with
// this executor) and writes it to out. Once every episode is written it
// purges the run's results and state, unless Config.KeepResults: a run that
// completed is not resumed. A run cut short (ctx cancelled, a failed write,
// FailFast) keeps them, for a re-attach by the same id.
//
// A run that cannot go on stops with the reason: ErrUnplayable when every
// live worker refused it (naming each one's reason), ErrLeaseLost when
// another submitter took it over or it was purged, ErrCancelled when it was
// cancelled.
func (x *Executor) Run(ctx context.Context, out play.Output) (play.Summary, error) {
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	x.stopRun = stop
	unhook := context.AfterFunc(x.ctx, func() { stop(context.Cause(x.ctx)) })
	defer unhook()
	sum, err := play.Run(rctx, x.cfg, out)
	failure := x.failure()
	if (failure != nil && !errors.Is(failure, ErrLeaseLost)) || (failure == nil && ctx.Err() != nil) {
		// Stopped (interrupted, cancelled, unplayable) while the run's
		// queue is still this submitter's: the workers need not play what
		// nobody waits for. What they hold they finish and store, for a
		// re-attach, which queues the rest again.
		x.cancel(errClosed) // nothing more is queued
		x.wg.Wait()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if perr := x.c.work.Purge(pctx, jetstream.WithPurgeSubject(x.c.n.workFilter(x.run))); perr != nil {
			x.c.log.Warn("natsrun: the run stopped but its queued requests could not be removed", "run", x.run, "err", perr)
		}
	}
	if failure != nil {
		return sum, failure
	}
	if err == nil && sum.Episodes == len(x.reqs) && !x.c.cfg.KeepResults {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// Only the lease's holder purges: renewing it first makes sure no
		// other submitter took the run over meanwhile.
		if _, lerr := x.c.renew(pctx, x.run, x.holder, x.leaseRev.Load()); lerr != nil {
			x.c.log.Warn("natsrun: the run is complete, but this submitter no longer holds it: not purging", "run", x.run, "err", lerr)
		} else if perr := x.c.Purge(pctx, x.run); perr != nil {
			// The output is complete; leftovers expire with ResultsMaxAge.
			x.c.log.Warn("natsrun: the run is complete but its results could not be purged", "run", x.run, "err", perr)
		}
	}
	return sum, err
}

// StartAt makes Run start at group firstGroup (the groups before it were
// written before: a resumed output) and report its progress to progress,
// after each written group and every progressEvery (0: only then), as
// play.Config's Progress and ProgressEvery. None shapes the episodes, so
// none is part of the run's record; call it before Run.
func (x *Executor) StartAt(firstGroup int, progress func(play.Progress), progressEvery time.Duration) {
	x.cfg.FirstGroup, x.cfg.Progress, x.cfg.ProgressEvery = firstGroup, progress, progressEvery
}

// errClosed is the cause of an executor's end by Close.
var errClosed = errors.New("natsrun: the executor was closed")

// failure is why the run cannot go on, or nil.
func (x *Executor) failure() error {
	if cause := context.Cause(x.ctx); cause != nil && !errors.Is(cause, errClosed) {
		return cause
	}
	return nil
}

// keepLease renews the run's lease every third of its TTL. Losing it
// (another submitter took the run over, or it was purged or cancelled)
// ends the run with the reason.
func (x *Executor) keepLease() {
	defer x.wg.Done()
	t := time.NewTicker(x.c.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-x.ctx.Done():
			return
		case <-t.C:
		}
		if x.stalled.Load() {
			continue
		}
		rev, err := x.c.renew(x.ctx, x.run, x.holder, x.leaseRev.Load())
		switch {
		case err == nil:
			x.leaseRev.Store(rev)
			if _, err := x.c.runConsumer(x.ctx, x.run, x.delivery); err != nil && x.ctx.Err() == nil {
				x.c.log.Warn("natsrun: the run's consumer", "run", x.run, "err", err)
			}
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrCancelled):
			x.c.log.Error("natsrun: the run cannot go on", "run", x.run, "err", err)
			x.cancel(err)
			return
		case x.ctx.Err() == nil:
			x.c.log.Warn("natsrun: renewing the run's lease", "run", x.run, "err", err)
		}
	}
}

// Refusal is a worker's reason for leaving a run to others: a scenario or
// policy it does not have, an LLM endpoint it does not serve, a version it
// does not speak.
type Refusal struct {
	Worker string `json:"worker"` // its name
	Reason string `json:"reason"`
}

// ErrUnplayable ends a run that every live worker refused; the error names
// each one's reason.
var ErrUnplayable = errors.New("natsrun: no live worker can play the run")

// watchRefusals follows the workers' refusals of the run, logs each by
// name, and ends the run with ErrUnplayable once every live worker has
// refused it (seen twice, pollEvery apart, so that a worker just starting
// has its say). With no live worker at all the run waits for one.
func (x *Executor) watchRefusals() {
	defer x.wg.Done()
	w, err := x.c.runs.Watch(x.ctx, x.ref.refusedFilter())
	if err != nil {
		if x.ctx.Err() == nil {
			x.c.log.Warn("natsrun: watching workers' refusals", "run", x.run, "err", err)
		}
		return
	}
	defer func() { _ = w.Stop() }()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	strikes := 0
	for {
		select {
		case <-x.ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var r Refusal
			if json.Unmarshal(e.Value(), &r) != nil {
				continue
			}
			id := e.Key()[len(x.ref.refusedFilter())-1:]
			x.mu.Lock()
			x.refusals[id] = r
			x.mu.Unlock()
			x.c.log.Warn("natsrun: a worker cannot play the run and leaves it to others", "run", x.run, "worker", r.Worker, "reason", r.Reason)
		case <-t.C:
			x.mu.Lock()
			n := len(x.refusals)
			x.mu.Unlock()
			if n == 0 {
				continue
			}
			live, err := x.c.liveWorkers(x.ctx)
			if err != nil || len(live) == 0 {
				strikes = 0
				continue
			}
			x.mu.Lock()
			all := true
			for _, id := range live {
				if _, ok := x.refusals[id]; !ok {
					all = false
				}
			}
			x.mu.Unlock()
			if !all {
				strikes = 0
				continue
			}
			if strikes++; strikes < 2 {
				continue
			}
			var why []string
			for _, r := range x.Stats().Refusals {
				why = append(why, "worker "+r.Worker+": "+r.Reason)
			}
			err = fmt.Errorf("%w: run %s: %s", ErrUnplayable, x.run, strings.Join(why, "; "))
			x.c.log.Error("natsrun: the run cannot go on", "run", x.run, "err", err)
			x.cancel(err)
			return
		}
	}
}

// liveWorkers lists the ids of the workers whose presence keys are live.
func (c *Client) liveWorkers(ctx context.Context) ([]string, error) {
	keys, err := c.alive.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	defer func() { _ = keys.Stop() }()
	var ids []string
	for k := range keys.Keys() {
		ids = append(ids, k)
	}
	return ids, nil
}

// Stats returns what the executor did so far.
func (x *Executor) Stats() ExecutorStats {
	x.mu.Lock()
	refusals := slices.SortedFunc(maps.Values(x.refusals), func(a, b Refusal) int { return strings.Compare(a.Worker, b.Worker) })
	x.mu.Unlock()
	var audited int64
	var failures []AuditFailure
	if x.audit != nil {
		audited, failures = x.audit.stats()
	}
	return ExecutorStats{
		Audited:       audited,
		AuditFailures: failures,
		Resumed:       x.resumed,
		DoneAtStart:   x.stats.doneAtStart.Load(),
		QueuedAtStart: x.stats.queuedAtStart.Load(),
		Published:     x.stats.published.Load(),
		Collected:     x.stats.collected.Load(),
		Redelivered:   x.stats.redelivered.Load(),
		Failed:        x.stats.failed.Load(),
		Refusals:      refusals,
	}
}

// ID returns the run's id.
func (x *Executor) ID() string { return x.run }

// Close stops queuing requests and following done markers, and gives the
// run's lease up. Requests already queued stay queued: a later Start with
// the same id picks the run up at once. Execute calls still waiting return
// their episodes as interrupted.
func (x *Executor) Close() error {
	// A lease lost is another submitter's now: not ours to release.
	lost := errors.Is(x.failure(), ErrLeaseLost)
	x.cancel(errClosed)
	x.wg.Wait()
	if !lost {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		x.c.release(ctx, x.run, x.leaseRev.Load())
		cancel()
	}
	return nil
}
