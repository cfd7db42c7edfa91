package env

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
)

// sumGame is a finished one-step game of two seats whose team reward is
// the sum of their moves; it rescores a seat playing the null action 0.
type sumGame struct {
	moves  []float64
	answer func(cf episode.Counterfactual) (Score, bool)
	calls  int // Rescore calls
}

func (g *sumGame) Seats() []Seat             { return []Seat{{ID: "a", Role: "p"}, {ID: "b", Role: "p"}} }
func (g *sumGame) Start(*Step) error         { return nil }
func (g *sumGame) Next(*Step) []int          { return nil }
func (g *sumGame) Observe(int) View          { return View{} }
func (g *sumGame) Apply(*Step, []Move) error { return nil }
func (g *sumGame) Score() Score              { return Score{Team: g.moves[0] + g.moves[1], Agents: g.moves} }

func (g *sumGame) Rescore(cf episode.Counterfactual) (Score, bool) {
	g.calls++
	return g.answer(cf)
}

// plainGame is a Game without Rescore.
type plainGame struct{ sumGame }

func (plainGame) Rescore() {} // a method of that name with another signature is not a Rescorer

func TestRescoreAsksOnlyRescorersAboutFrozenCounterfactuals(t *testing.T) {
	g := &sumGame{moves: []float64{2, 3}}
	g.answer = func(cf episode.Counterfactual) (Score, bool) {
		if len(cf.Null) != 1 || cf.Null[0] < 0 || cf.Null[0] > 1 {
			return Score{}, false
		}
		// Without seat i, the team reward is the other seat's move.
		return Score{Team: g.moves[1-cf.Null[0]]}, true
	}

	score, ok, err := rescore(g, episode.Counterfactual{Null: []int{0}}, 2)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 3.0, score.Team)

	// Re-simulation and reseeding ask policies again: never rescored.
	for _, cf := range []episode.Counterfactual{
		{Null: []int{0}, Resimulate: true},
		{Null: []int{0}, Reseed: map[int]uint64{1: 9}},
	} {
		_, ok, err = rescore(g, cf, 2)
		require.NoError(t, err)
		assert.False(t, ok, "%+v", cf)
	}
	assert.Equal(t, 1, g.calls)

	// A counterfactual the game cannot work out falls back to the replay.
	_, ok, err = rescore(g, episode.Counterfactual{Null: []int{7}}, 2)
	require.NoError(t, err)
	assert.False(t, ok)

	_, ok, err = rescore(&plainGame{}, episode.Counterfactual{Null: []int{0}}, 2)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestRescoreReportsBrokenRescorers(t *testing.T) {
	panics := &sumGame{answer: func(episode.Counterfactual) (Score, bool) { panic("boom") }}
	_, ok, err := rescore(panics, episode.Counterfactual{Absent: []int{1}}, 2)
	require.ErrorIs(t, err, ErrGamePanic)
	assert.ErrorContains(t, err, "boom")
	assert.False(t, ok)

	short := &sumGame{answer: func(episode.Counterfactual) (Score, bool) {
		return Score{Team: 1, Agents: []float64{1}}, true
	}}
	_, ok, err = rescore(short, episode.Counterfactual{Absent: []int{1}}, 2)
	require.ErrorIs(t, err, ErrBadSeats)
	assert.ErrorContains(t, err, "1 agent scores for 2 seats")
	assert.False(t, ok)
}
