package experiment_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// TestFactorednessAndLearnabilityReproduceAgoginoAndTumer checks the
// qualitative finding of Agogino & Tumer on El Farol: the difference reward
// is as factored as the global reward (fully: an agent's own move changes
// D_i exactly as it changes G) and far more learnable, and its advantage in
// learnability grows with the number of agents; the local reward (each
// patron's own night's φ) is the least factored. The agents play at random
// (ε = 1): the properties are the rewards', measured over the joint
// actions of uniformly random play.
func TestFactorednessAndLearnabilityReproduceAgoginoAndTumer(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	spec, err := learn.Parse("egreedy:epsilon=1")
	require.NoError(t, err)
	res, err := experiment.Run(context.Background(), experiment.Config{
		Scenario:   elfarol.New(),
		Params:     map[string]string{"nights": "7", "capacity": "6"},
		Axes:       []experiment.Axis{{Param: "agents", Values: []string{"20", "100", "300"}}},
		Allocators: []string{"team", "difference", "individual"},
		Learners:   []learn.Spec{spec},
		Seeds:      2,
		Seed:       1,
		Episodes:   30,
		Diagnose:   experiment.Diagnose{Episodes: 3, Agents: 10, Samples: 6},
	})
	require.NoError(t, err)
	type fl struct{ f, l float64 }
	got := map[string]map[string]fl{}
	for _, r := range res.Rows {
		require.NotNil(t, r.Diagnostics, "%v %s", r.Point, r.Allocator)
		if got[r.Point[0]] == nil {
			got[r.Point[0]] = map[string]fl{}
		}
		got[r.Point[0]][r.Allocator] = fl{r.Diagnostics.Factoredness.Mean, r.Diagnostics.Learnability.Mean}
		t.Logf("agents=%s %-12s factoredness %.3f learnability %.3f", r.Point[0], r.Allocator, r.Diagnostics.Factoredness.Mean, r.Diagnostics.Learnability.Mean)
	}
	gap := map[string]float64{}
	for n, m := range got {
		assert.Equal(t, 1.0, m["difference"].f, "agents=%s: D_i moves with G", n)
		assert.Equal(t, 1.0, m["team"].f, "agents=%s: G is factored by definition", n)
		assert.Less(t, m["individual"].f, 0.9, "agents=%s: the local reward is not factored", n)
		assert.Greater(t, m["difference"].l, 2*m["team"].l, "agents=%s: D is more learnable than G", n)
		gap[n] = m["difference"].l / m["team"].l
	}
	assert.Greater(t, gap["100"], gap["20"], "the learnability gap grows with N")
	assert.Greater(t, gap["300"], gap["100"], "the learnability gap grows with N")
	assert.Greater(t, gap["300"], 10.0, "at N=300, D is an order of magnitude more learnable than G")
}

// TestDiagnosticsChangeNothingLearned: a grid with diagnostics learns
// exactly what it learns without, and writes them to every output.
func TestDiagnosticsChangeNothingLearned(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	cfg := smallBar(t, "")
	cfg.Allocators = []string{"team", "difference", "shapley-mc:permutations=4"}
	plain, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	cfg.Diagnose = experiment.Diagnose{Episodes: 5}
	cfg.Out = t.TempDir()
	diag, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	for i, c := range plain.Cells {
		assert.Equal(t, c.Team, diag.Cells[i].Team)
		assert.Equal(t, c.Reward, diag.Cells[i].Reward)
		assert.Nil(t, c.Diagnostics)
		require.NotNil(t, diag.Cells[i].Diagnostics)
		assert.Equal(t, 5, diag.Cells[i].Diagnostics.Episodes)
		assert.Positive(t, diag.Cells[i].Diagnostics.Own)
	}
	files := outputs(t, cfg.Out)
	assert.Contains(t, string(files["report.md"]), "### Credit diagnostics")
	assert.Contains(t, string(files["results.csv"]), "factoredness_mean")
	assert.Contains(t, string(files["episodes.csv"]), "attendance_rank_1")
	assert.Contains(t, string(files["credit.csv"]), "patron-")
}

// TestDiagnosticsHearTheDecider: in committee the decider answers the
// advice, so the diagnostics' counterfactuals re-ask it (the scenario
// declares Resimulate): an adviser's own change moves G, and the
// difference reward, G − G(adviser abstains), moves with it.
func TestDiagnosticsHearTheDecider(t *testing.T) {
	spec, err := learn.Parse("egreedy:epsilon=1")
	require.NoError(t, err)
	res, err := experiment.Run(context.Background(), experiment.Config{
		Scenario:   committee.New(),
		Params:     map[string]string{"informed": "2", "uninformed": "2", "options": "3"},
		Allocators: []string{"team", "difference", "shapley"},
		Learners:   []learn.Spec{spec},
		Learn:      []string{committee.RoleAdviser},
		Policies:   map[string]string{committee.RoleDecider: "scripted"},
		Seeds:      2,
		Seed:       1,
		Episodes:   20,
		Diagnose:   experiment.Diagnose{Episodes: 4, Samples: 4},
	})
	require.NoError(t, err)
	for _, r := range res.Rows {
		d := r.Diagnostics
		require.NotNil(t, d, r.Allocator)
		t.Logf("%-28s factoredness %.3f learnability %.3f", r.Allocator, d.Factoredness.Mean, d.Learnability.Mean)
		assert.Positive(t, d.Learnability.Mean, "%s: an adviser's own advice moves its reward", r.Allocator)
	}
	assert.Equal(t, 1.0, res.Rows[0].Diagnostics.Factoredness.Mean, "the team reward is G")
	assert.Equal(t, 1.0, res.Rows[1].Diagnostics.Factoredness.Mean, "D_i moves with G")
}
