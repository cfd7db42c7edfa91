package natsrun_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
)

// These tests are an operator's: several submitters, mixed workers,
// abandoned and cancelled runs, on a real (embedded) nats-server.

// TestMixedFleetLeavesRunsToCapableWorkers: of three workers, one lacks
// the run's scenario and one speaks an older protocol; both leave the run
// to the third, which plays all of it, and the submitter names them and
// their reasons. Before, the one lacking the scenario recorded its share
// of the episodes as failed.
func TestMixedFleetLeavesRunsToCapableWorkers(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	able, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "able"})
	lacking, err := env.NewRegistry(tictactoe.New())
	require.NoError(t, err)
	short, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "short", Registry: lacking})
	old, err := c.NewOlderWorker(context.Background(), natsrun.WorkerConfig{Concurrency: 2, Name: "old", Registry: testscen.Registry(testscen.Options{}), PollWait: 200 * time.Millisecond}, natsrun.ProtocolVersion-1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = old.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "3"}, Policy: "random", Episodes: 30, GroupSize: 3, Seed: 4, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)
	got, sum, st := remote(t, c, "mixed-fleet", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 30, sum.Episodes)
	assert.Zero(t, st.Failed)
	assert.Equal(t, int64(30), able.Stats().Played)
	assert.Zero(t, short.Stats().Played+short.Stats().Rejected)
	assert.Zero(t, old.Stats().Played+old.Stats().Rejected)
	eventually(t, "both refusals", func() bool { return len(st.Refusals) == 2 || len(refusalsOf(t, c, "mixed-fleet")) == 2 })
	if len(st.Refusals) == 2 {
		assert.Equal(t, "old", st.Refusals[0].Worker)
		assert.Contains(t, st.Refusals[0].Reason, fmt.Sprintf("submitted under protocol %d", natsrun.ProtocolVersion))
		assert.Contains(t, st.Refusals[0].Reason, fmt.Sprintf("this process speaks protocol %d", natsrun.ProtocolVersion-1))
		assert.Equal(t, "short", st.Refusals[1].Worker)
		assert.Contains(t, st.Refusals[1].Reason, `unknown scenario "count"`)
	}
}

func refusalsOf(t *testing.T, c *natsrun.Client, run string) []natsrun.Refusal {
	info, err := c.Run(context.Background(), run)
	if err != nil {
		return nil
	}
	return info.Refusals
}

// TestSecondSubmitterIsRefused: while a submitter collects a run, a second
// one on the same id is refused, naming the holder, instead of hanging
// (it used to re-attach, see the first purge the run, and poll forever);
// the first finishes with a local run's bytes. Once the first is done, the
// same command plays the run again and writes the same bytes.
func TestSecondSubmitterIsRefused(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	a := open(t, connect(t, srv), cfg)
	b := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 20 * time.Millisecond})
	worker(t, a, natsrun.WorkerConfig{Registry: reg, Concurrency: 4})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 40, GroupSize: 2, Concurrency: 2, Seed: 12, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	xa, err := a.Start(ctx, "shared", rc.Config, spec)
	require.NoError(t, err)
	result := make(chan string, 1)
	go func() {
		defer xa.Close()
		var buf bytes.Buffer
		_, err := xa.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&buf, trajectories.Flat)))
		if err != nil {
			buf.WriteString("error: " + err.Error())
		}
		result <- buf.String()
	}()
	_, err = b.Start(ctx, "shared", rc.Config, spec)
	require.ErrorIs(t, err, natsrun.ErrRunBusy)
	assert.Contains(t, err.Error(), "is collected by submitter")
	assert.Contains(t, err.Error(), "renewed its lease")
	require.Equal(t, want, <-result)

	got, _, st := remote(t, b, "shared", rc, spec, trajectories.Flat)
	require.Equal(t, want, got, "a run completed and purged is played again alike")
	assert.False(t, st.Resumed)
}

// TestSilentSubmitterIsTakenOver: a submitter that goes silent (stopped,
// or cut off by a partition) loses its lease after the TTL; a second one
// takes the run over and completes it with a local run's bytes, and the
// first, back, stops with ErrLeaseLost at its next renewal instead of
// collecting (and purging) under the second.
func TestSilentSubmitterIsTakenOver(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	reg := testscen.Registry(testscen.Options{Delay: 30 * time.Millisecond})
	a := open(t, connect(t, srv), cfg)
	worker(t, a, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 200, Concurrency: 1, Seed: 13})
	want := local(t, rc, trajectories.Flat)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	xa, err := a.Start(ctx, "taken", rc.Config, spec)
	require.NoError(t, err)
	defer xa.Close()
	errA := make(chan error, 1)
	go func() {
		_, err := xa.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&bytes.Buffer{}, trajectories.Flat)))
		errA <- err
	}()
	eventually(t, "a few episodes", func() bool { return xa.Stats().Collected >= 3 })
	xa.Stall(true)

	b := open(t, connect(t, srv), cfg)
	xb, err := b.Start(ctx, "taken", rc.Config, spec)
	require.NoError(t, err, "a silent holder's lease is taken over")
	defer xb.Close()
	assert.True(t, xb.Stats().Resumed)
	xa.Stall(false)
	err = <-errA
	require.ErrorIs(t, err, natsrun.ErrLeaseLost)
	assert.Contains(t, err.Error(), "is now collected by submitter")

	var got bytes.Buffer
	sum, err := xb.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&got, trajectories.Flat)))
	require.NoError(t, err)
	assert.Equal(t, 200, sum.Episodes)
	require.Equal(t, want, got.String())
}

// midRun plays a long run on a fresh deployment and, once a few episodes
// are played, calls stop with the deployment's client; it returns the
// client, the worker and the run's error.
func midRun(t *testing.T, id string, stop func(c *natsrun.Client)) (*natsrun.Client, *natsrun.Worker, error) {
	t.Helper()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{Delay: 50 * time.Millisecond})
	w, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 200, Seed: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x, err := c.Start(ctx, id, rc.Config, spec)
	require.NoError(t, err)
	defer x.Close()
	go func() {
		eventually(t, "a few episodes", func() bool { return w.Stats().Played >= 4 })
		stop(c)
	}()
	_, err = x.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&bytes.Buffer{}, trajectories.Flat)))
	return c, w, err
}

// TestPurgeUnderASubmitterEndsIt: a run purged while its submitter
// collects it (troupe runs purge) ends the submitter with ErrLeaseLost,
// at its next lease renewal, instead of leaving it polling for results
// that are gone.
func TestPurgeUnderASubmitterEndsIt(t *testing.T) {
	t.Parallel()
	_, w, err := midRun(t, "purged", func(c *natsrun.Client) {
		require.NoError(t, c.Purge(context.Background(), "purged"))
	})
	require.ErrorIs(t, err, natsrun.ErrLeaseLost)
	assert.Contains(t, err.Error(), "purged")
	eventually(t, "the worker to stop playing the run", func() bool { return w.RunsFollowed() == 0 })
}

// TestRunsKeepTheirOwnDeliverySettings: a second submitter with a much
// shorter ack wait does not reconfigure the first run's delivery: the
// first run's long episodes are never handed out twice. (The shared
// consumer used to take the last submitter's ack wait, under workers
// whose heartbeat interval was fixed at their start.)
func TestRunsKeepTheirOwnDeliverySettings(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	slow := testConfig()
	slow.AckWait = 3 * time.Second
	a := open(t, connect(t, srv), slow)
	reg := testscen.Registry(testscen.Options{Delay: 400 * time.Millisecond})
	w1, _ := worker(t, a, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	w2, _ := worker(t, a, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	// Episodes of 4 turns of 400ms, well under 3s, well over 300ms.
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 6, Concurrency: 3, Seed: 2})
	want := local(t, rc, trajectories.Flat)

	fast := testConfig()
	fast.AckWait = 300 * time.Millisecond
	b := open(t, connect(t, srv), fast)
	other, ospec := plan(t, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "1"}, Policy: "random", Episodes: 4, Seed: 8})
	result := make(chan string, 1)
	go func() {
		got, _, _ := remote(t, a, "slow", rc, spec, trajectories.Flat)
		result <- got
	}()
	eventually(t, "the slow run in flight", func() bool {
		s, err := a.Stats(context.Background())
		return err == nil && s.InFlight > 0
	})
	_, _, _ = remote(t, b, "fast", other, ospec, trajectories.Flat)
	got := <-result
	require.Equal(t, want, got)
	assert.Zero(t, w1.Stats().Redelivered+w2.Stats().Redelivered, "no episode of the slow run was handed out twice")
	assert.Equal(t, int64(6+4), w1.Stats().Played+w2.Stats().Played, "each episode played once")
}

// TestCancelRemovesQueuedRequests: troupe runs cancel stops a run: its
// queued requests go at once (the workers play only what they held), its
// submitter stops with ErrCancelled, and a Start on it is refused until it
// is purged, after which it runs anew.
func TestCancelRemovesQueuedRequests(t *testing.T) {
	t.Parallel()
	c, w, err := midRun(t, "cancelled", func(c *natsrun.Client) {
		require.NoError(t, c.Cancel(context.Background(), "cancelled", "by the test"))
	})
	require.ErrorIs(t, err, natsrun.ErrCancelled)
	assert.Contains(t, err.Error(), "by the test")
	ctx := context.Background()
	info, err := c.Run(ctx, "cancelled")
	require.NoError(t, err)
	assert.Zero(t, info.Queued)
	assert.Contains(t, info.Cancelled, "by the test")
	_, work, _, _, err := c.StoreSize(ctx)
	require.NoError(t, err)
	assert.Zero(t, work, "no request of the run is left queued")
	// Nothing is queued: once the workers' hands are empty, nothing more can
	// be played.
	eventually(t, "the workers' hands empty", func() bool { return w.Stats().Busy == 0 })
	played := w.Stats().Played
	assert.Less(t, played, int64(20), "the workers played what they held, not the queue")

	reg := testscen.Registry(testscen.Options{})
	small, sspec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 3, Seed: 3})
	_, err = c.Start(ctx, "cancelled", small.Config, sspec)
	require.ErrorIs(t, err, natsrun.ErrCancelled)
	require.NoError(t, c.Purge(ctx, "cancelled"))
	_, err = c.Run(ctx, "cancelled")
	require.ErrorIs(t, err, natsrun.ErrNoRun)
	_, sum, _ := remote(t, c, "cancelled", small, sspec, trajectories.Flat)
	assert.Equal(t, 3, sum.Episodes)
}

// TestInterruptedRunLeavesNothingQueued: a submitter interrupted (Ctrl-C)
// removes its queued requests, so that the workers do not play on for
// nobody; re-attached, it queues them again and completes alike.
func TestInterruptedRunLeavesNothingQueued(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{Delay: 20 * time.Millisecond})
	w, stop := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 60, Concurrency: 1, Seed: 5})
	want := local(t, rc, trajectories.Flat)
	ctx, cancel := context.WithCancelCause(context.Background())
	x, err := c.Start(ctx, "ctrl-c", rc.Config, spec)
	require.NoError(t, err)
	go func() {
		eventually(t, "a few episodes", func() bool { return w.Stats().Played >= 5 })
		cancel(errStop)
	}()
	_, err = x.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&bytes.Buffer{}, trajectories.Flat)))
	require.ErrorIs(t, err, errStop)
	require.NoError(t, x.Close())
	bg := context.Background()
	_, work, _, _, err := c.StoreSize(bg)
	require.NoError(t, err)
	// What the workers held when the run stopped may still be acknowledged.
	assert.Zero(t, work, "no request left queued")
	eventually(t, "the workers' hands empty", func() bool { return w.Stats().Busy == 0 })
	assert.Less(t, w.Stats().Played, int64(20), "the workers stopped with the run")
	stop()

	worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	got, sum, st := remote(t, c, "ctrl-c", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 60, sum.Episodes)
	assert.True(t, st.Resumed)
}

// TestAbandonedRunsExpire: 20 runs abandoned mid-way (their submitters
// gone, nothing purged) leave the store as empty as before once their age
// limit passes: specs, markers, requests, results and consumers all go,
// and the workers forget them.
func TestAbandonedRunsExpire(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.DuplicateWindow, cfg.ResultsMaxAge = time.Second, 15*time.Second
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 10 * time.Millisecond})
	w, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 4})
	bg := context.Background()
	kv0, work0, res0, cons0, err := c.StoreSize(bg)
	require.NoError(t, err)

	for i := range 20 {
		rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 50, Seed: uint64(i + 1)})
		x, err := c.Start(bg, fmt.Sprintf("abandoned-%d", i), rc.Config, spec)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(bg)
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		_, _ = x.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&bytes.Buffer{}, trajectories.Flat)))
		require.NoError(t, x.Close())
	}
	kv, _, res, cons, err := c.StoreSize(bg)
	require.NoError(t, err)
	t.Logf("after 20 abandoned runs: %d KV entries, %d result messages, %d consumers", kv, res, cons)
	assert.Greater(t, kv, kv0)
	runs, err := c.Runs(bg)
	require.NoError(t, err)
	assert.Len(t, runs, 20)

	eventually(t, "the abandoned runs to expire", func() bool {
		kv, work, res, cons, err := c.StoreSize(bg)
		return err == nil && kv == kv0 && work == work0 && res == res0 && cons == cons0
	})
	eventually(t, "the worker to forget them", func() bool { return w.RunsFollowed() == 0 })
	runs, err = c.Runs(bg)
	require.NoError(t, err)
	assert.Empty(t, runs)
}

// TestWorkerCachesAreBounded: a worker that plays many runs keeps the
// executors of the runs it still follows only, and at most 64.
func TestWorkerCachesAreBounded(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	reg := testscen.Registry(testscen.Options{})
	for i := range 12 {
		rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 2, Seed: uint64(i + 1)})
		_, sum, _ := remote(t, c, fmt.Sprintf("many-%d", i), rc, spec, trajectories.Flat)
		require.Equal(t, 2, sum.Episodes)
	}
	eventually(t, "the worker to forget the completed runs", func() bool { return w.RunsFollowed() == 0 && w.ExecutorsCached() == 0 })
}

// TestBatchedRequests: with several episodes' requests in one work
// message, the output is a local run's; a worker stopped in the middle of
// a batch hands it back, and the worker that gets it next plays only the
// episodes not yet stored.
func TestBatchedRequests(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.Batch = 7
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 30 * time.Millisecond})
	a, stopA := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 40, GroupSize: 4, Concurrency: 3, Seed: 17, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)
	go func() {
		eventually(t, "a few episodes", func() bool { return a.Stats().Played >= 3 })
		stopA()
	}()
	result := make(chan string, 1)
	var st natsrun.ExecutorStats
	go func() {
		got, _, s := remote(t, c, "batched", rc, spec, trajectories.Flat)
		st = s
		result <- got
	}()
	eventually(t, "a to stop", func() bool { return a.Stats().HandedBack > 0 })
	b, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	require.Equal(t, want, <-result)
	assert.Equal(t, int64(40), a.Stats().Played+b.Stats().Played, "every episode played once")
	assert.Equal(t, int64(40), st.Published)
}

// TestWorkerFollowsRunsWhileFingerprinting: a worker checks a run's
// fingerprint on the run's own goroutine, not on the one that follows the
// runs. Its elfarol's games wait at a gate, so the first run's fingerprint
// (three episodes of elfarol) stalls until the gate opens; meanwhile the
// worker plays a second run, of another scenario, to the end. Once the
// gate opens, the first run's fingerprint is the submitter's and the run
// plays as a local one. Before, a large scenario's fingerprint (about 2 s
// at 100,000 agents) held up every other run.
func TestWorkerFollowsRunsWhileFingerprinting(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	gate, entered := make(chan struct{}), make(chan struct{})
	var enter, release sync.Once
	elf := elfarol.New()
	gated := env.Define(elf.Info(), func(p env.Params, seed uint64) (env.Game, error) {
		enter.Do(func() { close(entered) })
		<-gate
		return elf.New(p, seed)
	})
	wreg, err := env.NewRegistry(gated, testscen.Count())
	require.NoError(t, err)
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Registry: wreg})
	// Runs before the worker's cleanup (cleanups run last first), which
	// waits for the games at the gate.
	t.Cleanup(func() { release.Do(func() { close(gate) }) })

	reg := testscen.Registry(testscen.Options{})
	slowPlan, slowSpec := plan(t, reg, testscen.Plan{Scenario: "elfarol", Params: map[string]string{"agents": "8", "nights": "4"}, Policy: "random", Episodes: 4, Seed: 2})
	slowWant := local(t, slowPlan, trajectories.Flat)
	slow := make(chan string, 1)
	go func() {
		defer close(slow) // also when remote fails the test
		got, _, _ := remote(t, c, "gated", slowPlan, slowSpec, trajectories.Flat)
		slow <- got
	}()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the worker never started the gated run's fingerprint")
	}

	fastPlan, fastSpec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 4, Seed: 1})
	got, _, _ := remote(t, c, "ungated", fastPlan, fastSpec, trajectories.Flat)
	require.Equal(t, local(t, fastPlan, trajectories.Flat), got, "the other run, played while the first's fingerprint stalls")
	select {
	case <-slow:
		t.Fatal("the gated run finished before its gate opened")
	default:
	}

	release.Do(func() { close(gate) })
	slowGot, ok := <-slow
	require.True(t, ok, "the gated run failed")
	require.Equal(t, slowWant, slowGot)
	assert.Zero(t, w.Stats().Refused)
	assert.Equal(t, int64(8), w.Stats().Played)
}

// capacity3 is elfarol as a worker built from a changed copy might play
// it: the same name, roles and parameters, but every night's capacity is
// 3 whatever the run says.
func capacity3(t *testing.T) env.Scenario {
	t.Helper()
	sc, err := testscen.Registry(testscen.Options{ElfarolCapacity: "3"}).Lookup("elfarol")
	require.NoError(t, err)
	return sc
}

// TestWorkerWithADifferentScenarioRefuses: of three workers, one plays an
// elfarol that behaves differently under the same name (capacity always
// 3) and one a separately built but equal elfarol. The odd one refuses
// the run, naming the scenario and both fingerprints, and plays none of
// it; the other two share it, and the output is a local run's, byte for
// byte. Before, the odd worker's episodes went into the output silently.
func TestWorkerWithADifferentScenarioRefuses(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	able, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "able"})
	sameReg, err := env.NewRegistry(elfarol.New())
	require.NoError(t, err)
	same, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "same", Registry: sameReg})
	oddReg, err := env.NewRegistry(capacity3(t))
	require.NoError(t, err)
	odd, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "odd", Registry: oddReg})

	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "elfarol", Params: map[string]string{"agents": "8", "nights": "4"}, Policy: "random", Episodes: 40, GroupSize: 2, Seed: 9, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)
	got, sum, st := remote(t, c, "odd-scenario", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 40, sum.Episodes)
	assert.Zero(t, st.Failed)
	assert.Zero(t, odd.Stats().Played+odd.Stats().Rejected)
	assert.Equal(t, int64(1), odd.Stats().Refused)
	assert.Zero(t, able.Stats().Refused+same.Stats().Refused)
	assert.Equal(t, int64(40), able.Stats().Played+same.Stats().Played)
	var refusals []natsrun.Refusal
	eventually(t, "the refusal", func() bool {
		refusals = st.Refusals
		if len(refusals) == 0 {
			refusals = refusalsOf(t, c, "odd-scenario")
		}
		return len(refusals) == 1
	})
	assert.Equal(t, "odd", refusals[0].Worker)
	assert.Contains(t, refusals[0].Reason, "scenario elfarol plays differently on this worker")
	assert.Regexp(t, `the run's fingerprint is sha256:[0-9a-f]{32}, this worker's sha256:[0-9a-f]{32}`, refusals[0].Reason)
}

// TestRunWhoseConsumerLostItsStorage: a run whose consumer's directory
// went from under it (the server removing a purged earlier run's consumer
// directory after the new one was made in its place, which failed
// TestSecondSubmitterIsRefused once in ten under load) is played all the
// same: the submitter deletes the broken consumer and makes it anew.
// Before, every create of it failed alike until the run's deadline.
func TestRunWhoseConsumerLostItsStorage(t *testing.T) {
	srv, dir := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 6, Seed: 21})
	want := local(t, rc, trajectories.Flat)
	x, err := c.Start(context.Background(), "lost", rc.Config, spec)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	var consumerDirs []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "run_lost" && filepath.Base(filepath.Dir(p)) == "obs" {
			consumerDirs = append(consumerDirs, p)
		}
		return err
	}))
	require.Len(t, consumerDirs, 1, "the run's consumer directory")
	require.NoError(t, os.RemoveAll(consumerDirs[0]))

	worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	got, _, _ := remote(t, c, "lost", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
}
