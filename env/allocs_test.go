package env_test

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
)

// counting is a game that allocates nothing per turn: two seats take turns
// saying a number from a shared legal list, the game adds it up, and the
// episode ends after the parameter turns. Its seats, views, legal list and
// message texts are made once; only New allocates (the game).
type counting struct {
	seats []env.Seat
	turns int
	n     int
	total int
	talk  bool // broadcast every move on the bus
}

var (
	countingSeats = []env.Seat{{ID: "a", Role: "counter"}, {ID: "b", Role: "counter"}}
	countingLegal = []string{"1", "2", "3"}
	countingView  = env.View{Text: "say a number", Legal: countingLegal}
	countingRole  = &agents.Role{
		Name:    "counter",
		Initial: "waiting",
		Events: fsm.Events{
			agents.Edge("waiting", "go", "counting"),
			agents.Edge("counting", "said", "waiting"),
			agents.Edge("waiting", "stop", "done"),
		},
		Terminal: []agents.State{"done"},
		Acting:   []agents.State{"counting"},
	}
)

func countingScenario() env.Scenario {
	info := &env.Info{
		Name: "counting", Summary: "test game that allocates nothing per turn", Schedule: env.Sequential,
		Roles: []*agents.Role{countingRole},
		Params: []env.ParamSpec{
			env.Int("turns", 10, 1, 1<<20, "turns per episode"),
			env.Int("talk", 0, 0, 1, "1: broadcast every move"),
		},
	}
	return env.Define(info, func(p env.Params, _ uint64) (env.Game, error) {
		return &counting{seats: countingSeats, turns: p.Int("turns"), talk: p.Int("talk") == 1}, nil
	})
}

func (g *counting) Seats() []env.Seat       { return g.seats }
func (g *counting) Start(s *env.Step) error { return s.Fire(0, "go") }
func (g *counting) Observe(int) env.View    { return countingView }
func (g *counting) Score() env.Score        { return env.Score{Team: float64(g.total)} }

func (g *counting) Apply(s *env.Step, moves []env.Move) error {
	m := moves[0]
	if err := s.Fire(m.Seat, "said"); err != nil {
		return err
	}
	g.total += len(m.Action.Text)
	if g.talk {
		if err := s.Send(g.seats[m.Seat].ID, protocol.Broadcast, "said", m.Action.Text); err != nil {
			return err
		}
	}
	g.n++
	if g.n == g.turns {
		s.End()
		return s.FireAll("stop")
	}
	return s.Fire(1-m.Seat, "go")
}

// pick is a policy that allocates nothing: a legal action drawn from the
// turn's seed.
var pick = agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	return agents.Action{Text: obs.Legal[obs.Intn(0, len(obs.Legal))]}, nil
})

// episodeAllocs returns the heap allocations of one episode of counting
// with the given turns, played by a warm engine (its buffers sized by the
// same episode before).
func episodeAllocs(t *testing.T, turns int, talk bool) float64 {
	t.Helper()
	sc := countingScenario()
	kv := map[string]string{"turns": strconv.Itoa(turns), "talk": "0"}
	if talk {
		kv["talk"] = "1"
	}
	p, err := sc.Info().ParseParams(kv)
	require.NoError(t, err)
	eng := env.NewEngine()
	setup := env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Seed: 1, PolicySeed: 2}
	ctx := context.Background()
	for range 3 {
		ep := eng.Run(ctx, setup)
		require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
		require.Len(t, ep.Turns, turns)
	}
	return testing.AllocsPerRun(20, func() { eng.Run(ctx, setup) })
}

// TestEngineAllocatesNothingPerTurn: for a game and a policy that allocate
// nothing themselves, an episode's heap allocations do not depend on its
// length. The engine allocates per episode only: the record with its
// replayer, the turns and transitions arrays, and, when messages are sent, the message log,
// its recipients and the turns' inbox positions. Allocation counts are
// deterministic, so the test is exact.
func TestEngineAllocatesNothingPerTurn(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation counts differently")
	}
	for _, talk := range []bool{false, true} {
		short, long := episodeAllocs(t, 10, talk), episodeAllocs(t, 2000, talk)
		assert.Equal(t, short, long, "talk=%v: allocations per episode of 10 and of 2,000 turns", talk)
		max := 4.0 // game, record and replayer, turns, transitions
		if talk {
			max += 3 // message log, recipients, inbox positions
		}
		assert.LessOrEqual(t, long, max, "talk=%v: allocations per episode", talk)
		t.Logf("talk=%v: %v allocations per episode, whatever its length", talk, long)
	}
}

// BenchmarkEngineCounting is the engine alone on the counting game, 1,000
// turns an episode: -benchmem shows its allocations per episode, and the
// allocs/turn metric that they are none per turn.
func BenchmarkEngineCounting(b *testing.B) {
	for _, talk := range []string{"0", "1"} {
		b.Run("talk="+talk, func(b *testing.B) {
			sc := countingScenario()
			p, err := sc.Info().ParseParams(map[string]string{"turns": "1000", "talk": talk})
			require.NoError(b, err)
			eng := env.NewEngine()
			setup := env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Seed: 1, PolicySeed: 2}
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				eng.Run(context.Background(), setup)
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*1000), "allocs/turn")
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "turns/s")
		})
	}
}

// renewedCounting is counting with its games renewed (env.Renewer): a
// run of it allocates no game per episode.
type renewedCounting struct{ env.Scenario }

func (s renewedCounting) Renew(old env.Game, p env.Params, _ uint64) (env.Game, error) {
	g := old.(*counting)
	*g = counting{seats: countingSeats, turns: p.Int("turns"), talk: p.Int("talk") == 1}
	return g, nil
}

// forgetful is an output that writes nothing and keeps nothing
// (play.RecyclingOutput), and allocates nothing itself: what a run
// allocates with it is the runner's and the engine's.
type forgetful struct{ write func(int) (int, error) }

func newForgetful() *forgetful {
	f := &forgetful{}
	f.write = func(int) (int, error) { return 0, nil }
	return f
}

func (f *forgetful) Finish(context.Context, []*episode.Record) (func(int) (int, error), error) {
	return f.write, nil
}
func (f *forgetful) Flush() error   { return nil }
func (f *forgetful) Recycles() bool { return true }

// runMallocs returns the heap allocations of a run of episodes of
// counting on one worker, to an output that recycles the records and
// allocates nothing itself: what the run allocates is the runner's and
// the engine's. The collector is off while it counts (and the heap
// collected before), so that nothing it does, or runs with it, is counted.
func runMallocs(t *testing.T, episodes int) uint64 {
	t.Helper()
	sc := renewedCounting{countingScenario()}
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	cfg := play.Config{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Episodes: episodes, Concurrency: 1, Seed: 1}
	o := newForgetful()
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sum, err := play.Run(context.Background(), cfg, o)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Equal(t, episodes, sum.Scored)
	return after.Mallocs - before.Mallocs
}

// TestRecyclingRunAllocatesNothingPerEpisode: once its pools are warm, a
// run whose output recycles the records allocates nothing more per
// episode, so a long run makes no garbage for the collector to chase. (A
// record pool that dropped the lists it emptied made one allocation per
// few episodes, and with it a collection every few hundred milliseconds.)
//
// The runs are played in a synctest bubble: its clock stands still while
// the worker plays, so the runner's chunks, which it sizes by the time
// groups take, are the same however busy the machine is, and the count
// is exact (under load, on the real clock, chunks that grow and shrink
// with the machine's speed cost a few dozen allocations more, now and
// then; TestRecyclingRunOnTheRealClock bounds those).
func TestRecyclingRunAllocatesNothingPerEpisode(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation counts differently")
	}
	var short, long uint64
	synctest.Test(t, func(t *testing.T) {
		short, long = runMallocs(t, 500), runMallocs(t, 5000)
	})
	t.Logf("synctest: allocations of a run of 500 episodes, %d, and of 5,000, %d", short, long)
	assert.LessOrEqual(t, int64(long)-int64(short), int64(20),
		"allocations of a run of 500 episodes, %d, and of 5,000, %d", short, long)
}

// TestRecyclingRunOnTheRealClock is TestRecyclingRunAllocatesNothingPerEpisode
// on the real clock, where the runner sizes its chunks by the time groups
// take: a run of 5,000 episodes allocates no more than one of 500, give or
// take the chunks' arrays as their sizes follow the machine's speed, never
// one per few episodes (which would be hundreds in every try). A busy
// machine can cost a try a few dozen more, so the test tries up to three
// times and the fewest counts.
func TestRecyclingRunOnTheRealClock(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation counts differently")
	}
	extra := int64(math.MaxInt64)
	for try := 0; try < 3 && extra > 20; try++ {
		short, long := runMallocs(t, 500), runMallocs(t, 5000)
		extra = min(extra, int64(long)-int64(short))
		t.Logf("allocations of a run of 500 episodes, %d, and of 5,000, %d", short, long)
	}
	assert.LessOrEqual(t, extra, int64(20), "allocations of a run of 5,000 episodes beyond one of 500")
}
