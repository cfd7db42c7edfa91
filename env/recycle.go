package env

import (
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/episode"
)

// record is an episode's record and its replayer, allocated together, with
// the arrays behind the record's slices: its turns, transitions and message
// log, the messages' recipients and the turns' inbox positions. A record
// given back (LocalExecutor.Recycle) goes to its executor's recordPool
// (its Reuse's) whole, and the next episode that takes it writes into the same arrays: an
// episode of a recycling run allocates none of them once the pool is warm.
type record struct {
	rec episode.Record
	rp  replay

	log        []episode.Message // the bus's log, lent to the bus for the episode
	recipients []int             // backs the log's Recipients
	inbox      []int             // backs the turns' Inbox
	// game is the episode's game, for the scenario to renew (Renewer)
	// once the record is given back, and gameOf that scenario's Info:
	// executors of other scenarios may share the pool (Reuse), and a
	// Renewer renews only its own games.
	game   Game
	gameOf *Info
	// maker is the engine that recorded it last, whose core's cache holds
	// its memory: the pool gives it back to that engine first.
	maker *Engine
}

// newRecord returns a record for an episode played with setup: from the
// setup's pool when it holds one, else fresh.
func (e *Engine) newRecord(setup *Setup) *record {
	r := e.spareRecord(setup.records)
	if setup.records != nil {
		// Only a pooled record goes back to a pool; another would keep
		// the engine alive for nothing as long as it is held.
		r.maker = e
	}
	r.rp.setup = *setup
	r.rp.owner = r
	r.rec.Replay = &r.rp
	return r
}

// spareRecord returns a record with zero fields and empty arrays from the
// engine's spares, which it takes from p a few at a time, under one lock,
// rather than one per episode. Spares of another pool go back to it.
func (e *Engine) spareRecord(p *recordPool) *record {
	if p == nil {
		return &record{}
	}
	if e.sparesOf != p {
		if e.sparesOf != nil {
			e.sparesOf.give(e.spares)
		}
		e.spares, e.sparesOf = e.spares[:0], p
	}
	if len(e.spares) == 0 {
		e.spares = p.take(e, e.spares, spareRecords, spareTurns)
	}
	if k := len(e.spares); k > 0 {
		r := e.spares[k-1]
		e.spares[k-1] = nil
		e.spares = e.spares[:k-1]
		r.reset()
		return r
	}
	return &record{}
}

// reset empties a record given back: zero fields and empty arrays. The
// game stays, for the next episode's scenario to renew.
func (r *record) reset() {
	r.rec = episode.Record{Turns: r.rec.Turns[:0], Transitions: r.rec.Transitions[:0]}
	r.rp = replay{}
	r.log, r.recipients, r.inbox = r.log[:0], r.recipients[:0], r.inbox[:0]
}

// spareRecords and spareTurns bound the records an engine takes from its
// pool at once: up to 16, and no more than hold 256 turns (a record of a
// long episode is large, and one in the cache beats several out of it).
const (
	spareRecords = 16
	spareTurns   = 256
)

// recordPool holds records given back (LocalExecutor.Recycle), for the
// next episodes, which reset them first. The arrays are not cleared: the
// next episode overwrites every element it uses whole (Engine.record writes
// every field of a turn, appends write whole transitions and messages), so
// clearing them would write each one twice. What the elements past the
// next episode's lengths still point to stays reachable until overwritten:
// at most the arrays of the records in the pool and the engines' spares,
// which are bounded. It holds at most as many records as were in flight
// at once. The zero value is ready.
type recordPool struct {
	mu sync.Mutex
	// by holds the records by the engine that recorded them last: a few
	// engines (a run's workers), searched in turn, which costs less than
	// a map's hashing for every record given back.
	by []madeBy
}

// madeBy is the records of one engine in a recordPool, in the order they
// were given back; an empty list whose maker is nil is held for the next
// engine that gives records back.
type madeBy struct {
	maker *Engine
	free  []*record
}

// take moves up to n records from the pool to dst, the most recently
// given back first, and stops after the one that brings their turns'
// capacity to turns. It takes e's own records first: their memory is in
// the cache of the core that wrote it, where another engine's would have
// to move.
func (p *recordPool) take(e *Engine, dst []*record, n, turns int) []*record {
	p.mu.Lock()
	defer p.mu.Unlock()
	held, start := 0, len(dst)
	from := func(k int) {
		free := p.by[k].free
		for len(free) > 0 && n > 0 && held < turns {
			r := free[len(free)-1]
			free[len(free)-1] = nil
			free = free[:len(free)-1]
			held += cap(r.rec.Turns)
			n--
			dst = append(dst, r)
		}
		p.by[k].free = free
	}
	if k := p.of(e); k >= 0 {
		from(k)
	}
	for k := range p.by {
		if n == 0 || held >= turns {
			break
		}
		from(k)
	}
	// An engine with nothing left in the pool is forgotten, which would
	// keep an engine gone alive; its list's array stays, for the next
	// engine that gives records back (add): a pool that dropped it would
	// allocate one per chunk of records in a steady run, enough garbage to
	// keep the collector, and its write barriers, running.
	for k := range p.by {
		if len(p.by[k].free) == 0 {
			p.by[k].maker = nil
		}
	}
	// The engine takes its spares from the end: the most recent first.
	slices.Reverse(dst[start:])
	return dst
}

// of returns the index of e's records in p.by, or -1; the caller holds
// p.mu.
func (p *recordPool) of(e *Engine) int {
	for k := range p.by {
		if p.by[k].maker == e {
			return k
		}
	}
	return -1
}

// give returns records taken and not used.
func (p *recordPool) give(rs []*record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := -1
	for _, r := range rs {
		k = p.add(r, k)
	}
}

// add puts r with the records of its maker, whose index in p.by is k
// when k is not -1 and p.by[k] is r's maker's, and returns that index for
// the next record (given back with r, usually by the same engine). The
// caller holds p.mu.
func (p *recordPool) add(r *record, k int) int {
	if k < 0 || p.by[k].maker != r.maker {
		if k = p.of(r.maker); k < 0 {
			// A list no engine holds (take forgot its engine), else a
			// new one.
			if k = p.of(nil); k < 0 {
				k = len(p.by)
				p.by = append(p.by, madeBy{})
			}
			p.by[k].maker = r.maker
		}
	}
	p.by[k].free = append(p.by[k].free, r)
	return k
}

// put takes back recs, which no one uses any more, when an engine of this
// package recorded them in a record of this pool; other records (another
// executor's, another process's) are left to the collector.
func (p *recordPool) put(recs ...*episode.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := -1
	for _, rec := range recs {
		rp, ok := rec.Replay.(*replay)
		if !ok || rp.owner == nil || &rp.owner.rec != rec || rp.setup.records != p {
			continue
		}
		// Cleared by the engine that takes it (reset), not here: the
		// record's memory then moves once, to the core that writes it
		// next, rather than to this one and back. Its Replay goes now,
		// which marks it given back: a second Recycle skips it.
		rec.Replay = nil
		k = p.add(rp.owner, k)
	}
}
