package trajectories_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// spySink records what a Tee hands it. It implements Flusher and Preparer.
type spySink struct {
	name     string
	log      *[]string // shared by the spies of one test, to see the order
	err      error     // returned by WriteEpisode
	flushErr error
}

func (s *spySink) WriteEpisode(ep *trajectories.Episode) error {
	*s.log = append(*s.log, s.name+" write "+ep.Scenario)
	return s.err
}

func (s *spySink) Flush() error {
	*s.log = append(*s.log, s.name+" flush")
	return s.flushErr
}

func (s *spySink) Prepare(ep *trajectories.Episode) {
	*s.log = append(*s.log, s.name+" prepare "+ep.Scenario)
}

func TestCollector(t *testing.T) {
	var c trajectories.Collector
	assert.Empty(t, c.Episodes())
	eps := fxEpisodes(1, 2, 0)
	for _, ep := range eps {
		require.NoError(t, c.WriteEpisode(ep))
	}
	got := c.Episodes()
	assert.Equal(t, eps, got)
	// Episodes returns a copy of the list.
	got[0] = nil
	assert.Same(t, eps[0], c.Episodes()[0])
}

func TestCollectorConcurrent(t *testing.T) {
	var c trajectories.Collector
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				assert.NoError(t, c.WriteEpisode(&trajectories.Episode{Record: episode.Record{Index: int64(w*50 + i)}}))
				_ = c.Episodes()
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ep := range c.Episodes() {
		seen[ep.Index] = true
	}
	assert.Len(t, seen, 400)
}

func TestDiscard(t *testing.T) {
	for _, ep := range fxEpisodes(3, 0) {
		assert.NoError(t, trajectories.Discard.WriteEpisode(ep))
	}
	_, buffers := trajectories.Discard.(trajectories.Flusher)
	assert.False(t, buffers, "Discard has nothing to flush")
}

func TestSinkFunc(t *testing.T) {
	errFull := errors.New("full")
	var got *trajectories.Episode
	s := trajectories.SinkFunc(func(ep *trajectories.Episode) error {
		got = ep
		return errFull
	})
	ep := fxEpisode(1, 0, 1, 0)
	assert.ErrorIs(t, s.WriteEpisode(ep), errFull)
	assert.Same(t, ep, got)
}

func TestTeeFanOut(t *testing.T) {
	var log []string
	a := &spySink{name: "a", log: &log}
	b := &spySink{name: "b", log: &log}
	plain := trajectories.SinkFunc(func(ep *trajectories.Episode) error {
		log = append(log, "plain write "+ep.Scenario)
		return nil
	})
	tee := trajectories.Tee(a, plain, b)

	p, ok := tee.(trajectories.Preparer)
	require.True(t, ok, "Tee must pass Prepare on")
	f, ok := tee.(trajectories.Flusher)
	require.True(t, ok, "Tee must pass Flush on")

	ep := &trajectories.Episode{Record: episode.Record{Scenario: "x"}}
	p.Prepare(ep)
	require.NoError(t, tee.WriteEpisode(ep))
	require.NoError(t, f.Flush())
	assert.Equal(t, []string{
		"a prepare x", "b prepare x",
		"a write x", "plain write x", "b write x",
		"a flush", "b flush",
	}, log)
}

func TestTeeStopsAtFirstError(t *testing.T) {
	errFull := errors.New("disk full")
	var log []string
	a := &spySink{name: "a", log: &log, err: errFull, flushErr: errFull}
	b := &spySink{name: "b", log: &log}
	tee := trajectories.Tee(a, b)
	assert.ErrorIs(t, tee.WriteEpisode(&trajectories.Episode{Record: episode.Record{Scenario: "x"}}), errFull)
	assert.Equal(t, []string{"a write x"}, log)
	log = nil
	assert.ErrorIs(t, tee.(trajectories.Flusher).Flush(), errFull)
	assert.Equal(t, []string{"a flush", "b flush"}, log, "a failed flush does not keep the others from flushing")
}

func TestTeeEmpty(t *testing.T) {
	tee := trajectories.Tee()
	assert.NoError(t, tee.WriteEpisode(fxEpisode(1, 0, 1, 0)))
	assert.NoError(t, tee.(trajectories.Flusher).Flush())
}

// TestTeeOfJSONLWriters prepares through a Tee of two writers of different
// layouts: each must write what it writes alone.
func TestTeeOfJSONLWriters(t *testing.T) {
	var flat, nested bytes.Buffer
	tee := trajectories.Tee(
		trajectories.NewJSONLWriter(&flat, trajectories.Flat),
		trajectories.NewJSONLWriter(&nested, trajectories.Nested),
	)
	for _, ep := range fxEpisodes(2, 0, 3) {
		tee.(trajectories.Preparer).Prepare(ep)
		require.NoError(t, tee.WriteEpisode(ep))
	}
	assert.Zero(t, flat.Len()+nested.Len(), "nothing is written before Flush")
	require.NoError(t, tee.(trajectories.Flusher).Flush())
	assert.Equal(t, string(writeAll(t, trajectories.Flat, fxEpisodes(2, 0, 3))), flat.String())
	assert.Equal(t, string(writeAll(t, trajectories.Nested, fxEpisodes(2, 0, 3))), nested.String())
}
