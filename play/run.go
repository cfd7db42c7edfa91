package play

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/internal/worker"
	"github.com/troupe-rl/troupe/protocol"
)

// Config is a run: N episodes of one scenario, in groups, with bounded
// concurrency.
type Config struct {
	env.Play
	env.Drive

	Episodes    int    // how many episodes
	GroupSize   int    // episodes per group (same scenario seed); 0 means 1
	Concurrency int    // groups played at once; 0 means 1
	Seed        uint64 // the run seed: every episode's seeds derive from it
	// Seeds, when set, gives episode i's scenario and policy seeds in
	// place of the tree rooted at Seed: a run whose caller chose them (a
	// rollout request's, runspec.Seeds).
	Seeds func(i int) (scenario, policy uint64)
	// RolloutIDBase is the rollout_id of episode 0; episode i gets
	// RolloutIDBase+i. GroupIndexBase likewise numbers groups.
	RolloutIDBase  int64
	GroupIndexBase int64
	// FirstGroup is the first group Run plays: the groups before it were
	// written by an earlier, interrupted run that this one resumes. Their
	// requests, ids and seeds are what they always were, so the output of
	// the resumed run continues that run's byte for byte.
	FirstGroup int

	// FailFast stops the run at the first failed or aborted episode and
	// returns its error. Without it, such episodes are written with their
	// status and the run goes on.
	FailFast bool
	// Lockstep plays one group at a time and writes it before the next is
	// played: an output that learns from every group it is handed (an
	// experiment's learners, through trajectories.Output.ObserveCredit)
	// sees it before the policies play again. Concurrency is then 1.
	Lockstep bool
	// ConcurrentEpisodes plays the episodes of a group at once, each on a
	// goroutine of its own, where they are otherwise played in order by
	// one worker: the GRPO group of slow, LLM-bound episodes of a rollout
	// request. Their records, and so the output, are the same either way.
	ConcurrentEpisodes bool
	// Executor plays the episodes; nil plays them in this process, with
	// the engines and records of Reuse (nil: the run's own).
	Executor env.Executor
	Reuse    *env.Reuse
	// Progress, when set, is called after every group written, by the
	// worker that wrote it, and every ProgressEvery (when set) while the
	// run goes on, so that a run whose first group is slow to finish (or
	// never does: a runaway game) reports from its first seconds: one call
	// at a time, Done never going back.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Output is where Run writes the episodes it played: the output layer,
// which env knows only through this contract. Package trajectories'
// Output is the one a run usually has: it allocates each group's credit,
// projects the records into samples, numbers them and writes them to its
// sink.
//
// Run hands Output whole groups only, and writes them in episode order
// whatever the concurrency.
type Output interface {
	// Finish readies one group for writing: its records, in episode
	// order, every one played to its end (a group cut short by an
	// interruption is never finished). Run calls it on the worker that
	// played the group, as soon as it was played: concurrently for
	// different groups, in no set order, with a context that carries the
	// worker's number (a cache hint: troupe's Output keeps the arrays it
	// reuses per worker). The work that may run so (allocating credit,
	// encoding) belongs here.
	//
	// The function it returns writes the group's episode k and returns how
	// many samples it wrote (for Progress and Summary). Run calls it later,
	// one call at a time (on whichever worker's goroutine writes the
	// group), groups in episode order, for k = 0, 1, ... in turn; it stops
	// at the first error, and after an episode that failed under FailFast.
	// So the call for k = 0 is where work that must see the groups one at
	// a time, in output order, goes (a Sequential allocator's). An error of
	// Finish is the group's: it stops the run when the group's turn to be
	// written comes.
	Finish(ctx context.Context, group []*episode.Record) (write func(k int) (samples int, err error), err error)
	// Flush is called once, when Run returns, whatever way it ends.
	Flush() error
}

// RecyclingOutput is an Output that can give the records back: when
// Recycles reports true, the Output promises to read and write nothing of
// a group's records, nor of anything they hold (their Turns and Messages
// arrays, the turns' Inbox and the messages' Recipients, their Replay),
// nor of the group slice Finish was given, once the write function of the
// group's last episode returned (pointers to them it may still hold, and
// only overwrite), and Run then reuses the records, those arrays and the
// slice's for later episodes of the run.
// (The strings, maps and other slices the turns and messages point to are
// not reused: a game's or a policy's values are never written over.) Run
// recycles only the records its own executor played (Config.Executor
// nil).
type RecyclingOutput interface {
	Output
	Recycles() bool
}

// Progress is a run's state after a group was written.
type Progress struct {
	Done, Total int // episodes written (or, resumed, written before), of the run's
	// Played counts the episodes played to their end so far, written or
	// not yet (those of groups still playing, or waiting for an earlier
	// group to be written).
	Played  int
	Samples int64 // written
	Turns   int64 // of the episodes written
	Elapsed time.Duration
}

// Summary is what a run did.
type Summary struct {
	Episodes      int                     // episodes written
	ByStatus      map[protocol.Status]int // written episodes by status
	Interrupted   int                     // episodes cut short by cancellation and not written
	Samples       int64
	Turns         int64
	TeamRewardSum float64 // over completed and truncated episodes
	Scored        int     // completed and truncated episodes
	// RoleScores sums, per role, the agent scores of scored episodes that
	// have them: in zero-sum games the team reward says nothing, these do.
	RoleScores map[string]RoleScore
	// TeamScores sums, per team of a scenario that declares teams, the
	// team's reward over the scored episodes (N counts them); empty for a
	// scenario with one team, whose reward is TeamRewardSum's.
	TeamScores     map[string]RoleScore
	Elapsed        time.Duration
	FirstFailure   string // the error of the first failed or aborted episode written
	FirstFailureAt int64  // its episode index
	// FirstFailureStack is its panic's stack (episode.Record.Stack), when a
	// panic failed it.
	FirstFailureStack string
}

// RoleScore is the sum and count of one role's agent scores.
type RoleScore struct {
	Sum float64
	N   int
}

// Mean is the role's mean agent score.
func (r RoleScore) Mean() float64 {
	if r.N == 0 {
		return 0
	}
	return r.Sum / float64(r.N)
}

// MeanTeamReward is the mean team reward over scored episodes.
func (s Summary) MeanTeamReward() float64 {
	if s.Scored == 0 {
		return 0
	}
	return s.TeamRewardSum / float64(s.Scored)
}

// TurnsPerSecond is the run's agent-turn throughput.
func (s Summary) TurnsPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Turns) / s.Elapsed.Seconds()
}

// ErrEpisodeFailed is returned by Run with FailFast when an episode fails.
var ErrEpisodeFailed = errors.New("episode failed")

// Request returns the request of the run's episode i: episode i belongs to
// group i/GroupSize; its scenario seed is the group's, its policy seed its
// own. Requests are pure functions of the configuration and i, so Run makes
// each when its group starts, never the run's list of them.
func (c *Config) Request(i int) env.Request {
	return c.requests().at(i)
}

// Requests returns the requests of every episode of the run, in order
// (Request): for executors that hand a run out whole. Run itself never
// builds the list.
func (c *Config) Requests() []env.Request {
	at := c.Requester()
	reqs := make([]env.Request, c.Episodes)
	for i := range reqs {
		reqs[i] = at(i)
	}
	return reqs
}

// Requester returns Request as a function whose requests share one copy of
// the run's parameters: for a caller that makes them one by one, as Run
// does, without the list (Requests) or a copy of the parameters per
// request (Request). The configuration must not change while it is used.
func (c *Config) Requester() func(i int) env.Request { return c.requests().at }

// requester makes a run's requests; the parameters map is shared by all of
// them, as it is never changed.
type requester struct {
	cfg      *Config
	scenario string
	params   map[string]string
	size     int
}

func (c *Config) requests() requester {
	return requester{cfg: c, scenario: c.Scenario.Info().Name, params: c.Params.Map(), size: max(c.GroupSize, 1)}
}

func (r requester) at(i int) env.Request {
	group := int64(i / r.size)
	req := env.Request{
		Scenario:   r.scenario,
		Params:     r.params,
		Index:      int64(i),
		RolloutID:  r.cfg.RolloutIDBase + int64(i),
		GroupIndex: r.cfg.GroupIndexBase + group,
	}
	if r.cfg.Seeds != nil {
		req.Seed, req.PolicySeed = r.cfg.Seeds(i)
	} else {
		req.Seed, req.PolicySeed = seeds.Mix(r.cfg.Seed, 1, uint64(group)), seeds.Mix(r.cfg.Seed, 2, uint64(i))
	}
	return req
}

func (c *Config) validate() error {
	switch {
	case c.Scenario == nil:
		return fmt.Errorf("%w: no scenario", env.ErrBadConfig)
	case c.Episodes < 0:
		return fmt.Errorf("%w: episodes %d < 0", env.ErrBadConfig, c.Episodes)
	case c.GroupSize < 0:
		return fmt.Errorf("%w: group size %d < 0", env.ErrBadConfig, c.GroupSize)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: concurrency %d < 0", env.ErrBadConfig, c.Concurrency)
	case c.FirstGroup < 0 || c.FirstGroup > (c.Episodes+max(c.GroupSize, 1)-1)/max(c.GroupSize, 1):
		return fmt.Errorf("%w: first group %d is not one of the run's groups", env.ErrBadConfig, c.FirstGroup)
	case c.Policy == nil && c.Executor == nil:
		return fmt.Errorf("%w: no policy", env.ErrBadConfig)
	}
	if err := env.ValidateTree(c.Tree, c.Scenario.Info()); err != nil {
		return err
	}
	return c.Scenario.Info().Validate()
}

// Run plays the configured episodes and writes them to out in episode
// order, whatever the concurrency: the output is byte-identical for the same
// configuration. It is the one play loop: troupe run, troupe serve's
// requests, experiments' cells, NATS runs and league matches all go
// through it, each with its own executor, output and numbering.
//
// Groups are played concurrently (each group's episodes in order on one
// worker, or at once under ConcurrentEpisodes) and readied for writing
// there (Output.Finish), then written one group after the other, in order.
// Each group's requests are made when it starts (Config.Request), so
// neither memory nor start-up time grows with the number of episodes: at
// most a few chunks of groups per worker are held, waiting for their turn
// to be written. A worker takes consecutive groups in chunks sized by how
// long groups take (one at a time for slow, LLM-bound ones; up to 32 for
// episodes of microseconds; always one under Lockstep), which decides only
// where a group is played, never what it holds.
//
// Whatever stops a run (a cancelled ctx, a failed write, an episode that
// failed under FailFast), what it wrote is a prefix of what the run
// uninterrupted would have written: its first K groups, whole. When ctx is
// cancelled (Ctrl-C), Run stops starting groups, lets the episodes in
// flight end (they end aborted, "interrupted"), writes every group before
// the first one that did not finish whole, flushes the output, and returns
// ctx's error with the summary. Nothing after that first gap is written,
// even groups that finished: Summary.Interrupted counts every episode that
// was played, whole or not, and not written. Under FailFast, the group of
// the first failed episode is written whole, then the run stops.
//
// The workers write the groups themselves (whichever finds the next group
// ready), one at a time: a panic of the output stops the run, and Run
// panics with it on the caller's goroutine once the workers are done.
func Run(ctx context.Context, cfg Config, out Output) (Summary, error) {
	r := &runner{cfg: cfg, out: out, start: time.Now()}
	r.sum = Summary{ByStatus: map[protocol.Status]int{}, RoleScores: map[string]RoleScore{}, TeamScores: map[string]RoleScore{}}
	if err := cfg.validate(); err != nil {
		return r.sum, err
	}
	if out == nil {
		return r.sum, fmt.Errorf("%w: no output", env.ErrBadConfig)
	}
	return r.run(ctx)
}

// runner is one Run: the workers that play groups and the writing side
// that the workers take turns at.
//
// No goroutine hands work to another: each worker takes its next chunk of
// groups itself (take), plays it, and hands the chunk's groups to the
// writing side (deliver), and the worker that finds the next group to
// write ready writes it and every ready group after it, while the others
// play on. One worker writes at a time, groups in order. (A writer
// goroutine of its own, and one that handed out the chunks, cost each
// chunk a wake-up on the other core: on two cores that doubled the CPU
// time of a run of short episodes.) maxAhead bounds the chunks taken but
// not yet written, a few per worker (each is freed by its last group); a
// worker waits for room only when it is that far ahead of the writing, or
// when the groups played and waiting to be written hold maxPendingTurns
// turns or more and each worker has a chunk: a few chunks of large
// episodes (100,000 agents) are held back and fresh memory for the next
// ones made, their records and the output's arrays for them, where the
// writing cannot keep up anyway.
type runner struct {
	cfg   Config
	out   Output
	start time.Time
	exec  env.Executor
	// own is the executor Run made (cfg.Executor nil), whose workers keep
	// an engine each; local is the one whose records Run recycles.
	own, local *env.LocalExecutor
	recycles   bool // out is a RecyclingOutput that recycles
	reqs       requester
	size       int // episodes per group
	workers    int
	nGroups    int
	skipped    int // episodes written by the run this one resumes
	maxAhead   int
	chunks     chunker
	ctx        context.Context
	cancel     context.CancelCauseFunc

	// mu guards what follows, up to the writing worker's fields.
	mu      sync.Mutex
	room    *sync.Cond // a chunk was freed, or the run stops
	nextGi  int        // the next group to hand out
	ahead   int        // chunks taken and not yet freed
	writing bool       // a worker is writing
	spare   []*chunk   // chunks written whole, to reuse
	// pending holds the groups back from the workers and not yet written,
	// at n % len(pending): maxAhead bounds them to fewer than that.
	pending     []*group
	next        int // the next group to write
	interrupted int // episodes played and not written

	// pendingTurns is the turns of the groups in pending (runner.full).
	pendingTurns int

	// stopped: a group could not be written (cut, or its write failed):
	// no later group may be, or the output would have a hole.
	stopped  bool
	runErr   error
	panicked any // what the output panicked with

	// The writing worker's: the summary and its tallies, and the written
	// records not yet given back (local), with their turns.
	sum          Summary
	statuses     tally[protocol.Status, int]
	roles        tally[string, RoleScore]
	recycle      []*episode.Record
	recycleTurns int

	// played counts the episodes played, chunk by chunk; progressMu
	// makes the progress reports one at a time, and last is the latest
	// report of a written group, which the periodic ones repeat.
	played     atomic.Int64
	progressMu sync.Mutex
	last       Progress
}

// group is one unit of work: the episodes of a group, played in order by
// one worker.
type group struct {
	n        int
	episodes []*episode.Record
	write    func(k int) (int, error) // from Output.Finish
	err      error                    // Output.Finish's error
	cut      bool                     // interrupted, or never started: the group is not written
	turns    int                      // its episodes' turns, while pending
	last     bool                     // the last group of its chunk, which holds a window slot
	chunk    *chunk                   // the last group's: its chunk, to reuse once written
}

// chunk holds the groups a worker plays at once and their episodes. A
// chunk whose groups were all written serves again (Run's spare chunks):
// a run of short episodes allocates nothing per chunk, so the collector
// does not run, and neither do its write barriers. The episodes array,
// whose stretches are the groups Output.Finish is given, serves again only
// when the output keeps none of them (RecyclingOutput); any other Output
// may keep its groups.
type chunk struct {
	groups   []group
	episodes []*episode.Record
}

// run plays the run and returns its summary.
func (r *runner) run(ctx context.Context) (Summary, error) {
	cfg := &r.cfg
	r.exec = cfg.Executor
	ro, ok := r.out.(RecyclingOutput)
	r.recycles = ok && ro.Recycles()
	if r.exec == nil {
		r.own = &env.LocalExecutor{Play: cfg.Play, Drive: cfg.Drive, Reuse: cfg.Reuse}
		r.exec = r.own
		if r.recycles {
			r.local = r.own
		}
	}
	r.reqs = cfg.requests()
	r.size = r.reqs.size
	r.workers = max(cfg.Concurrency, 1)
	if cfg.Lockstep {
		r.workers = 1
	}
	r.nGroups = (cfg.Episodes + r.size - 1) / r.size
	r.skipped = min(cfg.FirstGroup*r.size, cfg.Episodes)
	r.chunks = chunker{workers: r.workers, one: cfg.Lockstep}
	r.maxAhead = 4 * r.workers
	// Room for every group that can be pending, and no more: a run of a
	// few groups (a league's batch) allocates little.
	r.pending = make([]*group, max(1, min(r.maxAhead*maxChunk, r.nGroups-cfg.FirstGroup)))
	r.nextGi, r.next = cfg.FirstGroup, cfg.FirstGroup
	r.room = sync.NewCond(&r.mu)

	r.ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)

	// A fixed pool of workers: one goroutine per worker for the whole
	// run, so that its stack, grown once by the first episode, is not
	// grown again (and copied) for every group. A run of one worker
	// (Lockstep, Concurrency 1, a run of one group) plays on the caller's
	// goroutine, whose stack is grown already: a caller that makes many
	// short runs (a league's batches of a match) would otherwise pay for
	// a goroutine and its stack's growth every run. That worker never
	// waits for room (it writes each chunk it plays before it takes the
	// next), so a cancellation has no one to wake. The periodic reports
	// end with the workers, before the summary: no report comes once Run
	// returns.
	stop := make(chan struct{})
	var ticking sync.WaitGroup
	if cfg.Progress != nil && cfg.ProgressEvery > 0 {
		ticking.Go(func() { r.tick(stop) })
	}
	func() {
		// Deferred: a panic of the output's Finish on the caller's
		// goroutine stops the reports too.
		defer func() {
			close(stop)
			ticking.Wait()
		}()
		n := min(r.workers, r.nGroups-cfg.FirstGroup)
		if n == 1 {
			r.work(0)
			return
		}
		defer context.AfterFunc(r.ctx, func() {
			r.mu.Lock()
			r.room.Broadcast()
			r.mu.Unlock()
		})()
		var wg sync.WaitGroup
		for w := range n {
			wg.Go(func() { r.work(w) })
		}
		wg.Wait()
	}()
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.summary()
}

// work is worker w's loop: take a chunk, play its groups, deliver them.
func (r *runner) work(w int) {
	// The worker's number, in the context its groups are finished
	// with: an Output keeps what it reuses per worker (internal/worker).
	wctx := worker.With(r.ctx, w)
	// The worker's own engine, for the whole run: taking one from the
	// executor's pool per episode costs two locks each.
	var pinned env.Executor
	if r.own != nil {
		var release func()
		pinned, release = r.own.Worker()
		defer release()
	}
	size := r.size
	for {
		lo, hi, c, ok := r.take()
		if !ok {
			return
		}
		// The chunk's groups and their episodes: a spare chunk's
		// arrays when they are large enough (the episodes' only for
		// an output that keeps no group), else one allocation each,
		// not one per group.
		c.groups = grow(c.groups, hi-lo)
		if n := min(hi*size, r.cfg.Episodes) - lo*size; r.recycles {
			c.episodes = grow(c.episodes, n)
		} else {
			c.episodes = make([]*episode.Record, n)
		}
		gs, eps := c.groups, c.episodes
		// The chunk is timed whole: a clock reading per group of a
		// microsecond costs more than the chunker gains by it.
		t0 := time.Now()
		played := 0
		for k := range gs {
			gi := lo + k
			if r.ctx.Err() != nil {
				// Cancelled before this group started: it has no
				// episodes, and is not written.
				gs[k] = group{n: gi, cut: true}
				continue
			}
			r.play(pinned, wctx, gi, &gs[k], eps[k*size:])
			played++
		}
		r.chunks.took(time.Since(t0), played)
		gs[len(gs)-1].last, gs[len(gs)-1].chunk = true, c
		r.deliver(gs)
	}
}

// play plays group gi into g, its episodes into eps (the chunk's), with
// the worker's own executor pinned when Run made the executor (else with
// the run's executor, which chooses where), and finishes it
// with wctx, the context of the worker playing it.
func (r *runner) play(pinned env.Executor, wctx context.Context, gi int, g *group, eps []*episode.Record) {
	lo, hi := gi*r.size, min((gi+1)*r.size, r.cfg.Episodes)
	// Whole: a spare chunk's group still holds what it held before.
	*g = group{n: gi, episodes: eps[: hi-lo : hi-lo]}
	if r.cfg.ConcurrentEpisodes && hi-lo > 1 {
		var wg sync.WaitGroup
		for i := lo; i < hi; i++ {
			wg.Go(func() {
				g.episodes[i-lo] = r.exec.Execute(r.ctx, r.reqs.at(i))
				r.played.Add(1)
			})
		}
		wg.Wait()
		if slices.ContainsFunc(g.episodes, r.cutBy) {
			g.cut = true
			return
		}
	} else {
		for i := lo; i < hi; i++ {
			var rec *episode.Record
			if pinned != nil {
				rec = pinned.Execute(r.ctx, r.reqs.at(i))
			} else {
				rec = r.exec.Execute(r.ctx, r.reqs.at(i))
			}
			g.episodes[i-lo] = rec
			if k := i - lo + 1; k%playedEvery == 0 || i == hi-1 {
				// Counted a few at a time: the counter is shared.
				r.played.Add(int64((k-1)%playedEvery + 1))
			}
			if r.cutBy(rec) {
				g.episodes = g.episodes[:i-lo+1]
				g.cut = true
				return
			}
		}
	}
	g.write, g.err = r.out.Finish(wctx, g.episodes)
}

// playedEvery is how many episodes of a group a worker plays between two
// additions to the run's count of episodes played.
const playedEvery = 64

// cutBy reports whether rec was cut short by the run's own interruption,
// which makes its group one that is not written (a resumed run plays it
// again). An episode an executor ended "interrupted" for a reason of its
// own (a request's deadline, a remote worker's shutdown) while the run
// goes on is an aborted episode like another, and is written.
func (r *runner) cutBy(rec *episode.Record) bool {
	return rec.End == env.EndInterrupted && r.ctx.Err() != nil
}

// take hands the calling worker its next chunk, [lo, hi), once it is not
// too far ahead of the writing; false when there is none to take.
func (r *runner) take() (lo, hi int, c *chunk, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.full() && r.ctx.Err() == nil && !r.stopped {
		r.room.Wait()
	}
	if r.ctx.Err() != nil || r.stopped || r.nextGi >= r.nGroups {
		return 0, 0, nil, false
	}
	lo = r.nextGi
	r.nextGi += r.chunks.next(r.nGroups - r.nextGi)
	r.ahead++
	if k := len(r.spare); k > 0 {
		c = r.spare[k-1]
		r.spare[k-1] = nil
		r.spare = r.spare[:k-1]
	} else {
		c = new(chunk)
	}
	return lo, r.nextGi, c, true
}

// full reports whether a worker must wait before it takes a chunk: maxAhead
// chunks are out, or every worker has one and the groups waiting to be
// written hold maxPendingTurns turns. The caller holds mu.
func (r *runner) full() bool {
	return r.ahead >= r.maxAhead || r.ahead >= r.workers && r.pendingTurns >= maxPendingTurns
}

// maxPendingTurns bounds the turns of the groups played and waiting to be
// written (runner.full): six episodes of 10,000 agents, one of 100,000;
// maxAhead's chunks of short episodes hold fewer. Each turn pending holds
// its record's and the output's memory for it (a kilobyte or two when its
// sample is written as JSONL).
const maxPendingTurns = 1 << 16

// deliver takes a chunk's groups back from the worker that played them,
// and writes them, and the groups pending behind them, when their turn has
// come and no other worker is writing; that one writes them otherwise.
func (r *runner) deliver(gs []group) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range gs {
		g := &gs[k]
		if r.stopped {
			r.drop(g) // drained, so the workers can finish
			continue
		}
		g.turns = 0
		for _, ep := range g.episodes {
			if ep != nil {
				g.turns += len(ep.Turns)
			}
		}
		r.pending[g.n%len(r.pending)] = g
		r.pendingTurns += g.turns
	}
	if r.writing {
		return
	}
	r.writing = true
	for !r.stopped {
		slot := &r.pending[r.next%len(r.pending)]
		g := *slot
		if g == nil {
			break
		}
		*slot = nil
		r.pendingTurns -= g.turns
		r.next++
		if g.cut {
			r.stopped = true
			r.drop(g)
			break
		}
		r.free(g)
		r.mu.Unlock()
		err := r.writeOrPanic(g)
		r.mu.Lock()
		if err != nil {
			r.runErr = err
			r.stopped = true
			r.cancel(err)
		}
		if g.last && err == nil {
			// Its chunk is written whole: no one reads it any more.
			r.spare = append(r.spare, g.chunk)
		}
	}
	r.writing = false
	if r.stopped {
		// Behind the gap: played, perhaps whole, and not written.
		for k, g := range r.pending {
			if g != nil {
				r.pendingTurns -= g.turns
				r.drop(g)
				r.pending[k] = nil
			}
		}
		r.room.Broadcast()
	}
}

// free gives back g's chunk's place once its last group is handled; the
// caller holds mu.
func (r *runner) free(g *group) {
	if g.last {
		r.ahead--
		r.room.Signal()
	}
}

// drop counts a group that is not written; the caller holds mu.
func (r *runner) drop(g *group) {
	r.interrupted += len(g.episodes)
	r.free(g)
}

// writeOrPanic is write, on a worker: a panic of the output (a sink's, an
// Observe's) stops the run, and Run panics with it once the workers are
// done, on the caller's goroutine, as it would if Run wrote there itself.
func (r *runner) writeOrPanic(g *group) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.mu.Lock()
			r.panicked = p
			r.mu.Unlock()
			err = fmt.Errorf("the output panicked: %v", p)
		}
	}()
	return r.write(g)
}

// write writes group g, episode by episode, tallies it into the summary,
// gives its records back when the output is done with them, and reports
// progress. Only the writing worker calls it.
func (r *runner) write(g *group) error {
	if g.err != nil {
		return g.err
	}
	cfg, sum := &r.cfg, &r.sum
	var failed error
	for k, ep := range g.episodes {
		samples, err := g.write(k)
		if err != nil {
			return err
		}
		sum.Episodes++
		*r.statuses.at(ep.Status)++
		sum.Samples += int64(samples)
		sum.Turns += int64(len(ep.Turns))
		switch ep.Status {
		case protocol.StatusCompleted, protocol.StatusTruncated:
			sum.Scored++
			sum.TeamRewardSum += ep.Score.Team
			for t, v := range ep.Score.Teams {
				ts := sum.TeamScores[ep.TeamName(t)]
				ts.Sum += v
				ts.N++
				sum.TeamScores[ep.TeamName(t)] = ts
			}
			// Consecutive seats of one role (El Farol's hundred
			// patrons) add up in one entry, looked up once.
			var role string
			var rs *RoleScore
			for i, v := range ep.Score.Agents {
				if rl := ep.Seats[i].Role; i == 0 || !strcmp.Equal(rl, role) {
					role, rs = rl, r.roles.at(rl)
				}
				rs.Sum += v
				rs.N++
			}
		default:
			if sum.FirstFailure == "" {
				sum.FirstFailure, sum.FirstFailureAt, sum.FirstFailureStack = ep.Err, ep.Index, ep.Stack
			}
			if cfg.FailFast && failed == nil {
				// The rest of the group is written all the same: a
				// group is the unit of the output.
				failed = fmt.Errorf("%w: episode %d %s (%s): %s", ErrEpisodeFailed, ep.Index, ep.Status, ep.End, ep.Err)
			}
		}
	}
	if r.local != nil {
		// The output is done with the group (RecyclingOutput). The
		// records go back a chunk at a time, under one lock, or sooner
		// when the chunk's records are many or large.
		r.recycle = append(r.recycle, g.episodes...)
		for _, ep := range g.episodes {
			r.recycleTurns += len(ep.Turns)
		}
		if g.last || len(r.recycle) >= recycleBatch || r.recycleTurns >= recycleBatchTurns {
			r.local.Recycle(r.recycle...)
			r.recycle, r.recycleTurns = r.recycle[:0], 0
		}
	}
	if cfg.Progress != nil {
		r.report(Progress{Done: r.skipped + sum.Episodes + sum.Interrupted, Total: cfg.Episodes, Samples: sum.Samples, Turns: sum.Turns}, true)
	}
	return failed
}

// report calls the run's Progress with p (a group's, written, when group
// is set; else a periodic report, which repeats the last group's counts),
// one call at a time.
func (r *runner) report(p Progress, group bool) {
	r.progressMu.Lock()
	defer r.progressMu.Unlock()
	if group {
		r.last = p
	} else {
		p = r.last
		p.Total = r.cfg.Episodes
		p.Done = max(p.Done, r.skipped)
	}
	p.Played = r.skipped + int(r.played.Load())
	p.Elapsed = time.Since(r.start)
	r.cfg.Progress(p)
}

// tick reports progress every ProgressEvery until stop is closed.
func (r *runner) tick(stop <-chan struct{}) {
	t := time.NewTicker(r.cfg.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.report(Progress{}, false)
		}
	}
}

// summary closes the run once its workers are done: the records not yet
// given back go back, the output is flushed, and the summary and the
// run's error are returned.
func (r *runner) summary() (Summary, error) {
	sum := &r.sum
	if len(r.recycle) > 0 {
		r.local.Recycle(r.recycle...)
	}
	// Whatever is left pending sits behind a group that never came back;
	// it was interrupted, so it is not written.
	for _, g := range r.pending {
		if g != nil {
			r.interrupted += len(g.episodes)
		}
	}
	sum.Interrupted += r.interrupted
	r.statuses.into(sum.ByStatus)
	r.roles.into(sum.RoleScores)
	runErr := r.runErr
	if err := r.out.Flush(); err != nil && runErr == nil {
		runErr = err
	}
	sum.Elapsed = time.Since(r.start)
	if runErr == nil && r.ctx.Err() != nil {
		runErr = context.Cause(r.ctx)
	}
	return *sum, runErr
}

// tally adds up values by key for a run's summary: a run has a few
// statuses and roles, so a short list searched by pointer costs less per
// episode than a map update; past a dozen keys it keeps an index.
type tally[K ~string, V any] struct {
	keys  []K
	vals  []V
	index map[K]int
}

// at returns the value of k, added as the zero value if new. The pointer
// holds until the next call.
func (t *tally[K, V]) at(k K) *V {
	if t.index != nil {
		if i, ok := t.index[k]; ok {
			return &t.vals[i]
		}
	} else {
		for i := range t.keys {
			if strcmp.Equal(string(t.keys[i]), string(k)) {
				return &t.vals[i]
			}
		}
	}
	t.keys = append(t.keys, k)
	t.vals = append(t.vals, *new(V))
	if t.index == nil && len(t.keys) > 12 {
		t.index = make(map[K]int, len(t.keys))
		for i, k := range t.keys {
			t.index[k] = i
		}
	} else if t.index != nil {
		t.index[k] = len(t.keys) - 1
	}
	return &t.vals[len(t.vals)-1]
}

// into adds the totals to m.
func (t *tally[K, V]) into(m map[K]V) {
	for i, k := range t.keys {
		m[k] = t.vals[i]
	}
}

// maxChunk bounds the groups a worker takes at once.
const maxChunk = 32

// chunkFor is about how long a chunk of groups should take: long enough
// that handing it to a worker and its groups back costs little beside it,
// short enough that the workers share the run's end evenly.
const chunkFor = 200 * time.Microsecond

// chunker sizes the chunks of groups Run hands its workers, from the time
// groups have taken so far: one group at a time until it knows, then as
// many as take about chunkFor, at most maxChunk, and never more than an
// even share of what is left. Chunking decides only which worker plays a
// group, never what the group holds or the order it is written in, so
// the output does not depend on it.
type chunker struct {
	workers int
	one     bool         // chunks of one group (Config.Lockstep)
	groups  atomic.Int64 // groups timed
	nanos   atomic.Int64 // their time
}

// took records that n groups took d together.
func (c *chunker) took(d time.Duration, n int) {
	if n == 0 {
		return
	}
	c.groups.Add(int64(n))
	c.nanos.Add(int64(d))
}

// recycleBatch and recycleBatchTurns bound the records Run gives back to
// its executor at once: a few dozen records of short episodes, and only a
// few of long ones, whose arrays held back meanwhile would push the hot
// ones out of the caches.
const (
	recycleBatch      = 32
	recycleBatchTurns = 256
)

// next returns the size of the next chunk, with left groups to go.
func (c *chunker) next(left int) int {
	n, ns := c.groups.Load(), c.nanos.Load()
	if c.one || n == 0 || ns <= 0 {
		return 1
	}
	k := int(int64(chunkFor) * n / ns)
	return max(1, min(k, maxChunk, left/(2*c.workers)))
}

// grow returns s with length n, reusing its array when large enough; the
// elements are not cleared.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
