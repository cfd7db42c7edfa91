package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/runspec"
)

// TestRequestIsARunSpec: the service logs (at debug level) each request's
// run spec, the request's fields over its own defaults, with its hash.
// The spec is data: decoded and resolved again it names the episodes the
// answer holds (their seeds and ids), with the service's episode timeout
// and turn cap, and the same request with the same ids has the same hash.
func TestRequestIsARunSpec(t *testing.T) {
	var logs bytes.Buffer
	s := newServer(t, server.Config{Seed: 3, RolloutIDBase: 50, MaxSamplesPerAnswer: 1000,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	body := `{"scenario":"tictactoe","n":3,"policies":{"x":"minimax"},"allocators":["rae:alpha=0.95","team"],"reward_format":"dict","invalid":"forfeit"}`
	res := decodeResponse(t, post(t, s, body))
	line := lastSpec(t, &logs)
	hash := line.Hash
	require.Len(t, hash, 64)
	spec, err := runspec.DecodeBytes([]byte(line.Spec))
	require.NoError(t, err)
	assert.Equal(t, hash, spec.Hash(), "the logged spec is the resolved one")
	assert.Equal(t, map[string]runspec.Policy{"x": {Name: "minimax"}, "o": {Name: "random"}}, spec.Policies)
	assert.Equal(t, []string{"rae", "team"}, spec.Allocators, "allocators by their canonical names")
	assert.Equal(t, runspec.Invalid{Mode: runspec.InvalidEnd, Penalty: -1, Bonus: 1}, spec.OnInvalid)
	assert.Equal(t, runspec.Limits{MaxTurns: 1000, Timeout: runspec.Duration(server.DefaultEpisodeTimeout)}, spec.Limits,
		"every role emitted and no turn limit: the samples limit caps the turns")
	assert.Equal(t, 3, spec.Episodes)
	assert.Equal(t, 3, spec.GroupSize, "a request is one group")
	assert.Equal(t, uint64(3), spec.Seed)
	require.NotNil(t, spec.Seeds)

	r, err := spec.Resolve(runspec.Resolvers{Scenarios: registry(t)})
	require.NoError(t, err)
	reqs := r.Requests()
	require.Len(t, reqs, len(res.Rollouts))
	for i, ro := range res.Rollouts {
		assert.Equal(t, reqs[i].RolloutID, ro.RolloutID)
		assert.Equal(t, reqs[i].GroupIndex, ro.GroupIndex)
		assert.Equal(t, reqs[i].Seed, ro.Seed)
		assert.Equal(t, reqs[i].PolicySeed, ro.PolicySeed)
	}

	// The ids and seeds are part of the run: the next request with the
	// same body is another run, the same body with the same ids the same.
	require.Equal(t, http.StatusOK, post(t, s, body).status)
	assert.NotEqual(t, hash, lastSpec(t, &logs).Hash)
	pinned := strings.Replace(body, `"n":3`, `"n":3,"rollout_id":50,"group_index":0`, 1)
	var other bytes.Buffer
	s2 := newServer(t, server.Config{Seed: 3, MaxSamplesPerAnswer: 1000,
		Logger: slog.New(slog.NewJSONHandler(&other, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.Equal(t, http.StatusOK, post(t, s2, pinned).status)
	assert.Equal(t, hash, lastSpec(t, &other).Hash)
}

type specLine struct {
	Hash string `json:"spec_hash"`
	Spec string `json:"spec"`
}

// lastSpec is the last run spec logged in logs.
func lastSpec(t *testing.T, logs *bytes.Buffer) specLine {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n"))
	var line specLine
	require.NoError(t, json.Unmarshal(lines[len(lines)-1], &line), "%s", logs.Bytes())
	return line
}
