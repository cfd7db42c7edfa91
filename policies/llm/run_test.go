package llm_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
)

// game is a run to play against a test server.
type game struct {
	scenario    env.Scenario
	params      map[string]string
	episodes    int
	concurrency int
	limits      env.Limits
	timeout     time.Duration
	invalid     env.InvalidRule
}

func ticTacToe(episodes, concurrency int) game {
	return game{scenario: tictactoe.New(), episodes: episodes, concurrency: concurrency}
}

func elFarol(episodes, concurrency int) game {
	return game{scenario: elfarol.New(), params: map[string]string{"agents": "6", "nights": "3", "capacity": "2"}, episodes: episodes, concurrency: concurrency}
}

// result is what a run wrote.
type result struct {
	sum      play.Summary
	err      error
	episodes []*trajectories.Episode
	jsonl    []byte
}

// playGame runs g with policy p and keeps everything it wrote.
func playGame(t *testing.T, ctx context.Context, p *llm.Policy, g game) result {
	t.Helper()
	params, err := g.scenario.Info().ParseParams(g.params)
	require.NoError(t, err)
	var buf bytes.Buffer
	var col trajectories.Collector
	w := trajectories.NewJSONLWriter(&buf, trajectories.Flat)
	sum, err := play.Run(ctx, play.Config{
		Play: env.Play{Scenario: g.scenario, Params: params, Policy: env.SamePolicy(p), Limits: g.limits, Invalid: g.invalid}, Drive: env.Drive{Timeout: g.timeout, ParallelPolicies: true},
		Episodes:    g.episodes,
		Concurrency: g.concurrency,
		Seed:        11,
	}, &trajectories.Output{Sink: trajectories.Tee(&col, w)})
	return result{sum: sum, err: err, episodes: col.Episodes(), jsonl: buf.Bytes()}
}

// checkWhole asserts that nothing was lost or duplicated: every episode is
// written once, with valid samples, one per turn (an episode without a
// turn as one placeholder), numbered without gaps, and the JSONL holds
// exactly those samples.
func checkWhole(t *testing.T, r result, episodes int) {
	t.Helper()
	require.NoError(t, r.err)
	require.Equal(t, episodes, r.sum.Episodes)
	require.Len(t, r.episodes, episodes)
	var ids []int64
	var index int64
	for _, ep := range r.episodes {
		ids = append(ids, ep.RolloutID)
		require.NoError(t, protocol.ValidateRollout(ep.Samples), "episode %d", ep.Index)
		if len(ep.Turns) == 0 {
			require.Len(t, ep.Samples, 1, "episode %d: a placeholder", ep.Index)
			require.True(t, trajectories.IsPlaceholder(&ep.Samples[0]), "episode %d: a placeholder", ep.Index)
			require.Equal(t, string(ep.Status), ep.Samples[0].Metadata.Extra["troupe_status"])
			require.Equal(t, index, ep.Samples[0].Index)
			index++
			continue
		}
		require.Len(t, ep.Samples, len(ep.Turns), "episode %d: one sample per turn", ep.Index)
		for _, s := range ep.Samples {
			require.Equal(t, index, s.Index)
			require.Equal(t, ep.Status, s.Status)
			index++
		}
	}
	for i, id := range ids {
		require.Equal(t, int64(i), id, "rollout ids must be 0..n-1, each once")
	}
	read, err := trajectories.ReadAll(bytes.NewReader(r.jsonl))
	require.NoError(t, err)
	require.Len(t, read, int(index))
	require.Equal(t, r.sum.Samples, index)
}

// survivable are faults a client with retries gets through. Each hits
// about a third of the distinct requests, once.
func survivable(retryAfterSecs string) []llmtest.Fault {
	return []llmtest.Fault{
		llmtest.InternalError,
		llmtest.Unavailable,
		llmtest.Status(http.StatusServiceUnavailable, retryAfterSecs),
		llmtest.Status(http.StatusTooManyRequests, retryAfterSecs),
		{Kind: llmtest.StatusCode, Status: http.StatusBadGateway, Body: "<html>bad gateway</html>"},
		llmtest.MalformedJSON,
		llmtest.NoChoices,
		llmtest.TruncatedBody,
		llmtest.HangFault,
		llmtest.WrongSchema,
		llmtest.MissingIDs,
	}
}

func faultName(f llmtest.Fault) string {
	if f.RetryAfter != "" {
		return f.Name() + " retry-after " + f.RetryAfter
	}
	if f.Body != "" && f.Kind == llmtest.StatusCode {
		return f.Name() + " text body"
	}
	return f.Name()
}

func runConfig(kind llm.Kind) llm.Config {
	cfg := llm.DefaultConfig()
	cfg.Kind = kind
	cfg.Model = "test-model"
	cfg.Temperature = ptr(0.0)
	cfg.BackoffBase = time.Millisecond
	cfg.BackoffMax = 10 * time.Millisecond
	// Long enough for a loaded CI machine to answer, short enough that
	// the hang fault's timeouts keep the test quick.
	cfg.Timeout = 500 * time.Millisecond
	return cfg
}

// TestFaultsOverNetwork plays whole runs against a server on 127.0.0.1
// that injects each fault, and checks that every run finishes whole and
// that no goroutine is left behind.
func TestFaultsOverNetwork(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, f := range survivable("0") {
		t.Run(faultName(f), func(t *testing.T) {
			every := 3
			if f.Kind == llmtest.Hang {
				every = 8 // each costs a timeout in real time
			}
			srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.SGLang, Script: llmtest.Sometimes(every, llmtest.FailFirst(1, f))})
			cfg := runConfig(llm.KindSGLang)
			cfg.BaseURL = srv.URL()
			p, err := llm.New(cfg, llm.WithScenario(tictactoe.New().Info()))
			require.NoError(t, err)
			defer p.Client().Close()
			// 12 games: about 90 requests, a fault in every third (and a
			// hang in every eighth): each fault is met many times over.
			r := playGame(t, t.Context(), p, ticTacToe(12, 6))
			checkWhole(t, r, 12)
			assert.Equal(t, 12, r.sum.ByStatus[protocol.StatusCompleted])
			assert.Positive(t, srv.Stats().Faults[f.Name()], "the fault was never injected")
			if f.Kind == llmtest.NoTokenIDs {
				assert.True(t, slices.ContainsFunc(r.episodes, hasTextOnly), "some samples should be text-only")
			}
		})
	}
	waitGoroutines(t, base)
}

// waitGoroutines waits until the goroutines that closed connections and
// servers leave behind have exited, and fails if some never do.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if runtime.NumGoroutine() <= base {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines left behind: %d, started with %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
}

func hasTextOnly(ep *trajectories.Episode) bool {
	return slices.ContainsFunc(ep.Samples, func(s protocol.Sample) bool { return s.Metadata.TextOnly })
}

// TestFaultsInVirtualTime plays the same runs through the in-process
// transport in a synctest bubble, where Retry-After waits of seconds and
// hangs cost nothing; the bubble also fails the test if any goroutine
// outlives the run.
func TestFaultsInVirtualTime(t *testing.T) {
	faults := append(survivable("7"), llmtest.Fault{Kind: llmtest.StatusCode, Status: http.StatusTooManyRequests, RetryAfter: "Sat, 01 Jan 2000 00:00:30 GMT"})
	for _, f := range faults {
		t.Run(faultName(f), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Latency: 50 * time.Millisecond, Script: llmtest.Sometimes(3, llmtest.FailFirst(1, f))})
				cfg := runConfig(llm.KindVLLM)
				cfg.BaseURL = "http://llmtest.invalid/v1"
				cfg.Timeout = 10 * time.Second
				c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
				require.NoError(t, err)
				p, err := llm.NewPolicy(c, cfg)
				require.NoError(t, err)
				for _, g := range []game{ticTacToe(8, 4), elFarol(4, 4)} {
					r := playGame(t, t.Context(), p, g)
					checkWhole(t, r, g.episodes)
					assert.Equal(t, g.episodes, r.sum.ByStatus[protocol.StatusCompleted])
				}
				assert.Positive(t, srv.Stats().Faults[f.Name()])
			})
		})
	}
}

// TestUnrecoverableFaultsAbortEpisodes: a server that keeps failing part
// of the requests aborts the episodes that need them; the run still
// finishes and writes every episode, the failed ones with their error.
func TestUnrecoverableFaultsAbortEpisodes(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Script: llmtest.Sometimes(4, llmtest.Always(llmtest.Unavailable))})
	cfg := runConfig(llm.KindVLLM)
	cfg.BaseURL = srv.URL()
	cfg.Retries = 1
	p, err := llm.New(cfg)
	require.NoError(t, err)
	defer p.Client().Close()
	r := playGame(t, t.Context(), p, ticTacToe(32, 8))
	checkWhole(t, r, 32)
	aborted := r.sum.ByStatus[protocol.StatusAborted]
	assert.Positive(t, aborted)
	assert.Positive(t, r.sum.ByStatus[protocol.StatusCompleted])
	assert.Equal(t, 32, aborted+r.sum.ByStatus[protocol.StatusCompleted])
	withSamples := 0
	for _, ep := range r.episodes {
		if ep.Status != protocol.StatusAborted {
			continue
		}
		assert.Equal(t, env.EndPolicyError, ep.End)
		assert.Contains(t, ep.Err, "gave up after 2 attempts")
		assert.Contains(t, ep.Err, "last status 503 Service Unavailable")
		for _, s := range ep.Samples {
			withSamples++
			assert.Equal(t, ep.Err, s.Metadata.Error)
			assert.Equal(t, protocol.StatusAborted, s.Status)
		}
	}
	assert.Positive(t, withSamples, "some aborted episodes should have played turns before failing")
}

// TestHangingServerTruncatesEpisodes: a server that stops answering part
// of the requests runs the episodes that need them into their deadline:
// they end truncated, and their earlier turns are kept.
func TestHangingServerTruncatesEpisodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One request body in 8 hangs: an episode's seven requests are all
		// distinct (each prompt holds the agent's conversation so far), so
		// about a third of the episodes meet none.
		srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Script: llmtest.Sometimes(8, llmtest.Always(llmtest.HangFault))})
		cfg := runConfig(llm.KindVLLM)
		cfg.BaseURL = "http://llmtest.invalid/v1"
		cfg.Timeout = time.Minute
		cfg.Retries = 100
		c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
		require.NoError(t, err)
		p, err := llm.NewPolicy(c, cfg)
		require.NoError(t, err)
		g := ticTacToe(16, 4)
		g.timeout = 30 * time.Second
		start := time.Now()
		r := playGame(t, t.Context(), p, g)
		checkWhole(t, r, 16)
		truncated := 0
		for _, ep := range r.episodes {
			if ep.Status == protocol.StatusTruncated {
				truncated++
				assert.Equal(t, env.EndDeadline, ep.End)
			}
		}
		assert.Positive(t, truncated)
		assert.Positive(t, r.sum.ByStatus[protocol.StatusCompleted])
		assert.LessOrEqual(t, time.Since(start), 4*30*time.Second, "at most 16/4 rounds of episodes that each end by their 30 s deadline")
	})
}

func TestInvalidAnswersUnderInvalidRules(t *testing.T) {
	for _, tc := range []struct {
		rule  env.InvalidRule
		end   string
		score []float64
	}{
		{env.Forfeit, env.EndInvalid, []float64{-1, 1}},
		{env.SpiralPenalty, env.EndInvalid, []float64{-1.5, 0.5}},
		{env.InvalidRule{}, env.EndTerminated, []float64{-1, 1}}, // tictactoe's own rule: forfeit
	} {
		t.Run(tc.end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.Text(`{"action":"zz"}`))})
				cfg := runConfig(llm.KindVLLM)
				cfg.BaseURL = "http://llmtest.invalid/v1"
				cfg.InvalidRetries = 1
				c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
				require.NoError(t, err)
				p, err := llm.NewPolicy(c, cfg)
				require.NoError(t, err)
				g := ticTacToe(4, 2)
				g.invalid = tc.rule
				r := playGame(t, t.Context(), p, g)
				checkWhole(t, r, 4)
				for _, ep := range r.episodes {
					assert.Equal(t, tc.end, ep.End)
					assert.Equal(t, tc.score, ep.Score.Agents)
					require.Len(t, ep.Samples, 1)
					s := ep.Samples[0]
					assert.Equal(t, `{"action":"zz"}`, s.Response, "the response is what the model wrote")
					assert.Equal(t, "zz", s.Metadata.Action, "the move the game read")
					assert.Contains(t, s.Metadata.Extra["invalid"], `"zz" is not a legal action`)
					assert.False(t, s.Metadata.TextOnly, "an invalid answer keeps its tokens")
				}
				assert.Equal(t, 4*2, srv.Stats().Chat, "each episode asks once and re-asks once")
			})
		})
	}
}

// TestDeterminism: the same server answers give byte-identical output at
// concurrency 1 and 8, faults keyed on request content included.
func TestDeterminism(t *testing.T) {
	for _, tc := range []struct {
		name   string
		game   func(concurrency int) game
		script llmtest.Script
	}{
		// More episodes than the 8 played at once: their answers arrive
		// in any order, and the output must not show it.
		{"tictactoe", func(c int) game { return ticTacToe(12, c) }, nil},
		{"elfarol", func(c int) game { return elFarol(10, c) }, nil},
		{"tictactoe with faults", func(c int) game { return ticTacToe(12, c) }, llmtest.Sometimes(3, llmtest.FailFirst(1, llmtest.InternalError))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var outputs [][]byte
			for _, conc := range []int{1, 8} {
				srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp, Script: tc.script})
				cfg := runConfig(llm.KindLlamaCpp)
				cfg.BaseURL = srv.URL()
				// No fault here hangs: an attempt's deadline that fired on a
				// loaded machine would retry it, and the retry shows in the
				// samples' metadata (llm_retries), so the output would
				// depend on the machine's speed.
				cfg.Timeout = 5 * time.Minute
				p, err := llm.New(cfg)
				require.NoError(t, err)
				r := playGame(t, t.Context(), p, tc.game(conc))
				p.Client().Close()
				g := tc.game(conc)
				checkWhole(t, r, g.episodes)
				require.False(t, slices.ContainsFunc(r.episodes, hasTextOnly), "llama.cpp samples should carry tokens")
				outputs = append(outputs, r.jsonl)
			}
			require.NotEmpty(t, outputs[0])
			assert.True(t, bytes.Equal(outputs[0], outputs[1]), "output differs between concurrency 1 and 8")
		})
	}
}

// TestSlowServerBoundsRequests: many episodes against a slow server keep
// no more requests in flight than the client allows.
func TestSlowServerBoundsRequests(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Latency: 20 * time.Millisecond})
	cfg := runConfig(llm.KindVLLM)
	cfg.BaseURL = srv.URL()
	cfg.MaxInFlight = 4
	cfg.Timeout = 10 * time.Second
	p, err := llm.New(cfg)
	require.NoError(t, err)
	defer p.Client().Close()
	r := playGame(t, t.Context(), p, elFarol(8, 8))
	checkWhole(t, r, 8)
	assert.Equal(t, 4, srv.Stats().MaxInFlight)
	assert.Equal(t, int64(4), p.Client().Stats().MaxInFlight)
}

// TestInterruptedRun: cancelling a run mid-way ends its calls at once; the
// run writes only whole episodes.
func TestInterruptedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Latency: time.Second})
		cfg := runConfig(llm.KindVLLM)
		cfg.BaseURL = "http://llmtest.invalid/v1"
		cfg.Timeout = time.Minute
		c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
		require.NoError(t, err)
		p, err := llm.NewPolicy(c, cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(20*time.Second+time.Second/2, cancel)
		r := playGame(t, ctx, p, ticTacToe(64, 4))
		require.ErrorIs(t, r.err, context.Canceled)
		assert.Positive(t, r.sum.Interrupted)
		assert.Positive(t, r.sum.Episodes)
		assert.Less(t, r.sum.Episodes+r.sum.Interrupted, 64, "no episode starts after the cancellation")
		for _, ep := range r.episodes {
			assert.Equal(t, protocol.StatusCompleted, ep.Status)
			require.NoError(t, protocol.ValidateRollout(ep.Samples))
		}
	})
}

func ptr[T any](v T) *T { return &v }
