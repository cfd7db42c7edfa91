package natsrun

import (
	"bytes"
	"cmp"
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

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
)

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Registry resolves the scenarios requests name. Required.
	Registry *env.Registry
	// Policies makes, for each run the worker plays, the maker of the
	// policies the scenario does not own that its spec names (an LLM),
	// given the run's LLM endpoint (Spec.LLMEndpoint: a name the worker
	// declares, or the URL of the run's own server): the closure holds
	// what the worker serves. The maker gets every role's request, the
	// run spec's name and settings, which the policy must honour exactly;
	// it returns env.ErrUnknownPolicy for the names it leaves to the
	// scenario's own policies and "random" (env.Info.MakePolicy, which
	// refuses settings), and any other error means the worker cannot play
	// the run (it lacks the policy, serves another LLM endpoint, cannot
	// honour a setting): the worker leaves the run to others and says why.
	// nil: the scenarios' own policies and "random" only.
	Policies func(llmEndpoint string) env.PolicyMaker
	// Parallel names the policies whose simultaneous actors the worker asks
	// at once (runspec.Resolvers.Parallel: slow remote ones, "llm"): how
	// it asks shapes no episode, so it is the worker's, not the run's.
	Parallel []string
	// Concurrency is how many episodes the worker plays at once; 0 means
	// GOMAXPROCS.
	Concurrency int
	// Drain is how long Run lets the episodes in hand finish after its
	// context ends; what is still running then is cancelled and handed
	// back to the queue for another worker. 0 hands them back at once.
	Drain time.Duration
	// Name identifies the worker in the metrics, in done markers and in
	// refusals; the default is HOSTNAME-PID.
	Name string
	// PollWait is how long one pull for work waits before it is renewed:
	// how long Run may take to notice its context ended while idle. The
	// default is 2s.
	PollWait time.Duration
}

// Worker follows the deployment's runs and plays the requests of those it
// can play exactly: their scenario registered, their versions its own,
// their policies and settings (an LLM endpoint, sampling) ones it can
// honour. It leaves the others to other workers, recording why, which
// their submitters report. See Run.
type Worker struct {
	c      *Client
	cfg    WorkerConfig
	id     string
	speaks versions      // ours, but in tests of older workers
	slots  chan struct{} // a token per episode in hand or pull waiting
	execs  execCache
	fps    fingerprints // of the runs it was asked to play

	mu   sync.Mutex
	runs map[string]*workerRun // the runs it plays, by id

	pullers, handlers sync.WaitGroup

	busy     atomic.Int64
	counters struct {
		played, failed, rejected, redelivered, skipped, handedBack, givenUp, refused atomic.Int64
	}
}

// workerRun is a run a worker plays.
type workerRun struct {
	ref  runRef
	rec  *record
	del  delivery
	stop context.CancelFunc
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
	Refused     int64 // runs it cannot play and left to others
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
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	w := &Worker{
		c: c, cfg: cfg, id: nameRE.ReplaceAllString(cfg.Name, "_") + "-" + nuid.Next(),
		slots: make(chan struct{}, cfg.Concurrency), runs: map[string]*workerRun{}, speaks: ours,
	}
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
		Refused:     w.counters.refused.Load(),
	}
}

// Run plays episodes until ctx ends (SIGTERM, say), then stops pulling,
// gives the episodes in hand Drain to finish, hands back the rest and
// returns nil. It acknowledges a request only after its episode is stored,
// so a worker that dies (SIGKILL, a lost machine) loses nothing: its
// requests go to another worker once the run's ack wait passes without a
// heartbeat.
//
// It follows the runs' specs: a run it can play it pulls from, through the
// run's own consumer, with the run's own ack wait and max deliver; a run
// it cannot play (see Worker) it never pulls from, and records why.
//
// A request delivered more than the run's MaxDeliver times (its workers
// kept dying on it) is not played again: the worker that gets it next
// records it as failed with the reason. The worker keeps a presence key
// that the deployment's Stats count.
func (w *Worker) Run(ctx context.Context) error {
	// Episodes get their own context: the run's ending stops the pulling,
	// not the playing, until Drain runs out.
	epCtx, stopEpisodes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEpisodes()

	// The worker counts as live (its presence key, which Stats and
	// submitters read) only once it follows the runs: the watcher has
	// delivered every spec already stored. A submitter, an operator or a
	// test that waits for N live workers then knows that each of them sees
	// the next run, however loaded its machine.
	following := make(chan struct{})
	var aux sync.WaitGroup
	aux.Go(func() { w.presence(ctx, following) })
	aux.Go(func() { w.followRuns(ctx, epCtx, following) })
	w.c.log.Info("natsrun: worker started", "worker", w.cfg.Name, "slots", w.cfg.Concurrency)

	<-ctx.Done()
	aux.Wait()
	w.pullers.Wait() // no more pulls: what is in hand is all there is
	drained := make(chan struct{})
	go func() { w.handlers.Wait(); close(drained) }()
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
	w.c.log.Info("natsrun: worker stopped", "worker", w.cfg.Name, "played", w.counters.played.Load(), "handed_back", w.counters.handedBack.Load())
	return nil
}

// followRuns watches the runs' specs and starts or stops playing each,
// until ctx ends. It closes following once the first watcher has
// delivered the specs already stored.
func (w *Worker) followRuns(ctx, epCtx context.Context, following chan<- struct{}) {
	var once sync.Once
	for ctx.Err() == nil {
		kw, err := w.c.runs.Watch(ctx, specFilter)
		if err != nil {
			if ctx.Err() == nil {
				w.c.log.Debug("natsrun: watching the runs", "err", err)
				pause(ctx, time.Second)
			}
			continue
		}
	follow:
		for {
			select {
			case e, ok := <-kw.Updates():
				if !ok {
					break follow // the watcher died: a new one resumes
				}
				if e == nil { // the watcher has delivered what was already there
					once.Do(func() { close(following) })
					continue
				}
				w.follow(ctx, epCtx, e)
			case <-ctx.Done():
				break follow
			}
		}
		_ = kw.Stop()
	}
	w.mu.Lock()
	for id, r := range w.runs {
		r.stop()
		delete(w.runs, id)
	}
	w.mu.Unlock()
}

// follow starts playing the run a spec entry describes, if the worker can
// play it, and stops playing a run whose spec is gone or replaced.
func (w *Worker) follow(ctx, epCtx context.Context, e jetstream.KeyValueEntry) {
	id, ok := runOfSpecKey(e.Key())
	if !ok {
		return
	}
	ref := runRef{id: id, rev: strconv.FormatUint(e.Revision(), 10)}
	w.mu.Lock()
	cur, known := w.runs[id]
	if known && cur.ref == ref && e.Operation() == jetstream.KeyValuePut {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if known {
		w.forget(cur)
	}
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	st, err := decodeStoredRun(e.Value(), w.speaks)
	if err == nil {
		err = w.canPlay(ref, &st.Run)
	}
	if err != nil {
		w.refuse(ctx, ref, err)
		return
	}
	rctx, stop := context.WithCancel(ctx)
	r := &workerRun{ref: ref, rec: &st.Run, del: st.Delivery, stop: stop}
	w.mu.Lock()
	w.runs[id] = r
	w.mu.Unlock()
	w.pullers.Go(func() {
		// The fingerprint is checked here, on the run's own goroutine,
		// not by followRuns: it plays episodes (seconds, for a scenario of
		// 100,000 agents), during which the worker would follow no run.
		if err := w.checkFingerprint(rctx, &st.Run); err != nil {
			if rctx.Err() == nil { // not stopped (the run replaced, the worker stopping) meanwhile
				w.forget(r)
				w.refuse(ctx, ref, err)
			}
			return
		}
		w.pull(rctx, epCtx, r)
	})
}

// canPlay sets the run up as it will play it, which is the test: every
// scenario, parameter and policy resolved, every setting honoured. The
// run's fingerprint is checked after it, apart (checkFingerprint).
func (w *Worker) canPlay(run runRef, rec *record) error {
	_, err := w.executor(run, rec, env.Request{Scenario: rec.Scenario, Params: rec.Params})
	return err
}

// checkFingerprint: the run's scenario must behave here as it did for the
// submitter: its fingerprint (see fingerprintOf), computed once per run
// input, must be the run's. A worker pulls none of a run's requests
// before it passes.
func (w *Worker) checkFingerprint(ctx context.Context, rec *record) error {
	sc, err := w.cfg.Registry.Lookup(rec.Scenario)
	if err != nil {
		return fmt.Errorf("natsrun: %w", err)
	}
	fp, err := w.fps.of(ctx, sc, fingerprintInputOf(rec))
	if err != nil {
		return err
	}
	if fp != rec.Fingerprint {
		return fmt.Errorf("%w: scenario %s plays differently on this worker: the run's fingerprint is %s, this worker's %s (another build of the scenario?)",
			ErrFingerprint, rec.Scenario, cmp.Or(rec.Fingerprint, "missing"), fp)
	}
	return nil
}

// ErrFingerprint is wrapped by the reason a worker gives for leaving a run
// whose scenario plays differently on it: the same name, another
// behaviour.
var ErrFingerprint = errors.New("natsrun: the scenario's fingerprint differs")

// refuse records that the worker cannot play run, and why, for the run's
// submitter to report.
func (w *Worker) refuse(ctx context.Context, run runRef, why error) {
	w.counters.refused.Add(1)
	w.c.log.Warn("natsrun: this worker cannot play the run; leaving it to others", "run", run, "worker", w.cfg.Name, "reason", why)
	val, _ := json.Marshal(Refusal{Worker: w.cfg.Name, Reason: why.Error()})
	if _, err := retryValue(ctx, func(ctx context.Context) (uint64, error) {
		return w.c.runs.Put(ctx, run.refusedKey(w.id), val)
	}); err != nil && ctx.Err() == nil {
		w.c.log.Warn("natsrun: recording a refusal", "run", run, "err", err)
	}
}

// pull takes the run's requests one free slot at a time and plays them,
// until ctx ends (the worker stops, or the run is gone). A pull that finds
// the run's queue empty makes it idle: it then asks the consumer's counts
// every PollWait, holding no slot, so that runs with nothing queued do not
// keep the slots from runs with work.
func (w *Worker) pull(ctx, epCtx context.Context, r *workerRun) {
	var cons jetstream.Consumer
	idle := 0
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			if cons, err = w.c.js.Consumer(ctx, w.c.n.workStream, w.c.n.consumer(r.ref.id)); err != nil {
				// Not created yet, or cancelled, or the run is gone: its
				// spec expired (which no watcher hears of) or was purged.
				cons = nil
				if w.gone(ctx, r) {
					w.forget(r)
					return
				}
				pause(ctx, w.cfg.PollWait)
				continue
			}
		}
		if idle > 0 {
			pause(ctx, w.cfg.PollWait)
			info, err := cons.Info(ctx)
			if err != nil {
				cons = nil
				continue
			}
			// Handed-back requests wait among the acknowledgements
			// pending: those are looked for every third time.
			if info.NumPending == 0 && (info.NumAckPending == 0 || idle%3 != 0) {
				idle++
				continue
			}
			idle = 0
		}
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msgs, err := w.fetch(cons)
		if err != nil {
			<-w.slots
			switch {
			case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoMessages):
				idle = 1
			default:
				w.c.log.Debug("natsrun: pulling work", "run", r.ref, "err", err)
				cons = nil
				pause(ctx, 100*time.Millisecond)
			}
			continue
		}
		for _, msg := range msgs {
			// Each message holds a slot: fetch took one per message.
			if ctx.Err() != nil {
				// Pulled as the worker was stopping: give it straight back.
				_ = msg.Nak()
				w.counters.handedBack.Add(1)
				<-w.slots
				continue
			}
			w.handlers.Go(func() {
				defer func() { <-w.slots }()
				w.busy.Add(1)
				defer w.busy.Add(-1)
				w.handle(epCtx, r, msg)
			})
		}
	}
}

// fetch pulls work for the slot the caller holds and for as many more as
// are free at once: one pull request for several messages when the worker
// has room, which spares the servers a request (and a subscription) per
// message. It holds a slot for every message it returns, and none more.
func (w *Worker) fetch(cons jetstream.Consumer) ([]jetstream.Msg, error) {
	extra := 0
take:
	for extra < cap(w.slots)-1 {
		select {
		case w.slots <- struct{}{}:
			extra++
		default:
			break take
		}
	}
	var msgs []jetstream.Msg
	if extra > 0 {
		// What is there now, at once; an empty queue falls back to the
		// waiting pull below.
		if batch, err := cons.FetchNoWait(1 + extra); err == nil {
			for m := range batch.Messages() {
				msgs = append(msgs, m)
			}
		}
	}
	for range extra + 1 - max(len(msgs), 1) {
		<-w.slots
	}
	if len(msgs) > 0 {
		return msgs, nil
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(w.cfg.PollWait))
	if err != nil {
		return nil, err
	}
	return []jetstream.Msg{msg}, nil
}

// gone reports whether run r's spec is no longer the one the worker plays.
func (w *Worker) gone(ctx context.Context, r *workerRun) bool {
	e, err := w.c.runs.Get(ctx, specKey(r.ref.id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	return err == nil && strconv.FormatUint(e.Revision(), 10) != r.ref.rev
}

// forget stops playing run r, and drops its executors.
func (w *Worker) forget(r *workerRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.runs[r.ref.id]; ok && cur == r {
		delete(w.runs, r.ref.id)
	}
	r.stop()
	w.execs.drop(r.ref.id + "@")
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handle plays the requests of one work message and stores their episodes,
// or records why one could not be played, or hands the message back. It
// acknowledges the message once every episode of it is stored; one handed
// back comes again, and its episodes already stored are then skipped.
func (w *Worker) handle(ctx context.Context, r *workerRun, msg jetstream.Msg) {
	received := time.Now()
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	if meta.NumDelivered > 1 {
		w.counters.redelivered.Add(1)
	}
	id, first, last, ok := w.c.n.parseWorkSubject(msg.Subject())
	if !ok || id != r.ref.id {
		w.c.log.Warn("natsrun: a request on a malformed subject was dropped", "subject", msg.Subject())
		_ = msg.TermWithReason("malformed subject")
		return
	}
	run := r.ref
	if rev := msg.Headers().Get(headerSpec); rev != "" && rev != run.rev {
		// Queued under an earlier incarnation of the run, which was
		// purged: nobody waits for it.
		_ = msg.TermWithReason("its run was started again")
		return
	}
	// Bookkeeping must outlive a shutdown (the episode in hand is finished
	// or handed back, never dropped) but not hang it.
	store, cancel := w.storeContext(ctx, r)
	defer cancel()
	reqs, err := decodeRequests(msg.Data(), first, last)
	if err != nil {
		// Nothing of it can be trusted but its subject: each episode it
		// names is recorded as rejected.
		for idx := first; idx <= last; idx++ {
			if err := w.reject(store, run, env.Request{Index: idx}, meta.NumDelivered, fmt.Sprintf("natsrun: undecodable request on %s: %v", msg.Subject(), err)); err != nil {
				w.handBack(store, msg, run, idx, err)
				return
			}
		}
		_ = msg.Ack()
		return
	}
	stop := w.heartbeat(msg, r.del.AckWait)
	defer stop()
	var stored []int64 // the episodes whose recorded result is this worker's
	for _, req := range reqs {
		won, err := w.playOne(ctx, r, req, meta.NumDelivered)
		if won {
			stored = append(stored, req.Index)
		}
		switch {
		case errors.Is(err, errHandBack):
			stop()
			_ = msg.Nak()
			w.counters.handedBack.Add(1)
			return
		case err != nil:
			stop()
			store, cancel := w.storeContext(ctx, r)
			defer cancel()
			w.handBack(store, msg, run, req.Index, err)
			return
		}
	}
	stop()
	// Another worker can have had the message, and the run completed,
	// only if an ack wait passed since the server sent it: checked then
	// (a request to the bucket's leader), with a margin for the time it
	// took to arrive, and not after every quick message.
	if len(stored) > 0 && time.Since(received) >= r.del.AckWait/2 {
		store, cancel := w.storeContext(ctx, r)
		defer cancel()
		if gone, err := w.c.specGone(store, run); gone {
			w.takeBack(store, run, stored)
		} else if err != nil {
			w.c.log.Debug("natsrun: checking the run is still there", "run", run, "err", err)
		}
	}
	// A lost ack only means a redelivery that finds the episodes done.
	_ = msg.Ack()
}

// takeBack removes what this worker recorded for episodes idxs of run
// once the run is gone. A worker cut off from the servers for longer than
// the ack wait (a partition, a paused process) has its requests played
// elsewhere meanwhile; its late done markers lose to theirs, but once the
// run completed and its submitter purged it, nothing is left to lose to:
// a KV Create on a purged key succeeds, and the markers (with their
// results) would stay, for nobody, until ResultsMaxAge. Found by the
// zombie-after-end partition schedule (partition_linux_test.go). A
// message delayed in transit by more than half the ack wait, then handled
// quickly, escapes the check; its markers expire with ResultsMaxAge. The
// purge's order (the spec first, then the markers) makes the check after
// the store enough: a purge that had not removed the spec by then removes
// the markers after they were written.
func (w *Worker) takeBack(ctx context.Context, run runRef, idxs []int64) {
	kv, err := w.c.js.Stream(ctx, "KV_"+w.c.n.runsBucket)
	if err != nil {
		w.c.log.Debug("natsrun: taking back the results of a gone run", "run", run, "err", err)
		return
	}
	for _, idx := range idxs {
		rec, err := w.c.leaderDoneRecord(ctx, run, idx)
		if err != nil {
			continue // already purged
		}
		// The chunks of this very attempt only: a run started again
		// under the same id stores its own under the same prefix.
		w.c.purgeSubject(ctx, w.c.n.resultSubject(run.id, idx, rec.Attempt))
		if err := kv.Purge(ctx, jetstream.WithPurgeSubject("$KV."+w.c.n.runsBucket+"."+run.doneKey(idx))); err != nil {
			w.c.log.Debug("natsrun: taking back the done marker of a gone run", "run", run, "episode", idx, "err", err)
			continue
		}
		w.counters.played.Add(-1)
		if rec.Status == protocol.StatusFailed {
			w.counters.failed.Add(-1)
		}
		w.counters.skipped.Add(1)
	}
	w.c.log.Info("natsrun: took back results stored after their run was gone", "run", run, "episodes", len(idxs))
}

// errHandBack is playOne's way to say that the worker is stopping and the
// message goes back as it is.
var errHandBack = errors.New("natsrun: handed back")

// playOne plays one request of a message delivered deliveries times and
// stores its episode (or its failure); it reports whether the result
// recorded is this play's, and returns an error when it could not store it
// (another try may), or errHandBack when the worker stops.
func (w *Worker) playOne(ctx context.Context, r *workerRun, req env.Request, deliveries uint64) (bool, error) {
	run := r.ref
	store, cancel := w.storeContext(ctx, r)
	defer cancel()
	// A request handed out before may have been played by a worker that
	// died before acknowledging it. (One handed out for the first time may
	// be a re-queued duplicate, which the done marker's creation catches.)
	if deliveries > 1 {
		if _, err := w.c.runs.Get(store, run.doneKey(req.Index)); err == nil {
			w.counters.skipped.Add(1)
			return false, nil
		}
	}
	if deliveries > uint64(r.del.MaxDeliver) {
		return false, w.giveUp(store, run, req, deliveries)
	}
	exec, err := w.executor(run, r.rec, req)
	if err != nil {
		return false, w.reject(store, run, req, deliveries, err.Error())
	}
	w.c.log.Debug("natsrun: playing", "run", run, "episode", req.Index, "delivery", deliveries, "worker", w.cfg.Name)
	t0 := time.Now()
	ep := exec.Execute(ctx, req)
	t1 := time.Now()
	if ep.End == env.EndInterrupted && ctx.Err() != nil {
		return false, errHandBack
	}
	store, cancel = w.storeContext(ctx, r) // a fresh deadline: the episode took its time
	defer cancel()
	// Counted before the result is stored, and taken back if it is not
	// this worker's: a submitter that sees the result finds it in the
	// worker's stats (played, and failed for a failed episode).
	failed := int64(0)
	if ep.Status == protocol.StatusFailed {
		failed = 1
	}
	w.counters.played.Add(1)
	w.counters.failed.Add(failed)
	won, err := w.c.commit(store, run, req.Index, ep, deliveries, w.cfg.Name)
	w.c.log.Debug("natsrun: played", "run", run, "episode", req.Index, "play", t1.Sub(t0), "store", time.Since(t1), "won", won)
	if err != nil || !won {
		w.counters.played.Add(-1)
		w.counters.failed.Add(-failed)
	}
	if err != nil {
		return false, err
	}
	if !won {
		w.counters.skipped.Add(1)
	}
	return won, nil
}

// decodeRequests reads a work message's requests strictly: a field this
// version does not know is refused by name, and every request must be of
// an episode in [first, last], once.
func decodeRequests(data []byte, first, last int64) ([]env.Request, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var reqs []env.Request
	if err := dec.Decode(&reqs); err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	for _, r := range reqs {
		if r.Index < first || r.Index > last || seen[r.Index] {
			return nil, fmt.Errorf("it names episode %d, not one of %d to %d once", r.Index, first, last)
		}
		seen[r.Index] = true
	}
	return reqs, nil
}

// storeContext bounds the bookkeeping around an episode: the retries of a
// store that cannot reach the servers give up after twice the run's ack
// wait (a minute at least), by which time another worker has the request
// anyway.
func (w *Worker) storeContext(ctx context.Context, r *workerRun) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(2*r.del.AckWait, time.Minute))
}

// heartbeat tells the server, every third of the run's ack wait, that msg
// is still being worked on, until the returned function is first called.
func (w *Worker) heartbeat(msg jetstream.Msg, ackWait time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(ackWait/3, 10*time.Millisecond))
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
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// reject stores req's episode as failed (EndRejected) with the reason: it
// could never be played.
func (w *Worker) reject(ctx context.Context, run runRef, req env.Request, deliveries uint64, reason string) error {
	w.c.log.Warn("natsrun: request rejected", "run", run, "episode", req.Index, "reason", reason)
	ep := failed(req, EndRejected, reason)
	// Counted before the store: a submitter that sees the stored result and
	// then reads Stats finds it counted. A store that fails takes it back.
	w.counters.rejected.Add(1)
	if _, err := w.c.commit(ctx, run, req.Index, ep, deliveries, w.cfg.Name); err != nil {
		w.counters.rejected.Add(-1)
		return err
	}
	return nil
}

// giveUp stores req's episode as failed (EndMaxDeliver) after its
// delivery number deliveries found it never finished.
func (w *Worker) giveUp(ctx context.Context, run runRef, req env.Request, deliveries uint64) error {
	reason := fmt.Sprintf("natsrun: given up after %d deliveries: every worker that took it died, hung or handed it back before storing it", deliveries-1)
	if e, err := w.c.runs.Get(ctx, run.errorKey(req.Index)); err == nil {
		reason += "; last error: " + string(e.Value())
	}
	w.c.log.Warn("natsrun: request given up", "run", run, "episode", req.Index, "deliveries", deliveries-1)
	won, err := w.c.commit(ctx, run, req.Index, failed(req, EndMaxDeliver, reason), deliveries, w.cfg.Name)
	if err != nil {
		return err
	}
	if won {
		w.counters.givenUp.Add(1)
	}
	return nil
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
// request can never be played here: an unknown scenario or policy, bad
// parameters, a setting or LLM endpoint the worker cannot honour.
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
			Policies:  rec.Policies,
			Emit:      rec.Emit,
			Limits:    runspec.LimitsOf(env.Limits{MaxSteps: rec.MaxSteps, MaxTurns: rec.MaxTurns, MaxMessages: rec.MaxMessages}, rec.Timeout),
			OnInvalid: runspec.InvalidOf(env.InvalidRule{Mode: rec.InvalidMode, Penalty: rec.InvalidPenalty, Bonus: rec.InvalidBonus}),
			Episodes:  1,
			Tree:      rec.Tree,
		}
		var policies env.PolicyMaker
		if w.cfg.Policies != nil {
			policies = w.cfg.Policies(rec.LLMEndpoint)
		}
		res, err := spec.Resolve(runspec.Resolvers{Scenarios: w.cfg.Registry, Policies: policies, Parallel: w.cfg.Parallel})
		if err != nil {
			return nil, fmt.Errorf("natsrun: %w", err)
		}
		return res.Executor(), nil
	})
}

// execCache keeps built executors, so that a run's episodes share one
// engine pool and one set of policies. It holds at most max of them,
// dropping the oldest, and a run's when the worker stops playing it.
type execCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]env.Executor
	order []string // keys, oldest first
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
	if c.m == nil {
		c.m = map[string]env.Executor{}
	}
	if _, ok := c.m[key]; !ok {
		c.order = append(c.order, key)
	}
	c.m[key] = x
	for len(c.order) > c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	return x, nil
}

// drop forgets the executors whose keys start with prefix (a run's).
func (c *execCache) drop(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = slices.DeleteFunc(c.order, func(k string) bool {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(c.m, k)
			return true
		}
		return false
	})
}

// Len is how many executors the cache holds.
func (c *execCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// presence puts the worker's key in the presence bucket once following
// is closed (the worker follows the runs), keeps it fresh, and deletes it
// when ctx ends.
func (w *Worker) presence(ctx context.Context, following <-chan struct{}) {
	put := func(ctx context.Context) {
		val, _ := json.Marshal(w.Stats())
		if _, err := w.c.alive.Put(ctx, w.id, val); err != nil {
			w.c.log.Debug("natsrun: refreshing presence", "err", err)
		}
	}
	select {
	case <-following:
	case <-ctx.Done():
		return
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
