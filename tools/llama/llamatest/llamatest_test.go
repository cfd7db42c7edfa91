package llamatest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// fakeEnv makes the test binary itself play llama-server: the fake tests
// pass os.Args[0] as the server, so Start's process handling is tested
// without the real build.
const fakeEnv = "LLAMATEST_FAKE"

// shared is the real server of the tests that need no options of their
// own (real_test.go).
var shared llamatest.Shared

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fake(mode, os.Args[1:]))
	}
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// fake serves /health on the --port it is given: 503 for the first three
// requests (a model still loading), then 200. Mode "exit" fails at once,
// as a server that lost its port would; mode "chatty" logs 4,000 lines
// first.
func fake(mode string, args []string) int {
	port := ""
	for i, a := range args {
		if a == "--port" && i+1 < len(args) {
			port = args[i+1]
		}
	}
	if mode == "exit" || port == "" {
		fmt.Fprintln(os.Stderr, "fake llama-server: couldn't bind HTTP server socket")
		return 3
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return 4
	}
	if mode == "chatty" {
		for i := range 4000 {
			fmt.Fprintf(os.Stderr, "line %d\n", i)
		}
	}
	fmt.Fprintln(os.Stderr, "fake llama-server: listening")
	polls := 0
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		if polls++; polls <= 3 {
			http.Error(w, `{"error":{"code":503,"message":"Loading model"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"status":"ok"}`)
	}))
	return 0
}

func fakeModel(t *testing.T) string {
	t.Helper()
	model := filepath.Join(t.TempDir(), "model.gguf")
	require.NoError(t, os.WriteFile(model, []byte("GGUF"), 0o644))
	return model
}

func TestPaths(t *testing.T) {
	for _, k := range []string{llamatest.EnvServer, llamatest.EnvModel, llamatest.EnvDir, llamatest.EnvCache} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", "/home/u")
	server, model, err := llamatest.Paths()
	require.NoError(t, err)
	assert.Equal(t, "/home/u/.cache/troupe/llama/llama-server", server)
	assert.Equal(t, "/home/u/.cache/troupe/llama/tiny-qwen2.gguf", model)

	t.Setenv(llamatest.EnvCache, "/ci/cache")
	server, _, err = llamatest.Paths()
	require.NoError(t, err)
	assert.Equal(t, "/ci/cache/llama/llama-server", server)

	t.Setenv(llamatest.EnvDir, "/opt/llama")
	server, model, err = llamatest.Paths()
	require.NoError(t, err)
	assert.Equal(t, "/opt/llama/llama-server", server)
	assert.Equal(t, "/opt/llama/tiny-qwen2.gguf", model)

	t.Setenv(llamatest.EnvServer, "/usr/bin/llama-server")
	t.Setenv(llamatest.EnvModel, "/models/qwen.gguf")
	server, model, err = llamatest.Paths()
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/llama-server", server)
	assert.Equal(t, "/models/qwen.gguf", model)
}

func TestStartWithoutTheBuild(t *testing.T) {
	_, err := llamatest.Start(context.Background(), llamatest.Options{Server: filepath.Join(t.TempDir(), "llama-server"), Model: fakeModel(t)})
	require.ErrorIs(t, err, llamatest.ErrNotBuilt)
	_, err = llamatest.Start(context.Background(), llamatest.Options{Server: os.Args[0], Model: filepath.Join(t.TempDir(), "none.gguf")})
	require.ErrorIs(t, err, llamatest.ErrNotBuilt)

	t.Setenv(llamatest.EnvRequire, "")
	var inner *testing.T
	t.Run("skips", func(t *testing.T) {
		inner = t
		llamatest.New(t, llamatest.Options{Server: filepath.Join(t.TempDir(), "llama-server")})
	})
	assert.True(t, inner.Skipped(), "a missing build skips the test")
}

func TestStartWaitsForHealth(t *testing.T) {
	t.Setenv(fakeEnv, "serve")
	s, err := llamatest.Start(context.Background(), llamatest.Options{Server: os.Args[0], Model: fakeModel(t)})
	require.NoError(t, err)
	resp, err := http.Get(s.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "Start returns once /health answers 200")
	assert.Contains(t, s.Log(), "fake llama-server: listening")

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice is fine")
	_, err = http.Get(s.URL + "/health")
	assert.Error(t, err, "the server is gone after Close")
}

func TestStartReportsAnExitingServer(t *testing.T) {
	t.Setenv(fakeEnv, "exit")
	_, err := llamatest.Start(context.Background(), llamatest.Options{Server: os.Args[0], Model: fakeModel(t)})
	require.ErrorIs(t, err, llamatest.ErrNotReady)
	assert.Contains(t, err.Error(), "couldn't bind HTTP server socket", "the error carries the server's output")
	assert.Contains(t, err.Error(), "exit status 3")
}

func TestStartHonoursCancellation(t *testing.T) {
	t.Setenv(fakeEnv, "serve")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := llamatest.Start(ctx, llamatest.Options{Server: os.Args[0], Model: fakeModel(t)})
	require.Error(t, err)
}

func TestLogKeepsTheTail(t *testing.T) {
	t.Setenv(fakeEnv, "chatty")
	s, err := llamatest.Start(context.Background(), llamatest.Options{Server: os.Args[0], Model: fakeModel(t)})
	require.NoError(t, err)
	defer s.Close()
	log := s.Log()
	assert.LessOrEqual(t, len(log), 16<<10)
	assert.Contains(t, log, "line 3999\nfake llama-server: listening\n")
	assert.NotContains(t, log, "line 0\n", "the head of a long log is dropped")
}

// TestSharedStartsOnce: a Shared server starts on the first Get, every
// Get after it returns the same one, outliving the test that started it,
// and Close stops it.
func TestSharedStartsOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: Shared skips its Get, so there is no server to share")
	}
	t.Setenv(fakeEnv, "serve")
	sh := llamatest.Shared{Options: llamatest.Options{Server: os.Args[0], Model: fakeModel(t)}}
	var first *llamatest.Server
	t.Run("first", func(t *testing.T) { first = sh.Get(t) })
	require.NotNil(t, first)
	assert.Same(t, first, sh.Get(t))
	resp, err := http.Get(first.URL + "/health")
	require.NoError(t, err, "the server outlives the test that started it")
	resp.Body.Close()

	sh.Close()
	_, err = http.Get(first.URL + "/health")
	assert.Error(t, err, "the server is gone after Close")
}

// TestSharedSkipsWithoutTheBuild: a Shared server without the build skips
// each test that asks for it, as New does.
func TestSharedSkipsWithoutTheBuild(t *testing.T) {
	t.Setenv(llamatest.EnvRequire, "")
	sh := llamatest.Shared{Options: llamatest.Options{Server: filepath.Join(t.TempDir(), "llama-server")}}
	for range 2 {
		var inner *testing.T
		t.Run("skips", func(t *testing.T) {
			inner = t
			sh.Get(t)
		})
		assert.True(t, inner.Skipped())
	}
}
