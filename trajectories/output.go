package trajectories

import (
	"context"
	"fmt"
	"sync"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Output is the output stage of a run (it implements env.Output): for each
// group of records the runner finished, it allocates the group's credit
// (Allocate), projects the records into samples (Samples) when Sink or
// Observe reads them, numbers the samples in output order from IndexBase,
// and writes each episode to Sink, then shows it to Observe.
//
// Allocation and the sink's preparation (Preparer) run on the worker that
// played the group, concurrently; with a Sequential allocator, allocation
// runs instead when the group's turn to be written comes, on the runner's
// goroutine, so that the allocator sees the groups in output order.
//
// When Observe is nil and the sink forgets what it wrote (Forgetter: the
// JSONL writers and Discard do), an Output keeps nothing of an episode once
// it has written it, and says so to the runner (Recycles, which implements
// env.RecyclingOutput): the runner then reuses the records' Turns arrays,
// and the Output the samples' array, for later episodes.
//
// An Output numbers the samples of one run: use a new one for each run.
type Output struct {
	Sink       Sink // nil: Discard
	Allocators []Allocator
	Format     RewardFormat // how the allocators' values become rewards
	IndexBase  int64        // the index of the first sample written
	// Observe, when set, sees every episode right after Sink, on the
	// runner's goroutine (learners read their rewards here).
	Observe func(ep *Episode)

	once       sync.Once
	sink       Sink     // Sink, or Discard
	sequential bool     // an allocator is Sequential
	project    bool     // Sink or Observe reads the samples
	preparer   Preparer // Sink, when it prepares
	next       int64    // the next sample's index
	recycle    bool     // nothing keeps an episode once written
	fill       bool     // Sink writes samples: an episode without any gets a Placeholder
	groups     GroupSink
	names      []string // the allocators' names
	namesErr   error    // two allocators share a name

	mu      sync.Mutex
	samples [][]protocol.Sample // zeroed sample arrays of written episodes
}

// Recycles implements env.RecyclingOutput: it reports whether nothing
// (neither Sink nor Observe) keeps an episode once it is written.
func (o *Output) Recycles() bool {
	o.init()
	return o.recycle
}

// samplesBuf returns a zeroed array for n samples, recycled when one is
// free.
func (o *Output) samplesBuf() []protocol.Sample {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := len(o.samples)
	if k == 0 {
		return nil
	}
	buf := o.samples[k-1]
	o.samples[k-1] = nil
	o.samples = o.samples[:k-1]
	return buf
}

// forget gives back the samples' array of an episode written.
func (o *Output) forget(ep *Episode) {
	buf := ep.Samples
	ep.Samples = nil
	if cap(buf) == 0 {
		return
	}
	clear(buf)
	o.mu.Lock()
	o.samples = append(o.samples, buf[:0])
	o.mu.Unlock()
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
		o.fill = NeedsSamples(o.sink)
		o.groups, _ = o.sink.(GroupSink)
		if len(o.Allocators) > 0 {
			o.names, o.namesErr = allocatorNames(o.Allocators)
		}
	})
}

// Finish implements env.Output: it makes the group's episodes, allocates
// their credit (unless an allocator is Sequential) and prepares them for
// the sink. The function it returns writes episode k.
func (o *Output) Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	o.init()
	eps := make([]*Episode, len(group))
	for i, rec := range group {
		if o.project {
			var buf []protocol.Sample
			if o.recycle {
				buf = o.samplesBuf()
			}
			eps[i] = &Episode{Record: *rec, Samples: samplesInto(buf, rec)}
		} else {
			eps[i] = RecordOnly(rec)
		}
	}
	if !o.sequential {
		if err := o.allocate(ctx, eps); err != nil {
			return nil, err
		}
	}
	return func(k int) (int, error) {
		if k == 0 && o.sequential {
			if err := o.allocate(ctx, eps); err != nil {
				return 0, err
			}
		}
		n, err := o.write(eps[k])
		if err == nil && o.recycle {
			o.forget(eps[k])
		}
		if o.groups != nil {
			// The group is the unit of the output: all of it, or none.
			if err != nil {
				o.groups.DropGroup()
			} else if k == len(eps)-1 {
				err = o.groups.EndGroup()
			}
		}
		return n, err
	}, nil
}

func (o *Output) allocate(ctx context.Context, eps []*Episode) error {
	if len(o.Allocators) > 0 {
		if o.namesErr != nil {
			return o.namesErr
		}
		if err := allocate(ctx, eps, o.Allocators, o.names, o.Format); err != nil {
			return err
		}
	}
	if o.preparer != nil && !o.sequential {
		for _, ep := range eps {
			o.preparer.Prepare(ep)
		}
	}
	return nil
}

func (o *Output) write(ep *Episode) (int, error) {
	if len(ep.Samples) == 0 && o.fill {
		// Every episode is in the sample file, one without samples as a
		// placeholder that trains nothing.
		ep.Samples = append(ep.Samples, Placeholder(&ep.Record, o.Format, o.names))
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
	return ep.SampleCount(), nil
}

// Flush implements env.Output: it flushes Sink when it is a Flusher.
func (o *Output) Flush() error {
	o.init()
	if f, ok := o.sink.(Flusher); ok {
		return f.Flush()
	}
	return nil
}
