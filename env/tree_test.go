package env_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
)

// treeSetup is episode k of the scenario with its default policies, tree
// sampled with tr.
func treeSetup(t *testing.T, name string, k int, tr episode.Tree) env.Setup {
	t.Helper()
	setup := setupOf(t, name, k)
	setup.Tree = &tr
	return setup
}

// checkTree checks the tree of rec against its definition: K candidates
// per tree-sampled turn, candidate 0 with the turn's seed and the others
// with theirs, exactly one chosen, the turn's answer, whose reward is the
// highest (the lowest index among equals), and every candidate's score
// equal to that of a fresh episode given the main line's moves up to it,
// then the candidate's, then played out by the policies. It returns the
// number of tree-sampled turns.
func checkTree(t *testing.T, setup env.Setup, rec *episode.Record) int {
	t.Helper()
	tr := setup.Tree
	require.NotNil(t, rec.Tree)
	assert.Equal(t, *tr, *rec.Tree)
	byTurn := map[int][]episode.Candidate{}
	for i, c := range rec.Candidates {
		if i > 0 {
			p := rec.Candidates[i-1]
			require.True(t, c.Turn > p.Turn || (c.Turn == p.Turn && c.Index == p.Index+1), "candidates out of order at %d", i)
		}
		byTurn[c.Turn] = append(byTurn[c.Turn], c)
	}
	for k, cands := range byTurn {
		turn := rec.Turns[k]
		require.True(t, turn.Emit, "turn %d is sampled but not emitted", k)
		require.Len(t, cands, tr.K, "turn %d", k)
		chosen := -1
		for c, cand := range cands {
			assert.Equal(t, c, cand.Index)
			assert.Equal(t, env.CandidateSeed(turn.Seed, c), cand.Seed)
			assert.Equal(t, tr.Alpha*cand.Team+cand.Local, cand.Reward)
			if cand.Chosen {
				require.Equal(t, -1, chosen, "turn %d has two chosen candidates", k)
				chosen = c
				assert.Equal(t, turn.Action, cand.Action)
			}
		}
		require.GreaterOrEqual(t, chosen, 0, "turn %d has no chosen candidate", k)
		if !tr.Joint {
			for c, cand := range cands {
				assert.True(t, cand.Reward < cands[chosen].Reward || (cand.Reward == cands[chosen].Reward && c >= chosen),
					"turn %d: candidate %d (%v) beats the chosen %d (%v)", k, c, cand.Reward, chosen, cands[chosen].Reward)
			}
		}
		// An independent rescoring: a fresh episode given the main line
		// up to the turn, then each candidate (and, in a simultaneous
		// step, the moves of the others as the driver gave them).
		for _, cand := range cands {
			team, local, _ := rescore(t, setup, rec, k, cand, byTurn)
			assert.Equal(t, team, cand.Team, "turn %d candidate %d: team", k, cand.Index)
			assert.Equal(t, local, cand.Local, "turn %d candidate %d: local", k, cand.Index)
		}
	}
	return len(byTurn)
}

// rescore plays a fresh episode of setup with the moves of rec's main line
// before turn k's step, then that step with candidate cand at turn k, and
// then everything with the policies, and returns the team reward and turn
// k's seat's score. In the step of turn k, the seats before k play their
// main-line moves and those after it their first candidate (AT-GRPO), or
// every sampled seat its candidate cand.Index (joint).
func rescore(t *testing.T, setup env.Setup, rec *episode.Record, k int, cand episode.Candidate, byTurn map[int][]episode.Candidate) (team, local float64, total float64) {
	t.Helper()
	tree := setup.Tree
	setup.Drive = env.Drive{} // this test is the episode's driver
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	step := rec.Turns[k].Step
	for j := 0; j < len(rec.Turns) && rec.Turns[j].Step < step; j++ {
		require.NoError(t, ep.Act(rec.Turns[j].Seat, agents.Action{Text: rec.Turns[j].Action}))
	}
	for j := 0; j < len(rec.Turns); j++ {
		if rec.Turns[j].Step != step {
			continue
		}
		action := rec.Turns[j].Action
		switch {
		case j == k:
			action = cand.Action
		case tree.Joint && byTurn[j] != nil:
			action = byTurn[j][cand.Index].Action
		case !tree.Joint && j > k && byTurn[j] != nil:
			action = byTurn[j][0].Action
		case !tree.Joint && j > k:
			// A seat that is not sampled answers once: its move.
		}
		require.NoError(t, ep.Act(rec.Turns[j].Seat, agents.Action{Text: action}))
	}
	for !ep.Done() {
		for _, o := range ep.Pending() {
			a, err := setup.Policy(ep.Seats()[o.Seat]).Act(t.Context(), &o.Observation)
			require.NoError(t, err)
			require.NoError(t, ep.Act(o.Seat, a))
		}
	}
	got := ep.Record()
	require.True(t, got.Finished(), "the rescoring ended %s: %s", got.Status, got.Err)
	seat := rec.Turns[k].Seat
	if seat < len(got.Score.Agents) {
		local = got.Score.Agents[seat]
	}
	// The seat's side's reward: the team reward itself without teams.
	return got.SeatReward(seat), local, got.Score.Team
}

// mainLine is rec without its tree: what the engine writes when every
// seat replays the main line's moves.
func mainLine(rec *episode.Record) *episode.Record {
	r := *rec
	r.Tree, r.Candidates = nil, nil
	return &r
}

// movesOf lists each seat's main-line moves.
func movesOf(rec *episode.Record) map[string][]string {
	moves := map[string][]string{}
	for _, tn := range rec.Turns {
		id := rec.Seats[tn.Seat].ID
		moves[id] = append(moves[id], tn.Action)
	}
	return moves
}

// AT-GRPO's tree on a sequential game of two roles: every turn of both
// players is tree sampled, each candidate is scored as a fresh episode
// scores it, the best is kept, and the main line is the record the engine
// writes given its moves.
func TestTreeSequential(t *testing.T) {
	for _, alpha := range []float64{1, 0.25} {
		for k := range 4 {
			setup := treeSetup(t, "tictactoe", k, episode.Tree{K: 3, Alpha: alpha})
			rec := env.PlayTree(t.Context(), setup)
			require.Equal(t, "completed", string(rec.Status), rec.Err)
			n := checkTree(t, setup, rec)
			emitted := 0
			for _, tn := range rec.Turns {
				if tn.Emit {
					emitted++
				}
			}
			assert.Equal(t, emitted, n, "every emitted turn is tree sampled")
			assert.Equal(t, emitted*3, rec.Emitted(), "K samples per turn")
			assert.Equal(t, encode(t, mainLine(rec)), encode(t, replayed(t, setup, movesOf(rec))))
		}
	}
}

// A simultaneous step (El Farol's patrons all pick a night at once),
// sampled seat by seat (AT-GRPO) and jointly (MAGRPO).
func TestTreeSimultaneous(t *testing.T) {
	for _, joint := range []bool{false, true} {
		setup := treeSetup(t, "elfarol", 0, episode.Tree{K: 2, Alpha: 1, Joint: joint})
		setup.Params = mustParams(t, setup, map[string]string{"agents": "6", "nights": "2", "capacity": "2"})
		rec := env.PlayTree(t.Context(), setup)
		require.Equal(t, "completed", string(rec.Status), rec.Err)
		assert.Equal(t, 6, checkTree(t, setup, rec))
		if joint {
			// One joint choice per step: every seat's chosen index is
			// the same, and candidate c scored the same for all.
			for i, c := range rec.Candidates {
				first := rec.Candidates[c.Index]
				assert.Equal(t, first.Chosen, c.Chosen, "candidate %d", i)
				assert.Equal(t, first.Team, c.Team, "candidate %d", i)
			}
		}
	}
}

// A two-sided game: each candidate's team reward is its own side's, not
// the sum of the sides', so that a bargainer's tree prefers what its
// side gets. Bargain is general-sum and simultaneous; random demands make
// the sides' rewards differ.
func TestTreeTeams(t *testing.T) {
	spec := runspec.Spec{Scenario: "bargain", Episodes: 4, Seed: 5, Policies: map[string]runspec.Policy{"bargainer": {Name: "random"}}}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	require.NoError(t, err)
	sides := 0
	for k := range 4 {
		req := res.Config.Request(k)
		setup := env.Setup{Play: res.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed, Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex}
		setup.Tree = &episode.Tree{K: 3, Alpha: 0.5}
		rec := env.PlayTree(t.Context(), setup)
		require.Equal(t, "completed", string(rec.Status), rec.Err)
		require.Len(t, rec.Teams, 2)
		require.Positive(t, checkTree(t, setup, rec))
		byTurn := map[int][]episode.Candidate{}
		for _, c := range rec.Candidates {
			byTurn[c.Turn] = append(byTurn[c.Turn], c)
		}
		for _, c := range rec.Candidates {
			// checkTree compared Team with the side's reward; a
			// continuation that scored the sides apart shows that it is
			// not the total.
			if _, _, total := rescore(t, setup, rec, c.Turn, c, byTurn); c.Team != total-c.Team {
				sides++
			}
		}
	}
	assert.Positive(t, sides, "no candidate's sides scored apart: the test shows nothing")
}

// mustParams parses raw as setup's scenario's parameters.
func mustParams(t *testing.T, setup env.Setup, raw map[string]string) env.Params {
	t.Helper()
	p, err := setup.Scenario.Info().ParseParams(raw)
	require.NoError(t, err)
	return p
}

// The record is the same whether the candidates are asked, and their
// continuations played, one after the other or at once.
func TestTreeParallelIsDeterministic(t *testing.T) {
	for _, name := range []string{"tictactoe", "negotiation"} {
		setup := treeSetup(t, name, 1, episode.Tree{K: 4, Alpha: 0.5})
		want := encode(t, env.PlayTree(t.Context(), setup))
		setup.ParallelPolicies = true
		for range 3 {
			assert.Equal(t, want, encode(t, env.PlayTree(t.Context(), setup)), name)
		}
	}
}

// Tree sampling only the roles named.
func TestTreeRoles(t *testing.T) {
	setup := treeSetup(t, "signal", 0, episode.Tree{K: 3, Alpha: 1, Roles: []string{"listener"}})
	rec := env.PlayTree(t.Context(), setup)
	require.Equal(t, "completed", string(rec.Status), rec.Err)
	require.NotEmpty(t, rec.Candidates)
	for _, c := range rec.Candidates {
		assert.Equal(t, "listener", rec.Seats[rec.Turns[c.Turn].Seat].Role)
	}
	checkTree(t, setup, rec)
}

// A bad tree is refused by the run, naming what is wrong; a failing
// policy aborts the episode as the engine would.
func TestTreeErrors(t *testing.T) {
	setup := setupOf(t, "tictactoe", 0)
	for _, tc := range []struct {
		tree episode.Tree
		want string
	}{
		{episode.Tree{K: 1, Alpha: 1}, "1 candidates per turn"},
		{episode.Tree{K: 2, Alpha: math.NaN()}, "alpha is NaN"},
		{episode.Tree{K: 2, Alpha: 1, Roles: []string{"nobody"}}, `role "nobody"`},
	} {
		cfg := play.Config{Play: setup.Play, Episodes: 1}
		cfg.Tree = &tc.tree
		_, err := play.Run(t.Context(), cfg, nil)
		require.ErrorIs(t, err, env.ErrBadConfig)
		assert.Contains(t, err.Error(), tc.want)
	}
	boom := errors.New("boom")
	setup.Tree = &episode.Tree{K: 2, Alpha: 1}
	setup.Policy = env.SamePolicy(agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
		if o.Turn > 0 {
			return agents.Action{}, boom
		}
		return agents.Action{Text: o.Legal[0]}, nil
	}))
	rec := env.PlayTree(t.Context(), setup)
	assert.Equal(t, "aborted", string(rec.Status))
	assert.Equal(t, env.EndPolicyError, rec.End)
	assert.Contains(t, rec.Err, "boom")
	setup.Policy = env.SamePolicy(agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) { panic("oops") }))
	rec = env.PlayTree(t.Context(), setup)
	assert.Equal(t, "failed", string(rec.Status))
	assert.Contains(t, rec.Err, "oops")
}

// A learning policy (an ε-greedy action-value learner) draws each
// candidate from the candidate's own seed: the candidates of a turn differ
// where its exploration says so, and the tree is what its definition says.
func TestTreeLearningPolicy(t *testing.T) {
	learner, err := learn.NewValues(learn.ValueConfig{Alpha: 0.1, Select: learn.EpsilonGreedy{Epsilon: 0.5}})
	require.NoError(t, err)
	setup := treeSetup(t, "elfarol", 0, episode.Tree{K: 4, Alpha: 1})
	setup.Params = mustParams(t, setup, map[string]string{"agents": "8", "nights": "3", "capacity": "2"})
	setup.Policy = env.SamePolicy(learner)
	rec := env.PlayTree(t.Context(), setup)
	require.Equal(t, "completed", string(rec.Status), rec.Err)
	assert.Equal(t, 8, checkTree(t, setup, rec))
	differ := 0
	for lo := 0; lo < len(rec.Candidates); lo += 4 {
		for _, c := range rec.Candidates[lo+1 : lo+4] {
			if c.Action != rec.Candidates[lo].Action {
				differ++
				break
			}
		}
	}
	assert.Greater(t, differ, 0, "exploring from their own seeds, some candidates play other nights")
}

// BenchmarkTree is what tree sampling costs against its yardstick, the
// same episode played plainly by the engine: a tree-sampled turn plays K
// forks to the end, so an episode of T turns costs about K·T/2 episodes
// more than T replays of its history.
func BenchmarkTree(b *testing.B) {
	for _, name := range []string{"tictactoe", "elfarol"} {
		setup := setupOf(b, name, 0)
		b.Run(name+"/engine", func(b *testing.B) {
			eng := env.NewEngine()
			for b.Loop() {
				eng.Run(b.Context(), setup)
			}
		})
		for _, k := range []int{2, 4} {
			setup := setup
			setup.Tree = &episode.Tree{K: k, Alpha: 1}
			b.Run(name+"/tree-K"+strconv.Itoa(k), func(b *testing.B) {
				for b.Loop() {
					env.PlayTree(b.Context(), setup)
				}
			})
		}
	}
}
