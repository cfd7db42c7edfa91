package experiment_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/experiment"
)

// TestGroupAllocatorsAreNeverSilentlyZero: GRPO-style allocators that
// compare the episodes of a group are refused with groups of one, naming
// the cause, and with groups they give rewards that are not all zero and
// are centred within each group.
func TestGroupAllocatorsAreNeverSilentlyZero(t *testing.T) {
	for _, spec := range []string{"grpo", "rloo", "dr-grpo", "magrpo", "at-grpo"} {
		cfg := smallBar(t, "")
		cfg.Allocators = []string{spec}
		_, err := experiment.Run(context.Background(), cfg)
		require.ErrorIs(t, err, experiment.ErrBadConfig, spec)
		assert.ErrorContains(t, err, "gives every sample 0", spec)
		assert.ErrorContains(t, err, "groups of 2 or more", spec)
	}

	cfg := smallBar(t, "")
	cfg.Allocators = []string{"grpo", "magrpo", "dr-grpo:base=individual"}
	cfg.Group = 4
	res, err := experiment.Run(context.Background(), cfg)
	require.NoError(t, err)
	for _, cell := range res.Cells {
		assert.Equal(t, 4, cell.Group)
		nonzero := 0
		for g := 0; g < len(cell.Reward); g += 4 {
			sum := 0.0
			for _, r := range cell.Reward[g : g+4] {
				sum += r
				if r != 0 {
					nonzero++
				}
			}
			if cell.Allocator != "dr-grpo:base=individual" {
				// Every agent of an episode is in the same unit count, so
				// the group's mean rewards are centred.
				assert.InDelta(t, 0, sum, 1e-9, "%s: group %d", cell.Allocator, g/4)
			}
		}
		// Once the learners settle, a group can play one outcome four
		// times; while they learn, it does not.
		assert.Greater(t, nonzero, len(cell.Reward)/8, "%s seed %d: rewards are not silently zero", cell.Allocator, cell.Seed)
	}

	// A group size that does not fit the run is refused.
	cfg.Group = cfg.Episodes + 1
	_, err = experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, experiment.ErrBadConfig)
}
