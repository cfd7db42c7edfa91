package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --tree K plays every turn of the emitted roles K times from the same
// history: each turn is K samples, one of them chosen, rewarded by the
// allocators; the run spec holds the tree; bad trees are usage errors.
func TestRunTree(t *testing.T) {
	r := troupe(t, "run", "tictactoe", "-n", "3", "--tree", "3", "--tree-alpha", "0.5", "--tree-roles", "x",
		"-a", "at-grpo,magrpo", "--reward-format", "dict", "-o", "-", "-q")
	require.Equal(t, ExitOK, r.code, r.stderr)
	rollouts := readRollouts(t, []byte(r.stdout))
	require.Len(t, rollouts, 3)
	for _, ro := range rollouts {
		xs, chosen := 0, 0
		for _, s := range ro {
			if s.Metadata.Role != "x" {
				assert.NotContains(t, s.Metadata.Extra, "tree_candidate", "o is not tree sampled")
				continue
			}
			xs++
			assert.Equal(t, (xs-1)%3, int(s.Metadata.Extra["tree_candidate"].(float64)))
			if s.Metadata.Extra["tree_chosen"].(bool) {
				chosen++
			}
			assert.Contains(t, s.Reward.Dict, "at-grpo")
		}
		assert.Equal(t, 0, xs%3)
		assert.Equal(t, xs/3, chosen, "one chosen candidate per turn of x")
	}
	spec := troupe(t, "run", "tictactoe", "-n", "3", "--tree", "3", "--tree-joint", "--print-spec")
	require.Equal(t, ExitOK, spec.code, spec.stderr)
	assert.Contains(t, spec.stdout, `"tree": {`)
	assert.Contains(t, spec.stdout, `"joint": true`)
	for args, want := range map[string][]string{
		"--tree 1":                  {"--tree", "1"},
		"no role":                   {"--tree", "2", "--tree-roles", "nobody"},
		"--tree-joint without tree": {"--tree-joint"},
		"merged":                    {"--tree", "2", "--merge-turns"},
		"no continuations on NATS":  {"--tree", "2", "-a", "equal-split", "--nats", "nats://127.0.0.1:1"},
		"refused allocator":         {"--tree", "2", "-a", "grpo", "-g", "2"},
	} {
		r := troupe(t, append([]string{"run", "tictactoe", "-n", "1", "-o", "-"}, want...)...)
		assert.Equal(t, ExitUsage, r.code, args)
		assert.Contains(t, r.stderr, "tree", args)
	}
}
