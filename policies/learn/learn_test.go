package learn_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// bandit is a one-step scenario: each of `players` seats pulls one of the
// arms; arm i pays payoff[i] to the team (summed over players) and to the
// puller. The view names the seat's "context" so that tests can give
// agents different states.
type bandit struct {
	payoff []float64
	arms   []string
	views  []string // per seat
}

func newBandit(payoff []float64, views ...string) env.Scenario {
	b := &bandit{payoff: payoff, views: views}
	for i := range payoff {
		b.arms = append(b.arms, fmt.Sprintf("arm%d", i))
	}
	role := &agents.Role{
		Name: "player", Initial: "ready",
		Events:   fsm.Events{agents.Edge("ready", "pull", "done")},
		Terminal: []agents.State{"done"},
	}
	info := &env.Info{Name: "bandit", Summary: "arms", Doc: "pull an arm", Schedule: env.Simultaneous, Roles: []*agents.Role{role}}
	return env.Define(info, func(env.Params, uint64) (env.Game, error) {
		g := &banditGame{bandit: b, pulled: make([]int, len(views))}
		for i := range views {
			g.seats = append(g.seats, env.Seat{ID: fmt.Sprintf("p%d", i), Role: "player"})
		}
		return g, nil
	})
}

type banditGame struct {
	*bandit
	seats  []env.Seat
	pulled []int
}

func (g *banditGame) Seats() []env.Seat      { return g.seats }
func (g *banditGame) Start(*env.Step) error  { return nil }
func (g *banditGame) Next(*env.Step) []int   { return nil }
func (g *banditGame) Observe(i int) env.View { return env.View{Text: g.views[i], Legal: g.arms} }

func (g *banditGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		g.pulled[m.Seat] = -1
		for a, name := range g.arms {
			if name == m.Action.Text {
				g.pulled[m.Seat] = a
			}
		}
		if err := s.Fire(m.Seat, "pull"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}

func (g *banditGame) Score() env.Score {
	sc := env.Score{Agents: make([]float64, len(g.seats))}
	for i, a := range g.pulled {
		if a >= 0 {
			sc.Agents[i] = g.payoff[a]
			sc.Team += g.payoff[a]
		}
	}
	return sc
}

// train plays episodes one after the other, allocating alloc's reward and
// learning each before the next is played, and returns the episodes.
func train(t *testing.T, sc env.Scenario, l learn.Learner, alloc trajectories.Allocator, episodes int) []*trajectories.Episode {
	t.Helper()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	var out []*trajectories.Episode
	for i := range episodes {
		ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
			Play:       env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)},
			PolicySeed: uint64(1000 + i),
			Index:      int64(i),
		}))
		require.Empty(t, ep.Err)
		require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{alloc}, trajectories.RewardScalar))
		require.NoError(t, l.Learn(&ep.Record, ep.Credit))
		out = append(out, ep)
	}
	return out
}

func TestValuesFollowTheUpdateRule(t *testing.T) {
	sc := newBandit([]float64{1, 3}, "s")
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.25, Init: 2, Select: learn.EpsilonGreedy{Epsilon: 1}})
	require.NoError(t, err)
	eps := train(t, sc, l, credit.Individual{}, 20)
	want := []float64{2, 2}
	for _, ep := range eps {
		a := strings.TrimPrefix(ep.Samples[0].Response, "arm")
		i := int(a[0] - '0')
		want[i] += 0.25 * ([]float64{1, 3}[i] - want[i])
	}
	legal, got, ok := l.Values("p0", "s")
	require.True(t, ok)
	assert.Equal(t, []string{"arm0", "arm1"}, legal)
	assert.Equal(t, want, got)
	assert.NotEqual(t, []float64{2, 2}, got, "some arm was pulled")
}

func TestValuesFindTheBestArm(t *testing.T) {
	payoff := []float64{0.2, 0.9, 0.5, 0.1}
	for name, sel := range map[string]learn.Selector{
		"egreedy":   learn.EpsilonGreedy{Epsilon: 0.1},
		"boltzmann": learn.Boltzmann{Temperature: 0.05},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.2, Init: 1, Select: sel})
			require.NoError(t, err)
			eps := train(t, newBandit(payoff, "s"), l, credit.Individual{}, 300)
			_, q, _ := l.Values("p0", "s")
			assert.InDelta(t, 0.9, q[1], 1e-3, "the best arm's value is learned")
			best := 0
			for _, ep := range eps[200:] {
				if ep.Samples[0].Response == "arm1" {
					best++
				}
			}
			assert.Greater(t, best, 80, "the best arm is played most of the time once learned")
		})
	}
}

func TestGreedyBreaksTiesUniformly(t *testing.T) {
	values := []float64{1, 3, 3, 0, 3}
	counts := map[int]int{}
	for seed := range uint64(3000) {
		counts[learn.Greedy(values, &agents.Observation{Seed: seed})]++
	}
	assert.Len(t, counts, 3, "only the best actions: %v", counts)
	for _, i := range []int{1, 2, 4} {
		assert.InDelta(t, 1000, counts[i], 100, "action %d", i)
	}
	assert.Equal(t, 2, learn.Greedy([]float64{0, 1, 5, 2}, &agents.Observation{Seed: 1}))
}

func TestBoltzmannDrawsTheSoftmax(t *testing.T) {
	values := []float64{0, math.Log(2), math.Log(5)} // at τ=1: p = 1/8, 2/8, 5/8
	sel := learn.Boltzmann{Temperature: 1}
	counts := make([]int, 3)
	const n = 8000
	for seed := range uint64(n) {
		counts[sel.Select(values, &agents.Observation{Seed: seed})]++
	}
	for i, p := range []float64{1.0 / 8, 2.0 / 8, 5.0 / 8} {
		assert.InDelta(t, p, float64(counts[i])/n, 0.02, "action %d", i)
	}
	cold := learn.Boltzmann{Temperature: 1e-6}
	for seed := range uint64(100) {
		assert.Equal(t, 2, cold.Select(values, &agents.Observation{Seed: seed}), "a cold Boltzmann is greedy")
	}
}

func TestEpsilonGreedyExploresAtRateEpsilon(t *testing.T) {
	sel := learn.EpsilonGreedy{Epsilon: 0.3}
	values := []float64{0, 1, 0, 0}
	other := 0
	const n = 10000
	for seed := range uint64(n) {
		if sel.Select(values, &agents.Observation{Seed: seed}) != 1 {
			other++
		}
	}
	// A random action is another one 3 times out of 4.
	assert.InDelta(t, 0.3*0.75, float64(other)/n, 0.015)
}

func TestGradientFollowsTheUpdateRule(t *testing.T) {
	sc := newBandit([]float64{1, 3}, "s")
	l, err := learn.NewGradient(learn.GradientConfig{Rate: 0.5})
	require.NoError(t, err)
	eps := train(t, sc, l, credit.Individual{}, 2)
	// By hand: θ = 0, π = (½, ½), b = 0 before the first sample.
	theta, b := []float64{0, 0}, 0.0
	for n, ep := range eps {
		a := int(ep.Samples[0].Response[len("arm")] - '0')
		r := []float64{1, 3}[a]
		e0, e1 := math.Exp(theta[0]), math.Exp(theta[1])
		pi := []float64{e0 / (e0 + e1), e1 / (e0 + e1)}
		for i := range theta {
			grad := -pi[i]
			if i == a {
				grad++
			}
			theta[i] += 0.5 * (r - b) * grad
		}
		b += (r - b) / float64(n+1)
	}
	_, probs, ok := l.Policy("p0", "s")
	require.True(t, ok)
	e0, e1 := math.Exp(theta[0]), math.Exp(theta[1])
	assert.InDeltaSlice(t, []float64{e0 / (e0 + e1), e1 / (e0 + e1)}, probs, 1e-12)
}

func TestGradientFindsTheBestArm(t *testing.T) {
	l, err := learn.NewGradient(learn.GradientConfig{Rate: 0.5})
	require.NoError(t, err)
	train(t, newBandit([]float64{0.2, 1, 0.4}, "s"), l, credit.Individual{}, 400)
	_, probs, _ := l.Policy("p0", "s")
	assert.Greater(t, probs[1], 0.9, "π = %v", probs)
}

func TestAgentsAndStatesHaveTablesOfTheirOwn(t *testing.T) {
	// p0 and p1 see different views; State folds p1's "x..." views into
	// one state.
	sc := newBandit([]float64{0, 1}, "alpha", "x-ray")
	state := func(prompt string) string { return prompt[:1] }
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5, Select: learn.EpsilonGreedy{Epsilon: 1}, Options: learn.Options{State: state}})
	require.NoError(t, err)
	train(t, sc, l, credit.Individual{}, 10)
	_, _, ok := l.Values("p0", "a")
	assert.True(t, ok)
	_, _, ok = l.Values("p1", "x")
	assert.True(t, ok)
	_, _, ok = l.Values("p0", "x")
	assert.False(t, ok, "p0 never saw x")
	_, _, ok = l.Values("p1", "x-ray")
	assert.False(t, ok, "states are what State says")
}

func TestLearningIsDeterministic(t *testing.T) {
	run := func() ([]string, []float64) {
		l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.3, Select: learn.EpsilonGreedy{Epsilon: 0.2}})
		require.NoError(t, err)
		eps := train(t, newBandit([]float64{0.3, 0.5, 0.4}, "s", "s", "s"), l, credit.Team{}, 50)
		var actions []string
		for _, ep := range eps {
			for _, s := range ep.Samples {
				actions = append(actions, s.Response)
			}
		}
		_, q, _ := l.Values("p2", "s")
		return actions, q
	}
	a1, q1 := run()
	a2, q2 := run()
	assert.Equal(t, a1, a2)
	assert.Equal(t, q1, q2)
}

func TestLearnReadsTheNamedDictReward(t *testing.T) {
	sc := newBandit([]float64{1, 2}, "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 1, Options: learn.Options{RewardKey: "individual"}})
	require.NoError(t, err)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}}))
	allocs := []trajectories.Allocator{credit.EqualSplit{}, credit.Individual{}}
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, allocs, trajectories.RewardDict))
	require.NoError(t, l.Learn(&ep.Record, ep.Credit))
	legal, q, _ := l.Values("p0", "s")
	played := ep.Samples[0].Response
	for i, a := range legal {
		if a == played {
			assert.Equal(t, ep.Score.Agents[0], q[i], "alpha 1 copies the individual reward")
		} else {
			assert.Equal(t, 0.0, q[i])
		}
	}

	other, err := learn.NewValues(learn.ValueConfig{Alpha: 1, Options: learn.Options{RewardKey: "shapley"}})
	require.NoError(t, err)
	ep2 := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(other)}}))
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep2}, allocs, trajectories.RewardDict))
	err = other.Learn(&ep2.Record, ep2.Credit)
	require.ErrorIs(t, err, learn.ErrNoReward)
	assert.ErrorContains(t, err, `"shapley"`)
}

func TestLearnRejectsTurnsItDidNotAct(t *testing.T) {
	sc := newBandit([]float64{1, 2}, "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5})
	require.NoError(t, err)
	team := []trajectories.Allocator{credit.Team{}}

	// Played by another policy: the learner never saw p0.
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}}))
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, team, trajectories.RewardScalar))
	require.ErrorIs(t, l.Learn(&ep.Record, ep.Credit), learn.ErrUnknownTurn)

	// Played by the learner but never allocated: no reward.
	mine := trajectories.RecordOnly(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}}))
	require.ErrorIs(t, l.Learn(&mine.Record, mine.Credit), learn.ErrNoReward)

	// Credit that does not fit the record, or is not finite: nothing is
	// learned.
	require.ErrorIs(t, l.Learn(&mine.Record, &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{{1, 2}}}), learn.ErrNoReward)
	err = l.Learn(&mine.Record, &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{{math.NaN()}}})
	require.ErrorIs(t, err, learn.ErrNoReward)
	assert.ErrorContains(t, err, "NaN")
	_, q, _ := l.Values("p0", "s")
	assert.Equal(t, []float64{0, 0}, q)

	// An action the state does not offer.
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{mine}, team, trajectories.RewardScalar))
	mine.Turns[0].Action = "arm9"
	err = l.Learn(&mine.Record, mine.Credit)
	require.ErrorIs(t, err, learn.ErrUnknownTurn)
	assert.ErrorContains(t, err, `"arm9"`)

	// A state it never acted in.
	mine.Turns[0].Action, mine.Turns[0].View = "arm1", "elsewhere"
	err = l.Learn(&mine.Record, mine.Credit)
	require.ErrorIs(t, err, learn.ErrUnknownTurn)
	assert.ErrorContains(t, err, `"elsewhere"`)

	// Unfinished episodes are skipped, whatever their turns hold.
	mine.Status = protocol.StatusAborted
	assert.NoError(t, l.Learn(&mine.Record, mine.Credit))
}

// TestLearnNeedsNoSamples: learning an episode whose samples were never
// projected is learning the same episode with them.
func TestLearnNeedsNoSamples(t *testing.T) {
	sc := newBandit([]float64{0.3, 0.5, 0.4}, "s", "t", "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	ctx := context.Background()
	var values [2][][]float64
	for k, project := range []func(*episode.Record) *trajectories.Episode{trajectories.NewEpisode, trajectories.RecordOnly} {
		l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.3, Select: learn.EpsilonGreedy{Epsilon: 0.2}})
		require.NoError(t, err)
		for i := range 40 {
			ep := project(env.RunEpisode(ctx, env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}, PolicySeed: uint64(i)}))
			require.NoError(t, trajectories.Allocate(ctx, []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Individual{}}, trajectories.RewardScalar))
			require.NoError(t, l.Learn(&ep.Record, ep.Credit))
		}
		for i, state := range []string{"s", "t", "s"} {
			_, q, ok := l.Values(fmt.Sprintf("p%d", i), state)
			require.True(t, ok)
			values[k] = append(values[k], q)
		}
	}
	assert.Equal(t, values[0], values[1])
}

func TestActNeedsStableLegalActions(t *testing.T) {
	l, err := learn.NewGradient(learn.GradientConfig{Rate: 1})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Act(ctx, &agents.Observation{Agent: "a", View: "v"})
	require.ErrorIs(t, err, agents.ErrNoLegalActions)
	a, err := l.Act(ctx, &agents.Observation{Agent: "a", View: "v", Legal: []string{"x", "y"}})
	require.NoError(t, err)
	assert.Contains(t, []string{"x", "y"}, a.Text)
	_, err = l.Act(ctx, &agents.Observation{Agent: "a", View: "v", Legal: []string{"x", "z"}})
	require.ErrorIs(t, err, learn.ErrLegalChanged)
	_, err = l.Act(ctx, &agents.Observation{Agent: "b", View: "v", Legal: []string{"x", "z"}})
	assert.NoError(t, err, "another agent's state is its own")
}

func TestConfigsAreChecked(t *testing.T) {
	for _, cfg := range []learn.ValueConfig{
		{Alpha: 0},
		{Alpha: 1.5},
		{Alpha: math.NaN()},
		{Alpha: 0.1, Init: math.Inf(1)},
		{Alpha: 0.1, Select: learn.EpsilonGreedy{Epsilon: -0.1}},
		{Alpha: 0.1, Select: learn.Boltzmann{}},
	} {
		_, err := learn.NewValues(cfg)
		assert.ErrorIs(t, err, learn.ErrBadConfig, "%+v", cfg)
	}
	for _, cfg := range []learn.GradientConfig{{}, {Rate: -1}, {Rate: 1, Baseline: 2}} {
		_, err := learn.NewGradient(cfg)
		assert.ErrorIs(t, err, learn.ErrBadConfig, "%+v", cfg)
	}
}

func TestConcurrentAgentsDoNotRace(t *testing.T) {
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.1, Select: learn.EpsilonGreedy{Epsilon: 0.5}})
	require.NoError(t, err)
	sc := newBandit([]float64{1, 2}, "s", "s", "s", "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
					Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}, Drive: env.Drive{ParallelPolicies: true},
					PolicySeed: uint64(w*100 + i),
				}))
				assert.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Team{}}, trajectories.RewardScalar))
				assert.NoError(t, l.Learn(&ep.Record, ep.Credit))
			}
		})
	}
	wg.Wait()
	for i := range 4 {
		_, q, ok := l.Values(fmt.Sprintf("p%d", i), "s")
		require.True(t, ok)
		assert.Greater(t, q[0]+q[1], 0.0)
	}
}

// actOnly hides a learner's ActBatch: the engine then asks it agent by
// agent.
type actOnly struct{ learn.Learner }

func (p actOnly) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	return p.Learner.Act(ctx, obs)
}

// TestActBatchIsAct trains each learner twice on the same bandit, whose
// five players share it and act at the same step: once asked in one
// batch per step (agents.BatchPolicy, as the engine does), once agent by
// agent through Act. The actions, hence the values learned, must be the
// same.
func TestActBatchIsAct(t *testing.T) {
	for _, spec := range []string{"egreedy:epsilon=0.3", "boltzmann:temperature=0.5", "reinforce"} {
		run := func(hide bool) ([]string, []float64) {
			s, err := learn.Parse(spec)
			require.NoError(t, err)
			l, err := s.New(learn.Options{})
			require.NoError(t, err)
			require.Implements(t, (*agents.BatchPolicy)(nil), l)
			var p learn.Learner = l
			if hide {
				p = actOnly{l}
			}
			eps := train(t, newBandit([]float64{0.3, 0.5, 0.4}, "s", "s", "t", "t", "s"), p, credit.Team{}, 60)
			var actions []string
			for _, ep := range eps {
				for _, s := range ep.Samples {
					actions = append(actions, s.Response)
				}
			}
			var q []float64
			switch l := l.(type) {
			case *learn.Values:
				_, q, _ = l.Values("p4", "s")
			case *learn.Gradient:
				_, q, _ = l.Policy("p4", "s")
			}
			require.NotEmpty(t, q)
			return actions, q
		}
		batched, qBatched := run(false)
		single, qSingle := run(true)
		assert.Equal(t, single, batched, spec)
		assert.Equal(t, qSingle, qBatched, spec)
		assert.Len(t, batched, 300)
	}
}

// TestPanicInBatchIsPanicInAct: a State function that panics for one
// agent's prompt fails the episode the same way, and leaves the same rows,
// whether the engine asks the learner in a batch or agent by agent: the
// agents after the panicking one are still asked.
func TestPanicInBatchIsPanicInAct(t *testing.T) {
	run := func(hide bool) (string, bool) {
		l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.1, Options: learn.Options{State: func(p string) string {
			if p == "t" {
				panic("bad state")
			}
			return p
		}}})
		require.NoError(t, err)
		var p agents.Policy = l
		if hide {
			p = actOnly{l}
		}
		sc := newBandit([]float64{1, 2}, "s", "t", "u")
		params, err := sc.Info().ParseParams(nil)
		require.NoError(t, err)
		rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(p)}, PolicySeed: 1})
		_, _, ok := l.Values("p2", "u")
		return rec.Err, ok
	}
	errAct, rowAct := run(true)
	errBatch, rowBatch := run(false)
	assert.Contains(t, errAct, `agent "p1": policy panicked: bad state`)
	assert.Equal(t, errAct, errBatch)
	assert.True(t, rowAct)
	assert.Equal(t, rowAct, rowBatch, "p2, after the panic, is asked")
}

// TestDuplicateLegalActionsLearnTheFirst: with a legal list that repeats a
// string (one literal, one address), Learn credits the first entry equal
// to the action played, as it always has, whichever entry Act drew.
func TestDuplicateLegalActionsLearnTheFirst(t *testing.T) {
	role := &agents.Role{Name: "player", Initial: "ready", Events: fsm.Events{agents.Edge("ready", "pull", "done")}, Terminal: []agents.State{"done"}}
	info := &env.Info{Name: "dup", Summary: "d", Doc: "d", Schedule: env.Simultaneous, Roles: []*agents.Role{role}}
	b := &bandit{payoff: []float64{1, 1}, arms: []string{"x", "x"}, views: []string{"s"}}
	sc := env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return &banditGame{bandit: b, pulled: make([]int, 1), seats: []env.Seat{{ID: "p0", Role: "player"}}}, nil
	})
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5, Select: learn.EpsilonGreedy{Epsilon: 1}})
	require.NoError(t, err)
	train(t, sc, l, credit.Individual{}, 40)
	_, q, _ := l.Values("p0", "s")
	assert.InDelta(t, 1, q[0], 1e-9)
	assert.Zero(t, q[1], "the second x is never credited")
}

// TestLearnReadsActionsByTheirText: Learn finds the action Act noted when
// the record holds the very string Act answered, and looks it up when the
// record holds a copy (a record read back from a file, say): the two
// learn the same values.
func TestLearnReadsActionsByTheirText(t *testing.T) {
	sc := newBandit([]float64{0.2, 0.9, 0.5}, "s", "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	noted, err := learn.NewValues(learn.ValueConfig{Alpha: 0.3, Select: learn.EpsilonGreedy{Epsilon: 0.3}})
	require.NoError(t, err)
	copied, err := learn.NewValues(learn.ValueConfig{Alpha: 0.3, Select: learn.EpsilonGreedy{Epsilon: 0.3}})
	require.NoError(t, err)
	for i := range 60 {
		var eps [2]*trajectories.Episode
		for k, l := range []*learn.Values{noted, copied} {
			eps[k] = trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
				Play:       env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)},
				PolicySeed: uint64(7 + i),
				Index:      int64(i),
			}))
			require.Empty(t, eps[k].Err)
			require.NoError(t, trajectories.Allocate(context.Background(), eps[k:k+1], []trajectories.Allocator{credit.Individual{}}, trajectories.RewardScalar))
		}
		require.NoError(t, noted.Learn(&eps[0].Record, eps[0].Credit))
		rec := eps[1].Record
		rec.Turns = append([]episode.Turn(nil), rec.Turns...)
		for j := range rec.Turns {
			rec.Turns[j].Action = strings.Clone(rec.Turns[j].Action)
		}
		require.NoError(t, copied.Learn(&rec, eps[1].Credit))
	}
	for _, agent := range []string{"p0", "p1"} {
		_, want, ok := noted.Values(agent, "s")
		require.True(t, ok)
		_, got, _ := copied.Values(agent, "s")
		assert.Equal(t, want, got, agent)
		assert.NotEqual(t, []float64{0, 0, 0}, got, agent)
	}
}

// TestActMapsEachPrompt: Act keeps the state of the latest view it mapped
// for the observations after it; a view with messages, another view, or
// the same text in another string are each mapped to their own prompt's
// state, whatever came before.
func TestActMapsEachPrompt(t *testing.T) {
	var mapped []string
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5, Options: learn.Options{State: func(p string) string {
		mapped = append(mapped, p)
		return strings.ToUpper(p)
	}}})
	require.NoError(t, err)
	legal := []string{"a", "b"}
	view := "view"
	mail := []protocol.Message{{From: "p1", To: "p0", Kind: "say", Payload: "hi", Time: 1}}
	withMail := episode.RenderObservation(view, mail)
	for _, obs := range []agents.Observation{
		{Agent: "p0", View: view, Legal: legal},
		{Agent: "p1", View: view, Legal: legal},                // the same string: not mapped again
		{Agent: "p2", View: view, Legal: legal, Inbox: mail},   // messages: its own prompt
		{Agent: "p3", View: view, Legal: legal},                // after it, mapped again
		{Agent: "p4", View: "other", Legal: legal},             // another view
		{Agent: "p5", View: strings.Clone(view), Legal: legal}, // the same text, another string
	} {
		_, err := l.Act(context.Background(), &obs)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{view, withMail, view, "other", view}, mapped)
	for agent, state := range map[string]string{"p0": "VIEW", "p1": "VIEW", "p2": strings.ToUpper(withMail), "p3": "VIEW", "p4": "OTHER", "p5": "VIEW"} {
		_, _, ok := l.Values(agent, state)
		assert.True(t, ok, "%s in %q", agent, state)
	}
}

// TestLearnKeepsTheTurnsBeforeABadOne: Learn's contract, a turn the
// learner did not act for is an error and the turns before it have been
// learned, for both kinds of learner.
func TestLearnKeepsTheTurnsBeforeABadOne(t *testing.T) {
	sc := newBandit([]float64{1, 2}, "s", "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	values, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5})
	require.NoError(t, err)
	gradient, err := learn.NewGradient(learn.GradientConfig{Rate: 0.5})
	require.NoError(t, err)
	for _, c := range []struct {
		l       learn.Learner
		read    func(agent, state string) ([]string, []float64, bool)
		initial []float64
	}{{values, values.Values, []float64{0, 0}}, {gradient, gradient.Policy, []float64{0.5, 0.5}}} {
		ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(c.l)}}))
		require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Team{}}, trajectories.RewardScalar))
		require.Equal(t, 1, ep.Turns[1].Seat)
		ep.Turns[1].Action = "arm9"
		err := c.l.Learn(&ep.Record, ep.Credit)
		require.ErrorIs(t, err, learn.ErrUnknownTurn)
		_, q0, _ := c.read("p0", "s")
		_, q1, _ := c.read("p1", "s")
		assert.NotEqual(t, c.initial, q0, "the turn before the bad one is learned")
		assert.Equal(t, c.initial, q1, "the bad turn is not")
	}
}

// TestLearnNothingFromCreditOfAnotherLength: credit with fewer or more
// values than the episode has emitted turns teaches nothing, not even the
// turns before a bad one.
func TestLearnNothingFromCreditOfAnotherLength(t *testing.T) {
	sc := newBandit([]float64{1, 2}, "s", "s")
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.5})
	require.NoError(t, err)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}}))
	require.Len(t, ep.Turns, 2)
	for _, values := range [][]float64{{1}, {1, 1, 1}} {
		c := &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{values}}
		err := l.Learn(&ep.Record, c)
		require.ErrorIs(t, err, learn.ErrNoReward)
		assert.ErrorContains(t, err, fmt.Sprintf("the credit has %d values for 2 emitted turns", len(values)))
		ep.Turns[1].Action = "arm9" // a bad turn after a good one
		require.ErrorIs(t, l.Learn(&ep.Record, c), learn.ErrNoReward)
		ep.Turns[1].Action = ep.Samples[1].Response
		for _, agent := range []string{"p0", "p1"} {
			_, q, _ := l.Values(agent, "s")
			assert.Equal(t, []float64{0, 0}, q, agent)
		}
	}
}
