//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"context"
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
	"github.com/troupe-rl/troupe/scenarios"
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
