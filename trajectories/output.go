package trajectories

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/worker"
	"github.com/troupe-rl/troupe/protocol"
)

// Output is the output stage of a run (it implements play.Output): for each
// group of records the runner finished, it allocates the group's credit
// (Allocate), projects the records into samples (Samples) when Sink or
// Observe reads them, stamps them with the caller's Label and RemoveFailed,
// numbers them in output order from IndexBase (or from the block Reserve
// gives each group), and writes each episode to Sink, then shows it to
// Observe and ObserveCredit.
//
// Allocation and the sink's preparation (Preparer) run on the worker that
// played the group, concurrently; with a Sequential allocator, allocation
// runs instead when the group's turn to be written comes, on the runner's
// goroutine, so that the allocator sees the groups in output order.
//
// When Observe is nil and the sink forgets what it wrote (Forgetter: the
// JSONL writers and Discard do; ObserveCredit keeps nothing by contract),
// an Output reads and writes nothing of an episode once it has written it,
// and says so to the runner (Recycles, which implements
// play.RecyclingOutput): the runner then reuses the records' Turns arrays,
// and the Output the samples' array, for later episodes: each worker's
// groups (the worker number Finish's context carries, internal/worker) for
// its own next ones. A written group still points to its episodes' copies
// of the records and to their samples until its worker takes it back, at
// most as many groups as a worker had in flight at once.
//
// An Output numbers the samples of one run: use a new one for each run.
type Output struct {
	Sink       Sink // nil: Discard
	Allocators []Allocator
	Format     RewardFormat // how the allocators' values become rewards
	IndexBase  int64        // the index of the first sample written
	// Reserve, when set, numbers each group's samples from the index it
	// returns, where they otherwise go on from the group before (from
	// IndexBase, which is then unused). Output calls it once per group,
	// when the group's turn to be written comes (after a Sequential
	// allocator ran, before the group's first episode is written), one
	// call at a time, in output order, with the number of samples the
	// group is written with, placeholders included. A service that
	// numbers the samples of runs that write at once from one counter
	// (troupe serve's requests) reserves there a block per group, with an
	// atomic add; a group it refuses after Reserve (an error of its sink)
	// has its block all the same.
	Reserve func(samples int) int64
	// Label, when not null, is every sample's label (slime's ground
	// truth), where it is otherwise the game's (episode.Record.Label):
	// the caller's own, a dataset row's. A sample whose game label says
	// otherwise keeps it in Metadata.Extra["game_label"] (GameLabelKey).
	Label protocol.Label
	// RemoveFailed marks the samples of aborted and failed episodes
	// remove_sample, so that a trainer takes nothing from them; they are
	// written all the same, with their status.
	RemoveFailed bool
	// NoPlaceholders writes an episode without samples as it is, where a
	// sink that writes samples otherwise gets a Placeholder for it: for a
	// sink that writes every episode whole, envelope and all (a rollout
	// answer), so that none is missing from it for want of a sample.
	NoPlaceholders bool
	// Merge writes one sample per agent per episode, its whole
	// conversation, where each turn is otherwise a sample: MergeTurns,
	// after the allocators (whose per-turn credit a merged sample sums,
	// or averages, or takes the last of: MergeReward).
	Merge bool
	// MergeReward is how a merged sample's reward is made of its turns'
	// (MergeTurnsBy); "" sums them, as Merge did before the choice
	// existed. Runs that name none get DefaultMergeReward from troupe's
	// commands and run specs that say so.
	MergeReward MergeReward
	// Observe, when set, sees every episode right after Sink, when the
	// runner writes it (one episode at a time, in order), with its samples
	// projected and rewarded.
	Observe func(ep *Episode)
	// ObserveCredit, when set, sees every episode's record and the credit
	// the allocators gave it (nil without allocators) right after Observe,
	// one episode at a time, in order: what a learner reads. It needs no
	// samples, so it makes the Output project none (with a sink that
	// needs none, and no Observe), and it must keep nothing of rec or c
	// once it returns: the runner may then reuse the record's arrays. An
	// error it returns is the episode's write error: the run stops.
	ObserveCredit func(rec *episode.Record, c *Credit) error

	once       sync.Once
	sink       Sink      // Sink, or Discard
	sequential bool      // an allocator is Sequential
	project    bool      // Sink or Observe reads the samples
	preparer   Preparer  // Sink, when it prepares
	next       int64     // the next sample's index
	recycle    bool      // nothing keeps an episode once written
	fill       bool      // Sink writes samples: an episode without any gets a Placeholder
	stamp      bool      // Label or RemoveFailed changes the samples
	groupSink  GroupSink // Sink, when groups are its unit of writing
	names      []string  // the allocators' names
	namesErr   error     // two allocators share a name
	mergeErr   error     // MergeReward is none of sum, mean, last

	// lists holds the groups written, for the next ones (recycle): one
	// list per worker (internal/worker), whose groups go back to it
	// whichever worker wrote them. A group's arrays are then rewritten by
	// the core that wrote them last, where a pool shared by the workers
	// (one sync.Pool) handed half of them to the other core with every
	// line of their memory. Read with Load, grown under listsMu.
	lists   atomic.Pointer[[]*groupList]
	listsMu sync.Mutex
}

// groupList is the groups written of one worker, for its next Finish.
type groupList struct {
	mu   sync.Mutex
	free []*outGroup
	// Its own cache line: the workers' lists are allocated one after the
	// other, and each is locked by its worker and whichever one writes.
	_ [64]byte
}

// outGroup is one group on its way through an Output: its episodes and the
// arrays behind their credits. An Output that recycles (Recycles) reuses
// it, arrays and all, for a later group once the last episode of this one
// was written.
type outGroup struct {
	o        *Output
	ctx      context.Context // Finish's: a Sequential allocator runs in write
	eps      []*Episode
	episodes []Episode // backs eps
	// samples are the zeroed sample arrays of the episodes written, by
	// position in the group, for the same positions of the next group.
	samples [][]protocol.Sample
	credit  creditArrays
	write   func(k int) (int, error) // writeEpisode, made once
	list    *groupList               // where it goes once written (recycle)
}

// group returns a group for n episodes, recycled from the list of ctx's
// worker when one is free.
func (o *Output) group(ctx context.Context, n int) *outGroup {
	var g *outGroup
	var l *groupList // nil: the group is not recycled
	if o.recycle {
		l = o.list(worker.Of(ctx))
		g = l.take()
	}
	if g == nil {
		g = &outGroup{o: o, list: l}
		g.write = g.writeEpisode
	} else {
		g.reuse()
	}
	g.ctx = ctx
	g.eps = grow(g.eps, n)
	g.episodes = grow(g.episodes, n)
	for i := range g.eps {
		g.eps[i] = &g.episodes[i]
	}
	return g
}

// writeEpisode writes the group's episode k, and gives the group back to
// its Output after the last one when the Output recycles.
func (g *outGroup) writeEpisode(k int) (int, error) {
	o := g.o
	if k == 0 && o.sequential {
		if err := o.allocate(g.ctx, g); err != nil {
			return 0, err
		}
	}
	if k == 0 && o.Reserve != nil {
		o.next = o.Reserve(g.sampleCount())
	}
	n, err := o.write(g.eps[k])
	if o.groupSink != nil {
		// The group is the unit of the output: all of it, or none.
		if err != nil {
			o.groupSink.DropGroup()
		} else if k == len(g.eps)-1 {
			err = o.groupSink.EndGroup()
		}
	}
	if err != nil || !o.recycle || k < len(g.eps)-1 {
		return n, err
	}
	// Written whole: back to its worker's list, untouched. That worker
	// empties it when it takes it (reuse), on its own core, rather than
	// this one, which may be the other's.
	g.list.put(g)
	return n, nil
}

// take returns the group given back last, or nil.
func (l *groupList) take() *outGroup {
	var g *outGroup
	l.mu.Lock()
	if k := len(l.free); k > 0 {
		g = l.free[k-1]
		l.free[k-1] = nil
		l.free = l.free[:k-1]
	}
	l.mu.Unlock()
	return g
}

// put gives back g, written whole.
func (l *groupList) put(g *outGroup) {
	l.mu.Lock()
	l.free = append(l.free, g)
	l.mu.Unlock()
}

// list returns worker k's list of groups, making the lists up to it the
// first time it asks.
func (o *Output) list(k int) *groupList {
	if ls := o.lists.Load(); ls != nil && k < len(*ls) {
		return (*ls)[k]
	}
	o.listsMu.Lock()
	defer o.listsMu.Unlock()
	var ls []*groupList
	if p := o.lists.Load(); p != nil {
		ls = *p
	}
	if k < len(ls) {
		return ls[k]
	}
	// A new slice, not ls grown in place: other workers read the old
	// one without the lock.
	grown := append(make([]*groupList, 0, k+1), ls...)
	for len(grown) <= k {
		grown = append(grown, &groupList{})
	}
	o.lists.Store(&grown)
	return grown[k]
}

// reuse empties a group taken back from its list: each episode's samples'
// array goes aside for the same episode of this group (forget), and what
// Finish may leave unset goes. The records are written whole by Finish
// (what the old ones point to stays reachable until then).
func (g *outGroup) reuse() {
	for k := range g.eps {
		g.forget(k)
		g.episodes[k].Credit, g.episodes[k].prepared = nil, nil
	}
}

// grow returns s with length n, reusing its array when it can; the caller
// overwrites every element.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Recycles implements play.RecyclingOutput: it reports whether nothing
// (neither Sink nor Observe; ObserveCredit never does) keeps an episode
// once it is written.
func (o *Output) Recycles() bool {
	o.init()
	return o.recycle
}

// samplesBuf returns a zeroed array for the samples of the group's
// episode k, the one a former group's episode k left (forget), or nil.
func (g *outGroup) samplesBuf(k int) []protocol.Sample {
	if k >= len(g.samples) {
		return nil
	}
	buf := g.samples[k]
	g.samples[k] = nil
	return buf
}

// forget keeps the samples' array of the group's episode k, written, for
// the same episode of the next group.
func (g *outGroup) forget(k int) {
	ep := g.eps[k]
	buf := ep.Samples
	ep.Samples = nil
	if cap(buf) == 0 {
		return
	}
	clear(buf)
	for len(g.samples) <= k {
		g.samples = append(g.samples, nil)
	}
	g.samples[k] = buf[:0]
}

func (o *Output) init() {
	o.once.Do(func() {
		o.sink = o.Sink
		if o.sink == nil {
			o.sink = Discard
		}
		o.sequential = AnySequential(o.Allocators)
		o.project = o.Observe != nil || NeedsSamples(o.sink)
		o.preparer, _ = o.sink.(Preparer)
		o.next = o.IndexBase
		o.recycle = o.Observe == nil && forgets(o.sink)
		o.fill = NeedsSamples(o.sink) && !o.NoPlaceholders
		o.stamp = !o.Label.IsNull() || o.RemoveFailed
		o.groupSink, _ = o.sink.(GroupSink)
		if len(o.Allocators) > 0 {
			o.names, o.namesErr = allocatorNames(o.Allocators)
		}
		if o.Merge {
			_, o.mergeErr = ParseMergeReward(string(o.MergeReward))
		}
	})
}

// Finish implements play.Output: it makes the group's episodes, allocates
// their credit (unless an allocator is Sequential) and prepares them for
// the sink. The function it returns writes episode k.
func (o *Output) Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	o.init()
	if o.mergeErr != nil {
		return nil, o.mergeErr
	}
	g := o.group(ctx, len(group))
	for i, rec := range group {
		ep := g.eps[i]
		ep.Record = *rec
		if o.project {
			var buf []protocol.Sample
			if o.recycle {
				buf = g.samplesBuf(i)
			}
			ep.Samples = samplesInto(buf, rec)
		}
	}
	if !o.sequential {
		if err := o.allocate(ctx, g); err != nil {
			return nil, err
		}
	}
	return g.write, nil
}

func (o *Output) allocate(ctx context.Context, g *outGroup) error {
	if len(o.Allocators) > 0 {
		if o.namesErr != nil {
			return o.namesErr
		}
		// Credits of a group that is not recycled are the episodes' own:
		// fresh arrays.
		var buf *creditArrays
		if o.recycle {
			buf = &g.credit
		}
		if err := allocateInto(ctx, buf, g.eps, o.Allocators, o.names, o.Format); err != nil {
			return err
		}
	}
	if o.stamp {
		for _, ep := range g.eps {
			for k := range ep.Samples {
				o.stampSample(ep, &ep.Samples[k])
			}
		}
	}
	if o.Merge {
		for _, ep := range g.eps {
			ep.Samples = MergeTurnsBy(ep.Samples, o.MergeReward)
		}
	}
	if o.preparer != nil && !o.sequential {
		for _, ep := range g.eps {
			o.preparer.Prepare(ep)
		}
	}
	return nil
}

// GameLabelKey is the metadata key that keeps a sample's game label when
// Output.Label replaces a label that says otherwise.
const GameLabelKey = "game_label"

// stampSample applies Label and RemoveFailed to one of ep's samples.
func (o *Output) stampSample(ep *Episode, sm *protocol.Sample) {
	if o.RemoveFailed && (ep.Status == protocol.StatusAborted || ep.Status == protocol.StatusFailed) {
		sm.RemoveSample = true
	}
	want, ok := o.Label.Text()
	if !ok {
		return
	}
	// The game's label is often the caller's, read as a parameter: it
	// moves aside only when it says otherwise.
	if game, ok := sm.Label.Text(); ok && game != want {
		// A copy: a sample's Extra may be its turn's Notes.
		extra := maps.Clone(sm.Metadata.Extra)
		if extra == nil {
			extra = map[string]any{}
		}
		extra[GameLabelKey] = game
		sm.Metadata.Extra = extra
	}
	sm.Label = o.Label
}

// sampleCount is the number of samples the group is written with:
// its episodes' samples, and a placeholder for each episode without any
// when the sink gets them.
func (g *outGroup) sampleCount() int {
	n := 0
	for _, ep := range g.eps {
		if len(ep.Samples) == 0 && g.o.fill {
			n++
		}
		n += len(ep.Samples)
	}
	return n
}

func (o *Output) write(ep *Episode) (int, error) {
	if len(ep.Samples) == 0 && o.fill {
		// Every episode is in the sample file, one without samples as a
		// placeholder that trains nothing.
		ep.Samples = append(ep.Samples, Placeholder(&ep.Record, o.Format, o.names))
		if o.stamp {
			o.stampSample(ep, &ep.Samples[0])
		}
	}
	for k := range ep.Samples {
		ep.Samples[k].Index = o.next
		o.next++
	}
	if err := o.sink.WriteEpisode(ep); err != nil {
		return 0, fmt.Errorf("episode %d: %w", ep.Index, err)
	}
	if o.Observe != nil {
		o.Observe(ep)
	}
	if o.ObserveCredit != nil {
		if err := o.ObserveCredit(&ep.Record, ep.Credit); err != nil {
			return 0, fmt.Errorf("episode %d: %w", ep.Index, err)
		}
	}
	return ep.SampleCount(), nil
}

// Flush implements play.Output: it flushes Sink when it is a Flusher.
func (o *Output) Flush() error {
	o.init()
	if f, ok := o.sink.(Flusher); ok {
		return f.Flush()
	}
	return nil
}
