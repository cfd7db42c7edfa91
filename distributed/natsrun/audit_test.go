package natsrun_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	binenc "encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/distributed/wire"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// testKey is the audit key number i of a test: fixed, so that the test's
// draws are the same every time.
func testKey(i int) []byte {
	k := sha256.Sum256(binenc.BigEndian.AppendUint64([]byte("audit test key"), uint64(i)))
	return k[:]
}

// localExecutor plays cfg's episodes in this process.
func localExecutor(t testing.TB, reg *env.Registry, p testscen.Plan) (*env.LocalExecutor, []env.Request) {
	t.Helper()
	cfg, _, err := p.Config(reg)
	require.NoError(t, err)
	return &env.LocalExecutor{Play: cfg.Play, Drive: cfg.Drive}, cfg.Requests()
}

// TestAuditCatchesAOnePercentLiarAtThePredictedRate: a worker whose
// scenario lies on 1% of seeds (and passes the fingerprint) is caught, over
// many runs, as often as 1 − (1 − r)^k predicts for each run's k lies,
// within a 4σ interval, a narrow enough one to tell the audit's rate from
// half of it. Each run is the collector's audit of the liar's records,
// in-process: the decision and the check are the executor's own.
func TestAuditCatchesAOnePercentLiarAtThePredictedRate(t *testing.T) {
	t.Parallel()
	const (
		runs     = 200
		episodes = 1000
		rate     = 0.05
		lieEvery = 100
	)
	honest := testscen.Registry(testscen.Options{})
	liar := testscen.Registry(testscen.Options{LieEvery: lieEvery})
	ctx := context.Background()

	// The liar passes the fingerprint: three fixed seeds, none a multiple
	// of 100. This is the case the audit exists for.
	fingerprint := func(reg *env.Registry) string {
		sc, err := reg.Lookup("count")
		require.NoError(t, err)
		p, err := sc.Info().ParseParams(map[string]string{"turns": "1"})
		require.NoError(t, err)
		fp, err := natsrun.Fingerprint(sc, p.Map(), env.Limits{}, env.InvalidRule{})
		require.NoError(t, err)
		return fp
	}
	require.Equal(t, fingerprint(honest), fingerprint(liar), "the 1% liar must pass the fingerprint")

	var caught, expected, variance, expectedHalf float64
	var drawn, checked int
	for i := range runs {
		p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "1"}, Policy: "random", Episodes: episodes, Seed: uint64(i + 1)}
		own, reqs := localExecutor(t, honest, p)
		lying, _ := localExecutor(t, liar, p)
		stored := map[int64]*episode.Record{} // what the liar stored
		a, err := natsrun.NewAuditor(rate, testKey(i), own, func(_ context.Context, idx int64) (*episode.Record, []byte, string, error) {
			return stored[idx], nil, "liar", nil
		})
		require.NoError(t, err)
		lies := 0
		for _, req := range reqs {
			if req.Seed%lieEvery == 0 {
				lies++
			}
		}
		for _, req := range reqs {
			checked++
			if a.Picked(req.Index) {
				drawn++
			}
			stored[req.Index] = lying.Execute(ctx, req)
			ep, err := a.Check(ctx, req, "liar", stored[req.Index], nil)
			if _, failures := a.Stats(); len(failures) > 0 {
				// Caught: the first failure is the audited lie, on a lying
				// seed, and the episode handed on is the honest one.
				assert.Zero(t, reqs[failures[0].Episode].Seed%lieEvery, "run %d: an honest episode was failed", i)
				assert.Equal(t, "liar", failures[0].Worker)
				if err == nil {
					assert.Equal(t, own.Execute(ctx, req).Score, ep.Score, "run %d: the liar's record was handed on", i)
				}
				caught++
				break
			}
			require.NoError(t, err)
		}
		require.InDelta(t, rate, a.Rate(), 1e-12)
		pi := natsrun.AuditProbability(rate, lies)
		expected += pi
		variance += pi * (1 - pi)
		expectedHalf += natsrun.AuditProbability(rate/2, lies)
	}
	sd := math.Sqrt(variance)
	t.Logf("caught %v of %d runs; predicted %.1f ± %.1f (1σ); at half the rate %.1f", caught, runs, expected, sd, expectedHalf)
	assert.InDelta(t, expected, caught, 4*sd, "catch rate off the prediction")
	assert.Greater(t, math.Abs(expectedHalf-caught), 4*sd, "the interval is too wide to tell the rate from half of it")

	// The draws themselves: a binomial share of rate.
	dsd := math.Sqrt(float64(checked) * rate * (1 - rate))
	assert.InDelta(t, rate*float64(checked), float64(drawn), 4*dsd, "drawn %d of %d", drawn, checked)
}

// TestAuditPassesHonestWorkers: auditing every episode of honest workers'
// runs (groups, counterfactual replays, a policy not the default) finds
// nothing, and the output is the local run's.
func TestAuditPassesHonestWorkers(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.AuditRate = 1
	c := open(t, connect(t, srv), cfg)
	reg := testscen.Registry(testscen.Options{})
	worker(t, c, natsrun.WorkerConfig{Name: "honest-a", Concurrency: 3})
	worker(t, c, natsrun.WorkerConfig{Name: "honest-b", Concurrency: 2})
	for i, p := range []testscen.Plan{
		{Scenario: "elfarol", Params: map[string]string{"agents": "6", "nights": "3", "capacity": "2"},
			Policy: "random", Episodes: 12, GroupSize: 3, Concurrency: 4, Seed: 11, Allocators: []string{"team", "difference"}},
		{Scenario: "tictactoe", Policy: "random", Episodes: 10, GroupSize: 2, Concurrency: 2, Seed: 5, Allocators: []string{"grpo"}},
		{Scenario: "count", Params: map[string]string{"turns": "5"}, Policy: "sleepy", Episodes: 10, Seed: 3},
	} {
		rp, spec := plan(t, reg, p)
		want := local(t, rp, trajectories.Flat)
		got, _, st := remote(t, c, "honest-"+strconv.Itoa(i), rp, spec, trajectories.Flat)
		require.Equal(t, want, got)
		assert.Equal(t, int64(p.Episodes), st.Audited, "%s: every episode re-played", p.Scenario)
		assert.Empty(t, st.AuditFailures, p.Scenario)
	}
}

// auditedRun plays p on a deployment auditing at rate with key, whose only
// worker is named name and plays with reg; it returns the output, Run's
// error and the executor's stats, and the local run's output.
func auditedRun(t *testing.T, p testscen.Plan, rate float64, key []byte, name string, reg *env.Registry) (got, want string, err error, st natsrun.ExecutorStats) {
	t.Helper()
	srv, _ := embedded(t, "")
	cfg := testConfig()
	cfg.AuditRate = rate
	c := open(t, connect(t, srv), cfg)
	natsrun.SetAuditKey(c, key)
	w, _ := worker(t, c, natsrun.WorkerConfig{Name: name, Registry: reg})
	rp, spec := plan(t, testscen.Registry(testscen.Options{}), p)
	want = local(t, rp, trajectories.Flat)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, err := c.Start(ctx, "audited", rp.Config, spec)
	require.NoError(t, err)
	defer x.Close()
	var buf bytes.Buffer
	_, err = x.Run(ctx, rp.out(t, trajectories.NewJSONLWriter(&buf, trajectories.Flat)))
	assert.Zero(t, w.Stats().Refused, "the liar passes the fingerprint")
	return buf.String(), want, err, x.Stats()
}

// TestAuditCatchesALiarUnderAnotherPolicy: a worker whose scenario plays
// its default policy as everyone does (the fingerprint passes) but lies
// under "sleepy" is caught on the first audited episode; from then on its
// episodes are re-played and the submitter's written: the output is the
// local run's, and every lie is named.
func TestAuditCatchesALiarUnderAnotherPolicy(t *testing.T) {
	t.Parallel()
	p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "8"}, Policy: "sleepy", Episodes: 12, Seed: 7}
	got, want, err, st := auditedRun(t, p, 1, nil, "liar-sleepy", testscen.Registry(testscen.Options{LyingSleepy: true}))
	require.NoError(t, err)
	assert.Equal(t, want, got, "the output is the local run's")
	assert.Equal(t, int64(p.Episodes), st.Audited)
	require.Len(t, st.AuditFailures, p.Episodes, "every episode lies (it names 3 eight times)")
	for _, f := range st.AuditFailures {
		assert.Equal(t, "liar-sleepy", f.Worker)
		assert.Contains(t, f.Diff, "at byte ")
		assert.False(t, f.Written)
	}
}

// TestAuditNamesEveryLieOfACaughtWorker: a worker lying on the seeds that
// are multiples of 4, audited at rate 1: each lie is found, no honest
// episode is failed, and the output is the local run's.
func TestAuditNamesEveryLieOfACaughtWorker(t *testing.T) {
	t.Parallel()
	p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "3"}, Policy: "random", Episodes: 40, Seed: 21}
	_, reqs := localExecutor(t, testscen.Registry(testscen.Options{}), p)
	var lies []int64
	for _, r := range reqs {
		if r.Seed%4 == 0 {
			lies = append(lies, r.Index)
		}
	}
	require.NotEmpty(t, lies)
	got, want, err, st := auditedRun(t, p, 1, nil, "liar-4", testscen.Registry(testscen.Options{LieEvery: 4}))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	var found []int64
	for _, f := range st.AuditFailures {
		assert.Equal(t, "liar-4", f.Worker)
		assert.Contains(t, f.Diff, `score`, "the first difference is the score")
		found = append(found, f.Episode)
	}
	assert.ElementsMatch(t, lies, found)
}

// TestAuditStopsWhenALieWasWritten: a lie handed to the output unaudited,
// before its worker was caught, cannot be taken back: once the worker is
// caught its earlier episodes are re-played, and the run stops with
// ErrAudit naming the written ones.
func TestAuditStopsWhenALieWasWritten(t *testing.T) {
	t.Parallel()
	const rate, lieEvery = 0.25, 2
	p := testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "3"}, Policy: "random", Episodes: 30, Seed: 4, Concurrency: 1}
	own, reqs := localExecutor(t, testscen.Registry(testscen.Options{}), p)
	// A key whose first audited lie comes after an unaudited one (episodes
	// are collected in order: Concurrency 1).
	var key []byte
	var written []int64
	for i := 0; key == nil; i++ {
		require.Less(t, i, 1000, "no key found")
		a, err := natsrun.NewAuditor(rate, testKey(i), own, nil)
		require.NoError(t, err)
		var before []int64
		for _, r := range reqs {
			if r.Seed%lieEvery != 0 {
				continue
			}
			if a.Picked(r.Index) {
				if len(before) > 0 {
					key, written = testKey(i), before
				}
				break
			}
			before = append(before, r.Index)
		}
	}
	_, _, err, st := auditedRun(t, p, rate, key, "liar-2", testscen.Registry(testscen.Options{LieEvery: lieEvery}))
	require.ErrorIs(t, err, natsrun.ErrAudit)
	assert.ErrorContains(t, err, "worker liar-2")
	var gotWritten []int64
	for _, f := range st.AuditFailures {
		assert.Contains(t, f.Diff, "at byte ", "episode %d", f.Episode)
		if f.Written {
			gotWritten = append(gotWritten, f.Episode)
			assert.ErrorContains(t, err, strconv.FormatInt(f.Episode, 10))
		}
	}
	assert.Equal(t, written, gotWritten)
}

// TestAuditRateFlag: troupe run's and troupe serve's --audit-rate is the
// rate, and its help states the probability of a catch.
func TestAuditRateFlag(t *testing.T) {
	t.Parallel()
	for _, bind := range []func(*natsrun.Flags, *pflag.FlagSet){(*natsrun.Flags).BindRun, (*natsrun.Flags).BindServe} {
		f := natsrun.DefaultFlags()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		bind(&f, fs)
		assert.Zero(t, f.Config.AuditRate, "off by default")
		require.NoError(t, fs.Parse([]string{"--audit-rate", "0.05"}))
		assert.Equal(t, 0.05, f.Config.AuditRate)
		assert.Contains(t, fs.Lookup("audit-rate").Usage, "1-(1-rate)^k")
	}
	w := natsrun.DefaultFlags()
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	w.BindWorker(fs)
	assert.Nil(t, fs.Lookup("audit-rate"), "a submitter's setting")
}

// TestAuditSettings: the rate is a share, an LLM run cannot be audited,
// and a run needs its policies to re-play episodes with.
func TestAuditSettings(t *testing.T) {
	t.Parallel()
	srv, _ := embedded(t, "")
	nc := connect(t, srv)
	for _, r := range []float64{-0.1, 1.5, math.NaN()} {
		cfg := testConfig()
		cfg.AuditRate = r
		_, err := natsrun.Open(context.Background(), nc, cfg)
		require.ErrorIs(t, err, natsrun.ErrBadConfig, "rate %v", r)
		assert.ErrorContains(t, err, "audit rate")
	}
	cfg := testConfig()
	cfg.AuditRate = 0.05
	c := open(t, nc, cfg)
	rp, spec := plan(t, testscen.Registry(testscen.Options{}), testscen.Plan{Scenario: "count", Policy: "random", Episodes: 2, Seed: 1})
	llm := spec
	llm.LLMEndpoint = "http://127.0.0.1:1/v1"
	_, err := c.Start(context.Background(), "llm", rp.Config, llm)
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	assert.ErrorContains(t, err, "LLM")
	noPolicy := rp.Config
	noPolicy.Policy = nil
	_, err = c.Start(context.Background(), "nopolicy", noPolicy, spec)
	require.ErrorIs(t, err, natsrun.ErrBadConfig)
	assert.ErrorContains(t, err, "Policy")

	assert.InDelta(t, 0.994, natsrun.AuditProbability(0.05, 100), 0.001)
	assert.Zero(t, natsrun.AuditProbability(0.05, 0))
	assert.Equal(t, 1.0, natsrun.AuditProbability(1, 1))
}

// BenchmarkAudit measures what the audit costs the submitter, in CPU
// (user+sys) per episode: "play" is an episode as a worker plays it (the
// yardstick), "audited" the check of an episode the draw picks (its
// re-play, two encodings and their comparison), "unaudited" the check of
// one it does not (an encoding and its digest, kept in case its worker is
// caught).
func BenchmarkAudit(b *testing.B) {
	reg := testscen.Registry(testscen.Options{})
	ctx := context.Background()
	for _, p := range []testscen.Plan{
		{Scenario: "elfarol", Policy: "random", Episodes: 64, Seed: 1},
		{Scenario: "tictactoe", Policy: "random", Episodes: 64, Seed: 1},
		{Scenario: "count", Params: map[string]string{"turns": "20"}, Policy: "random", Episodes: 64, Seed: 1},
	} {
		exec, reqs := localExecutor(b, reg, p)
		eps := make([]*episode.Record, len(reqs))
		raws := make([][]byte, len(reqs)) // as a worker stores them
		for i, r := range reqs {
			eps[i] = exec.Execute(ctx, r)
			raws[i] = wire.Encode(nil, eps[i])
		}
		for _, c := range []struct {
			name string
			rate float64
		}{{"play", 0}, {"audited", 1}, {"unaudited", 1e-300}} {
			b.Run(p.Scenario+"/"+c.name, func(b *testing.B) {
				var a *natsrun.Auditor
				if c.rate > 0 {
					var err error
					a, err = natsrun.NewAuditor(c.rate, testKey(0), exec, nil)
					require.NoError(b, err)
				}
				cpu0 := cpuTime(b)
				i := 0
				for b.Loop() {
					k := i % len(reqs)
					i++
					if a == nil {
						exec.Execute(ctx, reqs[k])
						continue
					}
					if i%len(reqs) == 0 {
						// A fresh auditor per pass: the unaudited digests
						// would pile up.
						a, _ = natsrun.NewAuditor(c.rate, testKey(0), exec, nil)
					}
					if _, err := a.Check(ctx, reqs[k], "w", eps[k], raws[k]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(i), "cpu-ns/op")
			})
		}
	}
}

// TestAuditWhatCannotBeReplayed: an episode a worker recorded as failed
// without playing it is not re-played; one that claims the clock cut it,
// in a run without a timeout, is, and fails.
func TestAuditWhatCannotBeReplayed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exec, reqs := localExecutor(t, testscen.Registry(testscen.Options{}), testscen.Plan{Scenario: "count", Policy: "random", Episodes: 2, Seed: 9})
	a, err := natsrun.NewAuditor(1, testKey(0), exec, nil)
	require.NoError(t, err)

	gaveUp := exec.Execute(ctx, reqs[0])
	gaveUp.End = natsrun.EndMaxDeliver
	got, err := a.Check(ctx, reqs[0], "w", gaveUp, nil)
	require.NoError(t, err)
	assert.Same(t, gaveUp, got)
	audited, failures := a.Stats()
	assert.Zero(t, audited)
	assert.Empty(t, failures)

	cut := exec.Execute(ctx, reqs[1])
	cut.End = env.EndDeadline
	got, err = a.Check(ctx, reqs[1], "w", cut, nil)
	require.NoError(t, err)
	assert.Equal(t, env.EndTerminated, got.End, "the submitter's own episode is handed on")
	audited, failures = a.Stats()
	assert.Equal(t, int64(1), audited)
	require.Len(t, failures, 1)
	assert.Contains(t, failures[0].Diff, "deadline")
}
