package learn_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// trainTicTacToe plays episodes [from, to) of tic-tac-toe with l as x
// against random o, learning each from its individual credit, and returns
// the games' actions joined, so that two learners' play can be compared.
func trainTicTacToe(t testing.TB, l learn.Learner, from, to int) string {
	t.Helper()
	sc := tictactoe.New()
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	var moves strings.Builder
	ctx := context.Background()
	for i := from; i < to; i++ {
		ep := trajectories.RecordOnly(env.RunEpisode(ctx, env.Setup{
			Play:       env.Play{Scenario: sc, Params: params, Policy: env.ByRole(map[string]agents.Policy{tictactoe.RoleX: l}, agents.Random()), Emit: env.EmitRoles(tictactoe.RoleX)},
			Seed:       uint64(i),
			PolicySeed: uint64(i),
			Index:      int64(i),
		}))
		require.Empty(t, ep.Err)
		require.NoError(t, trajectories.Allocate(ctx, []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Individual{}}, trajectories.RewardScalar))
		require.NoError(t, l.Learn(&ep.Record, ep.Credit))
		for _, turn := range ep.Turns {
			moves.WriteString(turn.Action)
		}
		moves.WriteByte('|')
	}
	return moves.String()
}

func snapshotBytes(t testing.TB, spec learn.Spec, l learn.Learner) []byte {
	t.Helper()
	s, err := learn.TakeSnapshot(spec, l)
	require.NoError(t, err)
	b, err := s.Bytes()
	require.NoError(t, err)
	return b
}

// A learner restored from its snapshot is the learner it was taken from:
// it snapshots back to the same bytes, and it goes on playing and
// learning exactly as the original does.
func TestSnapshotRestoresTheLearner(t *testing.T) {
	for _, text := range []string{"egreedy:alpha=0.2,epsilon=0.1", "boltzmann:temperature=0.3", "reinforce:rate=0.3",
		"pg-table:rate=0.3", "pg-linear:rate=0.1,clip=0.2,epochs=2", "pg-mlp:hidden=4,entropy=0.01"} {
		t.Run(text, func(t *testing.T) {
			spec, err := learn.Parse(text)
			require.NoError(t, err)
			orig, err := spec.New(learn.Options{})
			require.NoError(t, err)
			trainTicTacToe(t, orig, 0, 200)
			saved := snapshotBytes(t, spec, orig)

			snap, err := learn.DecodeSnapshot(bytes.NewReader(saved))
			require.NoError(t, err)
			assert.Equal(t, spec.String(), snap.Learner)
			require.NotEmpty(t, snap.Agents)
			restored, rspec, err := snap.Restore(learn.Options{})
			require.NoError(t, err)
			assert.Equal(t, spec.String(), rspec.String())
			assert.Equal(t, string(saved), string(snapshotBytes(t, rspec, restored)), "restore then snapshot")

			assert.Equal(t, trainTicTacToe(t, orig, 200, 300), trainTicTacToe(t, restored, 200, 300), "the restored learner plays as the original")
			assert.Equal(t, string(snapshotBytes(t, spec, orig)), string(snapshotBytes(t, rspec, restored)), "and learns as it")
			type locker interface{ Lock() learn.Lock }
			if lo, ok := orig.(locker); ok {
				assert.Equal(t, lo.Lock(), restored.(locker).Lock(), "and says the same of lock-in")
			}
		})
	}
}

// A greedy snapshot plays the best action it knows and random elsewhere;
// trained against random it wins more than random does.
func TestSnapshotGreedy(t *testing.T) {
	spec, err := learn.Parse("egreedy:alpha=0.2,epsilon=0.2")
	require.NoError(t, err)
	l, err := spec.New(learn.Options{})
	require.NoError(t, err)
	trainTicTacToe(t, l, 0, 3000)
	snap, err := learn.TakeSnapshot(spec, l)
	require.NoError(t, err)
	pol, err := snap.Greedy(learn.Options{})
	require.NoError(t, err)

	sc := tictactoe.New()
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	score := func(x agents.Policy) float64 {
		total := 0.0
		for i := range 400 {
			rec := env.RunEpisode(context.Background(), env.Setup{
				Play:       env.Play{Scenario: sc, Params: params, Policy: env.ByRole(map[string]agents.Policy{tictactoe.RoleX: x}, agents.Random())},
				Seed:       uint64(i),
				PolicySeed: uint64(1000 + i),
			})
			require.Empty(t, rec.Err)
			total += rec.Score.Agents[0]
		}
		return total / 400
	}
	greedyScore, randomScore := score(pol), score(agents.Random())
	assert.Greater(t, greedyScore, randomScore+0.2, "greedy snapshot %.3f, random %.3f", greedyScore, randomScore)
	// Its probabilities: one action, or its ties, in a state it knows;
	// uniform in one it does not.
	type distribution interface {
		Probabilities(obs *agents.Observation) ([]float64, error)
	}
	d, ok := pol.(distribution)
	require.True(t, ok)
	known := snap.Agents[0].States[0]
	probs, err := d.Probabilities(&agents.Observation{Agent: snap.Agents[0].ID, View: known.State, Legal: known.Legal})
	require.NoError(t, err)
	sum, top := 0.0, 0.0
	for _, p := range probs {
		sum, top = sum+p, max(top, p)
	}
	assert.InDelta(t, 1, sum, 1e-12)
	assert.Greater(t, top, 0.0)
	probs, err = d.Probabilities(&agents.Observation{Agent: "x", View: "never seen", Legal: []string{"a", "b", "c", "d"}})
	require.NoError(t, err)
	assert.Equal(t, []float64{0.25, 0.25, 0.25, 0.25}, probs)
	// It never learns: the snapshot is unchanged by play.
	again, err := learn.TakeSnapshot(spec, l)
	require.NoError(t, err)
	assert.Equal(t, snap, again)
}

func TestSnapshotErrors(t *testing.T) {
	spec, err := learn.Parse("egreedy")
	require.NoError(t, err)
	_, err = learn.TakeSnapshot(spec, agentsLearnerStub{})
	require.ErrorIs(t, err, learn.ErrBadSnapshot)
	g, err := learn.Parse("reinforce")
	require.NoError(t, err)
	l, err := g.New(learn.Options{})
	require.NoError(t, err)
	_, err = learn.TakeSnapshot(spec, l)
	require.ErrorIs(t, err, learn.ErrBadSnapshot)
	assert.ErrorContains(t, err, "does not build")

	good := `{"format":"troupe.learner/v1","learner":"egreedy:alpha=0.1,epsilon=0.05,init=0","agents":[{"id":"x","states":[{"state":"s","legal":["a","b"],"values":[1,2],"updates":3,"baseline":0}]}]}`
	_, err = learn.DecodeSnapshot(strings.NewReader(good))
	require.NoError(t, err)
	for name, c := range map[string]struct{ from, to, msg string }{
		"format":     {`"troupe.learner/v1"`, `"v0"`, "format"},
		"learner":    {`"egreedy:alpha`, `"sarsa:alpha`, "unknown learner"},
		"values":     {`[1,2]`, `[1]`, "1 values for 2 legal actions"},
		"legal":      {`["a","b"],"values":[1,2]`, `[],"values":[]`, "no legal actions"},
		"updates":    {`"updates":3`, `"updates":-1`, "updates -1"},
		"unknown":    {`"updates":3`, `"updates":3,"q":1`, "unknown field"},
		"duplicates": {`]}]}`, `]},{"id":"x","states":[]}]}`, "sorted by id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := learn.DecodeSnapshot(strings.NewReader(strings.Replace(good, c.from, c.to, 1)))
			require.ErrorIs(t, err, learn.ErrBadSnapshot)
			assert.ErrorContains(t, err, c.msg)
		})
	}
}

type agentsLearnerStub struct{ learn.Learner }

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(`{"format":"troupe.learner/v1","learner":"reinforce:baseline=0,rate=0.1","agents":[{"id":"x","states":[{"state":"s","legal":["a"],"values":[0.5],"updates":1,"baseline":0.25}]}]}`))
	f.Add([]byte(`{"format":"troupe.learner/v1","learner":"pg-mlp:hidden=1","agents":[{"id":"x","states":[],"model":{"inputs":1,"hidden":[[0.5,0]],"actions":[{"action":"a","weights":[1,2]}],"baseline":0,"updates":0}}]}`))
	f.Add([]byte(`{"format":"troupe.learner/v1","learner":"pg-table","agents":[{"id":"x","states":[{"state":"s","legal":["a","b"],"values":[0,1],"updates":1,"baseline":0,"greedy":-1,"best":1}]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := learn.DecodeSnapshot(bytes.NewReader(b))
		if err != nil {
			return
		}
		l, spec, err := s.Restore(learn.Options{})
		require.NoError(t, err)
		back, err := learn.TakeSnapshot(spec, l)
		require.NoError(t, err)
		_, err = s.Bytes()
		require.NoError(t, err)
		b2, err := back.Bytes()
		require.NoError(t, err)
		// The spec is written in its canonical form; the rest as read.
		s.Learner = spec.String()
		b1, err := s.Bytes()
		require.NoError(t, err)
		assert.Equal(t, string(b1), string(b2))
	})
}
