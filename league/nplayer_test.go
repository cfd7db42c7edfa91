package league_test

import (
	"context"
	"math"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/runspec"
)

// bid is a three-player game, one role each: every seat bids 1, 2 or 3 at
// once; the highest bid scores +1, the lowest -1, the middle 0, ties
// sharing the mean of their places' scores. Its policies bid high, low, or
// at random.
func bid() env.Scenario {
	roles := make([]*agents.Role, 3)
	for i, name := range []string{"a", "b", "c"} {
		roles[i] = &agents.Role{Name: name, Initial: "bidding",
			Events: fsm.Events{agents.Edge("bidding", "bid", "done")}, Terminal: []agents.State{"done"}}
	}
	always := func(v string) env.PolicyMaker {
		return func(env.PolicyRequest) (agents.Policy, error) {
			return agents.Scripted(func(*agents.Observation) string { return v }), nil
		}
	}
	info := &env.Info{Name: "bid", Summary: "three bidders", Doc: "the highest bid wins", Schedule: env.Simultaneous, Roles: roles,
		Policies: map[string]env.PolicyMaker{"high": always("3"), "low": always("1")}}
	return env.Define(info, func(env.Params, uint64) (env.Game, error) { return &bidGame{}, nil })
}

type bidGame struct{ bids [3]int }

func (g *bidGame) Seats() []env.Seat {
	return []env.Seat{{ID: "a", Role: "a"}, {ID: "b", Role: "b"}, {ID: "c", Role: "c"}}
}
func (g *bidGame) Start(*env.Step) error { return nil }
func (g *bidGame) Observe(int) env.View  { return env.View{Text: "bid", Legal: []string{"1", "2", "3"}} }
func (g *bidGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		g.bids[m.Seat] = int(m.Action.Text[0] - '0')
		if err := s.Fire(m.Seat, "bid"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}
func (g *bidGame) Score() env.Score {
	sc := env.Score{Agents: make([]float64, 3)}
	for i := range 3 {
		above, same := 0, 0
		for j := range 3 {
			switch {
			case g.bids[j] > g.bids[i]:
				above++
			case g.bids[j] == g.bids[i]:
				same++
			}
		}
		// Places above..above+same-1 share their scores 1, 0, -1.
		total := 0.0
		for p := above; p < above+same; p++ {
			total += float64(1 - p)
		}
		sc.Agents[i] = total / float64(same)
	}
	return sc
}

// In a three-role game every role other than the focal player's gets its
// own opponent, drawn uniformly from the pool; the ratings rank the bidders
// by strength (high > random > low).
func TestNPlayerMatchmakingAndRatings(t *testing.T) {
	reg, err := env.NewRegistry(bid())
	require.NoError(t, err)
	l, err := league.Create(t.TempDir(), league.Config{Name: "bid", Scenario: "bid", Seed: 8, GlickoPeriod: 30}, reg)
	require.NoError(t, err)
	defer l.Close()
	for _, p := range []string{"high", "low", "random"} {
		require.NoError(t, l.Add(league.Player{Name: p, Policy: runspec.Policy{Name: p}}))
	}
	require.NoError(t, l.Add(league.Player{Name: "random2", Policy: runspec.Policy{Name: "random"}}))
	const n = 3000
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: n, Concurrency: 2}))
	// Every match names a player for each role; the two opponents of the
	// focal player are drawn independently, each uniformly from the three
	// others.
	counts := map[string]int{}
	for _, r := range l.Results() {
		require.Len(t, r.Roles, 3)
		for role, p := range r.Roles {
			if role != r.FocalRole {
				require.NotEqual(t, r.Focal, p)
				counts[p]++
			}
		}
	}
	for _, p := range []string{"high", "low", "random", "random2"} {
		// Each player is focal a quarter of the time, and otherwise
		// drawn with probability 1/3 per role: 2n · 3/4 · 1/3 = n/2.
		want := float64(n) / 2
		assert.InDelta(t, want, float64(counts[p]), 4*math.Sqrt(want), "%s drawn %d times", p, counts[p])
	}
	by := map[string]league.Rating{}
	for _, r := range l.Ratings() {
		by[r.Player] = r
	}
	assert.Greater(t, by["high"].Elo, by["random"].Elo)
	assert.Greater(t, by["random"].Elo, by["low"].Elo)
	assert.Greater(t, by["high"].R-2*by["high"].RD, by["random"].R)
	assert.Greater(t, by["random2"].R, by["low"].R+2*by["low"].RD)
}
