package llm

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// arrivals records when each chat request reached a server, in virtual
// time, and injects the faults of script.
type arrivals struct {
	mu    sync.Mutex
	times []time.Time
	seeds []int64
}

func (a *arrivals) script(next llmtest.Script) llmtest.Script {
	return func(r *llmtest.Request, c llmtest.Call) llmtest.Fault {
		a.mu.Lock()
		a.times = append(a.times, time.Now())
		if r.Seed != nil {
			a.seeds = append(a.seeds, *r.Seed)
		}
		a.mu.Unlock()
		if next == nil {
			return llmtest.Fault{}
		}
		return next(r, c)
	}
}

func (a *arrivals) gaps() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(a.times); i++ {
		g = append(g, a.times[i].Sub(a.times[i-1]))
	}
	return g
}

func TestRetryAfterSecondsIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		srv := llmtest.NewServer(llmtest.Options{Script: a.script(llmtest.FailFirst(1, llmtest.Status(http.StatusServiceUnavailable, "7")))})
		cfg := testConfig(KindVLLM)
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1", "b2"))
		require.NoError(t, err)
		gaps := a.gaps()
		require.Len(t, gaps, 1)
		assert.GreaterOrEqual(t, gaps[0], 7*time.Second, "retried before Retry-After")
		assert.Less(t, gaps[0], 7*time.Second+cfg.BackoffBase, "waited longer than Retry-After plus jitter")
		assert.Equal(t, 1, turn.Notes["llm_retries"])
	})
}

func TestRetryAfterDateIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		date := func(*llmtest.Request, llmtest.Call) llmtest.Fault {
			return llmtest.Status(http.StatusTooManyRequests, time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat))
		}
		srv := llmtest.NewServer(llmtest.Options{Script: a.script(func(r *llmtest.Request, c llmtest.Call) llmtest.Fault {
			if c.Repeat == 0 {
				return date(r, c)
			}
			return llmtest.Fault{}
		})})
		cfg := testConfig(KindVLLM)
		_, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1", "b2"))
		require.NoError(t, err)
		gaps := a.gaps()
		require.Len(t, gaps, 1)
		// HTTP dates have whole seconds; the bubble's clock starts on one.
		assert.GreaterOrEqual(t, gaps[0], 30*time.Second)
		assert.Less(t, gaps[0], 30*time.Second+cfg.BackoffBase)
	})
}

func TestRetryAfterLongerThanAllowedFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.Status(http.StatusTooManyRequests, "3600"))})
		cfg := testConfig(KindVLLM)
		cfg.MaxRetryWait = time.Minute
		start := time.Now()
		_, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1"))
		require.ErrorIs(t, err, ErrRetryAfter)
		var ce *CallError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, 1, ce.Attempts)
		assert.Equal(t, http.StatusTooManyRequests, ce.Status)
		assert.Contains(t, err.Error(), "retry after 1h0m0s")
		assert.Zero(t, time.Since(start), "it must not wait before giving up")
		assert.Equal(t, 1, srv.Stats().Chat)
	})
}

func TestBackoffIsBoundedJitteredAndSeeded(t *testing.T) {
	run := func(seed uint64) []time.Duration {
		var gaps []time.Duration
		synctest.Test(t, func(t *testing.T) {
			var a arrivals
			srv := llmtest.NewServer(llmtest.Options{Script: a.script(llmtest.FailFirst(4, llmtest.InternalError))})
			cfg := testConfig(KindVLLM)
			cfg.Seed = seed
			turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(3, "a1"))
			require.NoError(t, err)
			assert.Equal(t, 4, turn.Notes["llm_retries"])
			gaps = a.gaps()
			require.Len(t, gaps, 4)
			for k, g := range gaps {
				ceil := min(cfg.BackoffBase<<k, cfg.BackoffMax)
				assert.GreaterOrEqual(t, g, time.Duration(0))
				assert.Less(t, g, ceil, "retry %d waited %v, more than its ceiling %v", k+1, g, ceil)
			}
		})
		return gaps
	}
	a, b, c := run(1), run(1), run(2)
	assert.Equal(t, a, b, "the same seed must give the same backoff")
	assert.NotEqual(t, a, c, "another seed must give another backoff")
}

func TestBackoffCeiling(t *testing.T) {
	c := &Client{cfg: testConfig(KindVLLM)}
	c.cfg.BackoffBase, c.cfg.BackoffMax = time.Second, 5*time.Second
	for attempt := range 70 { // far past the point where base<<attempt overflows
		ceil := min(time.Second<<min(attempt, 10), 5*time.Second)
		distinct := map[time.Duration]bool{}
		var sum time.Duration
		for s := range uint64(200) {
			d := c.backoff(attempt, s)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceil, "attempt %d", attempt)
			distinct[d] = true
			sum += d
		}
		assert.Len(t, distinct, 200, "full jitter should spread the waits")
		mean := sum / 200
		assert.InDelta(t, float64(ceil)/2, float64(mean), float64(ceil)/8, "attempt %d: the waits should be uniform below the ceiling", attempt)
	}
}

func TestGiveUpNamesStatusAndAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.Unavailable)})
		cfg := testConfig(KindVLLM)
		cfg.Retries = 2
		p := inProcess(t, srv, cfg)
		_, err := p.Act(t.Context(), board(1, "a1"))
		require.ErrorIs(t, err, ErrGaveUp)
		var ce *CallError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, 3, ce.Attempts)
		assert.Equal(t, http.StatusServiceUnavailable, ce.Status)
		assert.Contains(t, err.Error(), "POST http://llmtest.invalid/v1/chat/completions")
		assert.Contains(t, err.Error(), "gave up after 3 attempts")
		assert.Contains(t, err.Error(), "last status 503 Service Unavailable")
		assert.Equal(t, 3, srv.Stats().Chat)
		st := p.Client().Stats()
		assert.Equal(t, ClientStats{Calls: 1, Attempts: 3, Retries: 2, Failures: 1, MaxInFlight: 1}, st)
	})
}

func TestNonRetryableStatusIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.Status(http.StatusUnauthorized, ""))})
		_, err := inProcess(t, srv, testConfig(KindVLLM)).Act(t.Context(), board(1, "a1"))
		require.ErrorIs(t, err, ErrRejected)
		assert.Contains(t, err.Error(), "rejected at attempt 1, not retried: last status 401 Unauthorized")
		assert.Equal(t, 1, srv.Stats().Chat)
	})
}

func TestPlainTextErrorBodyIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		proxy := llmtest.Fault{Kind: llmtest.StatusCode, Status: http.StatusBadGateway, Body: "<html>bad gateway</html>"}
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.FailFirst(1, proxy)})
		turn, err := inProcess(t, srv, testConfig(KindVLLM)).Act(t.Context(), board(1, "a1"))
		require.NoError(t, err)
		assert.Equal(t, 1, turn.Notes["llm_retries"])
	})
}

func TestBrokenAnswersAreRetried(t *testing.T) {
	for _, f := range []llmtest.Fault{llmtest.MalformedJSON, llmtest.NoChoices, llmtest.TruncatedBody, llmtest.InternalError, llmtest.RateLimited, llmtest.Status(http.StatusBadGateway, ""), llmtest.Status(http.StatusRequestTimeout, "")} {
		t.Run(f.Name(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := llmtest.NewServer(llmtest.Options{Script: llmtest.FailFirst(2, f)})
				turn, err := inProcess(t, srv, testConfig(KindVLLM)).Act(t.Context(), board(1, "a1", "b2"))
				require.NoError(t, err)
				assert.Equal(t, 2, turn.Notes["llm_retries"])
				assert.NotNil(t, turn.Generation.Tokens)
				assert.Equal(t, 2, srv.Stats().Faults[f.Name()])
			})
		})
	}
}

func TestBrokenAnswersGiveUpWithTheirCause(t *testing.T) {
	for _, tc := range []struct {
		fault llmtest.Fault
		cause error
		text  string
	}{
		{llmtest.MalformedJSON, ErrMalformed, "malformed answer"},
		{llmtest.NoChoices, ErrEmptyChoices, "no choices"},
		{llmtest.TruncatedBody, nil, "unexpected EOF"},
	} {
		t.Run(tc.fault.Name(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(tc.fault)})
				cfg := testConfig(KindVLLM)
				cfg.Retries = 1
				_, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1"))
				require.ErrorIs(t, err, ErrGaveUp)
				if tc.cause != nil {
					require.ErrorIs(t, err, tc.cause)
				}
				assert.Contains(t, err.Error(), tc.text)
			})
		})
	}
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.FailFirst(1, llmtest.HangFault)})
		cfg := testConfig(KindVLLM)
		start := time.Now()
		turn, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1"))
		require.NoError(t, err)
		elapsed := time.Since(start)
		assert.GreaterOrEqual(t, elapsed, cfg.Timeout)
		assert.Less(t, elapsed, cfg.Timeout+cfg.BackoffBase)
		assert.Equal(t, 1, turn.Notes["llm_retries"])
	})
}

func TestHangingServerTimesOutEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.HangFault)})
		cfg := testConfig(KindVLLM)
		cfg.Retries = 1
		_, err := inProcess(t, srv, cfg).Act(t.Context(), board(1, "a1"))
		require.ErrorIs(t, err, ErrGaveUp)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "attempt timed out after 10s")
	})
}

func TestEpisodeDeadlineEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Script: llmtest.Always(llmtest.HangFault)})
		cfg := testConfig(KindVLLM)
		cfg.Retries = 100
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
		defer cancel()
		start := time.Now()
		_, err := inProcess(t, srv, cfg).Act(ctx, board(1, "a1"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrGaveUp)
		assert.Equal(t, 25*time.Second, time.Since(start), "the call must end exactly at the episode's deadline")
	})
}

func TestInFlightBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Latency: time.Second})
		cfg := testConfig(KindVLLM)
		cfg.MaxInFlight = 3
		p := inProcess(t, srv, cfg)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				_, err := p.Act(t.Context(), board(uint64(i), "a1", "b2"))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 3, srv.Stats().MaxInFlight)
		assert.Equal(t, int64(3), p.Client().Stats().MaxInFlight)
		assert.Equal(t, 4*time.Second, time.Since(start), "10 calls of 1 s, 3 at a time, take 4 rounds")
	})
}

func TestQueueIsFirstComeFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a arrivals
		srv := llmtest.NewServer(llmtest.Options{Latency: time.Second, Script: a.script(nil)})
		cfg := testConfig(KindVLLM)
		cfg.MaxInFlight = 1
		p := inProcess(t, srv, cfg)
		var wg sync.WaitGroup
		var want []int64
		for i := range 8 {
			seed := uint64(100 - i) // queue order differs from seed order
			want = append(want, int64(requestSeed(seed, 0)))
			wg.Go(func() {
				_, err := p.Act(t.Context(), board(seed, "a1"))
				assert.NoError(t, err)
			})
			synctest.Wait() // the goroutine is now queued (or served)
		}
		wg.Wait()
		assert.Equal(t, want, a.seeds)
	})
}

func TestCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Latency: time.Hour})
		cfg := testConfig(KindVLLM)
		cfg.MaxInFlight = 1
		cfg.Timeout = 2 * time.Hour
		p := inProcess(t, srv, cfg)
		holder, stop := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { _, err := p.Act(holder, board(1, "a1")); done <- err }()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err := p.Act(ctx, board(2, "a1"))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, 1, srv.Stats().Chat, "the queued call must not reach the server")
		stop()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{" 12 ", 12 * time.Second, true},
		{"-3", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"99999999999999999", time.Duration(1 << 62), true},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Retry-After", tc.header)
		}
		got, ok := retryAfter(h, now)
		assert.Equal(t, tc.ok, ok, "%q", tc.header)
		assert.Equal(t, tc.want, got, "%q", tc.header)
	}
}

func TestSplice(t *testing.T) {
	got, err := splice([]byte(`{"model":"m"}`), []byte(`"temperature":0`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","temperature":0}`, string(got))
	got, err = splice([]byte("{ }\n"), []byte(`"a":1,"b":true`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":1,"b":true}`, string(got))
	_, err = splice([]byte(`[1]`), []byte(`"a":1`))
	require.ErrorIs(t, err, ErrRejected)
}

func TestCallErrorUnwraps(t *testing.T) {
	last := errors.New("boom")
	err := error(&CallError{Op: "POST u", Attempts: 2, Err: last, reason: ErrGaveUp})
	assert.ErrorIs(t, err, ErrGaveUp)
	assert.ErrorIs(t, err, last)
	assert.Equal(t, "llm: POST u: gave up after 2 attempts: boom", err.Error())
}
