package natsrun_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/testbin"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/trajectories"
)

// buildOnce holds, by binary name, the build of each binary the process
// tests start.
var buildOnce sync.Map // binary name -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// binary builds pkg (a main package) once per test process, into
// testbin's cache (where it stays for the next run, linked again only
// when its sources change), and returns the binary's path. It is built
// without -race: it is the thing under test's surroundings, and the race
// build would slow every start.
func binary(t testing.TB, name, pkg string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(name, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.path, b.err = testbin.Build(name, pkg)
		if errors.Is(b.err, testbin.ErrNoGo) {
			b.err = fmt.Errorf("building %s needs the go command on PATH (or set TROUPE_TESTWORKER and TROUPE_NATS_SERVER): %w", pkg, b.err)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

// testworkerBin is internal/testworker, built for the test, or the
// prebuilt binary $TROUPE_TESTWORKER names (for a machine without Go).
func testworkerBin(t testing.TB) string {
	if p := os.Getenv("TROUPE_TESTWORKER"); p != "" {
		return p
	}
	return binary(t, "testworker", "github.com/troupe-rl/troupe/distributed/natsrun/internal/testworker")
}

// natsServerBin is nats-server built from the module, or the binary
// $TROUPE_NATS_SERVER names.
func natsServerBin(t testing.TB) string {
	if p := os.Getenv("TROUPE_NATS_SERVER"); p != "" {
		return p
	}
	return binary(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

// proc is a process a test started.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
	mu     sync.Mutex
	lines  []string // stdout after "ready"
}

// start runs bin; when ready is true it waits for the process to print
// "ready". The process is killed when the test ends.
func start(t testing.TB, ready bool, bin string, args ...string) *proc {
	t.Helper()
	return startCmd(t, ready, exec.Command(bin, args...))
}

// startCmd is start for a command of the caller's making (one run in
// another network namespace, say).
func startCmd(t testing.TB, ready bool, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	sc := bufio.NewScanner(out)
	readyCh := make(chan struct{})
	go func() {
		sawReady := false
		for sc.Scan() {
			if !sawReady && sc.Text() == "ready" {
				sawReady = true
				close(readyCh)
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	if ready {
		select {
		case <-readyCh:
		case <-p.done:
			t.Fatalf("%s %v exited before it was ready: %v\n%s", filepath.Base(cmd.Path), cmd.Args[1:], p.cmd.ProcessState, p.stderr)
		}
	}
	return p
}

func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// testConfig is a deployment tuned for fast tests: short ack wait, so a
// dead worker's episodes come back within a second.
func testConfig() natsrun.Config {
	return natsrun.Config{AckWait: time.Second, MaxDeliver: 4, ChunkSize: 2048, DuplicateWindow: 2 * time.Minute, LeaseTTL: 1500 * time.Millisecond, Batch: 1}
}

// embedded starts an in-process server in a temporary directory.
func embedded(t testing.TB, listen string) (*natsrun.Embedded, string) {
	t.Helper()
	dir := t.TempDir()
	srv, err := natsrun.StartEmbedded(natsrun.EmbeddedOptions{Dir: dir, Listen: listen})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, dir
}

func connect(t testing.TB, srv *natsrun.Embedded) *nats.Conn {
	t.Helper()
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func open(t testing.TB, nc *nats.Conn, cfg natsrun.Config) *natsrun.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := natsrun.Open(ctx, nc, cfg)
	require.NoError(t, err)
	return c
}

// worker runs an in-process worker until the test ends; stop stops it and
// waits.
func worker(t testing.TB, c *natsrun.Client, cfg natsrun.WorkerConfig) (w *natsrun.Worker, stop func()) {
	t.Helper()
	if cfg.Registry == nil {
		cfg.Registry = testscen.Registry(testscen.Options{})
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	w, err := c.NewWorker(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return w, stop
}

// runPlan is a plan's run: its configuration, and the plan, which makes
// its output stages.
type runPlan struct {
	play.Config
	plan    testscen.Plan
	observe func(ep *trajectories.Episode) // the output stages' Observe
}

// out is an output stage of the run writing to sink, with allocators of its
// own.
func (r runPlan) out(t testing.TB, sink trajectories.Sink) *trajectories.Output {
	t.Helper()
	o, err := r.plan.Output(sink)
	require.NoError(t, err)
	o.Observe = r.observe
	return o
}

// plan turns a testscen.Plan into a run and a Spec.
func plan(t testing.TB, reg *env.Registry, p testscen.Plan) (runPlan, natsrun.Spec) {
	t.Helper()
	cfg, policies, err := p.Config(reg)
	require.NoError(t, err)
	return runPlan{Config: cfg, plan: p}, natsrun.Spec{Policies: policies}
}

// local is the output of a local run: the reference. It plays many groups
// at once, which does not change the output, so that slow policies do not
// slow the test.
func local(t testing.TB, rp runPlan, layout trajectories.Layout) string {
	t.Helper()
	cfg := rp.Config
	cfg.Concurrency = 16
	var buf bytes.Buffer
	_, err := play.Run(context.Background(), cfg, rp.out(t, trajectories.NewJSONLWriter(&buf, layout)))
	require.NoError(t, err)
	return buf.String()
}

// remote runs cfg on the deployment and returns its output and the
// executor's stats.
func remote(t testing.TB, c *natsrun.Client, run string, rp runPlan, spec natsrun.Spec, layout trajectories.Layout) (string, play.Summary, natsrun.ExecutorStats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := c.Start(ctx, run, rp.Config, spec)
	require.NoError(t, err)
	defer x.Close()
	var buf bytes.Buffer
	sum, err := x.Run(ctx, rp.out(t, trajectories.NewJSONLWriter(&buf, layout)))
	require.NoError(t, err)
	return buf.String(), sum, x.Stats()
}

// eventually polls cond until it holds or the test's patience (a minute)
// runs out; it is a wait, not an assertion about speed.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePorts returns n TCP ports free on 127.0.0.1 just now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// cluster is a JetStream cluster of nats-server processes on loopback (a
// lone server when it has one node).
type cluster struct {
	names []string
	procs map[string]*proc
	urls  []string
}

func (c *cluster) url() string { return strings.Join(c.urls, ",") }

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	bin := natsServerBin(t)
	ports := freePorts(t, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[n+i]))
	}
	c := &cluster{procs: map[string]*proc{}}
	for i := range n {
		name := "n" + strconv.Itoa(i+1)
		args := []string{"-n", name, "-a", "127.0.0.1", "-p", strconv.Itoa(ports[i]), "-js", "-sd", t.TempDir()}
		if n > 1 {
			args = append(args, "--cluster_name", "troupe-test", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		}
		p := start(t, false, bin, args...)
		c.names = append(c.names, name)
		c.procs[name] = p
		c.urls = append(c.urls, "nats://127.0.0.1:"+strconv.Itoa(ports[i]))
	}
	return c
}

// connectURL connects to a deployment over TCP, waiting for it to come up.
func connectURL(t testing.TB, url string) *nats.Conn {
	t.Helper()
	var nc *nats.Conn
	eventually(t, "a connection to "+url, func() bool {
		var err error
		nc, err = natsrun.Connect(context.Background(), natsrun.ConnOptions{URL: url, Name: t.Name()})
		return err == nil
	})
	t.Cleanup(nc.Close)
	return nc
}

var errStop = errors.New("test stops the run")
