//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/scenarios/werewolf"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
	"github.com/troupe-rl/troupe/viewer"
)

// bystander is a game where one seat never acts yet counts: two players
// each say 0 or 1, a bystander only watches, and the team scores
// 0.5 + the players' numbers + 1 while the bystander is present. With
// everyone absent the team scores 0.5 = v(∅). The bystander has no turn,
// so no sample: its exact Shapley value (1) is in no record's values.
func bystander() env.Scenario {
	info := &env.Info{
		Name: "bystander", Summary: "two players and a bystander who never acts", Schedule: env.Simultaneous,
		Roles: []*agents.Role{
			{Name: "player", Doc: "says 0 or 1", Initial: "choosing", Events: fsm.Events{agents.Edge("choosing", "choose", "done")},
				Terminal: []agents.State{"done"}, Acting: []agents.State{"choosing"}},
			{Name: "bystander", Doc: "watches", Initial: "watching", Events: fsm.Events{agents.Edge("watching", "leave", "gone")},
				Terminal: []agents.State{"watching", "gone"}},
		},
		Counterfactual: &env.CounterfactualSpec{AbsentOK: true, Doc: "an absent player says 0; an absent bystander does not count"},
	}
	return env.Define(info, func(env.Params, uint64) (env.Game, error) { return &bystanderGame{}, nil })
}

type bystanderGame struct {
	said    [2]float64
	present bool
}

func (g *bystanderGame) Seats() []env.Seat {
	return []env.Seat{{ID: "p0", Role: "player"}, {ID: "p1", Role: "player"}, {ID: "watcher", Role: "bystander"}}
}
func (g *bystanderGame) Start(s *env.Step) error { g.present = !s.Absent(2); return nil }
func (g *bystanderGame) Observe(int) env.View {
	return env.View{Text: "say 0 or 1", Legal: []string{"0", "1"}}
}
func (g *bystanderGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		v, _ := strconv.ParseFloat(m.Action.Text, 64)
		g.said[m.Seat] = v
		if err := s.Fire(m.Seat, "choose"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}
func (g *bystanderGame) Score() env.Score {
	team := 0.5 + g.said[0] + g.said[1]
	if g.present {
		team++
	}
	return env.Score{Team: team, Agents: []float64{team, team, team}}
}

// TestBrowserShapleySumWithASeatThatNeverActs: the page's sum over agents
// of the exact Shapley value is G − v(∅), the bystander's value derived
// from it, though the record holds no sample of it.
func TestBrowserShapleySumWithASeatThatNeverActs(t *testing.T) {
	t.Parallel()
	sc := bystander()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p,
		Policy: env.ByRole(nil, agents.Replay("1"))}})
	require.Equal(t, "completed", string(rec.Status), rec.Err)
	ep := trajectories.NewEpisode(rec)
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Shapley{}, credit.Team{}}, trajectories.RewardDict))
	require.Equal(t, 3.5, rec.Score.Team)
	line, err := trajectories.AppendEpisodeJSON(nil, &ep.Record, ep.Credit)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "bystander.episodes.jsonl")
	require.NoError(t, os.WriteFile(path, line, 0o644))

	reg, err := env.NewRegistry(append(scenarios.List(), sc)...)
	require.NoError(t, err)
	b := newBrowser(t)
	x, err := viewer.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { x.Close() })
	v, err := viewer.New([]*viewer.File{x}, reg)
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	t.Cleanup(srv.Close)
	base := srv.URL
	b.open(base + "/run-0/ep-0.html")
	b.shotOf("shapley-bystander", "#credit")
	var sums []string
	b.eval(`[...document.querySelectorAll("#credit-table tfoot tr:first-child td.n")].map(c => c.firstChild.textContent.trim())`, &sums)
	require.Len(t, sums, 2)
	assert.Equal(t, "3", sums[0], "Σ over agents of Shapley = G − v(∅) = 3.5 − 0.5")
	assert.Equal(t, "7", sums[1], "the team allocator: G for each of the two agents with a sample")
	var empty string
	b.eval(`document.querySelector("#credit-table").dataset.emptyCoalition`, &empty)
	assert.Equal(t, "0.5", empty, "v(∅), from a replay with every seat absent")
	var watcher string
	b.eval(`document.querySelector('#credit-table tr[data-agent="watcher"] td[data-allocator="shapley"]').textContent`, &watcher)
	assert.Contains(t, watcher, "1", "the bystander's value, derived: G − v(∅) − the others'")
}

// werewolfWithASilentVillager plays werewolf (8 players, the scripted
// policies) from the first seed whose village wins with a villager killed
// the first night, before it ever acted, and allocates exact Shapley the
// way a run does (re-simulated, the scenario's mode). It returns the
// episode and that villager's seat.
func werewolfWithASilentVillager(t *testing.T) (*trajectories.Episode, int) {
	t.Helper()
	sc := werewolf.New()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	policy, err := scenariotest.NamedPolicy(sc, p, "scripted")
	require.NoError(t, err)
	for seed := uint64(1); seed <= 200; seed++ {
		rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Seed: seed, PolicySeed: seed + 100})
		require.True(t, rec.Finished(), rec.Err)
		if rec.Score.Of(werewolf.Village) != 1 {
			continue
		}
		acted := map[int]bool{}
		for _, turn := range rec.Turns {
			acted[turn.Seat] = true
		}
		for i, s := range rec.Seats {
			if s.Team == werewolf.Village && !acted[i] {
				ep := trajectories.NewEpisode(rec)
				shapley, err := credit.Builtin().ParseDefaultingSim("shapley", true)
				require.NoError(t, err)
				require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{shapley, credit.Team{}}, trajectories.RewardDict))
				return ep, i
			}
		}
	}
	t.Fatal("no seed of 200 has the village win with a villager who never acted")
	return nil, 0
}

// TestWerewolfShapleySumCountsASilentVillager: a village seat killed
// before its first turn has no sample, yet it is a player of the
// village's game, so the village's Shapley values sum to G_village −
// v_village(∅) with its share in, not to the sum of the others' values
// (the page showed 1.7 where that is 2). v_village(∅) is checked against
// the allocator's own counterfactual, replayed through the episode's
// live replayer.
func TestWerewolfShapleySumCountsASilentVillager(t *testing.T) {
	t.Parallel()
	ep, silent := werewolfWithASilentVillager(t)
	var village []int
	for i, s := range ep.Seats {
		if s.Team == werewolf.Village {
			village = append(village, i)
		}
	}
	score, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Absent: village, Resimulate: true, TeamOnly: true})
	require.NoError(t, err)
	want := ep.Score.Of(werewolf.Village) - score.Of(werewolf.Village)
	line, err := trajectories.AppendEpisodeJSON(nil, &ep.Record, ep.Credit)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "werewolf.episodes.jsonl")
	require.NoError(t, os.WriteFile(path, line, 0o644))

	x, err := viewer.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { x.Close() })
	reg, err := env.NewRegistry(scenarios.List()...)
	require.NoError(t, err)
	v, err := viewer.New([]*viewer.File{x}, reg)
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	t.Cleanup(srv.Close)
	b := newBrowser(t)
	b.open(srv.URL + "/run-0/ep-0.html")
	b.shotOf("shapley-werewolf", "#credit")

	var sums map[string]string // full precision: the cells' data-value
	b.eval(`Object.fromEntries([...document.querySelectorAll('#side-credit td[data-allocator="shapley"]')].map(c => [c.closest("tr").dataset.team, c.dataset.value]))`, &sums)
	got, err := strconv.ParseFloat(sums["village"], 64)
	require.NoError(t, err, "%v", sums)
	assert.InDelta(t, want, got, 1e-12, "Σ over the village = G − v(∅), the silent villager included")
	var shown string
	b.eval(`document.querySelector('#side-credit tr[data-team="village"] td[data-allocator="shapley"]').firstChild.textContent.trim()`, &shown)
	assert.Equal(t, strconv.FormatFloat(want, 'g', 6, 64), shown, "and the page shows it")
	var empty string
	b.eval(`document.querySelector('#side-credit tr[data-team="village"] td[data-allocator="shapley"] small').dataset.emptyCoalition`, &empty)
	assert.Equal(t, strconv.FormatFloat(score.Of(werewolf.Village), 'g', -1, 64), empty)

	// The others' values alone fall short by the silent villager's share,
	// which the page derives.
	others := villageValues(ep)
	require.NotEqual(t, want, others, "the defect needs a villager whose share is not 0")
	var derived string
	b.eval(fmt.Sprintf(`document.querySelector('#credit-table tr[data-agent=%q] td[data-allocator="shapley"]').firstChild.textContent.trim()`, ep.Seats[silent].ID), &derived)
	d, err := strconv.ParseFloat(derived, 64)
	require.NoError(t, err, derived)
	assert.InDelta(t, want-others, d, 1e-6, "the silent villager's value: G − v(∅) − the others' (as shown, to 6 digits)")
	t.Logf("village: G − v(∅) = %g, the others' values %g, the silent villager's %g", want, others, d)
}

// villageValues sums, over the village's seats with samples, the mean of
// their exact Shapley values (the first allocator's).
func villageValues(ep *trajectories.Episode) float64 {
	sum := map[int]float64{}
	count := map[int]int{}
	k := 0
	for _, turn := range ep.Turns {
		if turn.Emit {
			sum[turn.Seat] += ep.Credit.Values[0][k]
			count[turn.Seat]++
			k++
		}
	}
	total := 0.0
	for seat, s := range sum {
		if ep.Seats[seat].Team == werewolf.Village {
			total += s / float64(count[seat])
		}
	}
	return total
}
