//go:build linux

package natsrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/internal/netns"
	"github.com/troupe-rl/troupe/trajectories"
)

// The partition tests run a deployment over a network of its own: three
// nats-server processes clustered over routes, two workers and a
// submitter, each on a host of its own (a network namespace plugged into
// a bridge; internal/netns). A nemesis cuts, degrades and heals the
// network on a schedule while the run goes on; the checker then wants
// the local run's output byte for byte, each episode stored by exactly
// one worker. docs/distributed.md ("Partitions") lists the schedules and
// what they found.

// partitionsVar set to "all" runs the long schedules too (make
// partitions); partitionsLogVar set to 1 logs what the workers and the
// submitter log (debug level) after each schedule.
const (
	partitionsVar    = "TROUPE_PARTITIONS"
	partitionsLogVar = "TROUPE_PARTITIONS_LOG"
)

// The deployment's hosts.
var (
	natsHosts = []string{"n1", "n2", "n3"}
	allHosts  = []string{"n1", "n2", "n3", "w1", "w2", "sub"}
	clientsOf = []string{"w1", "w2", "sub"}
)

// partitionConfig is the deployment's delivery settings: an ack wait
// that a short cut stays under and a long one outlasts.
func partitionConfig() natsrun.Config {
	return natsrun.Config{Replicas: 3, AckWait: 3 * time.Second, MaxDeliver: 5, LeaseTTL: 1500 * time.Millisecond, Batch: 1}
}

// A schedule is what the nemesis does to a run: once the submitter has
// written at least `at` episodes, fault, for hold (0: until the submitter
// exits), then heal.
type schedule struct {
	name  string
	long  bool // only with TROUPE_PARTITIONS=all
	at    int
	hold  time.Duration
	fault func(ctx context.Context, n *netns.Net) error
	// steps, when set, replaces fault and hold: the nemesis calls it
	// every interval until it returns false, then heals.
	steps    func(ctx context.Context, n *netns.Net, i int) (bool, error)
	interval time.Duration
	// afterEnd: a worker comes back after the run completed (hold 0).
	afterEnd bool
}

func cut(groups ...[]string) func(ctx context.Context, n *netns.Net) error {
	return func(ctx context.Context, n *netns.Net) error { return n.Partition(ctx, groups...) }
}

func schedules() []schedule {
	cfg := partitionConfig()
	return []schedule{
		// A worker loses the cluster for half its ack wait: its TCP
		// connections stall, its heartbeats wait, and it carries on.
		{name: "worker-cut", at: 8, hold: cfg.AckWait / 2, fault: cut([]string{"w1"}, natsHosts)},
		// The submitter loses the cluster for longer than its lease;
		// nobody else wants the run, so it keeps it.
		{name: "submitter-cut", at: 8, hold: 3 * cfg.LeaseTTL, fault: cut([]string{"sub"}, natsHosts)},
		// n1 and the worker w1 on one side, the rest of the cluster and
		// the other clients on the other, for two ack waits.
		{name: "cluster-split", at: 8, hold: 2 * cfg.AckWait, fault: cut([]string{"n1", "w1"}, []string{"n2", "n3", "w2", "sub"})},
		// Every link drops a fifth of its packets (and delays each by
		// 200ms, where the kernel has netem), for the rest of the run.
		{name: "degraded", at: 4, hold: 8 * time.Second, fault: func(ctx context.Context, n *netns.Net) error {
			delay := 200 * time.Millisecond
			if !n.CanDelay() {
				delay = 0
			}
			return n.Degrade(ctx, delay, 20)
		}},
		// A worker is cut off from everyone for two ack waits: its
		// episodes go to w2, and it comes back a zombie holding results
		// that are no longer its to store.
		{name: "zombie-worker", at: 8, hold: 2 * cfg.AckWait, fault: cut([]string{"w1"}, []string{"n1", "n2", "n3", "w2", "sub"})},
		// The same zombie comes back only after the run completed and its
		// submitter removed it from the deployment.
		{name: "zombie-after-end", at: 8, afterEnd: true, fault: cut([]string{"w1"}, []string{"n1", "n2", "n3", "w2", "sub"})},
		// Long: a random partition of the six hosts every second, twenty
		// times.
		{name: "flapping", long: true, at: 2, interval: time.Second, steps: func(ctx context.Context, n *netns.Net, i int) (bool, error) {
			if i == 20 {
				return false, nil
			}
			r := rand.New(rand.NewPCG(uint64(i), 47))
			var a, b []string
			for _, h := range allHosts {
				if r.IntN(2) == 0 {
					a = append(a, h)
				} else {
					b = append(b, h)
				}
			}
			return true, n.Partition(ctx, a, b)
		}},
	}
}

// needNetns skips the test (fails it, when netns.RequireVar is 1) where
// this machine cannot build namespaced networks, saying why.
func needNetns(t *testing.T) {
	t.Helper()
	skipShort(t)
	if err := netns.Available(); err != nil {
		if os.Getenv(netns.RequireVar) == "1" {
			t.Fatalf("%v (%s=1 requires it)", err, netns.RequireVar)
		}
		t.Skipf("%v (%s=1 makes this a failure)", err, netns.RequireVar)
	}
}

// TestPartitions plays a run under each schedule and checks it ends in
// the local run's output, every episode stored once.
func TestPartitions(t *testing.T) {
	needNetns(t)
	all := os.Getenv(partitionsVar) == "all"
	for _, sc := range schedules() {
		t.Run(sc.name, func(t *testing.T) {
			if sc.long && !all {
				t.Skipf("a long schedule: %s=all runs it (make partitions)", partitionsVar)
			}
			t.Parallel()
			res := playUnder(t, sc)
			t.Logf("%s: %s", sc.name, res)
			assert.Zero(t, res.lost, "episodes lost")
			assert.Zero(t, res.duplicated, "episodes duplicated")
			assert.True(t, res.identical, "the output is the local run's")
			if sc.afterEnd {
				// A zombie whose store landed just before the cut, its
				// reply lost, finds nothing once the run is purged: it
				// cannot count that episode as its own, and the worker
				// that got it again found it done. Nobody counts it twice.
				assert.LessOrEqual(t, res.stored, int64(res.submitted), "no episode stored by two workers")
			} else {
				assert.Equal(t, int64(res.submitted), res.stored, "each episode stored by exactly one worker")
			}
			assert.Zero(t, res.leftMarkers, "the completed run's done markers are gone")
			assert.Zero(t, res.leftResults, "the completed run's results are gone")
		})
	}
}

// outcome is what the checker found after a schedule.
type outcome struct {
	submitted, written, duplicated, lost int
	identical                            bool
	stored, discarded, redelivered       int64 // over the workers: episodes stored, played but found done, deliveries after the first
	perWorker                            []string
	timeline                             timeline
	leftMarkers                          int    // done markers of the run left in the deployment after it
	leftResults                          uint64 // result messages of the run left
}

// timeline is when the nemesis struck and healed, in episodes written by
// then.
type timeline struct{ atFault, atHeal int }

func (o outcome) String() string {
	return fmt.Sprintf("fault at %d episodes written, healed at %d; submitted %d, written %d, duplicated %d, lost %d, identical to local %v; stored %d (%s), played again and discarded %d, redelivered %d; left behind: %d done markers, %d results",
		o.timeline.atFault, o.timeline.atHeal, o.submitted, o.written, o.duplicated, o.lost, o.identical, o.stored, strings.Join(o.perWorker, ", "), o.discarded, o.redelivered, o.leftMarkers, o.leftResults)
}

var episodeRE = regexp.MustCompile(`"episode":(\d+),`)

// samplesPerEpisode counts flat JSONL's lines by episode.
func samplesPerEpisode(jsonl string) map[int]int {
	n := map[int]int{}
	for line := range strings.Lines(jsonl) {
		if m := episodeRE.FindStringSubmatch(line); m != nil {
			i, _ := strconv.Atoi(m[1])
			n[i]++
		}
	}
	return n
}

// playUnder builds the network and the deployment, plays a run while the
// nemesis follows sc, and checks the output.
func playUnder(t *testing.T, sc schedule) outcome {
	ctx := context.Background()
	n, err := netns.New(ctx, allHosts...)
	require.NoError(t, err)
	t.Cleanup(n.Close)
	cfg := partitionConfig()
	natsBin, bin := natsServerBin(t), testworkerBin(t)

	var urls, routes []string
	for _, h := range natsHosts {
		urls = append(urls, "nats://"+n.Host(h).Addr.String()+":4222")
		routes = append(routes, "nats://"+n.Host(h).Addr.String()+":6222")
	}
	url := strings.Join(urls, ",")
	for _, h := range natsHosts {
		srv := startCmd(t, false, n.Command(h, natsBin, "-n", h, "-a", "0.0.0.0", "-p", "4222", "-js", "-sd", t.TempDir(),
			"--cluster_name", "troupe-netns", "--cluster", "nats://0.0.0.0:6222", "--routes", strings.Join(routes, ",")))
		eventually(t, h+" listening on 4222", func() bool { return listening(srv, 4222) })
	}
	var verbose []string
	if os.Getenv(partitionsLogVar) == "1" {
		verbose = []string{"-v"}
	}
	// The first client to open the deployment creates its streams, which
	// takes a JetStream meta leader: wait for one, from a client's host.
	eventually(t, "the cluster's JetStream", func() bool {
		return n.Do("sub", func() error { return openOnce(ctx, url, cfg, nil) }) == nil
	})
	workers := map[string]*proc{}
	for _, w := range []string{"w1", "w2"} {
		workers[w] = startCmd(t, true, n.Command(w, bin, workerArgs(url, cfg, append(verbose, "-concurrency=2", "-delay=100ms", "-name="+w)...)...))
		if verbose != nil {
			t.Cleanup(func() { t.Logf("%s's log:\n%s", w, killed(workers[w])) })
		}
	}

	p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "3"}, Policy: "sleepy", Episodes: 60, GroupSize: 2, Concurrency: 4, Seed: 47, Allocators: []string{"grpo"}}
	rc, _ := plan(t, testscen.Registry(testscen.Options{}), p)
	want := local(t, rc, trajectories.Flat)
	planJSON, err := json.Marshal(p)
	require.NoError(t, err)
	outFile := t.TempDir() + "/out.jsonl"
	sub := startCmd(t, true, n.Command("sub", bin, append([]string{"submit", "-url", url, "-replicas", "3", "-ack-wait", cfg.AckWait.String(),
		"-max-deliver", strconv.Itoa(cfg.MaxDeliver), "-lease", cfg.LeaseTTL.String(), "-delay=100ms",
		"-run", sc.name, "-plan", string(planJSON), "-out", outFile, "-progress"}, verbose...)...))
	if verbose != nil {
		t.Cleanup(func() { t.Logf("the submitter's log:\n%s", killed(sub)) })
	}

	nemesis := make(chan error, 1)
	var tl timeline
	go func() { nemesis <- runNemesis(ctx, n, sc, sub, &tl) }()

	select {
	case <-sub.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the submitter did not finish within 3 minutes; its stderr:\n%s", killed(sub))
	}
	require.NoError(t, <-nemesis)
	require.Equal(t, 0, sub.wait(), "the submitter fails: %s", stderrOf(sub))
	gotBytes, err := os.ReadFile(outFile)
	require.NoError(t, err)
	got := string(gotBytes)

	res := outcome{submitted: p.Episodes, identical: got == want, timeline: tl}
	wantN, gotN := samplesPerEpisode(want), samplesPerEpisode(got)
	for ep, k := range wantN {
		switch {
		case gotN[ep] == 0:
			res.lost++
		case gotN[ep] > k:
			res.duplicated++
		}
	}
	res.written = len(gotN)
	for _, w := range []string{"w1", "w2"} {
		pr := workers[w]
		pr.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, pr.wait(), "%s stops cleanly on SIGTERM:\n%s", w, stderrOf(pr))
		out := pr.output()
		require.NotEmpty(t, out, "%s prints its stats on the way out", w)
		var st natsrun.WorkerStats
		require.NoError(t, json.Unmarshal([]byte(out[len(out)-1]), &st))
		res.stored += st.Played
		res.discarded += st.Skipped
		res.redelivered += st.Redelivered
		res.perWorker = append(res.perWorker, fmt.Sprintf("%s %d", w, st.Played))
	}
	// A completed run leaves nothing in the deployment: ask it from the
	// submitter's host (the test process is on none).
	require.NoError(t, n.Do("sub", func() error {
		return openOnce(ctx, url, cfg, func(ctx context.Context, c *natsrun.Client) error {
			keys, err := c.DoneKeys(ctx, sc.name)
			if err != nil {
				return err
			}
			res.leftMarkers = len(keys)
			res.leftResults, err = c.ResultMessages(ctx, sc.name)
			return err
		})
	}))
	return res
}

// openOnce opens the deployment at url and calls f (when not nil) with
// it, on a connection that does not reconnect: run in a host's namespace
// (netns.Net.Do), a reconnection would dial from outside it.
func openOnce(ctx context.Context, url string, cfg natsrun.Config, f func(ctx context.Context, c *natsrun.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nc, err := natsrun.Connect(ctx, natsrun.ConnOptions{URL: url, Name: "checker"}, nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := natsrun.Open(ctx, nc, cfg)
	if err != nil || f == nil {
		return err
	}
	return f(ctx, c)
}

// runNemesis waits for the submitter to write sc.at episodes, then faults
// the network, holds, and heals it, noting the episodes written at each
// step in tl. A submitter that ends first ends it.
func runNemesis(ctx context.Context, n *netns.Net, sc schedule, sub *proc, tl *timeline) error {
	// The submitter prints each episode as it reaches the output.
	written := func() int { return len(sub.output()) }
	for written() < sc.at {
		select {
		case <-sub.done:
			return fmt.Errorf("the run ended before the nemesis struck (%d episodes written, %d wanted first)", written(), sc.at)
		case <-time.After(20 * time.Millisecond):
		}
	}
	tl.atFault = written()
	heal := func() error {
		tl.atHeal = written()
		return n.Heal(ctx)
	}
	if sc.steps == nil {
		if err := sc.fault(ctx, n); err != nil {
			return err
		}
		var until <-chan time.Time // hold 0: nil, never
		if sc.hold > 0 {
			until = time.After(sc.hold)
		}
		select {
		case <-sub.done:
		case <-until:
		}
		return heal()
	}
	for i := 0; ; i++ {
		more, err := sc.steps(ctx, n, i)
		if err != nil {
			return err
		}
		if !more {
			return heal()
		}
		select {
		case <-sub.done:
			return heal()
		case <-time.After(sc.interval):
		}
	}
}

// killed kills p, waits for it, and returns its standard error.
func killed(p *proc) string {
	_ = p.cmd.Process.Kill()
	<-p.done
	return p.stderr.String()
}

// stderrOf is a process's standard error, once it has exited (the buffer
// is its writer's until then).
func stderrOf(p *proc) string {
	select {
	case <-p.done:
		return p.stderr.String()
	default:
		return "(still running)"
	}
}

// listening reports whether p listens on TCP port in its own network
// namespace: /proc/PID/net/tcp{,6} list the sockets of the process's
// namespace, and state 0A is LISTEN.
func listening(p *proc, port int) bool {
	var b []byte
	for _, f := range []string{"tcp", "tcp6"} { // Go may listen dual-stack
		t, _ := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/net/" + f)
		b = append(b, t...)
	}
	local := fmt.Sprintf(":%04X ", port)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1]+" ", local) && f[3] == "0A" {
			return true
		}
	}
	return false
}
