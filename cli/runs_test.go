package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/scenarios"
)

// natsServer starts a real NATS server (embedded, listening on loopback)
// for troupe processes of the test to share, and returns its URL.
func natsServer(t *testing.T) string {
	t.Helper()
	srv, err := natsrun.StartEmbedded(natsrun.EmbeddedOptions{Dir: t.TempDir(), Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv.ClientURL()
}

// invokeCtx runs the command line with the built-in scenarios, without
// the machine's environment, until ctx ends.
func invokeCtx(ctx context.Context, args ...string) result {
	var stdout, stderr bytes.Buffer
	app := New(&stdout, &stderr)
	app.Scenarios = scenarios.Builtin()
	app.LookupEnv = noEnv
	app.Terminal = func(io.Writer) bool { return false }
	code := app.Main(ctx, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// background runs a command line until the test ends, or until stop is
// called; stop returns its result.
func background(t *testing.T, args ...string) (stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var r result
	done := make(chan struct{})
	go func() { defer close(done); r = invokeCtx(ctx, args...) }()
	var once sync.Once
	stop = func() result {
		once.Do(func() { cancel(); <-done })
		return r
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestWorkersPlayTheRunsLLMSettings: the samples of a distributed run
// carry the run's model and sampling, not the workers' flags. A worker
// that does not serve the run's LLM endpoint leaves the run (and the
// submitter names it), instead of failing episodes against its own
// server; one that declares the endpoint plays it with the run's model.
// The output is a local run's, and no "disconnected" warning ends it.
func TestWorkersPlayTheRunsLLMSettings(t *testing.T) {
	skipShort(t)
	llmSrv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	url := natsServer(t)
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "4", "--policy", "llm", "--llm-model", "run-model", "--llm-temperature", "0.5"}
	r, local := llmRun(t, append(args, "--llm-base-url", llmSrv.URL())...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	localCalls := len(llmSrv.Requests())

	// No endpoint declared, and its own server elsewhere: it leaves the run.
	stopBare := background(t, "worker", "--nats", url, "--nats-ack-wait", "2s", "-c", "2", "--llm-base-url", "http://127.0.0.1:9/v1")
	// The run's endpoint, on the real server, with other sampling flags.
	stopGPU := background(t, "worker", "--nats", url, "-c", "2", "--llm-endpoint", "gpu", "--llm-base-url", llmSrv.URL(), "--llm-model", "worker-model", "--llm-temperature", "1.5")
	liveWorkers(t, url, 2) // both follow the runs before the run starts

	out := filepath.Join(dir, "nats.jsonl")
	rr := invokeCtx(t.Context(), append(args, "--llm-endpoint", "gpu", "--llm-base-url", "http://127.0.0.1:9/v1", "--nats", url, "-o", out)...)
	require.Equal(t, ExitOK, rr.code, rr.stderr)
	require.Equal(t, local, readRollouts(t, readFile(t, out)), "the run's model and sampling decide the samples")
	assert.NotContains(t, rr.stderr, "disconnected")
	calls := llmSrv.Requests()[localCalls:]
	require.NotEmpty(t, calls)
	for _, c := range calls {
		assert.Equal(t, "run-model", c.Model)
		require.NotNil(t, c.Temperature)
		assert.Equal(t, 0.5, *c.Temperature)
	}
	assert.Contains(t, string(readFile(t, out)), `"llm_model":"run-model"`)
	bare := stopBare()
	assert.Contains(t, bare.stderr, "cannot play the run")
	assert.Contains(t, bare.stderr, "endpoint gpu, which this worker does not serve")
	assert.Equal(t, ExitOK, stopGPU().code)
}

// TestRunsCommand: an operator's view of a deployment. A run interrupted
// (Ctrl-C) leaves nothing queued; troupe runs list and show name it and
// its state; cancel stops a run a submitter is collecting; purge removes
// them, after which the deployment holds nothing.
func TestRunsCommand(t *testing.T) {
	skipShort(t)
	url := natsServer(t)
	dir := t.TempDir()
	list := func() string {
		r := invokeCtx(t.Context(), "runs", "list", "--nats", url)
		require.Equal(t, ExitOK, r.code, r.stderr)
		return r.stdout
	}
	assert.Equal(t, "no runs\n", list())

	// No worker: the run waits. Ctrl-C stops it, and its queue goes.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan result, 1)
	go func() {
		done <- invokeCtx(ctx, "run", "tictactoe", "-n", "50", "--run-id", "interrupted", "--nats", url, "-o", filepath.Join(dir, "a.jsonl"))
	}()
	eventually(t, func() bool { return strings.Contains(list(), "interrupted") })
	assert.Regexp(t, `interrupted\s+running\s+tictactoe\s+0/50\s+\d+`, list())
	cancel()
	r := <-done
	assert.Equal(t, ExitInterrupted, r.code, r.stderr)
	assert.Regexp(t, `interrupted\s+abandoned\s+tictactoe\s+0/50\s+0\s+0`, list(), "nothing left queued")

	// A submitter cancelled by the operator stops with the reason.
	done2 := make(chan result, 1)
	go func() {
		done2 <- invokeCtx(t.Context(), "run", "elfarol", "-n", "20", "--nats-batch", "1", "--run-id", "doomed", "--nats", url, "-o", filepath.Join(dir, "b.jsonl"))
	}()
	eventually(t, func() bool { return strings.Contains(list(), "doomed") })
	show := invokeCtx(t.Context(), "runs", "show", "doomed", "--nats", url)
	require.Equal(t, ExitOK, show.code, show.stderr)
	assert.Contains(t, show.stdout, "state:       running")
	assert.Contains(t, show.stdout, "delivery:    ack wait 30s, max deliver 5")
	c := invokeCtx(t.Context(), "runs", "cancel", "doomed", "--reason", "wrong parameters", "--nats", url)
	require.Equal(t, ExitOK, c.code, c.stderr)
	assert.Contains(t, c.stdout, "run doomed cancelled: 20 queued work messages removed")
	r = <-done2
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "the run was cancelled: run doomed: wrong parameters")
	assert.Regexp(t, `doomed\s+cancelled`, list())

	p := invokeCtx(t.Context(), "runs", "purge", "--abandoned", "--nats", url)
	require.Equal(t, ExitOK, p.code, p.stderr)
	assert.Contains(t, p.stdout, "run doomed purged")
	assert.Contains(t, p.stdout, "run interrupted purged")
	assert.Equal(t, "no runs\n", list())
	miss := invokeCtx(t.Context(), "runs", "show", "doomed", "--nats", url)
	assert.Equal(t, ExitFailure, miss.code)
	assert.Contains(t, miss.stderr, "no such run: doomed")
}

// TestRunIDMismatchKeepsTheOutput: a run id taken by another run is
// refused before the output is opened: an existing file keeps its bytes.
func TestRunIDMismatchKeepsTheOutput(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	js := filepath.Join(dir, "js")
	first := invokeCtx(t.Context(), "run", "tictactoe", "-n", "2", "--run-id", "taken", "--nats", "embedded", "--nats-dir", js, "--nats-keep", "-o", filepath.Join(dir, "first.jsonl"))
	require.Equal(t, ExitOK, first.code, first.stderr)
	out := filepath.Join(dir, "precious.jsonl")
	require.NoError(t, os.WriteFile(out, []byte("precious\n"), 0o644))
	r := invokeCtx(t.Context(), "run", "tictactoe", "-n", "3", "--run-id", "taken", "--nats", "embedded", "--nats-dir", js, "-o", out)
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "the run id belongs to a different run")
	assert.Equal(t, "precious\n", string(readFile(t, out)))
}

// liveWorkers waits until n workers of the deployment at url are live,
// which a worker is once it follows the runs (natsrun.Worker.Run).
func liveWorkers(t *testing.T, url string, n int) {
	t.Helper()
	nf := natsrun.DefaultFlags()
	nf.Conn.URL = url
	d, err := nf.OpenAdmin(t.Context(), nil)
	require.NoError(t, err)
	defer d.Close()
	eventually(t, func() bool {
		st, err := d.Client.Stats(t.Context())
		return err == nil && st.Workers == n
	})
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWorkersPlayRolesOnNamedEndpoints: a distributed run whose roles
// play on two endpoints, the default one and a named one, is played by a
// worker that serves both, with each role's model on its own server; a
// worker without the named endpoint leaves the run, naming it. The output
// is a local run's.
func TestWorkersPlayRolesOnNamedEndpoints(t *testing.T) {
	skipShort(t)
	a := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	b := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	url := natsServer(t)
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "4", "--role-llm", "x=model=mx,temperature=0.5", "--role-llm", "o=endpoint=bsrv,model=mo,temperature=0.25"}
	r, local := llmRun(t, append(args, "--llm-base-url", a.URL(), "--llm-endpoint", "bsrv="+b.URL())...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	localA, localB := len(a.Requests()), len(b.Requests())

	// The default endpoint only: it cannot play o.
	stopHalf := background(t, "worker", "--nats", url, "--nats-ack-wait", "2s", "-c", "2", "--llm-endpoint", "gpu", "--llm-base-url", "http://127.0.0.1:9/v1")
	stopBoth := background(t, "worker", "--nats", url, "-c", "2", "--llm-endpoint", "gpu", "--llm-base-url", a.URL(), "--llm-endpoint", "bsrv="+b.URL())
	liveWorkers(t, url, 2) // both follow the runs before the run starts

	out := filepath.Join(dir, "nats.jsonl")
	rr := invokeCtx(t.Context(), append(args, "--llm-endpoint", "gpu", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-endpoint", "bsrv=http://127.0.0.1:9/v1", "--nats", url, "-o", out)...)
	require.Equal(t, ExitOK, rr.code, rr.stderr)
	require.Equal(t, local, readRollouts(t, readFile(t, out)), "each role's model and sampling decide its samples")
	for _, side := range []struct {
		srv   *llmtest.Server
		from  int
		model string
		temp  float64
	}{{a, localA, "mx", 0.5}, {b, localB, "mo", 0.25}} {
		calls := side.srv.Requests()[side.from:]
		require.NotEmpty(t, calls)
		for _, c := range calls {
			assert.Equal(t, side.model, c.Model)
			require.NotNil(t, c.Temperature)
			assert.Equal(t, side.temp, *c.Temperature)
		}
	}
	half := stopHalf()
	assert.Contains(t, half.stderr, "cannot play the run")
	assert.Contains(t, half.stderr, `role o: endpoint \"bsrv\" is not defined here`) // the log quotes it
	assert.Equal(t, ExitOK, stopBoth().code)
}
