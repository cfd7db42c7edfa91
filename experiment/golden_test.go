package experiment_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

var update = flag.Bool("update", false, "rewrite the golden experiment outputs in testdata")

// TestOutputsMatchTheGoldenFiles pins what small grids measure, every
// episode's team reward and mean reward to the last bit: every learner,
// the counterfactual allocators (rescored and re-simulated), a stateful
// one, a scenario whose prompts carry messages, and a sweep of learners. A change of the
// engine, the allocators or the learners that changes what is learned
// shows here; run with -update only when that change is meant.
func TestOutputsMatchTheGoldenFiles(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	spec := func(s string) learn.Spec {
		l, err := learn.Parse(s)
		require.NoError(t, err)
		return l
	}
	bar := func(learner string, allocators ...string) experiment.Config {
		return experiment.Config{
			Scenario:   elfarol.New(),
			Params:     map[string]string{"nights": "3", "capacity": "2"},
			Axes:       []experiment.Axis{{Param: "agents", Values: []string{"5", "9"}}},
			Allocators: allocators,
			Learners:   []learn.Spec{spec(learner)},
			Seeds:      2,
			Seed:       7,
			Episodes:   40,
		}
	}
	sweep := func(learners ...string) experiment.Config {
		cfg := bar("egreedy", "team", "difference")
		cfg.Learners = nil
		for _, l := range learners {
			ls, err := experiment.ParseLearners(l)
			require.NoError(t, err)
			cfg.Learners = append(cfg.Learners, ls...)
		}
		return cfg
	}
	treed := func(cfg experiment.Config) experiment.Config {
		cfg.Tree = &episode.Tree{K: 2, Alpha: 1}
		return cfg
	}
	grids := map[string]experiment.Config{
		"elfarol-egreedy":   bar("egreedy:alpha=0.2,epsilon=0.1", "team", "individual", "difference"),
		"elfarol-boltzmann": bar("boltzmann:temperature=0.3", "team", "difference:c=average", "shapley-mc:permutations=4"),
		"elfarol-reinforce": bar("reinforce:rate=0.3", "equal-split", "rae", "leave-one-out"),
		// A sweep of learners: the cells of each are those a grid with that
		// learner alone plays (elfarol-egreedy's alpha=0.2 cells are
		// repeated here bit for bit).
		"elfarol-sweep": sweep("egreedy:alpha=0.2/0.5,epsilon=0.1", "reinforce:rate=0.3"),
		// Tree sampling: every learning turn's two candidates valued by
		// their continuations, learned with at-grpo's group advantage or
		// credited from their own continuations.
		"elfarol-tree": treed(bar("reinforce:rate=0.3", "at-grpo", "team", "difference")),
		"committee": {
			Scenario:   committee.New(),
			Params:     map[string]string{"informed": "1", "options": "3"},
			Axes:       []experiment.Axis{{Param: "uninformed", Values: []string{"1", "2"}}},
			Allocators: []string{"team", "difference", "shapley"},
			Learners:   []learn.Spec{spec("egreedy:alpha=0.2,epsilon=0.1")},
			Learn:      []string{committee.RoleAdviser},
			Policies:   map[string]string{committee.RoleDecider: "scripted"},
			Seeds:      2,
			Seed:       3,
			Episodes:   40,
			Limits:     env.Limits{MaxSteps: 50},
		},
	}
	for name, cfg := range grids {
		t.Run(name, func(t *testing.T) {
			cfg.Out = t.TempDir()
			_, err := experiment.Run(context.Background(), cfg)
			require.NoError(t, err)
			files := []string{"episodes.csv", "results.csv", "modes.csv", "cost.csv"}
			if len(cfg.Learners) > 1 {
				files = append(files, "sweep.csv")
			}
			for _, file := range files {
				got, err := os.ReadFile(filepath.Join(cfg.Out, file))
				require.NoError(t, err)
				checkGolden(t, filepath.Join("testdata", name, file), got)
			}
		})
	}
}

// checkGolden compares got with the golden file, or writes it with
// -update.
func checkGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
		require.NoError(t, os.WriteFile(golden, got, 0o644))
		return
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run with -update to write it")
	assert.Equal(t, string(want), string(got), "%s differs", golden)
}
