package viewer

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Load decodes episode ordinal of the file with the strict decoders of
// trajectories and protocol: a line the index pass accepted but they
// refuse is an error naming it.
func (x *File) Load(ordinal int) (*Episode, error) {
	if ordinal < 0 || ordinal >= x.n {
		return nil, fmt.Errorf("%s has no episode %d (it has %d)", x.Name, ordinal, x.n)
	}
	e := x.Info(ordinal)
	info := &e
	buf := make([]byte, info.Size)
	if _, err := x.f.ReadAt(buf, info.Offset); err != nil {
		return nil, fmt.Errorf("%s line %d: %w", x.Name, info.Line, err)
	}
	switch info.Layout {
	case Record:
		rec, credit, err := trajectories.DecodeEpisode(bytes.TrimSpace(buf))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", x.Name, info.Line, err)
		}
		return fromRecord(info, rec, credit), nil
	case Nested:
		var samples []protocol.Sample
		if err := json.Unmarshal(bytes.TrimSpace(buf), &samples); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", x.Name, info.Line, err)
		}
		return fromSamples(info, samples), nil
	}
	samples := make([]protocol.Sample, 0, info.Lines)
	line := info.Line
	for rest := buf; len(rest) > 0; line++ {
		l, after, _ := bytes.Cut(rest, []byte{'\n'})
		rest = after
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		var s protocol.Sample
		if err := s.UnmarshalJSON(l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", x.Name, line, err)
		}
		samples = append(samples, s)
	}
	return fromSamples(info, samples), nil
}

// cache keeps the episodes pages opened last, so that going back and forth
// between a few does not decode them again; it holds at most max, and
// episodes of at most maxBytes of file between them (an episode of 10,000
// agents is megabytes: 32 of them would be the server's largest cost).
type cache struct {
	mu    sync.Mutex
	max   int
	bytes int64
	order *list.List // of cacheKey, most recent first
	items map[cacheKey]*list.Element
}

type cacheKey struct{ file, ordinal int }

// cacheBytes bounds the file bytes of the episodes the cache keeps.
const cacheBytes = 64 << 20

type cacheItem struct {
	key cacheKey
	ep  *Episode
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), items: map[cacheKey]*list.Element{}}
}

func (c *cache) get(k cacheKey) (*Episode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheItem).ep, true
}

func (c *cache) put(k cacheKey, ep *Episode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.bytes += ep.Info.Size - el.Value.(*cacheItem).ep.Info.Size
		el.Value.(*cacheItem).ep = ep
		c.order.MoveToFront(el)
		return
	}
	c.items[k] = c.order.PushFront(&cacheItem{k, ep})
	c.bytes += ep.Info.Size
	// The newest stays, however large.
	for c.order.Len() > c.max || c.bytes > cacheBytes && c.order.Len() > 1 {
		last := c.order.Back()
		c.order.Remove(last)
		it := last.Value.(*cacheItem)
		c.bytes -= it.ep.Info.Size
		delete(c.items, it.key)
	}
}
