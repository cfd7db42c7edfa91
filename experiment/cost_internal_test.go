package experiment

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// The cost of a cell, counted by hand on El Farol with two patrons, one
// step an episode: the team reward costs the main lines alone, N steps
// for N episodes; the difference reward re-simulates each patron's
// absence once an episode, N more steps per patron (exactly 2N); with
// tree sampling of K candidates, each patron's turn adds K one-step
// continuations (2·K·N), and the difference reward then re-simulates each
// continuation too (2 patrons each, 2·K·2·N).
func TestCostCountedByHand(t *testing.T) {
	const n, k = 30, 3
	spec, err := learn.Parse("reinforce:rate=0.3")
	require.NoError(t, err)
	run := func(tree *episode.Tree, allocators ...string) map[string]int64 {
		res, err := Run(context.Background(), Config{
			Scenario: elfarol.New(), Params: map[string]string{"agents": "2", "nights": "2", "capacity": "1"},
			Allocators: allocators, Learners: []learn.Spec{spec}, Seeds: 2, Seed: 4, Episodes: n, Tree: tree,
		})
		require.NoError(t, err)
		totals := map[string]int64{}
		for _, cell := range res.Cells {
			require.Len(t, cell.Cost, n)
			for e := 1; e < n; e++ {
				require.GreaterOrEqual(t, cell.Cost[e], cell.Cost[e-1], "the cost is cumulative")
			}
			if old, ok := totals[cell.Allocator]; ok {
				assert.Equal(t, old, cell.Cost[n-1], "%s: every seed pays the same", cell.Allocator)
			}
			totals[cell.Allocator] = cell.Cost[n-1]
		}
		return totals
	}
	plain := run(nil, "team", "difference", "individual")
	assert.Equal(t, map[string]int64{"team": n, "individual": n, "difference": n + 2*n}, plain)
	tree := run(&episode.Tree{K: k, Alpha: 1}, "at-grpo", "team", "difference")
	assert.Equal(t, map[string]int64{"at-grpo": n + 2*k*n, "team": n + 2*k*n, "difference": n + 2*n + 2*k*n + 2*k*2*n}, tree)
}

// A tree-sampled episode's cost is its main line and the sum of its
// candidates' continuation lengths, counted here from the continuations'
// turns (tic-tac-toe: one turn a step) rather than their steps; a joint
// candidate's seats share one continuation (blotto: K one-step forks a
// step, where AT-GRPO plays K per seat).
func TestTreeCostIsTheContinuationLengths(t *testing.T) {
	play := func(sc env.Scenario, params map[string]string, tree episode.Tree) *episode.Record {
		p, err := sc.Info().ParseParams(params)
		require.NoError(t, err)
		rec := env.PlayTree(t.Context(), env.Setup{
			Play:  env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
			Drive: env.Drive{Tree: &tree}, Seed: 3, PolicySeed: 8,
		})
		require.True(t, rec.Finished(), rec.Err)
		return rec
	}
	rec := play(tictactoe.New(), nil, episode.Tree{K: 3, Alpha: 1})
	var want int64
	for _, c := range rec.Candidates {
		step := rec.Turns[c.Turn].Step
		for _, tr := range c.Fork.Turns {
			if tr.Step >= step {
				want++
			}
		}
	}
	got := costOf(rec)
	assert.Equal(t, EpisodeCost{Steps: int64(len(rec.Turns)), Tree: want}, got)
	assert.Greater(t, want, int64(len(rec.Candidates)), "continuations longer than one step")

	seats := 4 // blotto n=2: two soldiers a side
	joint := play(blotto.New(), map[string]string{"n": "2"}, episode.Tree{K: 3, Alpha: 1, Joint: true})
	assert.Equal(t, EpisodeCost{Steps: 1, Tree: 3}, costOf(joint))
	one := play(blotto.New(), map[string]string{"n": "2"}, episode.Tree{K: 3, Alpha: 1})
	assert.Equal(t, EpisodeCost{Steps: 1, Tree: int64(3 * seats)}, costOf(one))
}

// A cell's metric at a cost budget is the mean of its curve against
// cost over the last share of the budget, each episode weighed by the
// cost it spent there.
func TestAtCost(t *testing.T) {
	c := &Cell{Team: []float64{0, 1, 2, 3}, Cost: []int64{10, 20, 30, 50}}
	assert.Equal(t, 3.0, c.AtCost(50, 0.2), "(40, 50]: the last episode alone")
	assert.Equal(t, 3.0, c.AtCost(50, 0.4), "(30, 50]: all of it spent by the last episode")
	assert.InDelta(t, (2*5+3*20)/25.0, c.AtCost(50, 0.5), 1e-12, "(25, 50]: half of episode 2, all of 3")
	assert.InDelta(t, (1*5+2*10)/15.0, c.AtCost(30, 0.5), 1e-12, "(15, 30]: the budget of a cheaper cell")
	assert.Equal(t, 0.0, c.AtCost(5, 0.1), "within the first episode: its value")
	assert.Equal(t, 3.0, c.AtCost(99, 0.01), "beyond the cell's cost: its last episode")
	uniform := &Cell{Team: []float64{4, 1, 2, 3, 5}, Cost: []int64{7, 14, 21, 28, 35}}
	assert.InDelta(t, 4.0, uniform.AtCost(35, 0.4), 1e-12, "episodes that cost alike: the mean of the last two")
	assert.True(t, math.IsNaN((&Cell{}).AtCost(1, 1)))
}

// onGrid reads each seed's curve at common costs, linear between its
// points, over the costs every seed reached.
func TestOnGrid(t *testing.T) {
	grid, ys := onGrid([][]float64{{10, 20, 30}, {15, 25}}, [][]float64{{0, 1, 2}, {4, 6}})
	require.Len(t, grid, maxPoints)
	assert.Equal(t, 15.0, grid[0])
	assert.Equal(t, 25.0, grid[len(grid)-1])
	assert.InDelta(t, 0.5, ys[0][0], 1e-12)
	assert.InDelta(t, 1.5, ys[0][len(grid)-1], 1e-12)
	assert.InDelta(t, 4, ys[1][0], 1e-12)
	assert.InDelta(t, 6, ys[1][len(grid)-1], 1e-12)
	grid, _ = onGrid([][]float64{{1, 2}, {3, 4}}, [][]float64{{0, 0}, {0, 0}})
	assert.Nil(t, grid, "seeds whose costs do not overlap")
}
