package learn_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// contextBandit is a one-step scenario with numeric observations: each
// episode's seed picks a context, 0 or 1, which the one seat sees as the
// text "context N" and as the features one-hot(N); the arm of the same
// number pays 1, the other 0.
type contextBandit struct{ env.Scenario }

func newContextBandit() contextBandit {
	role := &agents.Role{
		Name: "player", Initial: "ready",
		Events:   fsm.Events{agents.Edge("ready", "pull", "done")},
		Terminal: []agents.State{"done"},
	}
	info := &env.Info{Name: "context-bandit", Summary: "arms", Doc: "pull the arm of the context", Schedule: env.Simultaneous, Roles: []*agents.Role{role}}
	return contextBandit{env.Define(info, func(_ env.Params, seed uint64) (env.Game, error) {
		return &contextGame{context: int(seed % 2), pulled: -1}, nil
	})}
}

func (contextBandit) ObservationSpace(env.Params, string) env.Space {
	return env.Space{Shape: []int{2}, Low: 0, High: 1}
}
func (contextBandit) StateSpace(env.Params) env.Space {
	return env.Space{Shape: []int{2}, Low: 0, High: 1}
}

type contextGame struct{ context, pulled int }

var contextArms = []string{"arm0", "arm1"}

func (g *contextGame) Seats() []env.Seat     { return []env.Seat{{ID: "p0", Role: "player"}} }
func (g *contextGame) Start(*env.Step) error { return nil }
func (g *contextGame) Observe(int) env.View {
	return env.View{Text: fmt.Sprintf("context %d", g.context), Legal: contextArms}
}
func (g *contextGame) ObserveFeatures(_ int, dst []float32) {
	clear(dst)
	dst[g.context] = 1
}
func (g *contextGame) WriteState(dst []float32) { g.ObserveFeatures(0, dst) }
func (g *contextGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		for a, name := range contextArms {
			if name == m.Action.Text {
				g.pulled = a
			}
		}
		if err := s.Fire(m.Seat, "pull"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}
func (g *contextGame) Score() env.Score {
	v := 0.0
	if g.pulled == g.context {
		v = 1
	}
	return env.Score{Team: v, Agents: []float64{v}}
}

// trainSeeded is train with each episode's scenario seed its index, so
// that the contexts alternate.
func trainSeeded(t *testing.T, sc env.Scenario, l learn.Learner, alloc trajectories.Allocator, episodes int) {
	t.Helper()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	for i := range episodes {
		ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
			Play:       env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)},
			Seed:       uint64(i),
			PolicySeed: uint64(1000 + i),
			Index:      int64(i),
		}))
		require.Empty(t, ep.Err)
		require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{alloc}, trajectories.RewardScalar))
		require.NoError(t, l.Learn(&ep.Record, ep.Credit))
	}
}

// rightArm is the probability l gives the paying arm in context c.
func rightArm(t *testing.T, l learn.Learner, c int) float64 {
	t.Helper()
	f := []float32{0, 0}
	f[c] = 1
	probs, err := l.(*learn.Softmax).Probabilities(&agents.Observation{Agent: "p0", View: fmt.Sprintf("context %d", c), Legal: contextArms, Features: f})
	require.NoError(t, err)
	return probs[c]
}

var softmaxSpecs = []string{
	"pg-table:rate=0.5",
	"pg-table:rate=0.5,clip=0.2,epochs=4,baseline=0",
	"pg-linear:rate=0.5",
	"pg-linear:rate=0.5,clip=0.2,epochs=4,entropy=0.01",
	"pg-mlp:rate=0.5,hidden=4",
	"pg-mlp:rate=0.5,hidden=4,clip=0.2,epochs=3,baseline=0",
}

// Every softmax learner starts uniform and, trained on the contextual
// bandit, plays the paying arm of each context with high probability.
func TestSoftmaxLearnersLearnTheContextBandit(t *testing.T) {
	sc := newContextBandit()
	for _, spec := range softmaxSpecs {
		t.Run(spec, func(t *testing.T) {
			s, err := learn.Parse(spec)
			require.NoError(t, err)
			l, err := s.New(learn.Options{})
			require.NoError(t, err)
			trainSeeded(t, sc, l, credit.Individual{}, 2)
			for c := range 2 {
				assert.InDelta(t, 0.5, rightArm(t, l, c), 0.3, "context %d after two episodes", c)
			}
			trainSeeded(t, sc, l, credit.Individual{}, 300)
			for c := range 2 {
				assert.Greater(t, rightArm(t, l, c), 0.9, "context %d", c)
			}
		})
	}
}

// The same spec (the same seed) trained on the same episodes ends with
// the same policy, to the bit; an mlp of another seed starts elsewhere.
func TestSoftmaxLearnersAreDeterministic(t *testing.T) {
	sc := newContextBandit()
	probs := func(spec string) []float64 {
		s, err := learn.Parse(spec)
		require.NoError(t, err)
		l, err := s.New(learn.Options{})
		require.NoError(t, err)
		trainSeeded(t, sc, l, credit.Individual{}, 40)
		return []float64{rightArm(t, l, 0), rightArm(t, l, 1)}
	}
	for _, spec := range softmaxSpecs {
		assert.Equal(t, probs(spec), probs(spec), spec)
	}
	assert.NotEqual(t, probs("pg-mlp:hidden=4,seed=1"), probs("pg-mlp:hidden=4,seed=2"))
}

// Played by the engine on a scenario that declares numeric observations,
// the learners of features get them (agents.ReadsFeatures) and learn;
// on one that declares none, they say so.
func TestSoftmaxFeaturesFromTheEngine(t *testing.T) {
	for _, spec := range []string{"pg-linear:clip=0.2,epochs=2", "pg-mlp:hidden=8"} {
		s, err := learn.Parse(spec)
		require.NoError(t, err)
		l, err := s.New(learn.Options{})
		require.NoError(t, err)
		assert.True(t, agents.ReadsFeatures(l))
		trainSeeded(t, signal.New(), l, credit.Team{}, 30)

		sc := newBandit([]float64{1, 2}, "s")
		p, err := sc.Info().ParseParams(nil)
		require.NoError(t, err)
		rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(l)}})
		assert.Contains(t, rec.Err, learn.ErrNoFeatures.Error(), spec)
	}
	table, err := learn.NewSoftmax(learn.SoftmaxConfig{Rate: 1, Epochs: 1})
	require.NoError(t, err)
	assert.False(t, agents.ReadsFeatures(table), "the table reads the text")
}

// Bad configurations name what is wrong.
func TestSoftmaxRefusesBadConfigs(t *testing.T) {
	for spec, want := range map[string]string{
		"pg-table:rate=0":            "rate",
		"pg-table:clip=1":            "clip",
		"pg-table:epochs=3":          "REINFORCE",
		"pg-table:clip=0.2,epochs=0": "epochs",
		"pg-table:baseline=2":        "baseline",
		"pg-linear:entropy=-1":       "entropy",
		"pg-mlp:hidden=0":            "hidden",
		"pg-mlp:hidden=2.5":          "hidden",
		"pg-mlp:seed=-1":             "seed",
		"pg-linear:hidden=3":         "no parameter",
	} {
		_, err := learn.Parse(spec)
		require.ErrorIs(t, err, learn.ErrBadConfig, spec)
		assert.Contains(t, err.Error(), want, spec)
	}
}

// A turn Learn is given that the learner never played is an error, and
// the learner's usage lists the new learners.
func TestSoftmaxUnknownTurnAndUsage(t *testing.T) {
	sc := newContextBandit()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	l, err := learn.NewSoftmax(learn.SoftmaxConfig{Model: learn.LinearModel, Rate: 1, Epochs: 1})
	require.NoError(t, err)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}}))
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Team{}}, trajectories.RewardScalar))
	require.ErrorIs(t, l.Learn(&ep.Record, ep.Credit), learn.ErrUnknownTurn)

	var b bytes.Buffer
	require.NoError(t, learn.Usage(&b))
	for _, name := range []string{"pg-table", "pg-linear", "pg-mlp", "clip=0", "epochs=1", "hidden=16"} {
		assert.Contains(t, b.String(), name)
	}
}

// pg-table's REINFORCE with the running-mean baseline is Gradient's rule
// when every agent has one turn per episode: trained on the same
// episodes, the two give the same policies.
func TestSoftmaxTableIsReinforceOnOneTurn(t *testing.T) {
	sc := newBandit([]float64{1, 3, 2}, "s", "s", "t")
	grad, err := learn.NewGradient(learn.GradientConfig{Rate: 0.2})
	require.NoError(t, err)
	table, err := learn.NewSoftmax(learn.SoftmaxConfig{Rate: 0.2, Epochs: 1, Baseline: learn.MeanBaseline})
	require.NoError(t, err)
	a := train(t, sc, grad, credit.Individual{}, 60)
	b := train(t, sc, table, credit.Individual{}, 60)
	for i := range a {
		require.Equal(t, a[i].Record.Turns[0].Action, b[i].Record.Turns[0].Action, "episode %d", i)
	}
	for k, view := range []string{"s", "s", "t"} {
		id := fmt.Sprintf("p%d", k)
		legal, want, ok := grad.Policy(id, view)
		require.True(t, ok)
		got, err := table.Probabilities(&agents.Observation{Agent: id, View: view, Legal: legal})
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			assert.InDelta(t, want[i], got[i], 1e-12, "%s action %d", id, i)
		}
		assert.NotEqual(t, 1.0/3, got[0], "it learned")
	}
}

// The greedy policy of a pg-linear snapshot plays the largest logit of
// the restored model: the paying arm of the context bandit, every time.
func TestSoftmaxSnapshotGreedy(t *testing.T) {
	sc := newContextBandit()
	spec, err := learn.Parse("pg-linear:rate=0.5")
	require.NoError(t, err)
	l, err := spec.New(learn.Options{})
	require.NoError(t, err)
	trainSeeded(t, sc, l, credit.Individual{}, 100)
	snap, err := learn.TakeSnapshot(spec, l)
	require.NoError(t, err)
	require.NotNil(t, snap.Agents[0].Model)
	pol, err := snap.Greedy(learn.Options{})
	require.NoError(t, err)
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	for i := range 20 {
		rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pol)}, Seed: uint64(i), PolicySeed: uint64(i)})
		require.Empty(t, rec.Err)
		assert.Equal(t, 1.0, rec.Score.Team, "episode %d", i)
	}
	other, err := learn.Parse("pg-mlp")
	require.NoError(t, err)
	_, err = learn.TakeSnapshot(other, l)
	require.ErrorIs(t, err, learn.ErrBadSnapshot)
}
