package natsrun_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// These tests start real processes: workers and submitters built from
// internal/testworker, and nats-server built from the module, all on
// 127.0.0.1, so that they can be killed for real.

func workerArgs(url string, cfg natsrun.Config, extra ...string) []string {
	args := []string{"worker", "-url", url, "-ack-wait", cfg.AckWait.String(), "-max-deliver", strconv.Itoa(cfg.MaxDeliver)}
	if cfg.Replicas > 0 {
		args = append(args, "-replicas", strconv.Itoa(cfg.Replicas))
	}
	return append(args, extra...)
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
}

// TestKilledWorkerIsReplaced: a worker process killed with SIGKILL in the
// middle of its episodes loses nothing; another worker plays them once the
// ack wait passes, and the output holds every episode exactly once.
func TestKilledWorkerIsReplaced(t *testing.T) {
	t.Parallel()
	skipShort(t)
	srv, _ := embedded(t, "127.0.0.1:0")
	cfg := testConfig()
	c := open(t, connect(t, srv), cfg)
	bin := testworkerBin(t)
	delay := "-delay=100ms"
	a := start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=3", delay, "-name=a")...)
	b := start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=3", delay, "-name=b")...)

	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "3"}, Policy: "sleepy", Episodes: 30, GroupSize: 2, Concurrency: 4, Seed: 21, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)

	go func() {
		// Kill a while it holds three episodes.
		eventually(t, "six episodes in flight", func() bool {
			s, err := c.Stats(context.Background())
			return err == nil && s.InFlight == 6
		})
		a.signal(t, syscall.SIGKILL)
	}()
	got, sum, st := remote(t, c, "sigkill", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 30, sum.Episodes)
	assert.Equal(t, -1, a.wait(), "a died of SIGKILL")
	assert.GreaterOrEqual(t, st.Redelivered, int64(1), "a's episodes went to b")

	b.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, b.wait(), "b stops cleanly on SIGTERM:\n%s", b.stderr)
}

// TestTerminatedWorkerHandsBack: SIGTERM makes a worker process stop
// pulling, hand back what it holds and exit 0; the run completes on the
// other worker.
func TestTerminatedWorkerHandsBack(t *testing.T) {
	t.Parallel()
	skipShort(t)
	srv, _ := embedded(t, "127.0.0.1:0")
	cfg := testConfig()
	c := open(t, connect(t, srv), cfg)
	bin := testworkerBin(t)
	a := start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=2", "-delay=200ms", "-name=a")...)

	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "4"}, Policy: "sleepy", Episodes: 8, Seed: 2})
	want := local(t, rc, trajectories.Flat)
	result := make(chan string, 1)
	go func() {
		got, _, _ := remote(t, c, "sigterm", rc, spec, trajectories.Flat)
		result <- got
	}()
	eventually(t, "a to hold two episodes", func() bool {
		s, err := c.Stats(context.Background())
		return err == nil && s.InFlight == 2
	})
	a.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, a.wait(), "a exits 0 on SIGTERM:\n%s", a.stderr)
	out := a.output()
	require.NotEmpty(t, out, "a prints its stats on the way out")
	var ws natsrun.WorkerStats
	require.NoError(t, json.Unmarshal([]byte(out[len(out)-1]), &ws))
	assert.Equal(t, int64(2), ws.HandedBack, "a held two episodes when told to stop, and handed both back")
	assert.Zero(t, ws.Busy)

	start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=2", "-delay=200ms", "-name=b")...)
	require.Equal(t, want, <-result)
}

// TestKilledSubmitterReattaches: the submitter process dies (SIGKILL)
// mid-run; the workers carry on; a new submitter re-attaches by run id and
// writes the local run's output, without any episode played twice.
func TestKilledSubmitterReattaches(t *testing.T) {
	t.Parallel()
	skipShort(t)
	srv, _ := embedded(t, "127.0.0.1:0")
	cfg := testConfig()
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 30 * time.Millisecond})
	w, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 3})

	p := testscen.Plan{Scenario: "elfarol", Params: map[string]string{"agents": "4", "nights": "2", "capacity": "2"}, Policy: "sleepy", Episodes: 40, GroupSize: 4, Concurrency: 2, Seed: 77, Allocators: []string{"difference", "team"}}
	rc, spec := plan(t, reg, p)
	want := local(t, rc, trajectories.Flat)
	planJSON, err := json.Marshal(p)
	require.NoError(t, err)
	sub := start(t, true, testworkerBin(t), "submit", "-url", srv.ClientURL(), "-ack-wait", cfg.AckWait.String(),
		"-max-deliver", strconv.Itoa(cfg.MaxDeliver), "-delay=30ms", "-lease", cfg.LeaseTTL.String(),
		"-run", "orphan", "-plan", string(planJSON), "-out", t.TempDir()+"/partial.jsonl")
	eventually(t, "ten episodes played", func() bool { return w.Stats().Played >= 10 })
	sub.signal(t, syscall.SIGKILL)
	assert.Equal(t, -1, sub.wait())

	got, sum, st := remote(t, c, "orphan", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 40, sum.Episodes)
	assert.True(t, st.Resumed)
	assert.GreaterOrEqual(t, st.DoneAtStart, int64(10))
	assert.Equal(t, int64(40), w.Stats().Played, "every episode played exactly once")
	assert.LessOrEqual(t, st.Published, 40-st.DoneAtStart-st.QueuedAtStart, "no finished or queued episode was queued again")
}

// TestMaxDeliverRecordsFailure: an episode that kills every worker that
// plays it is handed out the run's MaxDeliver times (the submitter's, not
// the workers' own), then recorded as failed with the reason; the rest of
// the run completes.
func TestMaxDeliverRecordsFailure(t *testing.T) {
	t.Parallel()
	skipShort(t)
	srv, _ := embedded(t, "127.0.0.1:0")
	cfg := testConfig()
	cfg.MaxDeliver = 2
	c := open(t, connect(t, srv), cfg)
	bin := testworkerBin(t)

	reg := testscen.Registry(testscen.Options{})
	p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "2"}, Policy: "random", Episodes: 8, Seed: 5}
	rc, _ := plan(t, reg, p)
	doomed := rc.Requests()[3]
	p.Params["crash_seed"] = strconv.FormatUint(doomed.Seed, 10)
	rc, _ = plan(t, reg, p)
	want := local(t, rc, trajectories.Flat)
	spec := natsrun.Spec{Policies: runspec.Named(map[string]string{"player": "crash"})}

	// A supervisor keeps two workers alive, as systemd or Kubernetes would.
	ctx, stop := context.WithCancel(context.Background())
	var crashes sync.WaitGroup
	crashCount := 0
	var mu sync.Mutex
	for i := range 2 {
		crashes.Go(func() {
			for ctx.Err() == nil {
				// The workers' own max deliver is not the run's: the run's
				// rules.
				wcfg := cfg
				wcfg.MaxDeliver = 7
				w := start(t, true, bin, workerArgs(srv.ClientURL(), wcfg, "-crash", "-concurrency=1", "-name=w"+strconv.Itoa(i))...)
				done := make(chan int, 1)
				go func() { done <- w.wait() }()
				select {
				case code := <-done:
					mu.Lock()
					if code == testscen.CrashExit {
						crashCount++
					}
					mu.Unlock()
				case <-ctx.Done():
					w.signal(t, syscall.SIGTERM)
					<-done
				}
			}
		})
	}
	var eps []*trajectories.Episode
	rc.observe = func(ep *trajectories.Episode) { eps = append(eps, ep) }
	got, sum, _ := remote(t, c, "doomed", rc, spec, trajectories.Flat)
	stop()
	crashes.Wait()

	assert.Equal(t, 2, crashCount, "the doomed episode was delivered MaxDeliver times")
	require.Len(t, eps, 8)
	ep := eps[3]
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Equal(t, natsrun.EndMaxDeliver, ep.End)
	assert.Contains(t, ep.Err, "given up after 2 deliveries")
	assert.Equal(t, 7, sum.ByStatus[protocol.StatusCompleted])
	// The others are the local run's episodes: without episode 3's
	// samples, and with the sample indexes that follow them renumbered,
	// the local output is the same. Episode 3 is in the file all the
	// same, as one placeholder with its error.
	assert.Equal(t, withoutEpisode(want, 3), withoutEpisode(got, 3))
	var doomedLines []string
	for line := range strings.Lines(got) {
		if strings.Contains(line, `"episode":3,`) {
			doomedLines = append(doomedLines, line)
		}
	}
	require.Len(t, doomedLines, 1)
	assert.Contains(t, doomedLines[0], `"troupe_placeholder":true`)
	assert.Contains(t, doomedLines[0], "given up after 2 deliveries")
}

var indexRE = regexp.MustCompile(`^\{"group_index":(\d+),"index":\d+,`)

// withoutEpisode removes the lines of episode idx from flat JSONL output
// and renumbers the sample indexes.
func withoutEpisode(jsonl string, idx int64) string {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(jsonl) {
		if strings.Contains(line, `"episode":`+strconv.FormatInt(idx, 10)+`,`) {
			continue
		}
		b.WriteString(indexRE.ReplaceAllString(line, `{"group_index":${1},"index":`+strconv.Itoa(n)+`,`))
		n++
	}
	return b.String()
}

// TestClusterSurvivesANodeLoss: a 3-node JetStream cluster on loopback
// loses the node that leads the work queue mid-run; the run completes with
// nothing lost or duplicated.
func TestClusterSurvivesANodeLoss(t *testing.T) {
	skipShort(t)
	cl := startCluster(t, 3)
	cfg := testConfig()
	cfg.Replicas = 3
	url := cl.url()
	c := open(t, connectURL(t, url), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 20 * time.Millisecond})
	w1, _ := worker(t, open(t, connectURL(t, url), cfg), natsrun.WorkerConfig{Registry: reg, Concurrency: 3})
	w2, _ := worker(t, open(t, connectURL(t, url), cfg), natsrun.WorkerConfig{Registry: reg, Concurrency: 3})

	cfg.KeepResults = true
	kc := open(t, connectURL(t, url), cfg)
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "tictactoe", Policy: "sleepy", Episodes: 60, GroupSize: 2, Concurrency: 4, Seed: 31, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)

	leader, err := c.WorkStreamLeader(context.Background())
	require.NoError(t, err)
	require.Contains(t, cl.procs, leader)
	var once sync.Once
	rc.observe = func(ep *trajectories.Episode) {
		if ep.Index >= 10 {
			once.Do(func() { cl.procs[leader].signal(t, syscall.SIGKILL) })
		}
	}
	got, sum, _ := remote(t, kc, "cluster", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 60, sum.Episodes)
	assert.Equal(t, -1, cl.procs[leader].wait(), "the leader was killed")

	// Listing keys takes a consumer, which the cluster may still be
	// placing after the loss: ask until it answers.
	var keys []string
	eventually(t, "the done markers", func() bool {
		var err error
		keys, err = kc.DoneKeys(context.Background(), "cluster")
		return err == nil
	})
	assert.Len(t, keys, 60, "each episode recorded once")
	assert.Equal(t, int64(60), w1.Stats().Played+w2.Stats().Played, "every episode stored by exactly one worker")
	var newLeader string
	eventually(t, "the work stream's leader after the loss", func() bool {
		l, err := c.WorkStreamLeader(context.Background())
		newLeader = l
		return err == nil && l != ""
	})
	assert.NotEqual(t, leader, newLeader)
}

// TestChangedBuildOfAScenarioIsRefused: two worker processes, one built
// with an elfarol that always plays capacity 3 (same name, same troupe
// version). It refuses the run by name, naming both fingerprints, and
// plays none of it; the other plays all of it, byte for byte as a local
// run. Before, the changed worker's episodes went into the output with
// exit 0 and no warning.
func TestChangedBuildOfAScenarioIsRefused(t *testing.T) {
	skipShort(t)
	srv, _ := embedded(t, "127.0.0.1:0")
	cfg := testConfig()
	c := open(t, connect(t, srv), cfg)
	bin := testworkerBin(t)
	good := start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=2", "-name=good")...)
	odd := start(t, true, bin, workerArgs(srv.ClientURL(), cfg, "-concurrency=2", "-name=odd", "-elfarol-capacity=3")...)

	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "elfarol", Params: map[string]string{"agents": "8", "nights": "4"}, Policy: "random", Episodes: 60, GroupSize: 3, Seed: 5, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)
	got, sum, st := remote(t, c, "changed-build", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 60, sum.Episodes)
	assert.Zero(t, st.Failed)
	var refusals []natsrun.Refusal
	eventually(t, "the refusal", func() bool {
		refusals = st.Refusals
		if len(refusals) == 0 {
			refusals = refusalsOf(t, c, "changed-build")
		}
		return len(refusals) == 1
	})
	assert.Equal(t, "odd", refusals[0].Worker)
	assert.Regexp(t, `scenario elfarol plays differently on this worker: the run's fingerprint is sha256:[0-9a-f]{32}, this worker's sha256:[0-9a-f]{32}`, refusals[0].Reason)

	var stats [2]natsrun.WorkerStats
	for i, p := range []*proc{good, odd} {
		p.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.wait(), "stops cleanly on SIGTERM:\n%s", p.stderr)
		out := p.output()
		require.NotEmpty(t, out)
		require.NoError(t, json.Unmarshal([]byte(out[len(out)-1]), &stats[i]))
	}
	assert.Equal(t, int64(60), stats[0].Played)
	assert.Zero(t, stats[1].Played+stats[1].Rejected)
	assert.Equal(t, int64(1), stats[1].Refused)
}
