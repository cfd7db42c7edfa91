package trajectories

import (
	"errors"
	"sync"
)

// Sink stores finished episodes. WriteEpisode takes a whole episode, so a
// reader never sees half of one; it is called from one goroutine, in output
// order.
type Sink interface {
	WriteEpisode(ep *Episode) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ep *Episode) error

// WriteEpisode calls f.
func (f SinkFunc) WriteEpisode(ep *Episode) error { return f(ep) }

// Flusher is implemented by sinks that buffer; Output calls Flush when a
// run ends, interrupted or not.
type Flusher interface {
	Flush() error
}

// GroupSink is implemented by sinks that write each group of episodes (a
// GRPO group: the episodes that share a group_index) as one unit, so that
// their output never holds part of one (JSONLWriter, EpisodeWriter, and a
// Tee of them). Output calls EndGroup after the group's last episode, and
// DropGroup instead when writing one of the group's episodes failed: the
// episodes given since the previous EndGroup are then forgotten, unwritten.
// Until its group ends, a sink holds an episode back.
type GroupSink interface {
	Sink
	EndGroup() error
	DropGroup()
}

// Preparer is implemented by sinks that can do part of their work (encoding)
// before an episode's sample indexes are known. Output calls Prepare on
// the worker goroutine that ran the episode, after rewards are allocated and
// before WriteEpisode, so that encoding uses every core; with a Sequential
// allocator among its allocators, whose rewards are only known when the
// group's turn to be written comes, it does not call Prepare, and
// WriteEpisode encodes on the writing goroutine. A sink must therefore
// write correctly whether or not Prepare was called. Prepare may be called
// concurrently for different episodes.
type Preparer interface {
	Prepare(ep *Episode)
}

// Forgetter is implemented by sinks that keep nothing of an episode once
// WriteEpisode returned: no reference to it, its record, turns or samples
// (JSONLWriter and EpisodeWriter copy out the bytes they write). Output
// recycles such an episode's buffers for later episodes (see Output).
type Forgetter interface {
	Forgets() bool
}

// forgets reports whether s is a Forgetter that forgets.
func forgets(s Sink) bool {
	f, ok := s.(Forgetter)
	return ok && f.Forgets()
}

// Collector is the in-memory sink: it keeps every episode it is given.
// It is safe for concurrent use.
type Collector struct {
	mu       sync.Mutex
	episodes []*Episode
}

// WriteEpisode keeps ep.
func (c *Collector) WriteEpisode(ep *Episode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.episodes = append(c.episodes, ep)
	return nil
}

// Episodes returns the episodes kept so far, in the order written.
func (c *Collector) Episodes() []*Episode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Episode(nil), c.episodes...)
}

// SampleNeeder is implemented by sinks that can say they need no samples:
// the records (and their credit) are all they write. A run whose sinks need
// none and that observes nothing never projects its samples.
type SampleNeeder interface {
	NeedsSamples() bool
}

// NeedsSamples reports whether s needs the samples of the episodes it is
// given: true unless it says otherwise (SampleNeeder).
func NeedsSamples(s Sink) bool {
	if n, ok := s.(SampleNeeder); ok {
		return n.NeedsSamples()
	}
	return true
}

// Discard is the sink that stores nothing: the "no serialisation" mode of
// runs whose consumer lives in the same process (an experiment's learners
// read samples before they reach the sink). It needs no samples.
var Discard Sink = discard{}

type discard struct{}

func (discard) WriteEpisode(*Episode) error { return nil }
func (discard) NeedsSamples() bool          { return false }
func (discard) Forgets() bool               { return true }

// Tee writes every episode to each sink in turn, stopping at the first error.
func Tee(sinks ...Sink) Sink { return tee(sinks) }

type tee []Sink

func (t tee) WriteEpisode(ep *Episode) error {
	for _, s := range t {
		if err := s.WriteEpisode(ep); err != nil {
			return err
		}
	}
	return nil
}

// Flush flushes every sink, even after one fails, so that none keeps
// episodes it was given; the errors are joined.
func (t tee) Flush() error {
	var errs []error
	for _, s := range t {
		if f, ok := s.(Flusher); ok {
			errs = append(errs, f.Flush())
		}
	}
	return errors.Join(errs...)
}

// EndGroup ends the group in every sink that writes groups, stopping at
// the first error.
func (t tee) EndGroup() error {
	for _, s := range t {
		if g, ok := s.(GroupSink); ok {
			if err := g.EndGroup(); err != nil {
				return err
			}
		}
	}
	return nil
}

// DropGroup drops the open group of every sink that writes groups.
func (t tee) DropGroup() {
	for _, s := range t {
		if g, ok := s.(GroupSink); ok {
			g.DropGroup()
		}
	}
}

// Forgets implements Forgetter: a tee forgets when each of its sinks does.
func (t tee) Forgets() bool {
	for _, s := range t {
		if !forgets(s) {
			return false
		}
	}
	return true
}

func (t tee) NeedsSamples() bool {
	for _, s := range t {
		if NeedsSamples(s) {
			return true
		}
	}
	return false
}

func (t tee) Prepare(ep *Episode) {
	for _, s := range t {
		if p, ok := s.(Preparer); ok {
			p.Prepare(ep)
		}
	}
}
