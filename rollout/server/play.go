package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/trajectories"
)

// A rollout request is one run (play.Run, the one play loop): its resolved
// run spec, placed at the request's ids and seeds, played as one group of
// n episodes at once (ConcurrentEpisodes), by the request's executor
// (episode slots, metrics; local or remote), into the request's answer
// (the checks and the allocation transaction around the standard
// trajectories.Output, which allocates, stamps and numbers the samples and
// writes them to the answer's encoder, answerWriter).

// executor plays one request's episodes: each in an episode slot of the
// service (local episodes), counted in the metrics, on the request's
// context.
type executor struct {
	s     *Server
	ctx   context.Context // the request's: its episodes end with it
	name  string          // the scenario's, for the metrics
	play  env.Play        // how they are played: remote episodes' replays
	drive env.Drive       // and how they are driven
	inner env.Executor    // a LocalExecutor, or the Remote's
	local bool            // inner plays here, each episode in a slot
	merge bool            // the answer's layout is merged: the metrics count its samples

	// By episode: the records played, and when each started and ended.
	recs         []*episode.Record
	starts, ends []time.Time
}

// Execute implements env.Executor: it plays req, the episode of the
// request's run (at the request's seeds and ids: the run spec's, placed),
// on the request's context, not the run's.
func (x *executor) Execute(_ context.Context, r env.Request) *episode.Record {
	i := r.Index
	if x.local {
		// An episode that cannot get a slot before the request's context
		// ends is still run: it ends aborted at once, with its seats and
		// error, so the caller gets a rollout for it all the same.
		if x.s.acquire(x.ctx) {
			defer x.s.release()
		}
	}
	x.s.metrics.inflightEpisodes.Add(1)
	defer x.s.metrics.inflightEpisodes.Add(-1)
	x.starts[i] = time.Now()
	rec := x.inner.Execute(x.ctx, r)
	x.ends[i] = time.Now()
	if !x.local && rec.Replay == nil && len(rec.Seats) > 0 {
		// A remote episode may come back without a Replayer (it cannot
		// travel): it gets the one a local episode would have, for
		// counterfactual allocators.
		rec.Replay = env.NewReplayer(env.Setup{Play: x.play, Drive: x.drive, Seed: r.Seed, PolicySeed: r.PolicySeed, Index: r.Index,
			RolloutID: r.RolloutID, GroupIndex: r.GroupIndex, Engines: &x.s.replays}, rec.Seats, rec.Turns)
	}
	samples := rec.Emitted()
	if x.merge {
		samples = trajectories.MergedCount(rec)
	}
	x.s.metrics.episode(x.name, rec.Status, samples, len(rec.Turns), x.ends[i].Sub(x.starts[i]))
	x.recs[i] = rec
	return rec
}

// inside is the time spent inside the episodes: from the first one's
// start to the last one's end, so that waiting for a slot counts as the
// service's overhead, not as episode time.
func (x *executor) inside() time.Duration {
	var first, last time.Time
	for i := range x.recs {
		if x.recs[i] == nil {
			continue
		}
		if first.IsZero() || x.starts[i].Before(first) {
			first = x.starts[i]
		}
		if x.ends[i].After(last) {
			last = x.ends[i]
		}
	}
	return last.Sub(first)
}

// unqueued is the executor of a request whose episodes the Remote could
// not take (Remote.Start failed): each ends aborted with its error.
type unqueued struct{ err error }

func (u unqueued) Execute(_ context.Context, req env.Request) *episode.Record {
	return &episode.Record{Scenario: req.Scenario, Params: req.Params, Seed: req.Seed, PolicySeed: req.PolicySeed,
		Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex,
		Status: protocol.StatusAborted, End: env.EndPolicyError, Err: u.err.Error()}
}

// answer is a request's output (an play.Output). Once the episodes are
// played (Finish), it hands them to the league (a league request),
// refuses an answer of too many samples, begins the allocation
// transaction, and hands the group on to out, the standard output: it
// allocates their credit, stamps the request's label and remove_sample,
// numbers the samples (from the request's index, else a block reserved
// from the service's counter) and writes them to w, the answer.
type answer struct {
	s     *Server
	p     *plan
	ctx   context.Context // the request's
	count *turnCounter
	out   *trajectories.Output
	w     *answerWriter

	tx      *allocation    // begun by Finish
	refusal *rollout.Error // Finish's refusal
	body    []byte         // the answer, once written
	inside  time.Duration  // the time inside the episodes
}

// Finish implements play.Output.
func (a *answer) Finish(_ context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	a.count.stop()
	a.s.leaguePlayed(a.p, group)
	if e := a.s.checkSamples(a.p, group, a.count); e != nil {
		a.refusal = e
		return nil, e
	}
	tx, err := a.s.beginAllocation(a.p)
	if err != nil {
		return nil, err
	}
	a.tx = tx
	// The request's context, not the run's: allocation (counterfactual
	// replays) ends with the request.
	return a.out.Finish(a.ctx, group)
}

// Flush implements play.Output.
func (a *answer) Flush() error { return nil }

// rollouts plays the request's run through play.Run and encodes its answer
// into *bp. On success the answer's allocation transaction is open: the
// caller commits it (its locks are held until then); on failure it was
// rolled back.
func (s *Server) rollouts(ctx context.Context, p *plan, count *turnCounter, bp *[]byte) (*answer, *rollout.Error) {
	w := newAnswerWriter((*bp)[:0], s.cfg.MaxAnswerBytes)
	defer func() { *bp = w.buf }() // grown, for the next request
	cfg := p.run.Config
	cfg.Policy = count.wrap(cfg.Policy, cfg.Emit)
	x := &executor{s: s, ctx: ctx, name: p.run.Info.Name, play: cfg.Play, drive: cfg.Drive, merge: p.run.Spec.MergeTurns,
		recs: make([]*episode.Record, p.n), starts: make([]time.Time, p.n), ends: make([]time.Time, p.n)}
	if s.cfg.Remote != nil {
		rx, err := s.cfg.Remote.Start(ctx, RemoteRequest{Run: p.run, Requests: p.run.Requests()})
		if err != nil {
			x.inner = unqueued{err}
		} else {
			defer func() { _ = rx.Close() }()
			x.inner = rx
		}
	} else {
		x.inner, x.local = &env.LocalExecutor{Play: cfg.Play, Drive: cfg.Drive, Reuse: &s.reuse}, true
	}

	a := &answer{s: s, p: p, ctx: ctx, count: count, w: w}
	var sink trajectories.Sink = a.w
	if p.match != nil {
		sink = newLeagueSink(p.match, sink)
	}
	a.out = &trajectories.Output{Sink: sink, Allocators: p.allocators, Format: p.run.Format,
		Label: p.label, RemoveFailed: !p.req.KeepFailed, NoPlaceholders: true, Merge: p.run.Spec.MergeTurns,
		MergeReward: trajectories.MergeReward(p.run.Spec.MergeReward)}
	if p.req.Index != nil {
		a.out.IndexBase = *p.req.Index
	} else {
		a.out.Reserve = s.reserveIndexes
	}

	cfg.Episodes, cfg.GroupSize, cfg.Concurrency = p.n, p.n, 1
	cfg.ConcurrentEpisodes = true
	cfg.Executor = x
	returned := false
	defer func() {
		if !returned {
			// An allocator or the answer panicked (net/http recovers
			// the handler's panic): the stateful allocators are left
			// unlocked, as they were.
			a.tx.rollback()
		}
	}()
	// The run's context does not end: the episodes' is the request's (the
	// executor's), and a request whose episodes it interrupted (a timeout,
	// a shutdown, too many turns) is answered all the same, its
	// interrupted episodes aborted rollouts.
	_, err := play.Run(context.WithoutCancel(ctx), cfg, a)
	returned = true
	a.inside = x.inside()
	s.voidMatch(p) // the league was told nothing: the request failed before
	switch {
	case a.refusal != nil:
		return nil, a.refusal
	case errors.Is(err, errAnswerTooLarge):
		a.tx.rollback()
		return nil, s.answerTooLarge(p)
	case err != nil:
		a.tx.rollback()
		if ctx.Err() != nil {
			return nil, &rollout.Error{Status: http.StatusServiceUnavailable, Code: rollout.CodeInternal,
				Message: fmt.Sprintf("reward allocation was interrupted: %v", context.Cause(ctx))}
		}
		return nil, &rollout.Error{Status: http.StatusBadRequest, Code: rollout.CodeBadAllocator,
			Message: fmt.Sprintf("scenario %s: %v", p.run.Info.Name, err)}
	}
	var ok bool
	if a.body, ok = a.w.end(); !ok {
		a.tx.rollback()
		return nil, s.answerTooLarge(p)
	}
	return a, nil
}

func (s *Server) answerTooLarge(p *plan) *rollout.Error {
	return &rollout.Error{Status: http.StatusUnprocessableEntity, Code: rollout.CodeAnswerTooLarge,
		Message: fmt.Sprintf("the answer is larger than the service's limit of %d bytes (troupe serve --max-answer-bytes; MaxAnswerBytes): ask for fewer episodes (n = %d) or fewer samples (emit, limits.max_turns)", s.cfg.MaxAnswerBytes, p.n)}
}

// reserveIndexes reserves the sample indexes of a request that gives no
// index: a block of n, atomically, so that concurrent requests never share
// one.
func (s *Server) reserveIndexes(n int) int64 { return s.nextIndex.Add(int64(n)) - int64(n) }

func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) release() { <-s.slots }
