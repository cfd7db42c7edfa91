package learn_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/trajectories"
)

// A tree-sampled episode is learned candidate by candidate: Candidates
// makes each candidate an emitted turn, in the order of the samples
// (SampleRefs), and REINFORCE, given +1 for the candidates of one seat's
// turn that played the first candidate's move and −1 for the others,
// raises that move's probability, which it never could from the main
// line alone (one turn, one value).
func TestGradientLearnsEveryCandidate(t *testing.T) {
	sc := blotto.New()
	params, err := sc.Info().ParseParams(map[string]string{"n": "1", "fields": "3"})
	require.NoError(t, err)
	g, err := learn.NewGradient(learn.GradientConfig{Rate: 0.5})
	require.NoError(t, err)
	var rec *episode.Record
	var mine []episode.Candidate // the first turn's candidates
	for seed := uint64(1); seed < 50 && rec == nil; seed++ {
		r := env.PlayTree(t.Context(), env.Setup{
			Play:  env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(g)},
			Drive: env.Drive{Tree: &episode.Tree{K: 4, Alpha: 1}}, Seed: seed, PolicySeed: seed,
		})
		require.True(t, r.Finished(), r.Err)
		var cands []episode.Candidate
		moves := map[string]bool{}
		for _, c := range r.Candidates {
			if c.Turn == 0 {
				cands = append(cands, c)
				moves[c.Action] = true
			}
		}
		if len(moves) >= 2 {
			rec, mine = r, cands
		}
	}
	require.NotNil(t, rec, "no seed gave the first turn two different candidates")

	expanded := learn.Candidates(rec)
	refs := rec.SampleRefs(nil)
	require.Equal(t, len(refs), expanded.Emitted())
	k := 0
	for _, tr := range expanded.Turns {
		if !tr.Emit {
			continue
		}
		ref := refs[k]
		assert.Equal(t, rec.Turns[ref.Turn].View, tr.View, "sample %d: its turn's prompt", k)
		assert.Equal(t, rec.Candidates[ref.Candidate].Action, tr.Action, "sample %d: its candidate's answer", k)
		k++
	}
	assert.Same(t, expanded, learn.Candidates(expanded), "a record without candidates is its own")

	best := mine[0].Action
	values := make([]float64, len(refs))
	for s, ref := range refs {
		if ref.Turn == 0 {
			values[s] = -1
			if rec.Candidates[ref.Candidate].Action == best {
				values[s] = 1
			}
		}
	}
	credit := &trajectories.Credit{Allocators: []string{"test"}, Values: [][]float64{values}}
	turn := &rec.Turns[0]
	agent, state := rec.Seats[turn.Seat].ID, rec.TextPrompt(turn)
	prob := func() float64 {
		legal, probs, ok := g.Policy(agent, state)
		require.True(t, ok)
		for i, a := range legal {
			if a == best {
				return probs[i]
			}
		}
		t.Fatalf("%q is not among %q", best, legal)
		return 0
	}
	before := prob()
	require.ErrorIs(t, g.Learn(rec, credit), learn.ErrNoReward, "the main line has fewer turns than the samples")
	require.NoError(t, g.Learn(learn.Candidates(rec), credit))
	assert.Greater(t, prob(), before, "the move the +1 candidates played")
}
