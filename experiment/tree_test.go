package experiment_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/committee"
)

// treeBar is smallBar with tree sampling of two candidates per turn, its
// learners learning from every candidate.
func treeBar(t *testing.T) experiment.Config {
	t.Helper()
	cfg := smallBar(t, "")
	spec, err := learn.Parse("reinforce:rate=0.3")
	require.NoError(t, err)
	cfg.Learners = []learn.Spec{spec}
	cfg.Allocators = []string{"at-grpo", "magrpo", "team", "difference"}
	cfg.Episodes = 30
	cfg.Tree = &episode.Tree{K: 2, Alpha: 1}
	return cfg
}

// A tree-sampled experiment writes the same bytes whatever the number of
// cells run at once, learns every candidate (two per patron and week),
// resumes to the same bytes, and refuses, naming it, a cell file an older
// troupe wrote without its per-episode cost.
func TestTreeExperimentsAreDeterministicAndResume(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	cfg := treeBar(t)
	cfg.Out, cfg.Parallel = t.TempDir(), 4
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	want := outputs(t, cfg.Out)
	for _, cell := range res.Cells {
		patrons := 6
		if cell.Params["agents"] == "12" {
			patrons = 12
		}
		assert.Equal(t, int64(2*patrons*cfg.Episodes), cell.Updates, "%s: every candidate learned", cell.Allocator)
		require.Len(t, cell.Cost, cfg.Episodes)
		// The main lines and two one-step continuations per patron.
		least := int64(cfg.Episodes * (1 + 2*patrons))
		if cell.Allocator == "difference" {
			assert.Greater(t, cell.Cost[cfg.Episodes-1], least, "its re-simulations cost")
		} else {
			assert.Equal(t, least, cell.Cost[cfg.Episodes-1])
		}
	}
	cfg.Out, cfg.Parallel = t.TempDir(), 1
	_, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, want, outputs(t, cfg.Out))

	var cells []string
	for name := range want {
		if strings.HasPrefix(name, "cells") {
			cells = append(cells, name)
		}
	}
	slices.Sort(cells)
	require.NoError(t, os.Remove(filepath.Join(cfg.Out, cells[0])))
	cfg.Resume = true
	res, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, len(cells)-1, res.Resumed)
	assert.Equal(t, want, outputs(t, cfg.Out))

	// A cell file of the format before the cost: refused by name.
	path := filepath.Join(cfg.Out, cells[1])
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var old map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &old))
	delete(old, "cost")
	data, err = json.Marshal(old)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	_, err = experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrOldCell)
	assert.ErrorContains(t, err, path)
}

// Tree sampling refuses, before any cell, what it cannot do, naming it.
func TestTreeConfigErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(*experiment.Config)
	}{
		{"grpo", "grpo", func(c *experiment.Config) { c.Allocators, c.Group = []string{"grpo"}, 2 }},
		{"rae", "rae", func(c *experiment.Config) { c.Allocators = []string{"team", "rae"} }},
		{"one candidate", "at least 2", func(c *experiment.Config) { c.Tree.K = 1 }},
		{"a role the scenario does not have", `"nobody"`, func(c *experiment.Config) { c.Tree.Roles = []string{"nobody"} }},
		{"diagnostics", "diagnostics", func(c *experiment.Config) { c.Diagnose.Episodes = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := treeBar(t)
			tc.edit(&cfg)
			_, err := experiment.Run(context.Background(), cfg)
			require.ErrorIs(t, err, experiment.ErrBadConfig)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	spec, err := learn.Parse("reinforce")
	require.NoError(t, err)
	// A role that does not learn: its candidates would be no samples.
	_, err = experiment.Run(context.Background(), experiment.Config{
		Scenario: committee.New(), Params: map[string]string{"informed": "1", "options": "3", "uninformed": "1"},
		Allocators: []string{"team"}, Learners: []learn.Spec{spec}, Learn: []string{committee.RoleAdviser},
		Policies: map[string]string{committee.RoleDecider: "scripted"}, Seeds: 1, Episodes: 4,
		Tree: &episode.Tree{K: 2, Alpha: 1, Roles: []string{committee.RoleDecider}},
	})
	require.ErrorIs(t, err, experiment.ErrBadConfig)
	assert.ErrorContains(t, err, `tree role "decider" does not learn`)

	// A compared side's per-side allocators take no tree.
	_, err = experiment.Run(context.Background(), experiment.Config{
		Scenario: blotto.New(), Params: map[string]string{"n": "2"}, Allocators: []string{"team"},
		Learners: []learn.Spec{spec}, Seeds: 1, Episodes: 4, Side: "red", Tree: &episode.Tree{K: 2, Alpha: 1},
	})
	require.ErrorIs(t, err, experiment.ErrBadConfig)
	assert.ErrorContains(t, err, "side")
}
