package league_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
)

func scripted(name string) league.Player {
	return league.Player{Name: name, Policy: runspec.Policy{Name: name}}
}

func learnerPlayer(name, spec string) league.Player {
	b, _ := json.Marshal(league.LearnerSettings{Spec: spec})
	return league.Player{Name: name, Policy: runspec.Policy{Name: league.PolicyLearner, Settings: b}}
}

func newLeague(t testing.TB, dir string, cfg league.Config, players ...league.Player) *league.League {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if cfg.Scenario == "" {
		cfg.Scenario = "tictactoe"
	}
	l, err := league.Create(dir, cfg, scenarios.Builtin())
	require.NoError(t, err)
	for _, p := range players {
		require.NoError(t, l.Add(p))
	}
	return l
}

// Tic-tac-toe is solved: minimax never loses, so whatever the ratings,
// minimax must never be rated below random, nor below any other player.
func TestMinimaxIsNeverRatedBelowRandom(t *testing.T) {
	l := newLeague(t, t.TempDir(), league.Config{Seed: 7, GlickoPeriod: 30},
		scripted("random"), scripted("center-first"), scripted("minimax"))
	defer l.Close()
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 900, Concurrency: 2}))
	byName := map[string]league.Rating{}
	for _, r := range l.Ratings() {
		byName[r.Player] = r
	}
	minimax := byName["minimax"]
	assert.Equal(t, 0, minimax.Record.Losses, "minimax lost a game")
	// Minimax beats random in the ratings, clearly; center-first, which
	// wins when it can and blocks when it must, draws every game with
	// minimax and beats random as often, so the two tie within their
	// uncertainty, and minimax is below no one by more than that.
	random := byName["random"]
	assert.Greater(t, minimax.Elo, random.Elo+300, "Elo: minimax vs random")
	assert.Greater(t, minimax.R-2*minimax.RD, random.R+2*random.RD, "Glicko-2: minimax vs random, beyond both deviations")
	for _, r := range l.Ratings() {
		assert.GreaterOrEqual(t, minimax.R+2*minimax.RD, r.R, "Glicko-2: minimax is not below %s", r.Player)
	}
	assert.Equal(t, "random", l.Ratings()[2].Player)

	// The payoff matrix agrees: minimax's mean score is ≥ 0 against all.
	p := l.Payoff()
	for j, name := range p.Players {
		if name != "minimax" && p.Games[2][j] > 0 {
			assert.GreaterOrEqual(t, p.Mean[2][j], 0.0, "minimax vs %s", name)
			assert.InDelta(t, -p.Mean[2][j], p.Mean[j][2], 1e-12, "zero-sum")
		}
	}
	var table, matrix bytes.Buffer
	require.NoError(t, l.WriteRatings(&table))
	require.NoError(t, p.Write(&matrix))
	assert.Contains(t, table.String(), "minimax")
	assert.Contains(t, matrix.String(), "row vs column")
	svg, err := l.PlotRatings(50, true, nil)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(svg, []byte("<?xml")), "an SVG")
}

// A league's files depend on its seed and history only: concurrency and
// batch play change nothing, and a league closed and reopened between
// calls to Play ends with the bytes of one that played straight through.
func TestPlayIsDeterministic(t *testing.T) {
	players := []league.Player{learnerPlayer("learner", "egreedy:alpha=0.2,epsilon=0.1"), scripted("random"), scripted("minimax")}
	cfg := league.Config{Seed: 3, Rule: "mix:pfsp=0.5,uniform=0.3,latest=0.2", SnapshotEvery: 40, Batch: 8}
	ref := t.TempDir()
	l := newLeague(t, ref, cfg, players...)
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 200, Concurrency: 1}))
	require.NoError(t, l.Close())

	other := t.TempDir()
	l = newLeague(t, other, cfg, players...)
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 75, Concurrency: 4, CheckpointEvery: 16}))
	require.NoError(t, l.Close())
	l, err := league.Open(other, scenarios.Builtin())
	require.NoError(t, err)
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: 200, Concurrency: 3}))
	assert.Len(t, l.Players(), 3+5, "a snapshot every 40 matches")
	require.NoError(t, l.Close())
	assertSameTree(t, ref, other)
}

// A Play cancelled between batches, or in the middle of one (whose
// matches are then not kept), says it was interrupted, keeps the batches
// played before, and a Play to the same total afterwards ends with the
// bytes of one that was never interrupted.
func TestInterruptedPlayResumesByteIdentically(t *testing.T) {
	players := []league.Player{learnerPlayer("learner", "egreedy:alpha=0.2,epsilon=0.1"), scripted("random"), scripted("minimax")}
	cfg := league.Config{Seed: 5, SnapshotEvery: 64, Batch: 16}
	ref := t.TempDir()
	l := newLeague(t, ref, cfg, players...)
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 320, Concurrency: 2}))
	require.NoError(t, l.Close())

	// Between batches: the third batch is never started.
	dir := t.TempDir()
	l = newLeague(t, dir, cfg, players...)
	ctx, cancel := context.WithCancel(context.Background())
	err := l.Play(ctx, league.PlayOptions{N: 320, Concurrency: 2, Progress: func(done int64) {
		if done == 32 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, league.ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(32), l.Matches(), "the batches played before the cancellation")
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: 320, Concurrency: 3}))
	require.NoError(t, l.Close())
	assertSameTree(t, ref, dir)

	// At any moment, mid-batch or not.
	for _, after := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond} {
		dir := t.TempDir()
		l := newLeague(t, dir, cfg, players...)
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(after, cancel)
		err := l.Play(ctx, league.PlayOptions{N: 320, Concurrency: 4})
		stop.Stop()
		cancel()
		if err != nil {
			require.ErrorIs(t, err, league.ErrInterrupted, "after %v", after)
			require.ErrorIs(t, err, context.Canceled, "after %v", after)
			assert.Zero(t, l.Matches()%16, "whole batches only, after %v", after)
		}
		require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: 320, Concurrency: 1}))
		require.NoError(t, l.Close())
		assertSameTree(t, ref, dir)
	}
}

// With batches of one match, a Play is one run in lockstep, each match
// drawn from the league its predecessor left (learned from, rated,
// snapshotted): it ends with the bytes of Plays of one match each, and a
// Play cancelled at any moment, or from its progress report, keeps whole
// matches only and resumes to the same bytes.
func TestPlayOfSingleMatchesIsMatchByMatch(t *testing.T) {
	players := []league.Player{learnerPlayer("learner", "egreedy:alpha=0.2,epsilon=0.1"), scripted("random"), scripted("minimax")}
	cfg := league.Config{Seed: 9, Rule: "mix:pfsp=0.5,uniform=0.3,latest=0.2", SnapshotEvery: 20}
	ref := t.TempDir()
	l := newLeague(t, ref, cfg, players...)
	for range 120 {
		require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 1}))
	}
	require.NoError(t, l.Close())

	dir := t.TempDir()
	l = newLeague(t, dir, cfg, players...)
	var reports []int64
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 120, Concurrency: 3, CheckpointEvery: 7,
		Progress: func(done int64) { reports = append(reports, done) }}))
	require.NoError(t, l.Close())
	assertSameTree(t, ref, dir)
	require.Len(t, reports, 120, "a report per match")
	assert.Equal(t, int64(120), reports[119])

	// Cancelled from the progress report: the matches before are kept.
	dir = t.TempDir()
	l = newLeague(t, dir, cfg, players...)
	ctx, cancel := context.WithCancel(context.Background())
	err := l.Play(ctx, league.PlayOptions{N: 120, Progress: func(done int64) {
		if done == 37 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, league.ErrInterrupted)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(37), l.Matches())
	require.NoError(t, l.Close())
	l, err = league.Open(dir, scenarios.Builtin())
	require.NoError(t, err)
	assert.Equal(t, int64(37), l.Matches(), "committed when interrupted")
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: 120}))
	require.NoError(t, l.Close())
	assertSameTree(t, ref, dir)

	// At any moment.
	for _, after := range []time.Duration{0, 100 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond} {
		dir := t.TempDir()
		l := newLeague(t, dir, cfg, players...)
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(after, cancel)
		err := l.Play(ctx, league.PlayOptions{N: 120})
		stop.Stop()
		cancel()
		if err != nil {
			require.ErrorIs(t, err, league.ErrInterrupted, "after %v", after)
			require.ErrorIs(t, err, context.Canceled, "after %v", after)
		}
		require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: 120}))
		require.NoError(t, l.Close())
		assertSameTree(t, ref, dir)
	}

	// A match that cannot be drawn stops the Play with the draw's error:
	// alone, the learner plays match 0 against itself (the rule drew
	// latest), and match 1's rule has no one to draw.
	l = newLeague(t, t.TempDir(), cfg, players[0])
	defer l.Close()
	require.ErrorIs(t, l.Play(context.Background(), league.PlayOptions{N: 5}), league.ErrNoOpponent)
	assert.Equal(t, int64(1), l.Matches())
}

// assertSameTree checks that two directories hold the same files with the
// same bytes.
func assertSameTree(t *testing.T, want, got string) {
	t.Helper()
	read := func(root string) map[string]string {
		files := map[string]string{}
		require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			rel, _ := filepath.Rel(root, path)
			files[rel] = string(b)
			return err
		}))
		return files
	}
	w, g := read(want), read(got)
	names := func(m map[string]string) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	require.ElementsMatch(t, names(w), names(g), "the files")
	for name, content := range w {
		assert.True(t, content == g[name], "%s differs (%d and %d bytes)", name, len(content), len(g[name]))
	}
}

func TestLeagueErrors(t *testing.T) {
	reg := scenarios.Builtin()
	dir := t.TempDir()
	_, err := league.Create(dir, league.Config{Name: "x", Scenario: "nope"}, reg)
	require.ErrorIs(t, err, league.ErrBadLeague)
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "elfarol"}, reg)
	assert.ErrorContains(t, err, "one role")
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "tictactoe", Params: map[string]string{"illegal": "maybe"}}, reg)
	require.ErrorIs(t, err, league.ErrBadLeague)
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "tictactoe", Rule: "best"}, reg)
	assert.ErrorContains(t, err, "rule")
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "tictactoe", Batch: 4, SnapshotEvery: 6}, reg)
	assert.ErrorContains(t, err, "multiple of batch")

	l := newLeague(t, dir, league.Config{}, scripted("random"))
	defer l.Close()
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "tictactoe"}, reg)
	require.ErrorIs(t, err, league.ErrExists)
	for _, c := range []struct {
		p   league.Player
		msg string
	}{
		{scripted("random"), "has a player of that name"},
		{league.Player{Name: "bad name", Policy: runspec.Policy{Name: "random"}}, "a name is"},
		{scripted("perfect"), "unknown policy"},
		{league.Player{Name: "r2", Policy: runspec.Policy{Name: "random", Settings: json.RawMessage(`{"x":1}`)}}, "takes no settings"},
		{learnerPlayer("l", "sarsa"), "unknown learner"},
		{league.Player{Name: "s", Policy: runspec.Policy{Name: league.PolicySnapshot, Settings: json.RawMessage(`{"file":"../x.json"}`)}}, "inside the league"},
		{league.Player{Name: "s", Policy: runspec.Policy{Name: league.PolicySnapshot, Settings: json.RawMessage(`{"file":"snapshots/none.json"}`)}}, "no such file"},
		{league.Player{Name: "m", Policy: runspec.Policy{Name: league.PolicyLLM, Settings: json.RawMessage(`{"model":"m"}`)}}, "base_url is required"},
		{league.Player{Name: "m", Policy: runspec.Policy{Name: league.PolicyLLM, Settings: json.RawMessage(`{"base_url":"http://127.0.0.1:1/v1","model":"m","temprature":1}`)}}, "unknown field"},
	} {
		err := l.Add(c.p)
		require.ErrorIs(t, err, league.ErrBadPlayer, c.msg)
		assert.ErrorContains(t, err, c.msg)
	}
	require.NoError(t, l.Add(learnerPlayer("learner", "egreedy")))
	err = l.Add(learnerPlayer("learner2", "egreedy"))
	assert.ErrorContains(t, err, "has a learner already")
	_, err = l.Snapshot("random", false)
	assert.ErrorContains(t, err, "has a player of that name")
	assert.ErrorContains(t, l.Play(context.Background(), league.PlayOptions{N: 1, Rule: "fixed:ghost=1"}), "ghost")
	assert.ErrorContains(t, l.Play(context.Background(), league.PlayOptions{N: 1, Focal: "ghost"}), "ghost")

	// A corrupt log is refused by name.
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 3}))
	require.NoError(t, l.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, league.FileLog), []byte("{}\n"), 0o644))
	_, err = league.Open(dir, reg)
	require.ErrorIs(t, err, league.ErrBadLeague)
	assert.ErrorContains(t, err, league.FileLog)
	_, err = league.Open(t.TempDir(), reg)
	assert.ErrorContains(t, err, "holds no league")
}

// Snapshots are players: a snapshot of a trained learner plays as the
// learner did when it was taken, and the latest rule plays it.
func TestSnapshotPlayers(t *testing.T) {
	dir := t.TempDir()
	l := newLeague(t, dir, league.Config{Seed: 1}, learnerPlayer("learner", "egreedy:alpha=0.3,epsilon=0.2"), scripted("random"))
	defer l.Close()
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 300}))
	p, err := l.Snapshot("", true)
	require.NoError(t, err)
	assert.Equal(t, "learner@300", p.Name)
	assert.Equal(t, "learner", p.Parent)
	assert.FileExists(t, filepath.Join(dir, "snapshots", "learner@300.json"))
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 20, Rule: "latest"}))
	for _, r := range l.Results()[300:] {
		opp := r.Roles["x"]
		if r.FocalRole == "x" {
			opp = r.Roles["o"]
		}
		require.Equal(t, "learner@300", opp)
		assert.Equal(t, "latest", r.Rule)
	}
	assert.True(t, strings.HasPrefix(l.Config().Rule, "uniform"))
}

// A model behind an OpenAI-compatible endpoint is a player like any
// other: here a test server on 127.0.0.1 that answers legal moves.
func TestLLMPlayer(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Record: true})
	dir := t.TempDir()
	temp := 0.0
	l := newLeague(t, dir, league.Config{Seed: 2}, scripted("random"),
		league.Player{Name: "ckpt-100", Policy: league.LLMPlayer(league.LLMSettings{BaseURL: srv.URL(), Model: "ckpt-100", Sampling: protocol.Sampling{Temperature: &temp, MaxTokens: ptr(32)}})})
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 6, Focal: "ckpt-100", Concurrency: 2}))
	for _, r := range l.Results() {
		assert.Equal(t, protocol.StatusCompleted, r.Status)
		assert.Equal(t, "ckpt-100", r.Roles[r.FocalRole])
	}
	require.NoError(t, l.Close())
	st := srv.Stats()
	assert.Positive(t, st.Answered)
	for _, req := range srv.Requests() {
		assert.Equal(t, "ckpt-100", req.Model)
	}
	// The league reopened plays the model again.
	l, err := league.Open(dir, scenarios.Builtin())
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 2, Focal: "ckpt-100"}))
}

func runspecPolicy(name string) runspec.Policy { return runspec.Policy{Name: name} }

// One process writes a league: a second Open is refused while the first
// holds it, OpenReadOnly reads what was committed and changes nothing.
func TestOneWriterManyReaders(t *testing.T) {
	dir := t.TempDir()
	l := newLeague(t, dir, league.Config{Seed: 1}, scripted("random"), scripted("minimax"))
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 20}))
	_, err := league.Open(dir, scenarios.Builtin())
	require.ErrorIs(t, err, league.ErrInUse)
	_, err = league.Create(dir, league.Config{Name: "x", Scenario: "tictactoe"}, scenarios.Builtin())
	require.ErrorIs(t, err, league.ErrExists)

	r, err := league.OpenReadOnly(dir, scenarios.Builtin())
	require.NoError(t, err)
	assert.Equal(t, int64(20), r.Matches())
	assert.Equal(t, l.Ratings(), r.Ratings())
	require.ErrorIs(t, r.Play(context.Background(), league.PlayOptions{N: 1}), league.ErrReadOnly)
	require.ErrorIs(t, r.Add(scripted("center-first")), league.ErrReadOnly)
	require.NoError(t, r.Close())

	require.NoError(t, l.Close())
	again, err := league.Open(dir, scenarios.Builtin())
	require.NoError(t, err, "the lock is released by Close")
	require.NoError(t, again.Close())
}

func ptr[T any](v T) *T { return &v }
