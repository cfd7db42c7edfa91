package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// logBuffer is a log sink safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

func TestDrainAnswersKeptAliveConnections(t *testing.T) {
	logs := &logBuffer{}
	g := newGate()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := newServer(t, server.Config{Policies: factory(g), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	// The caller's client keeps its connection alive between requests.
	keep := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer keep.CloseIdleConnections()
	resp, err := keep.Get(base + rollout.PathHealth)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A request in flight holds the drain open.
	other := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	inflight := make(chan int, 1)
	go func() {
		resp, err := other.Post(base+rollout.PathRollouts, "application/json", strings.NewReader(`{"scenario":"tictactoe"}`))
		if !assert.NoError(t, err) {
			inflight <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	<-g.entered

	cancel() // SIGTERM in the CLI
	for {
		resp, err := other.Get(base + rollout.PathHealth)
		require.NoError(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
	}

	const refused = 25
	for i := range refused {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			http.MethodPost, base+rollout.PathRollouts, strings.NewReader(`{"scenario":"tictactoe","n":2}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := keep.Do(req)
		require.NoError(t, err, "request %d gets an answer, not a reset", i)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "request %d: the whole answer", i)
		require.NoError(t, resp.Body.Close())
		if i == 0 {
			assert.True(t, reused, "the first one came on the kept-alive connection")
		}
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.True(t, resp.Close, "the answer closes the connection")
		var eb rollout.ErrorBody
		require.NoError(t, json.Unmarshal(body, &eb), "%s", body)
		require.NotNil(t, eb.Error)
		assert.Equal(t, rollout.CodeShuttingDown, eb.Error.Code)
	}

	close(g.open)
	assert.Equal(t, http.StatusOK, <-inflight, "the request in flight finishes")
	require.NoError(t, <-served)

	var refusals int
	for _, line := range logs.lines() {
		assert.NotContains(t, line, "level=ERROR", "a drain is no error")
		if strings.Contains(line, "the service is draining") {
			refusals++
			assert.Contains(t, line, "level=INFO")
		}
	}
	assert.Equal(t, refused, refusals, "one info line per refused request")
}
