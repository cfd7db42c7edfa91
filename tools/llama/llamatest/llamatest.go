// Package llamatest runs a real llama.cpp server (llama-server) for
// end-to-end tests, in the spirit of net/http/httptest: Start launches it
// on 127.0.0.1 on a free port, waits until it answers /health, and Close
// stops it.
//
// The binary and the model are the ones tools/llama/build.sh caches
// outside the clone (`make llama`): llama-server built from the llama.cpp
// source that the npm package node-llama-cpp ships, and tiny-qwen2.gguf, a
// 2-layer, 64-wide Qwen2 model with random weights but the real Qwen2
// tokenizer and chat template. Its text is gibberish; its protocol, token
// ids, log-probs, chat template and grammar-constrained (json_schema)
// output are a real server's. docs/llama.md lists the API facts the tests
// rely on.
//
// New is the entry point for tests: it skips the test, saying how to build
// the cache, when the server or the model is missing, unless the
// environment sets TROUPE_REQUIRE_LLAMA=1 (as CI does once it has run
// build.sh), in which case a missing cache fails the test.
package llamatest

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Environment variables that locate the cache, in order of precedence:
// TROUPE_LLAMA_SERVER and TROUPE_LLAMA_MODEL name the files; otherwise
// they are llama-server and tiny-qwen2.gguf in TROUPE_LLAMA_DIR, which
// defaults to $TROUPE_CACHE/llama, and TROUPE_CACHE to
// $HOME/.cache/troupe. build.sh uses the same defaults.
const (
	EnvServer  = "TROUPE_LLAMA_SERVER"
	EnvModel   = "TROUPE_LLAMA_MODEL"
	EnvDir     = "TROUPE_LLAMA_DIR"
	EnvCache   = "TROUPE_CACHE"
	EnvRequire = "TROUPE_REQUIRE_LLAMA"
)

// ModelAlias is the model name the server answers to (and reports in its
// responses' "model" field).
const ModelAlias = "troupe-tiny-qwen2"

// Errors Start returns.
var (
	// ErrNotBuilt: the server binary or the model is not where Paths
	// looked; run tools/llama/build.sh.
	ErrNotBuilt = errors.New("llamatest: llama-server or its model is not built (run tools/llama/build.sh, or make llama)")
	// ErrNotReady: the server exited, or did not answer /health in time.
	ErrNotReady = errors.New("llamatest: llama-server did not become ready")
)

// Paths returns where the server binary and the model are expected,
// following the environment variables above. It does not check that they
// exist.
func Paths() (server, model string, err error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		cache := os.Getenv(EnvCache)
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", "", fmt.Errorf("llamatest: no %s, %s or home directory: %w", EnvDir, EnvCache, err)
			}
			cache = filepath.Join(home, ".cache", "troupe")
		}
		dir = filepath.Join(cache, "llama")
	}
	server, model = os.Getenv(EnvServer), os.Getenv(EnvModel)
	if server == "" {
		server = filepath.Join(dir, "llama-server")
	}
	if model == "" {
		model = filepath.Join(dir, "tiny-qwen2.gguf")
	}
	return server, model, nil
}

// Options configure Start. The zero value runs the cached server and model
// with 1 thread, 4 slots and a 8,192-token context shared by the slots.
type Options struct {
	Server, Model string // override Paths
	// Threads is -t; 0 means 1. The tiny model's matrices are too small to
	// share: a second thread only spins waiting for the first at every
	// operation, which on a busy 2-core machine (the test suite's) costs
	// 3.5 times the CPU time of one thread, and more wall time too.
	Threads int
	Slots   int      // -np, parallel requests; 0 means 4
	Context int      // -c, all slots together; 0 means 8192
	Args    []string // extra llama-server arguments
	// Ready bounds the wait for /health; 0 means 2 minutes. Loading the
	// tiny model takes about a second; the bound is for slow machines.
	Ready time.Duration
	// ToolTemplate serves ToolTemplate (--chat-template-file) instead of
	// the model's own template, which renders no tools.
	ToolTemplate bool
}

// ToolTemplate is a chat template for the tiny model that renders tools,
// for tests of tool calls: Qwen2.5-Instruct's template (llama.cpp's
// models/templates/Qwen-Qwen2.5-7B-Instruct.jinja), the tools listed in
// the system prompt as there, with one change: a call is written as a bare
// JSON object {"name": ..., "arguments": ...}, without Qwen's <tool_call>
// tags. The tiny model's own template (Qwen2's) renders no tools, so
// llama-server would neither show the model the tool schema nor constrain
// the call; and with <tool_call> tags llama.cpp's grammar lets free text
// come before the call, which a random model never ends. With the bare
// form the call's grammar starts at the answer's first "{": a test that
// raises that token's logit (logit_bias {"{": 20}, standing in for a
// trained model's will to call) gets a schema-constrained call at once.
//
//go:embed tools.jinja
var ToolTemplate string

// EndOfGeneration lists the tiny model's end-of-generation tokens, as
// llama-server prints them when it loads it: </s> (128247), <|endoftext|>
// (151643, also its EOS) and <|im_end|> (151645). A completion that stops
// on one of them ends with its id, written as "" in the answer.
var EndOfGeneration = []int{128247, 151643, 151645}

// Server is a running llama-server.
type Server struct {
	// URL is the server's root, "http://127.0.0.1:PORT"; the
	// OpenAI-compatible API is under URL+"/v1".
	URL string

	cmd  *exec.Cmd
	log  *tail
	done chan struct{} // closed when the process has exited
	err  error         // the process's exit status, valid after done
	once sync.Once
}

// Start launches llama-server on 127.0.0.1 on a free port and waits until
// /health answers 200. A bind race with another process (the port is
// chosen, then handed to the server) is retried on a new port. The
// server runs until Close, or until ctx is cancelled.
func Start(ctx context.Context, opts Options) (*Server, error) {
	server, model, err := Paths()
	if err != nil {
		return nil, err
	}
	if opts.Server != "" {
		server = opts.Server
	}
	if opts.Model != "" {
		model = opts.Model
	}
	for _, f := range []string{server, model} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotBuilt, err)
		}
	}
	var errs []error
	for range 3 {
		s, err := start(ctx, server, model, opts)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errExited) || ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// errExited marks a server that exited before it was ready, which a
// lost bind race looks like: Start then tries another port.
var errExited = errors.New("llama-server exited")

func start(ctx context.Context, server, model string, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"-m", model, "-a", ModelAlias,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-t", strconv.Itoa(orDefault(opts.Threads, 1)),
		"-np", strconv.Itoa(orDefault(opts.Slots, 4)),
		"-c", strconv.Itoa(orDefault(opts.Context, 8192)),
		"--no-webui",
	}
	if opts.ToolTemplate {
		f, err := os.CreateTemp("", "troupe-tools-*.jinja")
		if err != nil {
			return nil, fmt.Errorf("llamatest: writing the tool template: %w", err)
		}
		_, err = f.WriteString(ToolTemplate)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
			return nil, fmt.Errorf("llamatest: writing the tool template: %w", err)
		}
		defer os.Remove(f.Name()) // read at start-up, before /health answers
		args = append(args, "--chat-template-file", f.Name())
	}
	args = append(args, opts.Args...)
	s := &Server{
		URL:  "http://127.0.0.1:" + strconv.Itoa(port),
		log:  &tail{max: 16 << 10},
		done: make(chan struct{}),
	}
	s.cmd = exec.CommandContext(ctx, server, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.WaitDelay = 5 * time.Second
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("llamatest: starting %s: %w", server, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, orDefault(opts.Ready, 2*time.Minute)); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("llamatest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls /health until it answers 200 (503 means the model is
// still loading), the process exits, or the wait runs out.
func (s *Server) waitReady(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w: %w (%v); its output:\n%s", ErrNotReady, errExited, s.err, s.log)
		case <-ctx.Done():
			return fmt.Errorf("%w: no healthy answer from %s within %v; its output:\n%s", ErrNotReady, s.URL, wait, s.log)
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			continue // not listening yet
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
}

// Close stops the server (SIGKILL: it holds no state worth a clean exit)
// and waits for it. It is safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	return nil
}

// Log returns the tail of the server's output (its last 16 KiB), for
// failure messages.
func (s *Server) Log() string { return s.log.String() }

// New starts a server for t and stops it when t ends. When the cache is
// missing it skips t, unless TROUPE_REQUIRE_LLAMA=1, when it fails t.
//
// A real server is a slow process test: go test -short skips it (make test
// runs it).
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("a real llama-server: skipped under -short")
	}
	s, err := Start(t.Context(), opts)
	if errors.Is(err, ErrNotBuilt) && os.Getenv(EnvRequire) != "1" {
		t.Skipf("%v; set %s=1 to fail instead of skipping", err, EnvRequire)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Shared is one server for the tests of a package that need no options of
// their own, so that the package starts one llama-server (a second of CPU
// time each) rather than one per test. Its first Get starts it; the
// package's TestMain closes it after m.Run:
//
//	var llama llamatest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		llama.Close()
//		os.Exit(code)
//	}
//
// The tests that share it take turns (none calls t.Parallel): llama.cpp
// batches concurrent requests together, which a test that compares
// log-probs must not depend on.
type Shared struct {
	// Options start the server; set before the first Get.
	Options Options

	mu  sync.Mutex
	s   *Server
	err error
}

// Get returns the shared server, started on the first call. It skips or
// fails t as New does; a server that failed to start is not tried again.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("a real llama-server: skipped under -short")
	}
	sh.mu.Lock()
	if sh.s == nil && sh.err == nil {
		// Not the test's context: the server outlives the test.
		sh.s, sh.err = Start(context.Background(), sh.Options)
	}
	s, err := sh.s, sh.err
	sh.mu.Unlock()
	if errors.Is(err, ErrNotBuilt) && os.Getenv(EnvRequire) != "1" {
		t.Skipf("%v; set %s=1 to fail instead of skipping", err, EnvRequire)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
		t.Fatalf("llamatest: the shared llama-server has exited (%v); its output:\n%s", s.err, s.log)
	default:
	}
	return s
}

// Close stops the shared server, if it was started.
func (sh *Shared) Close() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.s != nil {
		_ = sh.s.Close()
	}
}

// tail keeps the last max bytes written to it; safe for concurrent use,
// since exec copies stdout and stderr from two goroutines.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.Clone(w.buf))
}
