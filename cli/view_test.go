package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the command and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestViewServesExportsAndRefuses(t *testing.T) {
	dir := t.TempDir()
	samples, records := filepath.Join(dir, "s.jsonl"), filepath.Join(dir, "e.jsonl")
	run := func(ctx context.Context, args ...string) (int, string, string) {
		var stdout, stderr syncBuffer
		app := New(&stdout, &stderr)
		app.Terminal = func(io.Writer) bool { return false }
		code := app.Main(ctx, args)
		return code, stdout.String(), stderr.String()
	}
	code, _, stderr := run(context.Background(), "run", "signal", "-n", "3", "-q", "-o", samples, "--episodes-out", records)
	require.Equal(t, ExitOK, code, stderr)

	code, _, stderr = run(context.Background(), "view")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "at least one file")
	code, _, stderr = run(context.Background(), "view", filepath.Join(dir, "missing.jsonl"))
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, stderr, "missing.jsonl")
	code, _, stderr = run(context.Background(), "view", "--addr", "0.0.0.0:0", records)
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "needs a token")

	site := filepath.Join(dir, "site")
	code, _, stderr = run(context.Background(), "view", "--export", site, "--export-max", "2", records, samples)
	require.Equal(t, ExitOK, code, stderr)
	for _, p := range []string{"index.html", "run-0/index.html", "run-1/episodes.html", "run-0/ep-1.html", "compare-0-1.html", "assets/app.js"} {
		assert.FileExists(t, filepath.Join(site, p))
	}
	assert.NoFileExists(t, filepath.Join(site, "run-0/ep-2.html"), "--export-max 2")
	page, err := os.ReadFile(filepath.Join(site, "run-0/ep-1.html"))
	require.NoError(t, err)
	assert.NotContains(t, string(page), `href="ep-2.html"`, "no link to a page not exported")

	// Serving: the URL on stdout answers; cancelling stops it with 0.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, errs syncBuffer
	app := New(&stdout, &errs)
	done := make(chan int, 1)
	go func() { done <- app.Main(ctx, []string{"view", records}) }()
	var url string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && url == ""; time.Sleep(20 * time.Millisecond) {
		url = strings.TrimSpace(stdout.String())
	}
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), "printed %q; stderr %s", url, errs.String())
	resp, err := http.Get(url + "run-0/episodes.html")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "episodes-body")
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code, errs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("troupe view did not stop when cancelled")
	}
}
