package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// scrape reads /metrics into "name{labels}" -> value, checking that every
// line is a comment or a sample.
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	a := do(t, h, "GET", rollout.PathMetrics, "")
	require.Equal(t, http.StatusOK, a.status)
	assert.Contains(t, a.header.Get("Content-Type"), "text/plain; version=0.0.4")
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(a.body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "malformed line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "line %q", line)
		_, dup := out[line[:i]]
		require.False(t, dup, "series %s written twice", line[:i])
		out[line[:i]] = v
	}
	return out
}

func TestMetricsCountWhatWasServed(t *testing.T) {
	// A policy that reports one model call per turn, failing every other
	// one, as an LLM policy would.
	// The maker's closure holds the service's counter, as troupe serve's
	// does.
	calls := &server.CallCounter{}
	made := false
	llm := func(env.PolicyRequest) (agents.Policy, error) {
		made = true
		return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			var err error
			if obs.Turn%2 == 1 {
				err = errors.New("rate limited")
			}
			calls.RecordCall(3*time.Millisecond, err)
			return agents.Action{Text: obs.Legal[0]}, nil
		}), nil
	}
	s := newServer(t, server.Config{Policies: llm, Calls: calls})
	var samples, turns, episodes int
	for range 3 {
		res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":2}`))
		for _, r := range res.Rollouts {
			episodes++
			samples += len(r.Samples)
			turns += r.Turns
		}
	}
	require.True(t, made)
	post(t, s, `{"scenario":"nope"}`)
	post(t, s, `{"scenario":"signal","n":-1}`)

	m := scrape(t, s)
	assert.Equal(t, float64(episodes), m[`troupe_episodes_total{scenario="tictactoe",status="completed"}`])
	assert.Equal(t, 0.0, m[`troupe_episodes_total{scenario="tictactoe",status="failed"}`])
	assert.Equal(t, float64(samples), m[`troupe_samples_total{scenario="tictactoe"}`])
	assert.Equal(t, float64(turns), m[`troupe_turns_total{scenario="tictactoe"}`])
	assert.Equal(t, float64(episodes), m[`troupe_episode_duration_seconds_count{scenario="tictactoe"}`])
	assert.Equal(t, float64(episodes), m[`troupe_episode_duration_seconds_bucket{scenario="tictactoe",le="+Inf"}`])
	assert.Equal(t, 3.0, m[`troupe_rollout_request_duration_seconds_count`])
	assert.Equal(t, 3.0, m[`troupe_http_requests_total{endpoint="rollouts",code="200"}`])
	assert.Equal(t, 2.0, m[`troupe_http_requests_total{endpoint="rollouts",code="400"}`])
	assert.Equal(t, 1.0, m[`troupe_errors_total{code="unknown_scenario"}`])
	assert.Equal(t, 1.0, m[`troupe_errors_total{code="bad_request"}`])

	// One more episode: its agents' odd turns report failed calls.
	var ok, failed float64
	res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","rollout_id":0}`))
	for _, sm := range res.Rollouts[0].Samples {
		if sm.Metadata.Turn%2 == 1 {
			failed++
		} else {
			ok++
		}
	}
	before := m[`troupe_llm_calls_total{result="ok"}`] + m[`troupe_llm_calls_total{result="error"}`]
	assert.Equal(t, float64(turns), before, "one call per turn")
	m2 := scrape(t, s)
	assert.Equal(t, m[`troupe_llm_calls_total{result="ok"}`]+ok, m2[`troupe_llm_calls_total{result="ok"}`])
	assert.Equal(t, m[`troupe_llm_calls_total{result="error"}`]+failed, m2[`troupe_llm_calls_total{result="error"}`])
	assert.Equal(t, float64(turns)+ok+failed, m2[`troupe_llm_call_duration_seconds_count`])
	assert.InDelta(t, (float64(turns)+ok+failed)*0.003, m2[`troupe_llm_call_duration_seconds_sum`], 1e-9)
	assert.Equal(t, 0.0, m2[`troupe_inflight_requests`])
	assert.Equal(t, 0.0, m2[`troupe_inflight_episodes`])
}
