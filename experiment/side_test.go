package experiment_test

import (
	"context"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// smallBlotto is a quick team Blotto grid compared on red's side.
func smallBlotto(t testing.TB, out string) experiment.Config {
	t.Helper()
	spec, err := learn.Parse("egreedy:alpha=0.1,epsilon=0.1")
	require.NoError(t, err)
	return experiment.Config{
		Scenario:       blotto.New(),
		Axes:           []experiment.Axis{{Param: "n", Values: []string{"3", "6"}}},
		Allocators:     []string{"team", "individual", "difference"},
		Side:           "red",
		SideAllocators: map[string]string{"blue": "team"},
		Learners:       []learn.Spec{spec},
		Seeds:          3,
		Seed:           2,
		Episodes:       60,
		Window:         20,
		Out:            out,
	}
}

// With a compared side, the metric is that side's reward, episode by
// episode (the scenario's own red_reward), not the sum of the sides' (1 in
// every episode of a zero-sum game); the reward series is the mean of red's
// samples' rewards; and the outputs name the metric and the sides.
func TestASideIsComparedByItsOwnReward(t *testing.T) {
	dir := t.TempDir()
	res, err := experiment.Run(context.Background(), smallBlotto(t, dir))
	require.NoError(t, err)
	assert.Equal(t, "G_red", res.Metric)
	require.Len(t, res.Cells, 2*3*3)
	varied := false
	for _, c := range res.Cells {
		assert.Equal(t, "red", c.Side)
		assert.Equal(t, map[string]string{"blue": "team"}, c.SideAllocators)
		require.Equal(t, []string{"red_reward", "blue_reward", "red_top", "blue_top"}, c.MetricNames)
		assert.Equal(t, c.Metrics[0], c.Team, "cell %s seed %d: the metric is red's reward", c.Allocator, c.Seed)
		for e := range c.Team {
			assert.InDelta(t, 1, c.Metrics[0][e]+c.Metrics[1][e], 1e-12)
			varied = varied || c.Team[e] != c.Team[0]
		}
		if c.Allocator == "team" {
			// Red's samples get red's reward: their mean is that reward.
			assert.InDeltaSlice(t, c.Team, c.Reward, 1e-12)
		}
		// The credit statistics are red's: its agents only.
		require.NotNil(t, c.Credit)
		redMean := 0.0
		for _, v := range c.Team[len(c.Team)-20:] {
			redMean += v / 20
		}
		for k, agent := range c.Credit.Agents {
			require.True(t, strings.HasPrefix(agent, "red-"), agent)
			switch c.Allocator {
			case "team":
				assert.InDelta(t, redMean, c.Credit.Mean[k], 1e-12, "%s", agent)
			case "difference":
				// ±1/(2·fields) when pivotal, else 0.
				assert.LessOrEqual(t, math.Abs(c.Credit.Mean[k]), 1.0/6+1e-12, "%s's difference rewards", agent)
			}
		}
	}
	assert.True(t, varied, "red's reward varies from episode to episode")
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "of side red: `team`, `individual`, `difference`; the other sides' fixed: blue `team`")
	assert.Contains(t, string(report), "metric: G_red, side red's own reward")
	rows := readCSV(t, filepath.Join(dir, "results.csv"))
	metric := slices.Index(rows[0], "metric")
	require.GreaterOrEqual(t, metric, 0)
	for _, r := range rows[1:] {
		assert.Equal(t, "G_red", r[metric])
	}
	episodes := readCSV(t, filepath.Join(dir, "episodes.csv"))
	assert.Contains(t, episodes[0], "team_red", "episodes.csv names the side whose reward it holds")
	assert.NotContains(t, episodes[0], "team")
}

// Red's learners get the compared allocator and blue's their fixed one:
// red = team against blue = team, seen from blue's side, is the same
// cells, and blue's reward is 1 minus red's in every episode; and a cell
// whose red learns from the difference reward against a blue on the team
// reward is not the cell of the mirrored sides.
func TestTheSidesAreTheirOwn(t *testing.T) {
	red := smallBlotto(t, "")
	red.Allocators = []string{"team", "difference"}
	blue := red
	blue.Side, blue.SideAllocators = "blue", map[string]string{"red": "team"}
	rr, err := experiment.Run(context.Background(), red)
	require.NoError(t, err)
	br, err := experiment.Run(context.Background(), blue)
	require.NoError(t, err)
	for i, c := range rr.Cells {
		b := br.Cells[i]
		require.Equal(t, c.Seed, b.Seed)
		require.Equal(t, c.Params, b.Params)
		if c.Allocator != "team" {
			// red=difference,blue=team against blue=difference,red=team:
			// other games altogether.
			assert.NotEqual(t, c.Metrics[0], b.Metrics[0], "seed %d n=%s", c.Seed, c.Params["n"])
			continue
		}
		for e := range c.Team {
			assert.InDelta(t, 1, c.Team[e]+b.Team[e], 1e-12, "seed %d episode %d", c.Seed, e)
		}
		assert.Equal(t, c.Metrics, b.Metrics, "both sides on the team reward: the same games")
	}
}

// A side's experiment is deterministic and resumes as any other, and its
// manifest holds the sides: another fixed allocator is another experiment.
func TestASideExperimentResumesAndNamesItsSides(t *testing.T) {
	dir := t.TempDir()
	cfg := smallBlotto(t, dir)
	cfg.Axes = []experiment.Axis{{Param: "n", Values: []string{"3"}}}
	first, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	before := outputs(t, dir)
	cfg.Resume = true
	again, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, len(first.Cells), again.Resumed)
	assert.Equal(t, before, outputs(t, dir), "a resumed side experiment writes the same bytes")

	other := cfg
	other.SideAllocators = map[string]string{"blue": "difference"}
	_, err = experiment.Run(context.Background(), other)
	var mismatch *experiment.MismatchError
	require.ErrorAs(t, err, &mismatch)
	assert.Contains(t, err.Error(), "side_allocators.blue")
	assert.Contains(t, err.Error(), "difference")
}

func TestSideErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*experiment.Config)
		want string
	}{
		{"a scenario without teams", func(c *experiment.Config) {
			c.Scenario, c.Axes, c.SideAllocators = elfarol.New(), nil, nil
		}, `side "red": scenario elfarol declares no teams`},
		{"an unknown side", func(c *experiment.Config) { c.Side = "green" }, `side "green": scenario blotto has the teams red, blue`},
		{"an allocator for the compared side", func(c *experiment.Config) { c.SideAllocators = map[string]string{"red": "difference"} },
			"side allocator red=difference: red is the compared side"},
		{"an unknown team", func(c *experiment.Config) { c.SideAllocators = map[string]string{"green": "team"} },
			"side allocator green=team: scenario blotto has the teams red, blue"},
		{"side allocators without a side", func(c *experiment.Config) { c.Side = "" }, "side allocators map[blue:team] without a compared side"},
		{"a bad allocator", func(c *experiment.Config) { c.SideAllocators = map[string]string{"blue": "bogus"} }, "side allocator blue=bogus"},
		{"a group allocator in groups of one", func(c *experiment.Config) { c.SideAllocators = map[string]string{"blue": "magrpo"} },
			"side allocator blue=magrpo: magrpo compares the episodes of a group"},
		{"diagnostics", func(c *experiment.Config) { c.Diagnose = experiment.Diagnose{Episodes: 2} }, `diagnostics with side "red"`},
		{"an optimum", func(c *experiment.Config) {
			c.Optimum = func(p env.Params) (float64, error) { return 1, nil }
		}, `an optimum with side "red"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallBlotto(t, "")
			tc.edit(&cfg)
			_, err := experiment.Run(context.Background(), cfg)
			require.Error(t, err)
			assert.True(t, errors.Is(err, experiment.ErrBadConfig), "%v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	for _, bad := range []string{"blue", "=team", "blue=", ""} {
		_, _, err := experiment.ParseSideAllocator(bad)
		assert.ErrorIs(t, err, experiment.ErrBadConfig, "%q", bad)
	}
	team, spec, err := experiment.ParseSideAllocator(" blue = difference:c=null ")
	require.NoError(t, err)
	assert.Equal(t, []string{"blue", "difference:c=null"}, []string{team, spec})
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

// A side allocator that parses names a non-empty team and spec, without
// the spaces around them, and reads back the same from team=spec.
func FuzzParseSideAllocator(f *testing.F) {
	for _, s := range []string{"blue=team", " blue = difference:c=null ", "blue", "=team", "blue=", "a=b=c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		team, spec, err := experiment.ParseSideAllocator(s)
		if err != nil {
			require.ErrorIs(t, err, experiment.ErrBadConfig)
			require.Empty(t, team+spec)
			return
		}
		require.NotEmpty(t, team)
		require.NotEmpty(t, spec)
		require.Equal(t, strings.TrimSpace(team), team)
		require.Equal(t, strings.TrimSpace(spec), spec)
		require.NotContains(t, team, "=")
		team2, spec2, err := experiment.ParseSideAllocator(team + "=" + spec)
		require.NoError(t, err)
		require.Equal(t, []string{team, spec}, []string{team2, spec2})
	})
}
