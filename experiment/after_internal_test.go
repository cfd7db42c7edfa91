package experiment

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
)

// A cell's diagnostics wrap its output (afterGroups): the wrapper must
// recycle when the output does, or the grid loses the reuse of its
// records, and must not when it does not.
func TestAfterGroupsRecyclesAsItsOutputDoes(t *testing.T) {
	var o play.Output = &afterGroups{RecyclingOutput: &trajectories.Output{ObserveCredit: func(*episode.Record, *trajectories.Credit) error { return nil }}}
	r, ok := o.(play.RecyclingOutput)
	require.True(t, ok)
	assert.True(t, r.Recycles())
	o = &afterGroups{RecyclingOutput: &trajectories.Output{Observe: func(*trajectories.Episode) {}}}
	assert.False(t, o.(play.RecyclingOutput).Recycles())
}

// afterGroups hands each group to its hook whole, once every episode of it
// was written (a learner learned them all), and before the next group is
// played (the records are still the group's, not recycled for the next).
func TestAfterGroupsSeesEachGroupOnceWritten(t *testing.T) {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "5", "nights": "2"})
	require.NoError(t, err)
	var written []int64
	var seen [][]int64
	out := &afterGroups{
		RecyclingOutput: &trajectories.Output{ObserveCredit: func(rec *episode.Record, _ *trajectories.Credit) error {
			written = append(written, rec.Index)
			return nil
		}},
		after: func(_ context.Context, group []*episode.Record) error {
			var ids []int64
			for _, rec := range group {
				ids = append(ids, rec.Index)
			}
			assert.Equal(t, ids[len(ids)-1], written[len(written)-1], "the group's last episode was written")
			seen = append(seen, ids)
			return nil
		},
	}
	require.True(t, out.Recycles())
	_, err = play.Run(context.Background(), play.Config{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())},
		Episodes: 10, GroupSize: 3, Lockstep: true, FailFast: true}, out)
	require.NoError(t, err)
	assert.Equal(t, [][]int64{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}, seen)
	assert.Len(t, written, 10)
}
