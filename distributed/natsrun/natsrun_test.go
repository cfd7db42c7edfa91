package natsrun_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestSameOutputAsALocalRun is the central promise: a run played by
// workers over NATS writes the bytes a local run writes, for every layout,
// with groups, with counterfactual allocators that replay episodes on
// the collector, and tree sampled (the candidates travel in the records).
func TestSameOutputAsALocalRun(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.KeepResults = true
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{})
	worker(t, c, natsrun.WorkerConfig{Concurrency: 3})
	worker(t, c, natsrun.WorkerConfig{Concurrency: 2})

	for _, tc := range []struct {
		name   string
		plan   testscen.Plan
		layout trajectories.Layout
	}{
		{"elfarol counterfactual", testscen.Plan{
			Scenario: "elfarol", Params: map[string]string{"agents": "6", "nights": "3", "capacity": "2"},
			Policy: "random", Episodes: 24, GroupSize: 3, Concurrency: 4, Seed: 11,
			Allocators: []string{"team", "difference", "shapley"},
		}, trajectories.Flat},
		{"tictactoe groups nested", testscen.Plan{
			Scenario: "tictactoe", Policy: "random", Episodes: 20, GroupSize: 4, Concurrency: 2, Seed: 5,
			Allocators: []string{"grpo", "team"},
		}, trajectories.Nested},
		{"tictactoe tree sampled", testscen.Plan{
			Scenario: "tictactoe", Policy: "random", Episodes: 6, GroupSize: 2, Concurrency: 2, Seed: 8,
			Allocators: []string{"at-grpo", "team"}, Tree: &runspec.Tree{K: 3, Alpha: 0.5},
		}, trajectories.Flat},
		{"count one at a time", testscen.Plan{
			Scenario: "count", Params: map[string]string{"turns": "9"}, Policy: "random", Episodes: 15, Seed: 3,
			Allocators: []string{"individual"},
		}, trajectories.Flat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, spec := plan(t, reg, tc.plan)
			want := local(t, rc, tc.layout)
			run := strings.ReplaceAll(tc.name, " ", "-")
			got, sum, st := remote(t, c, run, rc, spec, tc.layout)
			require.Equal(t, want, got)
			assert.Equal(t, tc.plan.Episodes, sum.Episodes)
			assert.Equal(t, int64(tc.plan.Episodes), st.Collected)
			assert.False(t, st.Resumed)

			ctx := context.Background()
			keys, err := c.DoneKeys(ctx, run)
			require.NoError(t, err)
			assert.Len(t, keys, tc.plan.Episodes, "one done marker per episode")
			msgs, err := c.ResultMessages(ctx, run)
			require.NoError(t, err)
			assert.Zero(t, msgs, "results smaller than a chunk ride in their done markers")
		})
	}
}

// chunkedRun is a deployment that keeps results, with the smallest chunk
// size: results larger than a chunk go to the results stream (smaller
// ones ride in their done markers), and p's run on it.
func chunkedRun(t *testing.T, p testscen.Plan) (*natsrun.Client, *natsrun.Worker, runPlan, natsrun.Spec) {
	t.Helper()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.KeepResults, cfg.ChunkSize = true, 1024
	c := open(t, connect(t, srv), cfg)
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	rc, spec := plan(t, testscen.Registry(testscen.Options{}), p)
	return c, w, rc, spec
}

// TestLargeResultsTravelInChunks: a result larger than the chunk size,
// compressed, is split into chunks and read back whole.
func TestLargeResultsTravelInChunks(t *testing.T) {
	c, _, rc, spec := chunkedRun(t, testscen.Plan{Scenario: "elfarol", Policy: "random", Episodes: 6, GroupSize: 2, Seed: 3, Allocators: []string{"team", "difference"}})
	want := local(t, rc, trajectories.Flat)
	got, _, _ := remote(t, c, "chunked", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	msgs, err := c.ResultMessages(context.Background(), "chunked")
	require.NoError(t, err)
	assert.Greater(t, msgs, uint64(6), "results larger than the chunk size travel in chunks")
}

// TestCompletedRunIsPurged: without KeepResults, a run that completes
// leaves nothing behind, and running it again plays it again.
func TestCompletedRunIsPurged(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{})
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 6, Seed: 1})

	first, _, _ := remote(t, c, "purged", rc, spec, trajectories.Flat)
	keys, err := c.DoneKeys(context.Background(), "purged")
	require.NoError(t, err)
	assert.Empty(t, keys)
	msgs, err := c.ResultMessages(context.Background(), "purged")
	require.NoError(t, err)
	assert.Zero(t, msgs)

	again, _, st := remote(t, c, "purged", rc, spec, trajectories.Flat)
	assert.Equal(t, first, again)
	assert.False(t, st.Resumed)
	assert.Equal(t, int64(12), w.Stats().Played)
}

// TestKeptRunIsRewrittenWithoutPlaying: re-attaching to a run whose
// episodes are all done writes its output from the stored results alone.
func TestKeptRunIsRewrittenWithoutPlaying(t *testing.T) {
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.KeepResults = true
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{})
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 8, Seed: 4, Allocators: []string{"team"}})

	first, _, _ := remote(t, c, "kept", rc, spec, trajectories.Flat)
	again, _, st := remote(t, c, "kept", rc, spec, trajectories.Flat)
	assert.Equal(t, first, again)
	assert.True(t, st.Resumed)
	assert.Equal(t, int64(8), st.DoneAtStart)
	assert.Zero(t, st.Published, "a finished episode must not be queued again")
	assert.Equal(t, int64(8), w.Stats().Played)
}

// TestExpiredResultsArePlayedAgain: a run re-attached after its results
// expired (ResultsMaxAge) plays those episodes again instead of failing
// them.
func TestExpiredResultsArePlayedAgain(t *testing.T) {
	// Results larger than a chunk go to the results stream, which expires
	// them on its own (smaller ones ride in their done markers, and
	// expire with them).
	c, w, rc, spec := chunkedRun(t, testscen.Plan{Scenario: "elfarol", Policy: "random", Episodes: 6, Seed: 4, Allocators: []string{"team"}})

	first, _, _ := remote(t, c, "expired", rc, spec, trajectories.Flat)
	require.NoError(t, c.PurgeResults(context.Background(), "expired"))
	again, _, st := remote(t, c, "expired", rc, spec, trajectories.Flat)
	assert.Equal(t, first, again)
	assert.True(t, st.Resumed)
	assert.Zero(t, st.Failed)
	// The worker counts an episode once its result is stored and acked,
	// which can be just after the submitter has read that result.
	assert.Eventually(t, func() bool { return w.Stats().Played == 12 }, 10*time.Second, 5*time.Millisecond,
		"played %d, want 12", w.Stats().Played)
}

func TestRunIDBelongsToOneRun(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 3, Seed: 1})
	ctx := context.Background()
	x, err := c.Start(ctx, "taken", rc.Config, spec)
	require.NoError(t, err)
	require.NoError(t, x.Close())

	rc.Seed = 2
	_, err = c.Start(ctx, "taken", rc.Config, spec)
	require.ErrorIs(t, err, natsrun.ErrRunMismatch)
	assert.Contains(t, err.Error(), "seed 2 (stored: 1)")

	_, err = c.Start(ctx, "bad.id", rc.Config, spec)
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	_, err = c.Start(ctx, "ok", rc.Config, natsrun.Spec{Policies: runspec.Named(map[string]string{"nobody": "random"})})
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	assert.Contains(t, err.Error(), `role "nobody"`)
}

func TestRunID(t *testing.T) {
	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 3, Seed: 1})
	a, err := natsrun.RunID(rc.Config, spec)
	require.NoError(t, err)
	require.NoError(t, natsrun.CheckRunID(a))
	assert.True(t, strings.HasPrefix(a, "count-"), a)
	b, err := natsrun.RunID(rc.Config, spec)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the id is a function of the run")
	rc.Concurrency = 17 // does not shape the episodes
	b, _ = natsrun.RunID(rc.Config, spec)
	assert.Equal(t, a, b)
	rc.Seed = 2
	b, _ = natsrun.RunID(rc.Config, spec)
	assert.NotEqual(t, a, b)
	rc.Seed = 1
	b, _ = natsrun.RunID(rc.Config, natsrun.Spec{Policies: runspec.Named(map[string]string{"player": "sleepy"})})
	assert.NotEqual(t, a, b)
}

// ghost is a scenario the submitter knows and the workers do not; wide is
// count with a parameter range the workers' count rejects.
func submitterOnly(t *testing.T) *env.Registry {
	t.Helper()
	ghostInfo := *testscen.Count().Info()
	ghostInfo.Name = "ghost"
	wideInfo := *testscen.Count().Info()
	wideInfo.Params = []env.ParamSpec{env.Int("turns", 4, 1, 1_000_000, "turns"), env.String("crash_seed", "", "")}
	reg, err := env.NewRegistry(env.Define(&ghostInfo, testscen.Count().New), env.Define(&wideInfo, testscen.Count().New))
	require.NoError(t, err)
	return reg
}

// TestUnplayableRunStopsWithTheReasons: a run no live worker can set up
// (a scenario they lack, parameters their scenario rejects, a policy they
// do not have) is not played, nor recorded as failed: every worker leaves
// it, and the submitter stops with ErrUnplayable naming each worker's
// reason. Nothing is written; the run stays for a capable worker.
func TestUnplayableRunStopsWithTheReasons(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	w1, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2, Name: "w1"})
	w2, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 1, Name: "w2"})
	reg := submitterOnly(t)
	for _, tc := range []struct {
		name string
		plan testscen.Plan
		spec map[string]string
		want string
	}{
		{"ghost", testscen.Plan{Scenario: "ghost", Policy: "random", Episodes: 4, Seed: 1}, nil, `unknown scenario "ghost"`},
		{"params", testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "5000"}, Policy: "random", Episodes: 4, Seed: 1}, nil, "count turns: 5000 is outside [1, 1000]"},
		{"policy", testscen.Plan{Scenario: "count", Policy: "random", Episodes: 2, Seed: 9}, map[string]string{"player": "oracle"}, `unknown policy "oracle" (scenario count has random, sleepy)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, spec := plan(t, reg, tc.plan)
			if tc.spec != nil {
				spec = natsrun.Spec{Policies: runspec.Named(tc.spec)}
			}
			id := "unplayable-" + tc.name
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			x, err := c.Start(ctx, id, rc.Config, spec)
			require.NoError(t, err)
			defer x.Close()
			var out bytes.Buffer
			sum, err := x.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&out, trajectories.Flat)))
			require.ErrorIs(t, err, natsrun.ErrUnplayable)
			assert.Contains(t, err.Error(), "worker w1: ")
			assert.Contains(t, err.Error(), "worker w2: ")
			assert.Contains(t, err.Error(), tc.want)
			assert.Zero(t, sum.Episodes)
			assert.Empty(t, out.String(), "nothing is written as failed")
			st := x.Stats()
			require.Len(t, st.Refusals, 2)
			assert.Equal(t, "w1", st.Refusals[0].Worker)
			assert.Contains(t, st.Refusals[0].Reason, tc.want)

			info, err := c.Run(ctx, id)
			require.NoError(t, err, "the run stays for a worker that can play it")
			assert.Len(t, info.Refusals, 2)
			assert.Zero(t, info.Done)
		})
	}
	assert.Zero(t, w1.Stats().Played+w2.Stats().Played+w1.Stats().Rejected+w2.Stats().Rejected)
	assert.Equal(t, int64(3), w1.Stats().Refused)
}

// TestPoisonRequestsAmongGoodOnes: requests a worker rejects end failed
// with the reason, and the others of the run play normally.
func TestPoisonRequestsAmongGoodOnes(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	w, _ := worker(t, c, natsrun.WorkerConfig{Concurrency: 2})
	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "random", Episodes: 8, Seed: 9})
	reqs := rc.Requests()
	reqs[1].Scenario = "nosuch"
	reqs[4].Params = map[string]string{"turns": "zero"}
	reqs[6].Params = map[string]string{"colour": "red"}

	ctx := context.Background()
	x, err := c.StartWithRequests(ctx, "mixed", rc.Config, spec, reqs)
	require.NoError(t, err)
	defer x.Close()
	eps := make([]*episode.Record, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { eps[i] = x.Execute(ctx, req) })
	}
	wg.Wait()
	want := map[int]string{1: `unknown scenario "nosuch"`, 4: `count turns: "zero" is not an integer`, 6: `has no parameter "colour"`}
	for i, ep := range eps {
		if reason, bad := want[i]; bad {
			assert.Equal(t, protocol.StatusFailed, ep.Status, "episode %d", i)
			assert.Equal(t, natsrun.EndRejected, ep.End)
			assert.Contains(t, ep.Err, reason)
			continue
		}
		assert.Equal(t, protocol.StatusCompleted, ep.Status, "episode %d: %s", i, ep.Err)
		assert.Equal(t, 4, ep.Emitted())
		assert.Len(t, trajectories.Samples(ep), 4)
		assert.NotNil(t, ep.Replay, "the collector rebuilds the replayer")
	}
	assert.Equal(t, int64(3), w.Stats().Rejected)

	// A request that is not the run's own is refused without queuing it.
	stray := reqs[2]
	stray.Seed++
	ep := x.Execute(ctx, stray)
	assert.Equal(t, natsrun.EndRejected, ep.End)
	assert.Contains(t, ep.Err, "not one of the 8 requests")
}

// TestHeartbeatsKeepLongEpisodes: an episode longer than the ack wait is
// not handed to a second worker while the first still plays it.
func TestHeartbeatsKeepLongEpisodes(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.AckWait = 1500 * time.Millisecond
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{Delay: 600 * time.Millisecond})
	a, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	b, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	// Each episode takes 4 turns of 600ms: well over the ack wait, which
	// only the heartbeats (every 500ms) keep from running out.
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 4, Seed: 2})
	want := local(t, rc, trajectories.Flat)
	got, _, st := remote(t, c, "long", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Zero(t, st.Redelivered)
	assert.Equal(t, int64(4), a.Stats().Played+b.Stats().Played, "no episode was played twice")
	assert.Zero(t, a.Stats().Redelivered+b.Stats().Redelivered)
}

// TestStoppedWorkerHandsBack: a worker whose context ends mid-episode hands
// its episodes back at once (no drain), and another worker plays them.
func TestStoppedWorkerHandsBack(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{Delay: 100 * time.Millisecond})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 10, Seed: 6})
	want := local(t, rc, trajectories.Flat)

	a, stopA := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 3})
	result := make(chan string, 1)
	go func() {
		got, _, _ := remote(t, c, "handback", rc, spec, trajectories.Flat)
		result <- got
	}()
	eventually(t, "worker a to hold three episodes", func() bool { return a.Stats().Busy == 3 })
	stopA()
	assert.Equal(t, int64(3), a.Stats().HandedBack)
	assert.Zero(t, a.Stats().Busy)
	b, _ := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 3})
	require.Equal(t, want, <-result)
	assert.GreaterOrEqual(t, b.Stats().Redelivered, int64(3), "b played what a handed back")
}

// TestDrainingWorkerFinishes: with a drain time, a stopping worker finishes
// the episodes in hand instead of handing them back.
func TestDrainingWorkerFinishes(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{Delay: 50 * time.Millisecond})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 6, Seed: 6})
	want := local(t, rc, trajectories.Flat)

	a, stopA := worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2, Drain: time.Minute})
	result := make(chan string, 1)
	go func() {
		got, _, _ := remote(t, c, "drain", rc, spec, trajectories.Flat)
		result <- got
	}()
	eventually(t, "worker a to hold two episodes", func() bool { return a.Stats().Busy == 2 })
	stopA()
	assert.Zero(t, a.Stats().HandedBack)
	assert.GreaterOrEqual(t, a.Stats().Played, int64(2))
	worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2})
	require.Equal(t, want, <-result)
}

// TestInterruptedSubmitterResumes: a submitter cancelled mid-run (Ctrl-C)
// writes what finished; the server restarts on the same directory; a new
// submitter re-attaches by id and the output is the local run's.
func TestInterruptedSubmitterResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reg := testscen.Registry(testscen.Options{Delay: 20 * time.Millisecond})
	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 16, GroupSize: 2, Concurrency: 2, Seed: 8, Allocators: []string{"grpo"}})
	want := local(t, rc, trajectories.Flat)
	startLocal := func() *natsrun.Local {
		l, err := natsrun.StartLocal(context.Background(), natsrun.LocalOptions{
			Embedded: natsrun.EmbeddedOptions{Dir: dir},
			Config:   testConfig(),
			Worker:   natsrun.WorkerConfig{Registry: reg, Concurrency: 2, PollWait: 200 * time.Millisecond},
		})
		require.NoError(t, err)
		return l
	}

	l := startLocal()
	ctx, cancel := context.WithCancelCause(context.Background())
	x, err := l.Client.Start(ctx, "resume", rc.Config, spec)
	require.NoError(t, err)
	go func() {
		eventually(t, "six episodes played", func() bool { return l.Worker.Stats().Played >= 6 })
		cancel(errStop)
	}()
	var partial bytes.Buffer
	sum, err := x.Run(ctx, rc.out(t, trajectories.NewJSONLWriter(&partial, trajectories.Flat)))
	require.ErrorIs(t, err, errStop)
	assert.Less(t, sum.Episodes, 16)
	require.NoError(t, x.Close())
	l.Close()
	// The worker went on with what was queued until Close stopped it.
	before := l.Worker.Stats().Played

	l = startLocal()
	defer l.Close()
	got, sum, st := remote(t, l.Client, "resume", rc, spec, trajectories.Flat)
	require.Equal(t, want, got)
	assert.Equal(t, 16, sum.Episodes)
	assert.True(t, st.Resumed)
	assert.Equal(t, before, st.DoneAtStart, "every episode stored before the restart is found done")
	assert.Equal(t, int64(16), before+l.Worker.Stats().Played, "no episode is played twice")
	assert.True(t, strings.HasPrefix(want, partial.String()), "the interrupted run wrote a prefix of the output")
}

func TestStats(t *testing.T) {
	srv, _ := embedded(t, "")
	c := open(t, connect(t, srv), testConfig())
	reg := testscen.Registry(testscen.Options{Delay: time.Hour})
	ctx := context.Background()

	rc, spec := plan(t, reg, testscen.Plan{Scenario: "count", Policy: "sleepy", Episodes: 5, Seed: 1})
	x, err := c.Start(ctx, "stats", rc.Config, spec)
	require.NoError(t, err)
	defer x.Close()
	go x.Execute(ctx, rc.Requests()[0]) // queues all five
	eventually(t, "five queued requests", func() bool {
		s, err := c.Stats(ctx)
		return err == nil && s.Queued == 5
	})
	worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 2, Name: "w1"})
	worker(t, c, natsrun.WorkerConfig{Registry: reg, Concurrency: 1, Name: "w2"})
	var s natsrun.Stats
	eventually(t, "three episodes in flight", func() bool {
		s, err = c.Stats(ctx)
		return err == nil && s.InFlight == 3 && s.Workers == 2
	})
	assert.Equal(t, uint64(2), s.Queued)
	assert.Equal(t, 3, s.Slots)
	metrics := map[string]float64{}
	for _, m := range s.Metrics() {
		assert.True(t, strings.HasPrefix(m.Name, "troupe_nats_"), m.Name)
		assert.NotEmpty(t, m.Help)
		metrics[m.Name] = m.Value
	}
	assert.Equal(t, 2.0, metrics["troupe_nats_queue_depth"])
	assert.Equal(t, 3.0, metrics["troupe_nats_in_flight"])
	assert.Equal(t, 2.0, metrics["troupe_nats_workers"])
	assert.Contains(t, metrics, "troupe_nats_redeliveries_total")

	// The same numbers, scraped as Prometheus text.
	rec := httptest.NewRecorder()
	natsrun.MetricsHandler(c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	assert.Contains(t, body, "# TYPE troupe_nats_queue_depth gauge\ntroupe_nats_queue_depth 2\n")
	assert.Contains(t, body, "# TYPE troupe_nats_workers gauge\ntroupe_nats_workers 2\n")
	assert.Contains(t, body, "# TYPE troupe_nats_redeliveries_total counter\n")
}

func TestConfigValidation(t *testing.T) {
	srv, _ := embedded(t, "")
	nc := connect(t, srv)
	for _, tc := range []struct {
		cfg  natsrun.Config
		want string
	}{
		{natsrun.Config{Prefix: "Troupe"}, `prefix "Troupe"`},
		{natsrun.Config{Prefix: "a.b"}, `prefix "a.b"`},
		{natsrun.Config{Replicas: 7}, "replicas 7"},
		{natsrun.Config{AckWait: time.Millisecond}, "ack wait 1ms"},
		{natsrun.Config{MaxDeliver: -1}, "max deliver -1"},
		{natsrun.Config{ChunkSize: 10}, "chunk size 10"},
		{natsrun.Config{ResultsMaxAge: time.Second, DuplicateWindow: time.Minute}, "shorter than the duplicate window"},
	} {
		_, err := natsrun.Open(context.Background(), nc, tc.cfg)
		require.ErrorIs(t, err, natsrun.ErrBadConfig, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
	}
	c := open(t, nc, natsrun.Config{Prefix: "other"})
	assert.Equal(t, "other", c.Config().Prefix)
	assert.Equal(t, 1024, c.Config().MaxAckPending)
	_, err := c.NewWorker(context.Background(), natsrun.WorkerConfig{})
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
}

func TestConnOptionsNeverShowSecrets(t *testing.T) {
	o := natsrun.ConnOptions{
		URL:      "nats://alice:hunter2@127.0.0.1:1,nats://s3cr3tt0ken@127.0.0.1:2",
		User:     "bob",
		Password: "pa55word",
		Token:    "t0ken-value",
		Name:     "n",
	}
	secrets := []string{"hunter2", "s3cr3tt0ken", "pa55word", "t0ken-value"}
	for _, s := range []string{o.String(), fmt.Sprint(o), fmt.Sprintf("%v %+v %#v %s", o, o, o, o)} {
		for _, secret := range secrets {
			assert.NotContains(t, s, secret)
		}
	}
	assert.Contains(t, o.String(), "nats://alice:REDACTED@127.0.0.1:1")
	assert.Contains(t, o.String(), "user=bob")

	var logged bytes.Buffer
	logger := newTextLogger(&logged)
	logger.Info("connecting", "nats", o)
	for _, secret := range secrets {
		assert.NotContains(t, logged.String(), secret)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := natsrun.Connect(ctx, o)
	require.Error(t, err)
	for _, secret := range secrets {
		assert.NotContains(t, err.Error(), secret)
	}

	for _, bad := range []natsrun.ConnOptions{
		{URL: "nats://x", CredsFile: "a", NKeyFile: "b"},
		{URL: "nats://x", TLSCert: "cert.pem"},
		{URL: "nats://x", NKeyFile: "/nonexistent/seed"},
		{},
	} {
		_, err := natsrun.Connect(ctx, bad)
		require.ErrorIs(t, err, natsrun.ErrBadConfig, "%v", bad)
	}
}

// TestEmbeddedServesOtherProcesses: with an address, the embedded server
// takes connections over TCP.
func TestEmbeddedServesOtherProcesses(t *testing.T) {
	srv, _ := embedded(t, "127.0.0.1:0")
	require.NotEmpty(t, srv.ClientURL())
	nc := connectURL(t, srv.ClientURL())
	assert.True(t, nc.IsConnected())
	quiet, _ := embedded(t, "")
	assert.Empty(t, quiet.ClientURL())

	_, err := natsrun.StartEmbedded(natsrun.EmbeddedOptions{})
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	_, err = natsrun.StartEmbedded(natsrun.EmbeddedOptions{Dir: t.TempDir(), Listen: "nope"})
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
