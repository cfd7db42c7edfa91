package elfarol

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// week is a played episode and its finished game, rebuilt from the record.
type week struct {
	setup env.Setup
	ep    *trajectories.Episode
	game  *game
}

// playWeek plays one random week in which some patrons answer "home" or
// nonsense, so that Rescore meets patrons who attended no night.
func playWeek(t *testing.T, n, k int, c float64, seed uint64) week {
	t.Helper()
	sc := New()
	p, err := sc.Info().ParseParams(map[string]string{
		"agents": strconv.Itoa(n), "nights": strconv.Itoa(k), "capacity": strconv.FormatFloat(c, 'g', -1, 64),
	})
	require.NoError(t, err)
	policy := agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		switch obs.Intn(1, 10) {
		case 0:
			return agents.Action{Text: NullAction}, nil
		case 1:
			return agents.Action{Text: "tuesday"}, nil
		}
		return agents.Action{Text: obs.Legal[obs.Intn(0, len(obs.Legal))]}, nil
	})
	setup := env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(policy)}, Seed: seed, PolicySeed: seed}
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), setup))
	require.Empty(t, ep.Err)
	played, err := sc.New(p, seed)
	require.NoError(t, err)
	g := played.(*game)
	for i := range g.choice {
		g.choice[i] = -1
	}
	for _, a := range ep.Turns {
		if night := g.nightOf(a.Action); night >= 0 {
			g.choice[a.Seat] = night
			g.counts[night]++
		}
	}
	require.Equal(t, ep.Score, g.Score())
	return week{setup: setup, ep: ep, game: g}
}

// replay plays the counterfactual for real.
func (w week) replay(t *testing.T, cf episode.Counterfactual) env.Score {
	t.Helper()
	s := w.setup
	s.Counterfactual, s.Recorded = &cf, w.ep.Turns
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), s))
	require.Empty(t, ep.Err)
	return ep.Score
}

// check asserts that Rescore, the episode's Replayer and a real replay
// agree on cf, bit for bit, and that TeamOnly drops the agent scores only.
func (w week) check(t *testing.T, cf episode.Counterfactual) {
	t.Helper()
	want := w.replay(t, cf)
	got, ok := w.game.Rescore(cf)
	require.True(t, ok, "%+v", cf)
	assert.Equal(t, want, got, "Rescore %+v", cf)
	viaReplayer, err := w.ep.Replay.Replay(context.Background(), cf)
	require.NoError(t, err)
	assert.Equal(t, want, viaReplayer, "Replayer %+v", cf)

	cf.TeamOnly = true
	team, ok := w.game.Rescore(cf)
	require.True(t, ok)
	assert.Equal(t, env.Score{Team: want.Team}, team, "TeamOnly %+v", cf)
}

func TestRescoreEqualsAReplayForEverySeat(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		c    float64
	}{{1, 1, 1}, {12, 3, 2}, {40, 7, 6}, {90, 20, 4.5}} {
		for seed := range uint64(3) {
			w := playWeek(t, tc.n, tc.k, tc.c, seed+1)
			w.check(t, episode.Counterfactual{})
			for i := range tc.n {
				w.check(t, episode.Counterfactual{Null: []int{i}})
				w.check(t, episode.Counterfactual{Absent: []int{i}})
				w.check(t, episode.Counterfactual{Replace: map[int]string{i: strconv.Itoa((i + int(seed)) % tc.k)}})
				w.check(t, episode.Counterfactual{Replace: map[int]string{i: "sunday"}})
			}
		}
	}
}

func TestRescoreEqualsAReplayForCoalitions(t *testing.T) {
	const n, k = 30, 5
	w := playWeek(t, n, k, 3, 7)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	w.check(t, episode.Counterfactual{Absent: all})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		cf := episode.Counterfactual{Replace: map[int]string{}}
		for i := range n {
			switch rng.IntN(6) {
			case 0:
				cf.Absent = append(cf.Absent, i)
			case 1:
				cf.Null = append(cf.Null, i)
			case 2:
				cf.Replace[i] = strconv.Itoa(rng.IntN(k))
			case 3: // named thrice: absence wins
				cf.Null = append(cf.Null, i)
				cf.Absent = append(cf.Absent, i, i)
				cf.Replace[i] = "0"
			}
		}
		w.check(t, cf)
	}
}

func TestRescoreDeclinesWhatItCannotWorkOut(t *testing.T) {
	w := playWeek(t, 10, 3, 2, 1)
	for _, cf := range []episode.Counterfactual{
		{Null: []int{10}},
		{Absent: []int{-1}},
		{Null: []int{10}, TeamOnly: true}, // one patron, the difference reward's
		{Absent: []int{-1}, TeamOnly: true},
		{Replace: map[int]string{12: "0"}},
		{Null: []int{0}, Resimulate: true},
		{Reseed: map[int]uint64{0: 1}},
	} {
		_, ok := w.game.Rescore(cf)
		assert.False(t, ok, "%+v", cf)
	}
	unscored := &game{c: 1, choice: []int{0}, counts: []int{1}}
	_, ok := unscored.Rescore(episode.Counterfactual{Null: []int{0}})
	assert.False(t, ok, "a game not yet scored")
}

// TestRescoreLeavesTheGameAlone checks env.Rescorer's rule that Rescore
// does not change the game: the allocators rescore one finished game from
// several goroutines. Every patron moved home and to every night, on 8
// goroutines at once, answers what one goroutine alone does, and the game
// (its memo of φ included) is as it was; under the race detector, any
// write Rescore made would be reported.
func TestRescoreLeavesTheGameAlone(t *testing.T) {
	w := playWeek(t, 40, 5, 3, 11)
	before := *w.game
	memo := slices.Clone(w.game.phiOf)
	var cfs []episode.Counterfactual
	for i := range 40 {
		cfs = append(cfs, episode.Counterfactual{Null: []int{i}, TeamOnly: true})
		for night := range 5 {
			cfs = append(cfs, episode.Counterfactual{Replace: map[int]string{i: strconv.Itoa(night)}, TeamOnly: true})
		}
	}
	want := make([]env.Score, len(cfs))
	for k, cf := range cfs {
		s, ok := w.game.Rescore(cf)
		require.True(t, ok)
		want[k] = s
	}
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			for k, cf := range cfs {
				if s, _ := w.game.Rescore(cf); s.Team != want[k].Team {
					return fmt.Errorf("counterfactual %d: %+v, alone %+v", k, s, want[k])
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	assert.Equal(t, before.counts, w.game.counts)
	assert.Equal(t, before.choice, w.game.choice)
	assert.True(t, slices.EqualFunc(memo, w.game.phiOf, func(a, b float64) bool { return a == b || (a != a && b != b) }), "Rescore changed the memo of φ")
}

// TestRescoreOneOutIsRescore checks env.OneOutRescorer's contract: each
// seat's value is Rescore's for that seat alone out, bit for bit, absent or
// null, whatever the seats asked and their order, and through the
// episode's replayer too; a bad seat, or a game not scored, is false.
func TestRescoreOneOutIsRescore(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		c    float64
	}{{1, 1, 1}, {12, 3, 2}, {40, 7, 6}, {90, 70, 4.5}} {
		w := playWeek(t, tc.n, tc.k, tc.c, 5)
		every := make([]int, tc.n)
		for i := range every {
			every[i] = i
		}
		rng := rand.New(rand.NewPCG(3, uint64(tc.n)))
		some := []int{tc.n - 1, 0, tc.n - 1, rng.IntN(tc.n), rng.IntN(tc.n)}
		for _, seats := range [][]int{every, some, nil} {
			for _, null := range []bool{false, true} {
				team := make([]float64, len(seats))
				require.True(t, w.game.RescoreOneOut(null, seats, team))
				viaReplayer := make([]float64, len(seats))
				require.True(t, w.ep.Replay.(episode.OneOutReplayer).ReplayOneOut(null, seats, viaReplayer))
				for j, i := range seats {
					cf := episode.Counterfactual{Absent: []int{i}, TeamOnly: true}
					if null {
						cf = episode.Counterfactual{Null: []int{i}, TeamOnly: true}
					}
					want, ok := w.game.Rescore(cf)
					require.True(t, ok)
					assert.Equal(t, want.Team, team[j], "seat %d null=%v", i, null)
					assert.Equal(t, want.Team, viaReplayer[j], "seat %d null=%v, replayer", i, null)
				}
			}
		}
		assert.False(t, w.game.RescoreOneOut(true, []int{0, tc.n}, make([]float64, 2)))
		assert.False(t, w.game.RescoreOneOut(false, []int{-1}, make([]float64, 1)))
		assert.False(t, w.ep.Replay.(episode.OneOutReplayer).ReplayOneOut(true, []int{tc.n}, make([]float64, 1)))
	}
	unscored := &game{c: 1, choice: []int{0}, counts: []int{1}}
	assert.False(t, unscored.RescoreOneOut(true, []int{0}, make([]float64, 1)), "a game not yet scored")
}
