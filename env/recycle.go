package env

import (
	"sync"

	"github.com/troupe-rl/troupe/episode"
)

// record is an episode's record and its replayer, allocated together, with
// the arrays behind the record's slices: its turns, transitions and message
// log, the messages' recipients and the turns' inbox positions. A record
// given back (LocalExecutor.Recycle) goes to its executor's recordPool
// whole, and the next episode that takes it writes into the same arrays: an
// episode of a recycling run allocates none of them once the pool is warm.
type record struct {
	rec episode.Record
	rp  replay

	log        []episode.Message // the bus's log, lent to the bus for the episode
	recipients []int             // backs the log's Recipients
	inbox      []int             // backs the turns' Inbox
	// game is the episode's game, for the scenario to renew (Renewer)
	// once the record is given back.
	game Game
}

// newRecord returns a record for an episode played with setup: from the
// setup's pool when it holds one, else fresh.
func newRecord(setup *Setup) *record {
	r := setup.records.get()
	r.rp.setup = *setup
	r.rp.owner = r
	r.rec.Replay = &r.rp
	return r
}

// recordPool holds records given back (LocalExecutor.Recycle), zeroed but
// for their arrays, for the next episodes. The arrays are not cleared: the
// next episode overwrites every element it uses whole (Engine.record writes
// every field of a turn, appends write whole transitions and messages), so
// clearing them would write each one twice. What the elements past the
// next episode's lengths still point to stays reachable until overwritten:
// at most the arrays of the records in the pool, which is bounded. It holds at most as many as
// were in flight at once. The zero value is ready; a nil pool makes a
// fresh record for every get.
type recordPool struct {
	mu   sync.Mutex
	free []*record
}

// get returns a record with zero fields and empty arrays.
func (p *recordPool) get() *record {
	if p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if k := len(p.free); k > 0 {
			r := p.free[k-1]
			p.free[k-1] = nil
			p.free = p.free[:k-1]
			return r
		}
	}
	return &record{}
}

// put takes back rec, which no one uses any more, when an engine of this
// package recorded it for the executor whose policyKey is key; other
// records (another executor's, another process's) are left to the
// collector, so that the games a Renewer is given are its own.
func (p *recordPool) put(rec *episode.Record, key any) {
	rp, ok := rec.Replay.(*replay)
	if !ok || rp.owner == nil || &rp.owner.rec != rec || rp.setup.policyKey != key {
		return
	}
	r := rp.owner
	r.rec = episode.Record{Turns: rec.Turns[:0], Transitions: rec.Transitions[:0]}
	r.rp = replay{}
	// r.game stays, for the next episode's scenario to renew.
	r.log, r.recipients, r.inbox = r.log[:0], r.recipients[:0], r.inbox[:0]
	p.mu.Lock()
	p.free = append(p.free, r)
	p.mu.Unlock()
}
