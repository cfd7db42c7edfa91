package experiment_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
)

func TestParseLearnersExpandsASweep(t *testing.T) {
	ls, err := experiment.ParseLearners("egreedy:alpha=0.05/0.1/0.3,epsilon=0.02/0.1")
	require.NoError(t, err)
	var got []string
	for _, l := range ls {
		got = append(got, l.String())
	}
	assert.Equal(t, []string{
		"egreedy:alpha=0.05,epsilon=0.02,init=0,unbiased=1",
		"egreedy:alpha=0.05,epsilon=0.1,init=0,unbiased=1",
		"egreedy:alpha=0.1,epsilon=0.02,init=0,unbiased=1",
		"egreedy:alpha=0.1,epsilon=0.1,init=0,unbiased=1",
		"egreedy:alpha=0.3,epsilon=0.02,init=0,unbiased=1",
		"egreedy:alpha=0.3,epsilon=0.1,init=0,unbiased=1",
	}, got, "the first parameter varies slowest")

	one, err := experiment.ParseLearners("reinforce:rate=0.2")
	require.NoError(t, err)
	require.Len(t, one, 1)
	assert.Equal(t, "reinforce:baseline=0,rate=0.2", one[0].String())

	for spec, msg := range map[string]string{
		"egreedy:alpha=0.1/":         "alpha has an empty value",
		"egreedy:alpha=0.1/0.1":      "alpha=0.1 given twice",
		"egreedy:alpha/0.1":          "is not key=value",
		"egreedy:alpha=0.1/2":        "alpha",
		"egreedy:gamma=0.1/0.2":      `no parameter "gamma"`,
		"sarsa:alpha=0.1/0.2":        "unknown learner",
		"egreedy:alpha=0.1/x,init=1": `"x" is not a finite number`,
	} {
		_, err := experiment.ParseLearners(spec)
		assert.ErrorContains(t, err, msg, spec)
	}
}

// sweepBar is smallBar with a sweep of two learning rates and a second
// learner.
func sweepBar(t *testing.T, out string) experiment.Config {
	cfg := smallBar(t, out)
	ls, err := experiment.ParseLearners("egreedy:alpha=0.2/0.5,epsilon=0.05")
	require.NoError(t, err)
	r, err := learn.Parse("reinforce:rate=0.3")
	require.NoError(t, err)
	cfg.Learners = append(ls, r)
	cfg.Episodes = 40
	return cfg
}

func TestASweepSummarisesEveryReward(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := sweepBar(t, dir)
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	L, A := 3, 2
	require.Len(t, res.Cells, 2*L*A*2)
	require.Len(t, res.Rows, 2*L*A)
	require.Len(t, res.Comparisons, 2*L, "each point and learner compares its two allocators")
	require.Len(t, res.Sweep, 2*A)
	for i, s := range res.Sweep {
		pi, ai := i/A, i%A
		var means []float64
		for li := range L {
			r := res.Rows[(pi*L+li)*A+ai]
			assert.Equal(t, cfg.Learners[li].String(), r.Learner)
			assert.Equal(t, s.Allocator, r.Allocator)
			means = append(means, r.FinalStats.Mean)
		}
		assert.Equal(t, means, s.Means)
		assert.Equal(t, slices.Max(means), s.Best)
		assert.Equal(t, slices.Min(means), s.Worst)
		sorted := slices.Sorted(slices.Values(means))
		assert.Equal(t, sorted[1], s.Median, "the median of three")
		assert.Equal(t, res.Rows[(pi*L+slices.Index(means, s.Best))*A+ai].Learner, s.BestLearner)
		top := 0
		for li, rank := range s.Ranks {
			other := res.Rows[(pi*L+li)*A+(1-ai)].FinalStats.Mean
			if means[li] >= other {
				assert.Equal(t, 1, rank)
				top++
			} else {
				assert.Equal(t, 2, rank)
			}
		}
		assert.Equal(t, top, s.Top)
	}
	// Every learner gives one ordering at each point.
	perPoint := map[string]int{}
	for _, o := range res.Orderings {
		perPoint[strings.Join(o.Point, ",")] += len(o.Learners)
		assert.Regexp(t, `^(team|difference) [>≈] (team|difference)$`, o.Order)
	}
	assert.Equal(t, map[string]int{"6": L, "12": L}, perPoint)

	files := outputs(t, dir)
	report := string(files[experiment.ReportMD])
	assert.Contains(t, report, "### Learner sweep")
	assert.Contains(t, report, "`egreedy:alpha=0.2`", "a learner is named by what differs")
	assert.Contains(t, report, "`egreedy:alpha=0.5`")
	assert.Contains(t, report, "`reinforce`")
	for _, f := range []string{"sweep.csv", "modes.csv", "final_agents-6.svg", "final_agents-12.svg", "curves_agents-6_egreedy-alpha-0.5.svg", "curves_agents-12_reinforce.svg"} {
		assert.Contains(t, files, f)
		assert.Contains(t, report, f, "the report shows or names %s", f)
	}
	assert.NotContains(t, files, "seeds.svg", "the finals against the learners show every seed")
	sweep := strings.Split(strings.TrimSpace(string(files["sweep.csv"])), "\n")
	assert.Len(t, sweep, 1+2*A*L)
}

func TestASweepResumesAndIsDeterministic(t *testing.T) {
	t.Parallel()
	want, cfg := sameBytesInSerial(t, sweepBar(t, ""))
	second := cfg.Out

	// Lose every cell of one learner: only they are played again.
	entries, err := os.ReadDir(filepath.Join(second, "cells"))
	require.NoError(t, err)
	lost := 0
	for _, e := range entries {
		if strings.Contains(e.Name(), "_reinforce-baseline-0-rate-0.3_") {
			require.NoError(t, os.Remove(filepath.Join(second, "cells", e.Name())))
			lost++
		}
	}
	require.Equal(t, 8, lost)
	cfg.Resume = true
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, len(res.Cells)-lost, res.Resumed)
	assert.Equal(t, want, outputs(t, second))

	// Another sweep is another experiment.
	cfg.Learners = cfg.Learners[:2]
	_, err = experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrOtherExperiment)
	assert.ErrorContains(t, err, "learners")
}

func TestASingleGridPointHasAFinalPlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := smallBar(t, dir)
	cfg.Axes = nil
	cfg.Params["agents"] = "6"
	cfg.Episodes = 30
	_, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	files := outputs(t, dir)
	require.Contains(t, files, "final.svg")
	assert.Contains(t, string(files[experiment.ReportMD]), "![Final G/G*](final.svg)")
}

func TestConfigRefusesALearnerTwice(t *testing.T) {
	cfg := smallBar(t, "")
	cfg.Learners = append(cfg.Learners, cfg.Learners[0])
	_, err := experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrBadConfig)
	assert.ErrorContains(t, err, "given twice")
	cfg.Learners = []learn.Spec{{}}
	_, err = experiment.Run(context.Background(), cfg)
	assert.ErrorContains(t, err, "learner 1: not parsed")
}

// FuzzParseLearners: a sweep spec is refused with an error or read as
// learners each of which learn.Parse reads back to itself, all different.
func FuzzParseLearners(f *testing.F) {
	for _, s := range []string{"egreedy", "egreedy:alpha=0.1/0.3,epsilon=0.01/0.05", "reinforce:rate=1", "boltzmann:temperature=0.03/0.3",
		"egreedy:alpha=/", "egreedy:alpha=0.1//0.2", ":", "egreedy:alpha=0.1/0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ls, err := experiment.ParseLearners(spec)
		if err != nil {
			require.Empty(t, ls)
			return
		}
		require.NotEmpty(t, ls)
		seen := map[string]bool{}
		for _, l := range ls {
			again, err := learn.Parse(l.String())
			require.NoError(t, err, l.String())
			require.Equal(t, l.String(), again.String())
			require.False(t, seen[l.String()], "%s twice", l.String())
			seen[l.String()] = true
		}
	})
}
