package env

import (
	"context"
	"errors"

	"github.com/troupe-rl/troupe/episode"
)

// ErrBadConfig is wrapped by the errors of a configuration that cannot be
// played: a Setup or Play that names no scenario or policy, a bad tree,
// a run's bad numbers (package play).
var ErrBadConfig = errors.New("bad run configuration")

// Request identifies one episode of a run: everything needed to play it
// again anywhere, given the scenario and the policies. It is plain data so
// that it can travel to another process.
type Request struct {
	Scenario   string            `json:"scenario"`
	Params     map[string]string `json:"params"`
	Seed       uint64            `json:"seed"`
	PolicySeed uint64            `json:"policy_seed"`
	Index      int64             `json:"index"`
	RolloutID  int64             `json:"rollout_id"`
	GroupIndex int64             `json:"group_index"`
}

// Executor plays the episode a Request names and returns its record. It
// must record failures in the record, not return them: Execute always
// returns a record.
type Executor interface {
	Execute(ctx context.Context, req Request) *episode.Record
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, req Request) *episode.Record

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, req Request) *episode.Record {
	return f(ctx, req)
}

// LocalExecutor plays episodes in this process. It is safe for concurrent
// use: each call borrows an Engine from its pool.
type LocalExecutor struct {
	Play
	Drive
	// Reuse, when set, holds the executor's engines and the records given
	// back to it, shared with the executors before and after it (see
	// Reuse); nil, the executor's own.
	Reuse *Reuse

	own Reuse
}

// Reuse is what LocalExecutors that play one after another may share, so
// that each finds warm what the one before it allocated: the engines, with
// their state machines and buffers, and the records given back (Recycle),
// with the arrays behind them. An experiment plays each of its cells with
// a fresh executor, and the cells of a parameter point in turn with one
// Reuse (one per cell of the point playing at the same time). Executors
// that share one may differ in everything: an engine asks a new executor's
// Policy and Emit again, and a Renewer is given only games of its own
// scenario, to renew when their parameters are the new ones; what they
// reuse is worth most when they play one scenario with parameters of one
// size. It is safe for concurrent use, but executors that run at once
// then trade engines, and each asks its policies again for an engine
// another one used last: it is for executors that run in turn. The zero
// value is ready.
type Reuse struct {
	engines EnginePool
	// records holds the records given back (Recycle) for later episodes.
	records recordPool
}

// reuse is the engines and records x plays with.
func (x *LocalExecutor) reuse() *Reuse {
	if x.Reuse != nil {
		return x.Reuse
	}
	return &x.own
}

// Execute implements Executor: it plays the episode and returns its record.
// The request's Scenario and Params must be the executor's own.
func (x *LocalExecutor) Execute(ctx context.Context, req Request) *episode.Record {
	engines := &x.reuse().engines
	eng := engines.Get()
	defer engines.Put(eng)
	return x.executeOn(ctx, eng, req)
}

// executeOn is Execute on an engine of the caller's, one of x's engines
// (Run's workers keep one each for the whole run).
func (x *LocalExecutor) executeOn(ctx context.Context, eng *Engine, req Request) *episode.Record {
	r := x.reuse()
	if x.Tree != nil {
		return PlayTree(ctx, Setup{
			Play: x.Play, Drive: x.Drive, Seed: req.Seed, PolicySeed: req.PolicySeed,
			Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex,
		})
	}
	return eng.Run(ctx, Setup{
		Play:       x.Play,
		Drive:      x.Drive,
		Seed:       req.Seed,
		PolicySeed: req.PolicySeed,
		Index:      req.Index,
		RolloutID:  req.RolloutID,
		GroupIndex: req.GroupIndex,
		Engines:    &r.engines,
		records:    &r.records,
		policyKey:  x,
	})
}

// Recycle gives back records that x played and that nothing uses any
// more, nor anything they hold (see play.RecyclingOutput): x's later
// episodes write into them and the arrays behind them, and allocate none
// of them. A record x did not play (another executor's, unless the two
// share a Reuse; one decoded from another process) is left alone, and so
// is one given back twice.
func (x *LocalExecutor) Recycle(recs ...*episode.Record) { x.reuse().records.put(recs...) }

// Worker returns an executor that plays every request on one engine of
// x's, and the function that gives the engine back, after which the
// executor must not be used. It is for one goroutine that plays many
// episodes in turn (a run's worker), which Execute would charge two locks
// per episode for taking an engine from x's pool and giving it back.
func (x *LocalExecutor) Worker() (Executor, func()) {
	engines := &x.reuse().engines
	w := &pinned{x: x, eng: engines.Get()}
	return w, func() { engines.Put(w.eng) }
}

// pinned is an executor of Worker's: x's, on one engine.
type pinned struct {
	x   *LocalExecutor
	eng *Engine
}

func (w *pinned) Execute(ctx context.Context, req Request) *episode.Record {
	return w.x.executeOn(ctx, w.eng, req)
}
