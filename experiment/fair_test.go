package experiment_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// TestTeamLearnersNoLongerLockIn is issue 14's degenerate baseline: with
// plain α steps from 0 and rewards that are always positive, global-reward
// patrons never leave their first night; the default learner (unbiased
// step size) and optimistic initial values let them move, and the
// experiment measures which.
func TestTeamLearnersNoLongerLockIn(t *testing.T) {
	lockIn := func(spec string) float64 {
		s, err := learn.Parse(spec)
		require.NoError(t, err)
		res, err := experiment.Run(context.Background(), experiment.Config{
			Scenario:   elfarol.New(),
			Params:     map[string]string{"agents": "40", "nights": "7", "capacity": "6"},
			Allocators: []string{"team"},
			Learners:   []learn.Spec{s},
			Seeds:      3,
			Seed:       1,
			Episodes:   300,
		})
		require.NoError(t, err)
		require.Len(t, res.Rows[0].LockedIn, 3)
		t.Logf("%s: locked in %.3f", spec, res.Rows[0].LockedInStats.Mean)
		return res.Rows[0].LockedInStats.Mean
	}
	assert.Greater(t, lockIn("egreedy:unbiased=0"), 0.9, "plain steps from 0 lock the team reward in")
	assert.Less(t, lockIn("egreedy"), 0.1, "the default learner does not")
	assert.Less(t, lockIn("egreedy:unbiased=0,init=20"), 0.1, "nor do optimistic initial values")
}

// TestFinalsListEverySeed: finals.csv holds one line per seed with the
// final result the rows summarise, so that bimodal outcomes can be seen.
func TestFinalsListEverySeed(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	cfg := smallBar(t, t.TempDir())
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(cfg.Out, experiment.FinalsCSV))
	require.NoError(t, err)
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	require.Len(t, rows, 1+len(res.Cells))
	k := 1
	for _, r := range res.Rows {
		for s, want := range r.Final {
			rec := rows[k]
			k++
			assert.Equal(t, r.Point[0], rec[col["agents"]])
			assert.Equal(t, r.Allocator, rec[col["allocator"]])
			assert.Equal(t, strconv.Itoa(s), rec[col["seed"]])
			got, err := strconv.ParseFloat(rec[col["final"]], 64)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		}
	}
}
