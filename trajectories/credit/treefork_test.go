package credit_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Every candidate of a tree-sampled turn is credited, by the allocators
// that value an episode by its record alone, from its own continuation:
// the value equals what the allocator gives the candidate's turn in a
// fork rebuilt here independently of env.PlayTree (a fresh stepped
// episode given the main line's recorded moves before the candidate's
// step, the step's moves as the tree sampling gave them, and the
// policies' first answers after it), allocated on its own. Before the
// fix every candidate got the main line's value; for every allocator,
// some candidate's value differs from it, so the test would fail then.
func TestTreeCandidatesAreCreditedFromTheirOwnForks(t *testing.T) {
	cases := []struct {
		name   string
		sc     env.Scenario
		params map[string]string
		tree   episode.Tree
		allocs []string
	}{
		{"blotto", blotto.New(), map[string]string{"n": "2"}, episode.Tree{K: 3, Alpha: 1},
			[]string{"team", "equal-split", "individual", "difference", "leave-one-out", "shapley", "coma"}},
		{"blotto-joint", blotto.New(), map[string]string{"n": "2"}, episode.Tree{K: 3, Alpha: 0.5, Joint: true},
			[]string{"team", "difference", "shapley-mc"}},
		{"elfarol", elfarol.New(), map[string]string{"agents": "4"}, episode.Tree{K: 2, Alpha: 1},
			[]string{"team", "equal-split-sample", "difference", "shapley", "discount:of=difference"}},
		{"tictactoe", tictactoe.New(), nil, episode.Tree{K: 2, Alpha: 1},
			[]string{"team", "equal-split", "individual", "discount:gamma=0.5,of=individual", "coma"}},
		{"bargain", bargain.New(), nil, episode.Tree{K: 2, Alpha: 0.5},
			[]string{"team", "individual", "equal-split"}},
	}
	// differs counts, per allocator over every case, the candidates whose
	// own value is not the main line's for their turn.
	differs := map[string]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.sc.Info().ParseParams(tc.params)
			require.NoError(t, err)
			var allocs []trajectories.Allocator
			for _, spec := range tc.allocs {
				a, err := credit.Builtin().Parse(spec)
				require.NoError(t, err, spec)
				allocs = append(allocs, a)
			}
			checked := 0
			for seed := range uint64(3) {
				setup := env.Setup{
					Play: env.Play{Scenario: tc.sc, Params: p, Policy: env.SamePolicy(agents.Random())},
					Seed: seed + 11, PolicySeed: seed + 101, Index: int64(seed),
				}
				tree := tc.tree
				treed := setup
				treed.Tree = &tree
				rec := env.PlayTree(t.Context(), treed)
				require.True(t, rec.Finished(), rec.Err)
				ep := trajectories.NewEpisode(rec)
				require.NoError(t, trajectories.Allocate(t.Context(), []*trajectories.Episode{ep}, allocs, trajectories.RewardDict))
				main := mainLine(t, allocs, rec)
				for s, ref := range rec.SampleRefs(nil) {
					if ref.Candidate < 0 {
						continue
					}
					c := &rec.Candidates[ref.Candidate]
					fork := refork(t, setup, rec, c)
					seat := rec.Turns[c.Turn].Seat
					assert.Equal(t, fork.Score.Of(rec.Seats[seat].Team), c.Team, "candidate %d of turn %d: its Team is its fork's", c.Index, c.Turn)
					for i, a := range allocs {
						want := forkCredit(t, a, fork, c.Turn)
						assert.Equal(t, want, ep.Credit.Values[i][s], "%s: candidate %d of turn %d", a.Name(), c.Index, c.Turn)
						if want != main[i][ref.Turn] {
							differs[a.Name()]++
						}
					}
					checked++
				}
			}
			assert.Positive(t, checked)
		})
	}
	for _, tc := range cases {
		for _, spec := range tc.allocs {
			assert.Positive(t, differs[spec], "%s: no candidate's own credit differs from the main line's: the cases cannot tell the two apart", spec)
		}
	}
}

// mainLine returns, per allocator, its value for each turn of rec's main
// line (the record without its candidates), by turn index.
func mainLine(t *testing.T, allocs []trajectories.Allocator, rec *episode.Record) [][]float64 {
	t.Helper()
	plain := *rec
	plain.Tree, plain.Candidates = nil, nil
	out := make([][]float64, len(allocs))
	for i, a := range allocs {
		out[i] = make([]float64, len(rec.Turns))
		vals := allocateAlone(t, a, &plain)
		s := 0
		for k := range rec.Turns {
			if rec.Turns[k].Emit {
				out[i][k] = vals[s]
				s++
			}
		}
	}
	return out
}

// forkCredit is what a gives turn k of fork, allocated alone.
func forkCredit(t *testing.T, a trajectories.Allocator, fork *episode.Record, k int) float64 {
	t.Helper()
	require.True(t, fork.Turns[k].Emit)
	s := 0
	for j := range k {
		if fork.Turns[j].Emit {
			s++
		}
	}
	return allocateAlone(t, a, fork)[s]
}

// allocateAlone runs a over rec as a group of one.
func allocateAlone(t *testing.T, a trajectories.Allocator, rec *episode.Record) []float64 {
	t.Helper()
	ep := trajectories.RecordOnly(rec)
	vals := make([]float64, ep.SampleCount())
	require.NoError(t, a.Allocate(t.Context(), []*trajectories.Episode{ep}, [][]float64{vals}))
	return vals
}

// refork rebuilds candidate c's continuation from rec alone: a fresh
// stepped episode of setup given the recorded moves of the steps before
// c's, then the step's moves as the tree sampling gave them (the
// candidate's for its seat; for the other seats, without Joint the
// chosen answers of the seats before it and the first answers of those
// after; with Joint, the candidates of c's index), then played to its end
// with each turn's first answer.
func refork(t *testing.T, setup env.Setup, rec *episode.Record, c *episode.Candidate) *episode.Record {
	t.Helper()
	ctx := t.Context()
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	step := rec.Turns[c.Turn].Step
	seat := rec.Turns[c.Turn].Seat
	for k := range rec.Turns {
		tr := &rec.Turns[k]
		if tr.Step >= step {
			break
		}
		require.NoError(t, ep.Act(tr.Seat, agents.Action{Text: tr.Action}))
	}
	for k := range rec.Turns {
		tr := &rec.Turns[k]
		if tr.Step != step {
			continue
		}
		move := tr.Action
		cands := candidatesOf(rec, k)
		switch {
		case k == c.Turn:
			move = c.Action
		case len(cands) == 0:
		case rec.Tree.Joint:
			move = cands[c.Index].Action
		case tr.Seat > seat:
			move = cands[0].Action
		}
		require.NoError(t, ep.Act(tr.Seat, agents.Action{Text: move}))
	}
	for !ep.Done() {
		for _, o := range ep.Pending() {
			obs := o.Observation
			a, err := setup.Policy(ep.Seats()[o.Seat]).Act(ctx, &obs)
			require.NoError(t, err)
			require.NoError(t, ep.Act(o.Seat, a))
		}
	}
	fork := ep.Record()
	require.True(t, fork.Finished(), fork.Err)
	return fork
}

// candidatesOf returns the candidates of turn k of rec, by index.
func candidatesOf(rec *episode.Record, k int) []episode.Candidate {
	var out []episode.Candidate
	for _, c := range rec.Candidates {
		if c.Turn == k {
			out = append(out, c)
		}
	}
	return slices.Clip(out)
}

// A run of tree-sampled episodes refuses, naming the allocator, the
// allocators whose values depend on other episodes than a candidate's
// own continuation, and those that credit from forks when the
// continuations are not kept.
func TestTreeCreditRefusals(t *testing.T) {
	sc := blotto.New()
	p, err := sc.Info().ParseParams(map[string]string{"n": "2"})
	require.NoError(t, err)
	rec := env.PlayTree(t.Context(), env.Setup{
		Play:  env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())},
		Drive: env.Drive{Tree: &episode.Tree{K: 2, Alpha: 1}}, Seed: 1, PolicySeed: 2,
	})
	require.True(t, rec.Finished(), rec.Err)
	for _, spec := range []string{"grpo", "rloo", "dr-grpo", "rae"} {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err)
		assert.Equal(t, trajectories.TreeRefused, trajectories.TreeCreditOf(a), spec)
		err = trajectories.Allocate(t.Context(), []*trajectories.Episode{trajectories.NewEpisode(rec)}, []trajectories.Allocator{a}, trajectories.RewardScalar)
		require.ErrorIs(t, err, trajectories.ErrTreeCredit, spec)
		assert.ErrorContains(t, err, a.Name())
	}
	// Read back from a file, a candidate has no continuation: team reads
	// the candidate's Team, difference refuses.
	lost := *rec
	lost.Candidates = slices.Clone(rec.Candidates)
	for i := range lost.Candidates {
		lost.Candidates[i].Fork = nil
	}
	team, diff := credit.Team{}, credit.Difference{}
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{trajectories.NewEpisode(&lost)}, []trajectories.Allocator{team}, trajectories.RewardScalar))
	err = trajectories.Allocate(t.Context(), []*trajectories.Episode{trajectories.NewEpisode(&lost)}, []trajectories.Allocator{diff}, trajectories.RewardScalar)
	require.ErrorIs(t, err, trajectories.ErrNoFork)
	assert.ErrorContains(t, err, fmt.Sprintf("allocator %s", diff.Name()))
}
