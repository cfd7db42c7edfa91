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

	score, ok, err := rescore(g, &Info{Name: "t"}, episode.Counterfactual{Null: []int{0}}, 2)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 3.0, score.Team)

	// Re-simulation and reseeding ask policies again: never rescored.
	for _, cf := range []episode.Counterfactual{
		{Null: []int{0}, Resimulate: true},
		{Null: []int{0}, Reseed: map[int]uint64{1: 9}},
	} {
		_, ok, err = rescore(g, &Info{Name: "t"}, cf, 2)
		require.NoError(t, err)
		assert.False(t, ok, "%+v", cf)
	}
	assert.Equal(t, 1, g.calls)

	// A counterfactual the game cannot work out falls back to the replay.
	_, ok, err = rescore(g, &Info{Name: "t"}, episode.Counterfactual{Null: []int{7}}, 2)
	require.NoError(t, err)
	assert.False(t, ok)

	_, ok, err = rescore(&plainGame{}, &Info{Name: "t"}, episode.Counterfactual{Null: []int{0}}, 2)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestRescoreReportsBrokenRescorers(t *testing.T) {
	panics := &sumGame{answer: func(episode.Counterfactual) (Score, bool) { panic("boom") }}
	_, ok, err := rescore(panics, &Info{Name: "t"}, episode.Counterfactual{Absent: []int{1}}, 2)
	require.ErrorIs(t, err, ErrGamePanic)
	assert.ErrorContains(t, err, "boom")
	assert.False(t, ok)

	short := &sumGame{answer: func(episode.Counterfactual) (Score, bool) {
		return Score{Team: 1, Agents: []float64{1}}, true
	}}
	_, ok, err = rescore(short, &Info{Name: "t"}, episode.Counterfactual{Absent: []int{1}}, 2)
	require.ErrorIs(t, err, ErrBadSeats)
	assert.ErrorContains(t, err, "1 agent scores for 2 seats")
	assert.False(t, ok)
}

// oneOutGame is a sumGame that also answers one-out counterfactuals.
type oneOutGame struct {
	sumGame
	oneOut int // RescoreOneOut calls
	panics bool
}

func (g *oneOutGame) RescoreOneOut(_ bool, seats []int, team []float64) bool {
	g.oneOut++
	if g.panics {
		panic("boom")
	}
	for k, i := range seats {
		if i < 0 || i > 1 {
			return false
		}
		team[k] = g.moves[1-i]
	}
	return true
}

// infoScenario is a Scenario of which a replayer reads the Info only.
type infoScenario struct{ info *Info }

func (s infoScenario) Info() *Info                      { return s.info }
func (s infoScenario) New(Params, uint64) (Game, error) { return nil, nil }

func TestReplayOneOutChecksWhatReplayChecks(t *testing.T) {
	spec := &CounterfactualSpec{NullAction: map[string]string{"p": "0"}, AbsentOK: true}
	replayer := func(g Game, spec *CounterfactualSpec) *replay {
		return &replay{setup: Setup{Play: Play{Scenario: infoScenario{&Info{Name: "sum", Counterfactual: spec}}}}, seats: (&sumGame{}).Seats(), done: g}
	}
	g := &oneOutGame{sumGame: sumGame{moves: []float64{2, 3}}}
	team := make([]float64, 2)
	for _, null := range []bool{false, true} {
		require.True(t, replayer(g, spec).ReplayOneOut(null, []int{1, 0}, team))
		assert.Equal(t, []float64{2, 3}, team)
	}
	calls := g.oneOut

	// What Replay would refuse, and games that cannot answer, are false
	// without asking the game: the replays one by one say why.
	assert.False(t, replayer(g, &CounterfactualSpec{NullAction: spec.NullAction}).ReplayOneOut(false, []int{0}, team[:1]), "absence not declared")
	assert.False(t, replayer(g, &CounterfactualSpec{AbsentOK: true}).ReplayOneOut(true, []int{0}, team[:1]), "no null action")
	assert.False(t, replayer(g, nil).ReplayOneOut(true, []int{0}, team[:1]), "no counterfactual spec")
	assert.False(t, replayer(g, spec).ReplayOneOut(true, []int{2}, team[:1]), "a seat out of range")
	assert.False(t, replayer(g, spec).ReplayOneOut(true, []int{0}, team), "a team of another length")
	assert.Equal(t, calls, g.oneOut)
	assert.False(t, replayer(&g.sumGame, spec).ReplayOneOut(true, []int{0}, team[:1]), "a Rescorer only")
	assert.False(t, replayer(nil, spec).ReplayOneOut(true, []int{0}, team[:1]), "an episode that must be replayed")

	// The game's own false, and its panic, are false too.
	assert.False(t, replayer(g, spec).ReplayOneOut(false, []int{-1}, team[:1]))
	g.panics = true
	assert.False(t, replayer(g, spec).ReplayOneOut(false, []int{0}, team[:1]))
}
