package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/client"
	"github.com/troupe-rl/troupe/rollout/server"
)

func start(t *testing.T, cfg server.Config) (*server.Server, *httptest.Server) {
	t.Helper()
	s, err := server.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func ptr[T any](v T) *T { return &v }

func TestRollouts(t *testing.T) {
	// The service's policies see the sampling parameters as the caller
	// set them: an explicit temperature 0 (greedy) must arrive as 0, not
	// as absent, in the settings of the role's policy in the run spec.
	var mu sync.Mutex
	var seen []json.RawMessage
	_, ts := start(t, server.Config{Token: "tok-0123456789abcdef",
		PolicySettings: func(_, _ string, req *rollout.Request) (json.RawMessage, error) { return json.Marshal(req.Sampling) },
		Policies: func(req env.PolicyRequest) (agents.Policy, error) {
			if req.Name != "sampled" {
				return nil, env.ErrUnknownPolicy
			}
			mu.Lock()
			seen = append(seen, req.Settings)
			mu.Unlock()
			req.Name, req.Settings = "scripted", nil
			return req.Scenario.Info().MakePolicy(req)
		}})
	c, err := client.New(ts.URL, client.WithToken("tok-0123456789abcdef"))
	require.NoError(t, err)

	res, err := c.Rollouts(context.Background(), &rollout.Request{
		Scenario:   "signal",
		Params:     rollout.Params{"candidates": "3", "attributes": "1"},
		N:          2,
		RolloutID:  ptr(int64(40)),
		Policy:     "sampled",
		Sampling:   &protocol.Sampling{Temperature: ptr(0.0), MaxTokens: ptr(64)},
		Allocators: []string{"team"},
	})
	require.NoError(t, err)
	require.Len(t, res.Rollouts, 2)
	assert.Positive(t, res.EpisodeTime)
	for i, r := range res.Rollouts {
		assert.Equal(t, int64(40+i), r.RolloutID)
		assert.Equal(t, protocol.StatusCompleted, r.Status)
		// With one attribute every candidate has a value of its own: the
		// scripted speaker's word always singles out the target.
		assert.Equal(t, 1.0, r.TeamReward)
		require.NoError(t, protocol.ValidateRollout(r.Samples))
	}
	assert.Len(t, res.Samples(), len(res.Rollouts[0].Samples)+len(res.Rollouts[1].Samples))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "one policy per role and request")
	for _, settings := range seen {
		assert.JSONEq(t, `{"temperature":0,"max_tokens":64}`, string(settings))
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, ts := start(t, server.Config{Token: "tok-0123456789abcdef"})
	c, err := client.New(ts.URL, client.WithToken("tok-0123456789abcdef"))
	require.NoError(t, err)
	_, err = c.Rollouts(context.Background(), &rollout.Request{Scenario: "chess"})
	require.ErrorIs(t, err, rollout.CodeUnknownScenario)
	var e *rollout.Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, http.StatusBadRequest, e.Status)
	assert.Contains(t, e.Message, "chess")

	anon, err := client.New(ts.URL)
	require.NoError(t, err)
	_, err = anon.Scenarios(context.Background())
	require.ErrorIs(t, err, rollout.CodeUnauthorized)
}

func TestListingsAndHealth(t *testing.T) {
	s, ts := start(t, server.Config{})
	c, err := client.New(ts.URL + "/")
	require.NoError(t, err)
	ctx := context.Background()

	list, err := c.Scenarios(ctx)
	require.NoError(t, err)
	var names []string
	for _, sc := range list.Scenarios {
		names = append(names, sc.Name)
	}
	assert.Contains(t, names, "tictactoe")
	allocs, err := c.Allocators(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, allocs.Allocators)

	h, err := c.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, rollout.HealthServing, h)
	require.NoError(t, s.Shutdown(ctx))
	h, err = c.Health(ctx)
	require.NoError(t, err)
	assert.Equal(t, rollout.HealthDraining, h)
	_, err = c.Rollouts(ctx, &rollout.Request{Scenario: "tictactoe"})
	require.ErrorIs(t, err, rollout.CodeShuttingDown)
}

func TestErrorsWithoutAJSONBody(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream is down", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	c, err := client.New(proxy.URL)
	require.NoError(t, err)
	_, err = c.Rollouts(context.Background(), &rollout.Request{Scenario: "tictactoe"})
	var e *rollout.Error
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, http.StatusBadGateway, e.Status)
	assert.Contains(t, e.Message, "upstream is down")
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8377", "ftp://host", "http://", "http://[::1"} {
		_, err := client.New(u)
		require.ErrorIs(t, err, client.ErrBadURL, "%q", u)
	}
}

func TestAnswerLimitsAndAllocationOrder(t *testing.T) {
	_, ts := start(t, server.Config{MaxSamplesPerAnswer: 4, MaxAnswerBytes: 3000})
	c, err := client.New(ts.URL)
	require.NoError(t, err)
	_, err = c.Rollouts(context.Background(), &rollout.Request{Scenario: "tictactoe"})
	require.ErrorIs(t, err, rollout.CodeTooManySamples, "tic-tac-toe takes at least five turns")
	var e *rollout.Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, http.StatusUnprocessableEntity, e.Status)

	_, err = c.Rollouts(context.Background(), &rollout.Request{Scenario: "signal", N: 2, Label: []byte(`"` + strings.Repeat("x", 3000) + `"`)})
	require.ErrorIs(t, err, rollout.CodeAnswerTooLarge)

	for want := uint64(1); want <= 3; want++ {
		res, err := c.Rollouts(context.Background(), &rollout.Request{Scenario: "signal", Allocators: []string{"rae"}})
		require.NoError(t, err)
		assert.Equal(t, want, res.AllocationSeq)
	}
	res, err := c.Rollouts(context.Background(), &rollout.Request{Scenario: "signal"})
	require.NoError(t, err)
	assert.Zero(t, res.AllocationSeq, "team keeps no state")
}
