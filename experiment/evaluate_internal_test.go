package experiment

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// Evaluation episodes are played after a cell has learned everything and
// learn nothing: the cell's series and costs are those of a run without
// them, and the evaluations are the same bytes at any parallelism.
func TestEvaluationLeavesTheCellsAlone(t *testing.T) {
	spec, err := learn.Parse("pg-table:rate=0.3,baseline=0")
	require.NoError(t, err)
	run := func(evaluate, parallel int) *Result {
		res, err := Run(context.Background(), Config{
			Scenario: elfarol.New(), Params: map[string]string{"agents": "6", "nights": "3", "capacity": "2"},
			Allocators: []string{"at-grpo", "team"}, Learners: []learn.Spec{spec}, Seeds: 3, Seed: 5, Episodes: 40,
			Tree: &episode.Tree{K: 2, Alpha: 1}, Evaluate: evaluate, Parallel: parallel,
		})
		require.NoError(t, err)
		return res
	}
	plain, one, many := run(0, 1), run(25, 1), run(25, 3)
	require.Len(t, one.Cells, len(plain.Cells))
	for i, c := range one.Cells {
		p := plain.Cells[i]
		assert.Nil(t, p.Evaluation)
		assert.Equal(t, p.Team, c.Team, "cell %d: the series", i)
		assert.Equal(t, p.Cost, c.Cost, "cell %d: the cost", i)
		assert.Equal(t, p.Metrics, c.Metrics, "cell %d: the metrics", i)
		require.NotNil(t, c.Evaluation, "cell %d", i)
		assert.Equal(t, 25, c.Evaluation.Episodes)
		assert.Greater(t, c.Evaluation.Mean, 0.0)
		assert.LessOrEqual(t, c.Evaluation.Mean, 1.0+1e-12, "G/G*")
		assert.Equal(t, *c.Evaluation, *many.Cells[i].Evaluation, "cell %d: the same at any parallelism", i)
	}
	_, err = Run(context.Background(), Config{Scenario: elfarol.New(), Allocators: []string{"team"}, Learners: []learn.Spec{spec},
		Seeds: 1, Episodes: 1, Evaluate: -1})
	require.ErrorIs(t, err, ErrBadConfig)
}

// A tree-sampled cell's scenario metrics are its main line's: El Farol's
// attendances and patrons at home add up to the patrons, not to K times
// them (the candidates are samples, not patrons).
func TestTreeMetricsAreTheMainLines(t *testing.T) {
	spec, err := learn.Parse("reinforce:rate=0.3")
	require.NoError(t, err)
	const agents = 7
	res, err := Run(context.Background(), Config{
		Scenario: elfarol.New(), Params: map[string]string{"agents": "7", "nights": "3", "capacity": "2"},
		Allocators: []string{"at-grpo"}, Learners: []learn.Spec{spec}, Seeds: 2, Seed: 1, Episodes: 10,
		Tree: &episode.Tree{K: 3, Alpha: 1},
	})
	require.NoError(t, err)
	for _, c := range res.Cells {
		require.NotEmpty(t, c.Metrics)
		for e := range c.Team {
			sum := 0.0
			for m := range c.Metrics {
				sum += c.Metrics[m][e]
			}
			assert.Equal(t, float64(agents), sum, "seed %d episode %d", c.Seed, e)
		}
	}
}
