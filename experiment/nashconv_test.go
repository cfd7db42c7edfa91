package experiment_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// Each cell of a two-sided game ends with its learnt joint policy's exact
// NashConv, which the report tabulates, the cell files keep (a resumed
// experiment writes the same report from them), and a game that is not
// two-sided gives the reason instead, without failing the experiment.
func TestCellsMeasureTheirNashConv(t *testing.T) {
	spec, err := learn.Parse("egreedy:alpha=0.2,epsilon=0.2")
	require.NoError(t, err)
	dir := t.TempDir()
	cfg := experiment.Config{
		Scenario:   blotto.New(),
		Params:     map[string]string{"n": "2", "fields": "3"},
		Allocators: []string{"team", "individual"},
		Learners:   []learn.Spec{spec},
		Seeds:      3,
		Seed:       5,
		Episodes:   150,
		NashConv:   &experiment.NashConv{},
		Out:        dir,
	}
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	for _, c := range res.Cells {
		require.NotNil(t, c.NashConv, "cell %s seed %d", c.Allocator, c.Seed)
		require.Empty(t, c.NashConv.Error)
		assert.Equal(t, "greedy", c.NashConv.Policy)
		m := c.NashConv.Measure
		require.NotNil(t, m)
		assert.Equal(t, "red", m.Sides[0].Name)
		assert.Equal(t, "blue", m.Sides[1].Name)
		assert.Equal(t, []uint64{c.RunSeed}, m.Seeds)
		assert.InDelta(t, m.Sides[0].Gain()+m.Sides[1].Gain(), m.NashConv, 1e-12)
		for _, s := range m.Sides {
			assert.GreaterOrEqual(t, s.Gain(), -1e-12)
			// The sides' rewards are shares of the battlefields: a best
			// response gains at most what the side does not have.
			assert.LessOrEqual(t, s.BestResponse, 1+1e-12)
		}
		assert.InDelta(t, 1, m.Sides[0].Value+m.Sides[1].Value, 1e-12, "constant-sum")
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "### Exploitability (NashConv)")
	assert.Contains(t, string(report), "| gain of red | gain of blue | not measured |")
	assert.Contains(t, string(report), "| 0 of 3 |")

	cfg.Resume = true
	again, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, len(res.Cells), again.Resumed)
	for i, c := range again.Cells {
		assert.Equal(t, res.Cells[i].NashConv, c.NashConv)
	}
	resumed, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Equal(t, string(report), string(resumed))

	// measures runs cfg and returns its cells' measures.
	measures := func(cfg experiment.Config) []*experiment.CellNashConv {
		res, err := experiment.Run(context.Background(), cfg)
		require.NoError(t, err)
		out := make([]*experiment.CellNashConv, len(res.Cells))
		for i, c := range res.Cells {
			require.NotNil(t, c.NashConv)
			out[i] = c.NashConv
		}
		return out
	}
	// A learner that gives its probabilities, and reads the numeric
	// observation, is measured by them.
	pg, err := learn.Parse("pg-linear")
	require.NoError(t, err)
	for _, nc := range measures(experiment.Config{Scenario: blotto.New(), Params: map[string]string{"n": "2", "fields": "3"},
		Allocators: []string{"team"}, Learners: []learn.Spec{pg}, Seeds: 2, Seed: 1, Episodes: 50, NashConv: &experiment.NashConv{}}) {
		require.Empty(t, nc.Error)
		assert.Equal(t, "distribution", nc.Policy)
		assert.InDelta(t, 1, nc.Measure.Sides[0].Value+nc.Measure.Sides[1].Value, 1e-12)
		assert.Greater(t, nc.Measure.NashConv, 0.0, "a softmax policy of 50 episodes is mixed, and exploitable")
	}
	for _, nc := range measures(experiment.Config{Scenario: elfarol.New(), Params: map[string]string{"agents": "3"}, Allocators: []string{"team"},
		Learners: []learn.Spec{spec}, Seeds: 2, Seed: 1, Episodes: 20, NashConv: &experiment.NashConv{}}) {
		assert.Nil(t, nc.Measure)
		assert.Contains(t, nc.Error, league.ErrNotTwoSided.Error())
	}
}
