package play_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

func params(t *testing.T, sc env.Scenario, kv map[string]string) env.Params {
	t.Helper()
	p, err := sc.Info().ParseParams(kv)
	require.NoError(t, err)
	return p
}

func elfarolConfig(t *testing.T, kv map[string]string) play.Config {
	t.Helper()
	sc := elfarol.New()
	return play.Config{
		Play:     env.Play{Scenario: sc, Params: params(t, sc, kv), Policy: env.SamePolicy(agents.Random())},
		Episodes: 40,
		Seed:     2026,
	}
}

// The output stage a run usually has is trajectories'.
var _ play.Output = (*trajectories.Output)(nil)

// teamOut writes to sink with the team allocator.
func teamOut(sink trajectories.Sink) *trajectories.Output {
	return &trajectories.Output{Sink: sink, Allocators: []trajectories.Allocator{credit.Team{}}}
}

// runJSONL runs cfg into JSONL through out (nil: the team allocator),
// whose sink it sets.
func runJSONL(t *testing.T, cfg play.Config, layout trajectories.Layout, out *trajectories.Output) ([]byte, play.Summary) {
	t.Helper()
	var buf bytes.Buffer
	if out == nil {
		out = teamOut(nil)
	}
	out.Sink = trajectories.NewJSONLWriter(&buf, layout)
	sum, err := play.Run(context.Background(), cfg, out)
	require.NoError(t, err)
	return buf.Bytes(), sum
}

func TestRunIsByteIdenticalWhateverTheConcurrency(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "12"})
	cfg.GroupSize = 3
	cfg.Concurrency = 1
	one, sum := runJSONL(t, cfg, trajectories.Flat, nil)
	cfg.Concurrency = 8
	eight, _ := runJSONL(t, cfg, trajectories.Flat, nil)
	require.Equal(t, string(one), string(eight))
	assert.Equal(t, 40, sum.Episodes)
	assert.Equal(t, int64(480), sum.Samples)

	rollouts, err := trajectories.ReadRollouts(bytes.NewReader(one))
	require.NoError(t, err)
	require.Len(t, rollouts, 40)
	index := int64(0)
	for i, r := range rollouts {
		require.NoError(t, protocol.ValidateRollout(r))
		require.Len(t, r, 12)
		for _, s := range r {
			assert.Equal(t, int64(i), s.RolloutID)
			assert.Equal(t, int64(i/3), s.GroupIndex)
			assert.Equal(t, index, s.Index, "indexes are contiguous in output order")
			index++
		}
	}
	// A group shares its scenario seed; its episodes draw different moves.
	assert.Equal(t, rollouts[0][0].Metadata.Seed, rollouts[2][0].Metadata.Seed)
	assert.NotEqual(t, rollouts[2][0].Metadata.Seed, rollouts[3][0].Metadata.Seed)

	cfg.Seed++
	other, _ := runJSONL(t, cfg, trajectories.Flat, nil)
	assert.NotEqual(t, string(one), string(other), "another run seed gives other episodes")
}

func TestRunNestedLayoutHoldsOneRolloutPerLine(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "5"})
	cfg.Concurrency = 3
	out, _ := runJSONL(t, cfg, trajectories.Nested, nil)
	assert.Equal(t, 40, bytes.Count(out, []byte("\n")))
	rollouts, err := trajectories.ReadRollouts(bytes.NewReader(out))
	require.NoError(t, err)
	require.Len(t, rollouts, 40)
	flat, _ := runJSONL(t, cfg, trajectories.Flat, nil)
	flatRollouts, err := trajectories.ReadRollouts(bytes.NewReader(flat))
	require.NoError(t, err)
	assert.Equal(t, flatRollouts, rollouts)
}

func TestRunRecordsFailuresAndGoesOn(t *testing.T) {
	calls := 0
	var mu sync.Mutex
	flaky := agents.PolicyFunc(func(ctx context.Context, o *agents.Observation) (agents.Action, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if o.Role == "o" && o.Seed%3 == 0 {
			return agents.Action{}, errors.New("server said no")
		}
		return agents.Random().Act(ctx, o)
	})
	sc := tictactoe.New()
	cfg := play.Config{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(flaky)}, Episodes: 60, Concurrency: 4, Seed: 1}
	var col trajectories.Collector
	sum, err := play.Run(context.Background(), cfg, teamOut(&col))
	require.NoError(t, err)
	assert.Equal(t, 60, sum.Episodes)
	require.Positive(t, sum.ByStatus[protocol.StatusAborted])
	assert.Equal(t, 60, sum.ByStatus[protocol.StatusAborted]+sum.ByStatus[protocol.StatusCompleted])
	assert.Contains(t, sum.FirstFailure, "server said no")
	for _, ep := range col.Episodes() {
		if ep.Status == protocol.StatusAborted {
			for _, s := range ep.Samples {
				assert.Equal(t, protocol.StatusAborted, s.Status)
				assert.Equal(t, 0.0, s.Reward.Value)
			}
		}
	}

	cfg.FailFast = true
	var col2 trajectories.Collector
	_, err = play.Run(context.Background(), cfg, teamOut(&col2))
	require.ErrorIs(t, err, play.ErrEpisodeFailed)
	assert.ErrorContains(t, err, "server said no")
	assert.Less(t, len(col2.Episodes()), 60)
}

func TestRunInterruptedWritesOnlyWholeEpisodes(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "20"})
	cfg.Episodes = 5000
	cfg.Concurrency = 4
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Progress = func(p play.Progress) {
		if p.Done >= 100 {
			cancel()
		}
	}
	var buf bytes.Buffer
	sum, err := play.Run(ctx, cfg, teamOut(trajectories.NewJSONLWriter(&buf, trajectories.Flat)))
	require.ErrorIs(t, err, context.Canceled)
	assert.GreaterOrEqual(t, sum.Episodes, 100)
	assert.Less(t, sum.Episodes, 5000)
	rollouts, err := trajectories.ReadRollouts(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err, "the output is valid JSONL")
	assert.Len(t, rollouts, sum.Episodes)
	seen := map[int64]bool{}
	for _, r := range rollouts {
		require.Len(t, r, 20, "only whole episodes")
		require.NoError(t, protocol.ValidateRollout(r))
		assert.Equal(t, protocol.StatusCompleted, r[0].Status)
		assert.False(t, seen[r[0].RolloutID], "no episode twice")
		seen[r[0].RolloutID] = true
	}
}

func TestRunDictRewardsAndSequentialAllocators(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "4"})
	order := &orderAllocator{}
	cfg.GroupSize = 2
	cfg.Concurrency = 6
	out, _ := runJSONL(t, cfg, trajectories.Flat, &trajectories.Output{
		Allocators: []trajectories.Allocator{credit.Team{}, credit.EqualSplit{}, order},
		Format:     trajectories.RewardDict,
	})
	samples, err := trajectories.ReadAll(bytes.NewReader(out))
	require.NoError(t, err)
	for _, s := range samples {
		require.Equal(t, protocol.RewardDict, s.Reward.Kind)
		assert.InDelta(t, s.Metadata.TeamReward, s.Reward.Dict["team"], 1e-12)
		assert.InDelta(t, s.Metadata.TeamReward/4, s.Reward.Dict["equal-split"], 1e-12)
		assert.Equal(t, float64(s.GroupIndex), s.Reward.Dict["order"], "sequential allocators see groups in output order")
		assert.Equal(t, "team equal-split order", s.Metadata.Allocator)
	}
}

// orderAllocator numbers the groups it sees: with the runner's guarantee
// for Sequential allocators, that number is the group index.
type orderAllocator struct{ seen int }

func (o *orderAllocator) Name() string     { return "order" }
func (o *orderAllocator) Sequential() bool { return true }
func (o *orderAllocator) Allocate(_ context.Context, g []*trajectories.Episode, dst [][]float64) error {
	for e := range g {
		for s := range dst[e] {
			dst[e][s] = float64(o.seen)
		}
	}
	o.seen++
	return nil
}

func TestRunSinkErrorStopsTheRun(t *testing.T) {
	cfg := elfarolConfig(t, nil)
	cfg.Concurrency = 4
	full := errors.New("disk full")
	n := 0
	_, err := play.Run(context.Background(), cfg, teamOut(trajectories.SinkFunc(func(*trajectories.Episode) error {
		n++
		if n == 3 {
			return full
		}
		return nil
	})))
	require.ErrorIs(t, err, full)
	assert.ErrorContains(t, err, "episode 2")
	assert.Equal(t, 3, n, "nothing is written after the failure")
}

// TestRunPanicsWithItsOutput checks that a panicking output (a sink, an
// Observe) panics Run on its caller's goroutine, where the caller can
// recover it, although the workers write the groups: nothing is written
// after it, and the workers are done when Run panics.
func TestRunPanicsWithItsOutput(t *testing.T) {
	cfg := elfarolConfig(t, nil)
	cfg.Episodes, cfg.Concurrency = 40, 4
	var n atomic.Int32
	sink := trajectories.SinkFunc(func(*trajectories.Episode) error {
		if n.Add(1) == 5 {
			panic("the sink broke")
		}
		return nil
	})
	assert.PanicsWithValue(t, "the sink broke", func() {
		_, _ = play.Run(context.Background(), cfg, teamOut(sink))
	})
	assert.Equal(t, int32(5), n.Load(), "nothing is written after the panic")
}

// A run of one worker (Lockstep, Concurrency 1, a run of one group)
// plays on the caller's goroutine, and starts none: a caller that makes
// many short runs (a league's batches) pays for no goroutine and no
// stack growth per run. Its output's panic still reaches the caller.
func TestARunOfOneWorkerPlaysOnTheCallersGoroutine(t *testing.T) {
	base := elfarolConfig(t, nil)
	local := &env.LocalExecutor{Play: base.Play}
	for name, edit := range map[string]func(*play.Config){
		"concurrency 1": func(c *play.Config) {},
		"lockstep":      func(c *play.Config) { c.Concurrency, c.Lockstep = 4, true },
		"one group":     func(c *play.Config) { c.Concurrency, c.Episodes, c.GroupSize = 4, 8, 8 },
		"last group":    func(c *play.Config) { c.Concurrency, c.FirstGroup = 4, 39 },
	} {
		cfg := base
		edit(&cfg)
		before := runtime.NumGoroutine()
		var most atomic.Int64
		cfg.Executor = env.ExecutorFunc(func(ctx context.Context, req env.Request) *episode.Record {
			if n := int64(runtime.NumGoroutine()); n > most.Load() {
				most.Store(n)
			}
			return local.Execute(ctx, req)
		})
		_, err := play.Run(context.Background(), cfg, teamOut(nil))
		require.NoError(t, err, name)
		assert.LessOrEqual(t, most.Load(), int64(before), "%s: no goroutine started", name)
	}

	cfg := base
	cfg.Lockstep = true
	var n int
	sink := trajectories.SinkFunc(func(*trajectories.Episode) error {
		if n++; n == 5 {
			panic("the sink broke")
		}
		return nil
	})
	assert.PanicsWithValue(t, "the sink broke", func() {
		_, _ = play.Run(context.Background(), cfg, teamOut(sink))
	})
	assert.Equal(t, 5, n, "nothing is written after the panic")
}

func TestRunRejectsBadConfig(t *testing.T) {
	good := elfarolConfig(t, nil)
	for name, mod := range map[string]func(*play.Config){
		"no scenario":          func(c *play.Config) { c.Scenario = nil },
		"negative episodes":    func(c *play.Config) { c.Episodes = -1 },
		"negative concurrency": func(c *play.Config) { c.Concurrency = -2 },
		"negative group":       func(c *play.Config) { c.GroupSize = -1 },
		"no policy":            func(c *play.Config) { c.Policy = nil },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := good
			mod(&cfg)
			_, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: trajectories.Discard})
			assert.ErrorIs(t, err, env.ErrBadConfig)
		})
	}
	_, err := play.Run(context.Background(), good, nil)
	assert.ErrorIs(t, err, env.ErrBadConfig, "no output")
}

// fakeOutput is an output stage of env's contract alone: it records the
// calls Run makes.
type fakeOutput struct {
	mu       sync.Mutex
	finished int
	failAt   int64 // the group whose Finish fails; -1 for none
	written  []int64
	flushed  int
}

func (f *fakeOutput) Finish(_ context.Context, group []*episode.Record) (func(int) (int, error), error) {
	f.mu.Lock()
	f.finished++
	f.mu.Unlock()
	if group[0].GroupIndex == f.failAt {
		return nil, errors.New("no credit")
	}
	return func(k int) (int, error) {
		f.written = append(f.written, group[k].Index)
		return 2 * k, nil
	}, nil
}

func (f *fakeOutput) Flush() error { f.flushed++; return nil }

func TestRunWritesGroupsInOrderThroughItsOutput(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3"})
	cfg.Episodes, cfg.GroupSize, cfg.Concurrency = 10, 3, 4
	out := &fakeOutput{failAt: -1}
	sum, err := play.Run(context.Background(), cfg, out)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, out.written)
	assert.Equal(t, 4, out.finished, "one Finish per group")
	assert.Equal(t, 1, out.flushed)
	assert.Equal(t, int64(3*(0+2+4)+0), sum.Samples, "the samples are what the writes say")

	out = &fakeOutput{failAt: 2}
	sum, err = play.Run(context.Background(), cfg, out)
	require.ErrorContains(t, err, "no credit")
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5}, out.written, "the groups before the failed one are written")
	assert.Equal(t, 6, sum.Episodes)
	assert.Equal(t, 1, out.flushed)
}

func TestOutputNumbersSamplesFromItsIndexBase(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "2"})
	cfg.Episodes, cfg.Concurrency = 3, 2
	var col trajectories.Collector
	sum, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: &col, IndexBase: 100})
	require.NoError(t, err)
	require.Positive(t, sum.Samples)
	next := int64(100)
	for _, ep := range col.Episodes() {
		for _, s := range ep.Samples {
			assert.Equal(t, next, s.Index)
			next++
		}
	}
	assert.Equal(t, 100+sum.Samples, next)

	var seen int
	sum, err = play.Run(context.Background(), cfg, &trajectories.Output{Observe: func(ep *trajectories.Episode) { seen += len(ep.Samples) }})
	require.NoError(t, err, "no sink: nothing is stored")
	assert.Equal(t, int64(seen), sum.Samples)
}

func TestRunEmitsOnlyChosenRoles(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3"})
	cfg.Emit = env.EmitRoles("nobody")
	var col trajectories.Collector
	sum, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: &col})
	require.NoError(t, err)
	assert.Equal(t, int64(120), sum.Turns)
	// No turn is a sample, yet every episode is in the output: as one
	// placeholder that trains nothing.
	assert.Equal(t, int64(40), sum.Samples)
	for i, ep := range col.Episodes() {
		require.Len(t, ep.Samples, 1)
		s := ep.Samples[0]
		assert.True(t, trajectories.IsPlaceholder(&s))
		assert.True(t, s.RemoveSample)
		assert.Equal(t, int64(i), s.Index)
		assert.Equal(t, ep.RolloutID, s.RolloutID)
		assert.Equal(t, string(protocol.StatusCompleted), s.Metadata.Extra["troupe_status"])
		require.NoError(t, s.Validate())
	}
}

func TestSummaryRoleScores(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3", "nights": "1", "capacity": "3"})
	sum, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: trajectories.Discard})
	require.NoError(t, err)
	// Everyone attends the only night: each patron scores φ(3) = 3·e^(-1).
	rs := sum.RoleScores[elfarol.RolePatron]
	assert.Equal(t, 120, rs.N)
	assert.InDelta(t, 3*math.Exp(-1), rs.Mean(), 1e-12)
	assert.InDelta(t, 3*math.Exp(-1), sum.MeanTeamReward(), 1e-12, "G = φ(3) too: one night")
}

// recyclingOutput is fakeOutput's recycling kind: it copies out what it
// writes of each record (its turns' actions and seeds) and notes the
// address of each Turns array it sees.
type recyclingOutput struct {
	recycles bool
	lines    []string
	arrays   map[*episode.Turn]int
}

func (r *recyclingOutput) Finish(_ context.Context, group []*episode.Record) (func(int) (int, error), error) {
	return func(k int) (int, error) {
		rec := group[k]
		line := fmt.Sprint(rec.Index, rec.Status, rec.Score.Team)
		for _, t := range rec.Turns {
			line += fmt.Sprint(" ", t.Seat, t.Action, t.Seed, t.Inbox, len(t.Notes))
		}
		r.lines = append(r.lines, line)
		if len(rec.Turns) > 0 {
			r.arrays[&rec.Turns[0]]++
		}
		return len(rec.Turns), nil
	}, nil
}

func (r *recyclingOutput) Flush() error   { return nil }
func (r *recyclingOutput) Recycles() bool { return r.recycles }

func TestRunRecyclesTheTurnsOfARecyclingOutput(t *testing.T) {
	for _, name := range []string{"elfarol", "tictactoe", "negotiation"} {
		t.Run(name, func(t *testing.T) {
			sc, err := scenarios.Builtin().Lookup(name)
			require.NoError(t, err)
			p, err := sc.Info().ParseParams(nil)
			require.NoError(t, err)
			policy, _, err := sc.Info().AssignPolicies(env.PolicyRequest{Scenario: sc, Params: p}, nil, nil)
			require.NoError(t, err)
			cfg := play.Config{Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Episodes: 60, GroupSize: 2, Concurrency: 3, Seed: 5}
			var outs [2]*recyclingOutput
			for i, recycles := range []bool{false, true} {
				outs[i] = &recyclingOutput{recycles: recycles, arrays: map[*episode.Turn]int{}}
				_, err := play.Run(context.Background(), cfg, outs[i])
				require.NoError(t, err)
			}
			assert.Equal(t, outs[0].lines, outs[1].lines, "recycled turns record the same episodes")
			assert.Len(t, outs[0].arrays, 60, "without recycling every episode has its own turns")
			assert.Less(t, len(outs[1].arrays), 60, "a recycling output sees turns arrays reused")
		})
	}
}

func TestRecyclingOutputWritesTheSameBytes(t *testing.T) {
	for _, name := range []string{"elfarol", "tictactoe", "negotiation", "committee"} {
		t.Run(name, func(t *testing.T) {
			sc, err := scenarios.Builtin().Lookup(name)
			require.NoError(t, err)
			p, err := sc.Info().ParseParams(nil)
			require.NoError(t, err)
			policy, _, err := sc.Info().AssignPolicies(env.PolicyRequest{Scenario: sc, Params: p}, nil, nil)
			require.NoError(t, err)
			cfg := play.Config{Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Episodes: 50, GroupSize: 2, Concurrency: 3, Seed: 9}
			var outs [2]bytes.Buffer
			for i := range outs {
				sink := trajectories.Sink(trajectories.NewJSONLWriter(&outs[i], trajectories.Flat))
				if i == 1 {
					// A SinkFunc may keep what it is given: no recycling.
					sink = trajectories.Tee(sink, trajectories.SinkFunc(func(*trajectories.Episode) error { return nil }))
				}
				out := teamOut(sink)
				assert.Equal(t, i == 0, out.Recycles())
				_, err := play.Run(context.Background(), cfg, out)
				require.NoError(t, err)
			}
			assert.Equal(t, outs[1].String(), outs[0].String())
		})
	}
}

// keeper is an Output that keeps the groups it is given and reads them
// at Flush: one that does not recycle may (RecyclingOutput).
type keeper struct {
	mu     sync.Mutex
	groups [][]*episode.Record
	seen   map[int64]int
}

func (k *keeper) Finish(_ context.Context, group []*episode.Record) (func(int) (int, error), error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.groups = append(k.groups, group)
	return func(int) (int, error) { return 0, nil }, nil
}

func (k *keeper) Flush() error {
	k.seen = map[int64]int{}
	for _, g := range k.groups {
		for _, rec := range g {
			k.seen[rec.Index]++
		}
	}
	return nil
}

// TestOutputsMayKeepTheirGroups: Run reuses its chunks' arrays of records
// only for an output that keeps no group; another still finds, at Flush,
// every episode once in the groups it kept.
func TestOutputsMayKeepTheirGroups(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3"})
	cfg.Episodes, cfg.GroupSize, cfg.Concurrency = 400, 2, 2
	out := &keeper{}
	_, err := play.Run(context.Background(), cfg, out)
	require.NoError(t, err)
	assert.Len(t, out.seen, 400)
	for i, n := range out.seen {
		assert.Equal(t, 1, n, "episode %d", i)
	}
}

// An episode that its executor ended "interrupted" for a reason of its
// own (a request's deadline, a remote worker's shutdown) while the run
// goes on is written, aborted, like any other, and the run plays on; only
// the run's own interruption leaves groups unwritten.
func TestRunWritesEpisodesItsExecutorInterrupted(t *testing.T) {
	cfg := elfarolConfig(t, map[string]string{"agents": "3"})
	cfg.Episodes, cfg.Concurrency = 4, 2
	local := &env.LocalExecutor{Play: cfg.Play}
	cfg.Executor = env.ExecutorFunc(func(ctx context.Context, req env.Request) *episode.Record {
		rec := local.Execute(ctx, req)
		if req.Index == 1 {
			rec.Status, rec.End, rec.Err = protocol.StatusAborted, env.EndInterrupted, "the caller went away"
		}
		return rec
	})
	out := &fakeOutput{failAt: -1}
	sum, err := play.Run(context.Background(), cfg, out)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2, 3}, out.written)
	assert.Equal(t, 1, sum.ByStatus[protocol.StatusAborted])
	assert.Zero(t, sum.Interrupted)
}

// A run may take its episodes' seeds from its caller (play.Config.Seeds)
// instead of its seed tree; ids and groups are numbered as ever.
func TestRunPlaysTheSeedsItIsGiven(t *testing.T) {
	cfg := elfarolConfig(t, nil)
	cfg.Episodes, cfg.GroupSize = 3, 3
	cfg.Seeds = func(i int) (uint64, uint64) { return 77, 1000 + uint64(i) }
	for i, req := range cfg.Requests() {
		assert.Equal(t, env.Request{Scenario: "elfarol", Params: cfg.Params.Map(), Seed: 77, PolicySeed: 1000 + uint64(i),
			Index: int64(i), RolloutID: int64(i), GroupIndex: 0}, req)
	}
	var c trajectories.Collector
	_, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: &c})
	require.NoError(t, err)
	for i, ep := range c.Episodes() {
		assert.Equal(t, uint64(77), ep.Seed)
		assert.Equal(t, 1000+uint64(i), ep.PolicySeed)
	}
}

// A run reports its progress every ProgressEvery while nothing is
// written, so that a slow first group (or a game that never ends) is not
// silence; Done never goes back, and no report comes after Run returns.
func TestRunReportsProgressWhileItsFirstGroupPlays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := elfarolConfig(t, map[string]string{"agents": "2"})
		cfg.Episodes, cfg.GroupSize = 4, 2
		local := &env.LocalExecutor{Play: cfg.Play}
		cfg.Executor = env.ExecutorFunc(func(ctx context.Context, req env.Request) *episode.Record {
			time.Sleep(3 * time.Second) // a slow episode
			return local.Execute(ctx, req)
		})
		var mu sync.Mutex
		var reports []play.Progress
		cfg.Progress = func(p play.Progress) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, p)
		}
		cfg.ProgressEvery = time.Second
		_, err := play.Run(context.Background(), cfg, &fakeOutput{failAt: -1})
		require.NoError(t, err)
		mu.Lock()
		got := slices.Clone(reports)
		mu.Unlock()
		require.NotEmpty(t, got)
		assert.Equal(t, time.Second, got[0].Elapsed, "the first report after a second, the first group still playing")
		assert.Zero(t, got[0].Done)
		assert.Zero(t, got[0].Played)
		for k := 1; k < len(got); k++ {
			assert.GreaterOrEqual(t, got[k].Done, got[k-1].Done, "report %d", k)
			assert.Equal(t, 4, got[k].Total)
		}
		assert.Equal(t, 4, got[len(got)-1].Done)
		assert.Equal(t, 4, got[len(got)-1].Played)
		n := len(got)
		time.Sleep(5 * time.Second)
		mu.Lock()
		assert.Len(t, reports, n, "no report after Run returned")
		mu.Unlock()
	})
}

// backlogOutput is an output with a slow writer that counts the episodes
// played and not yet written (its backlog) at their most.
type backlogOutput struct {
	mu              sync.Mutex
	finished, wrote int
	most            int
	delay           time.Duration
}

func (b *backlogOutput) Finish(_ context.Context, group []*episode.Record) (func(int) (int, error), error) {
	b.mu.Lock()
	b.finished += len(group)
	b.most = max(b.most, b.finished-b.wrote)
	b.mu.Unlock()
	return func(k int) (int, error) {
		time.Sleep(b.delay)
		b.mu.Lock()
		b.wrote++
		b.mu.Unlock()
		return len(group[k].Turns), nil
	}, nil
}

func (b *backlogOutput) Flush() error { return nil }

// Episodes of tens of thousands of turns are not played far ahead of a
// writer that cannot keep up: a worker waits once every worker has a
// chunk and the groups waiting to be written hold 1<<16 turns, where it
// otherwise ran four chunks per worker ahead, each holding an episode's
// record and the output's memory for it. Short episodes keep the four.
func TestRunHoldsFewLargeEpisodesAhead(t *testing.T) {
	sc, err := scenarios.Builtin().Lookup("elfarol")
	require.NoError(t, err)
	for _, c := range []struct {
		agents, episodes, most int
	}{
		{33_000, 12, 5},  // two pending hold 66,000 turns
		{10, 200, 1_000}, // unbounded but by maxAhead
	} {
		p, err := sc.Info().ParseParams(map[string]string{"agents": fmt.Sprint(c.agents)})
		require.NoError(t, err)
		out := &backlogOutput{delay: 150 * time.Millisecond}
		if c.agents < 100 {
			out.delay = time.Millisecond
		}
		cfg := play.Config{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}, Episodes: c.episodes, Concurrency: 2, Seed: 1}
		sum, err := play.Run(context.Background(), cfg, out)
		require.NoError(t, err)
		require.Equal(t, c.episodes, sum.Episodes)
		assert.LessOrEqual(t, out.most, c.most, "%d agents: most episodes played and not written", c.agents)
		if c.agents < 100 {
			assert.Greater(t, out.most, 5, "short episodes are played ahead as before")
		}
	}
}
