package trajectories_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/trajectories"
)

// TestCheckFindsWhatIsWrong: each way a file can be broken is named, with
// its line; a whole file passes.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	eps := fxEpisodes(2, 2, 2, 2, 2, 2) // groups of two
	flat := writeAll(t, trajectories.Flat, eps)
	lines := strings.SplitAfter(string(flat), "\n")
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "")) }
	for _, tc := range []struct {
		name string
		data []byte
		opt  trajectories.CheckOptions
		says string // "" when whole
	}{
		{"whole", flat, trajectories.CheckOptions{GroupSize: 2, Episodes: 6}, ""},
		{"a whole prefix", join(lines[:8]...), trajectories.CheckOptions{GroupSize: 2, Episodes: 6}, ""},
		{"cut", flat[:len(flat)-10], trajectories.CheckOptions{}, "line 12: cut short"},
		{"a missing episode", join(append(lines[:2:2], lines[4:]...)...), trajectories.CheckOptions{}, "indexes 2 to 3 are missing"},
		{"a repeated line", join(append(lines[:3:3], lines[2:]...)...), trajectories.CheckOptions{}, "a duplicate or out of order"},
		{"a partial group", join(append(lines[:6:6], lines[8:]...)...), trajectories.CheckOptions{GroupSize: 2}, "group 1 has 1 episodes, not 2"},
		{"a partial last group", join(lines[:10]...), trajectories.CheckOptions{GroupSize: 2, Episodes: 6}, "group 2 has 1 episodes, not 2"},
		{"not JSON", join(lines[0], "{oops\n", lines[1]), trajectories.CheckOptions{}, "line 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := trajectories.Check(bytes.NewReader(tc.data), tc.opt)
			if tc.says == "" {
				assert.True(t, rep.OK(), "%v", rep.Problems)
				return
			}
			assert.False(t, rep.OK())
			assert.Contains(t, strings.Join(rep.Problems, "; "), tc.says)
		})
	}
}
