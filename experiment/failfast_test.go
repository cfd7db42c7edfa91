package experiment_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// brokenAt is El Farol whose game cannot be built for one scenario seed:
// the episode with that seed fails. It is a plain env.Scenario, so each
// episode's game is built anew (not renewed).
type brokenAt struct {
	env.Scenario
	seed uint64
}

func (s brokenAt) New(p env.Params, seed uint64) (env.Game, error) {
	if seed == s.seed {
		return nil, errors.New("the bar burnt down")
	}
	return s.Scenario.New(p, seed)
}

// TestAFailedEpisodeStopsItsCell: an episode that fails stops its cell
// there (a learner must not go on as if it had been played), with an
// error that names the cell, the episode and why.
func TestAFailedEpisodeStopsItsCell(t *testing.T) {
	cfg := smallBar(t, t.TempDir())
	cfg.Axes = nil
	cfg.Params["agents"] = "6"
	cfg.Allocators = []string{"team"}
	cfg.Seeds = 1
	// Episode 30 of seed 0's cell: its scenario seed is its group's, and
	// the cell's run seed derives from the experiment's and the seed index.
	cfg.Scenario = brokenAt{elfarol.New(), seeds.Mix(seeds.Mix(cfg.Seed, 0), 1, 30)}
	var progress []int64
	cfg.Progress = func(p experiment.Progress) { progress = append(progress, p.EpisodesDone) }
	_, err := experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, play.ErrEpisodeFailed)
	assert.Regexp(t, `^cell \(the only point\) allocator=team seed=0: episode failed: episode 30 failed \(game_error\): .*the bar burnt down`, err.Error())
	assert.Equal(t, []int64{25}, progress, "the episodes learned before the failure")
}
