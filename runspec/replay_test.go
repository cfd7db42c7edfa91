package runspec_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestReplayPolicy: the replay policy plays recorded moves by agent and
// turn: a run of it writes the episode the moves' own run wrote, and bad
// settings or missing moves are refused by name.
func TestReplayPolicy(t *testing.T) {
	reg := runspec.Resolvers{Scenarios: scenarios.Builtin()}
	run := func(spec runspec.Spec) (string, error) {
		res, err := spec.Resolve(reg)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		_, err = play.Run(t.Context(), res.Config, res.Output(trajectories.NewEpisodeWriter(&b)))
		return b.String(), err
	}
	// The moves of minimax against center-first, read from their record.
	played := runspec.Spec{Scenario: "tictactoe", Episodes: 1, Seed: 4, Policies: map[string]runspec.Policy{"x": {Name: "minimax"}, "o": {Name: "center-first"}}}
	res, err := played.Resolve(reg)
	require.NoError(t, err)
	req := res.Config.Request(0)
	rec := env.NewEngine().Run(t.Context(), env.Setup{Play: res.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed})
	moves := map[string][]string{}
	for _, turn := range rec.Turns {
		id := rec.Seats[turn.Seat].ID
		moves[id] = append(moves[id], turn.Action)
	}
	settings, err := json.Marshal(map[string]any{"moves": moves})
	require.NoError(t, err)
	replay := played
	replay.Policies = map[string]runspec.Policy{"x": {Name: runspec.ReplayPolicy, Settings: settings}, "o": {Name: runspec.ReplayPolicy, Settings: settings}}
	want, err := run(played)
	require.NoError(t, err)
	got, err := run(replay)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	bad := played
	bad.Policies = map[string]runspec.Policy{"x": {Name: runspec.ReplayPolicy, Settings: json.RawMessage(`{"move":{}}`)}}
	_, err = bad.Resolve(reg)
	require.ErrorIs(t, err, runspec.ErrBadSpec)
	assert.Contains(t, err.Error(), `{"moves": {AGENT: [MOVE, ...]}}`)

	short := played
	short.Policies = map[string]runspec.Policy{"x": {Name: runspec.ReplayPolicy, Settings: json.RawMessage(`{"moves":{"x":["b2"]}}`)}}
	res, err = short.Resolve(reg)
	require.NoError(t, err)
	rec = env.NewEngine().Run(t.Context(), env.Setup{Play: res.Config.Play})
	assert.Equal(t, "aborted", string(rec.Status))
	assert.Contains(t, rec.Err, agents.ErrReplayExhausted.Error())

	// With "then", that policy plays on once the moves run out, and for
	// the agents the moves do not name.
	then := played
	then.Policies = map[string]runspec.Policy{"x": {Name: runspec.ReplayPolicy, Settings: json.RawMessage(`{"moves":{"x":["b2"]},"then":"random"}`)},
		"o": {Name: runspec.ReplayPolicy, Settings: json.RawMessage(`{"moves":{},"then":"random"}`)}}
	res, err = then.Resolve(reg)
	require.NoError(t, err)
	rec = env.NewEngine().Run(t.Context(), env.Setup{Play: res.Config.Play})
	assert.Equal(t, "completed", string(rec.Status), rec.Err)
	assert.Equal(t, "b2", rec.Turns[0].Action)

	unknown := played
	unknown.Policies = map[string]runspec.Policy{"x": {Name: runspec.ReplayPolicy, Settings: json.RawMessage(`{"moves":{},"then":"bogus"}`)}}
	_, err = unknown.Resolve(reg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "then")
	assert.Contains(t, err.Error(), "bogus")
}
