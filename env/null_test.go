package env_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// TestNullActionByState plays a null action that depends on the state: a
// volley player's null action is "hit" in waiting, declared per state.
func TestNullActionByState(t *testing.T) {
	info := &env.Info{Name: "volley", Summary: "test", Schedule: env.Sequential, Roles: []*agents.Role{volleyRole()},
		Counterfactual: &env.CounterfactualSpec{NullActionIn: map[string]map[agents.State]string{"player": {"waiting": "hit"}}}}
	require.NoError(t, info.Validate())
	assert.True(t, info.Counterfactual.HasNullAction("player"))
	null, ok := info.Counterfactual.NullActionAt("player", "waiting")
	assert.True(t, ok)
	assert.Equal(t, "hit", null)
	_, ok = info.Counterfactual.NullActionOf("player")
	assert.False(t, ok, "no null action in every state")

	sc := env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return &volley{seats: []env.Seat{{ID: "a", Role: "player"}, {ID: "b", Role: "player"}}}, nil
	})
	pol := agents.Scripted(func(o *agents.Observation) string {
		if o.Agent == "b" && o.Turn == 1 {
			return "stop"
		}
		return "hit"
	})
	ep := runOne(t, sc, pol, func(s *env.Setup) { s.Limits.MaxSteps = 10 })
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	// b's null action is "hit" in waiting: it never stops, and the episode
	// runs to the step limit.
	score, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{1}, Resimulate: true})
	require.NoError(t, err)
	assert.Greater(t, score.Team, ep.Score.Team)

	bad := *info
	bad.Counterfactual = &env.CounterfactualSpec{NullActionIn: map[string]map[agents.State]string{"player": {"idle": "hit"}}}
	assert.ErrorContains(t, bad.Validate(), `null action of role "player" in state "idle", in which it does not act`)
}
