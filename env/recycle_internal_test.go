package env

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/troupe-rl/troupe/episode"
)

// An engine takes back the records it made before any other engine's, and
// another's only when its own run out; a list emptied forgets its engine,
// so that an engine given nothing back is not kept alive by it.
func TestRecordPoolGivesAnEngineItsOwnRecordsFirst(t *testing.T) {
	var p recordPool
	a, b := NewEngine(), NewEngine()
	made := func(e *Engine, n int) []*record {
		rs := make([]*record, n)
		for i := range rs {
			rs[i] = &record{maker: e}
		}
		return rs
	}
	ofA, ofB := made(a, 3), made(b, 3)
	p.give(append(append([]*record{}, ofB[:2]...), ofA...))
	p.give(ofB[2:])

	got := p.take(a, nil, 2, 1<<30)
	require.Len(t, got, 2)
	// The most recent is at the end, where the engine takes its spares.
	assert.Equal(t, []*record{ofA[1], ofA[2]}, got)

	got = p.take(a, nil, 3, 1<<30)
	require.Len(t, got, 3)
	assert.Same(t, ofA[0], got[len(got)-1], "a's last own record comes first, then b's")
	assert.Same(t, a, got[2].maker)
	assert.Same(t, b, got[0].maker)
	assert.Same(t, b, got[1].maker)
	assert.Negative(t, p.of(a), "a's emptied list went from the pool")

	got = p.take(b, nil, 3, 1<<30)
	require.Len(t, got, 1, "b has one record left")
	assert.Same(t, b, got[0].maker)
	for _, m := range p.by {
		assert.Nil(t, m.maker, "an emptied list names no engine")
		assert.Empty(t, m.free)
	}
}

// A pool in a steady run allocates nothing: the lists its engines empty
// keep their arrays for the next records given back, whoever made them.
func TestRecordPoolReusesEmptiedLists(t *testing.T) {
	var p recordPool
	engines := []*Engine{NewEngine(), NewEngine()}
	rs := make([]*record, 8)
	for i := range rs {
		rs[i] = &record{maker: engines[i%2]}
	}
	var spare []*record
	taken := 0
	cycle := func() {
		p.give(rs)
		for _, e := range engines {
			spare = p.take(e, spare[:0], 4, 1<<30)
			taken += len(spare)
		}
	}
	cycle() // the pool's lists are made
	assert.Zero(t, testing.AllocsPerRun(100, cycle))
	assert.Equal(t, 8*102, taken, "every record given back is taken")
	// A new engine's records take a list another one emptied.
	lists := len(p.by)
	for i := range rs {
		rs[i].maker = NewEngine()
	}
	p.give(rs[:1])
	assert.Len(t, p.by, lists)
}

// take stops at the record that brings the turns' capacity to the bound.
func TestRecordPoolTakeStopsAtTheTurnsBound(t *testing.T) {
	var p recordPool
	e := NewEngine()
	for range 4 {
		r := &record{maker: e}
		r.rec.Turns = make([]episode.Turn, 0, 100)
		p.give([]*record{r})
	}
	assert.Len(t, p.take(e, nil, 16, 150), 2, "100 turns, then 200: past 150")
	assert.Len(t, p.by[p.of(e)].free, 2)
}

// A record made without a pool names no maker: nothing gives it back to
// one, and its maker would keep the engine alive as long as the record.
func TestOnlyPooledRecordsNameTheirMaker(t *testing.T) {
	e := NewEngine()
	assert.Nil(t, e.newRecord(&Setup{}).maker)
	assert.Same(t, e, e.newRecord(&Setup{records: &recordPool{}}).maker)
}
