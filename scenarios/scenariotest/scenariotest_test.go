package scenariotest_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// coins is a small well-behaved scenario: two players each show heads or
// tails at once; the team scores 1 when they match. Its bug field breaks
// one rule at a time, so the tests can check that Verify catches it.
type coins struct {
	info  *env.Info
	bug   string
	calls *atomic.Int64 // shared across episodes: only the buggy variants read it
}

var player = &agents.Role{
	Name:    "player",
	Initial: "choosing",
	Events: fsm.Events{
		agents.Edge("choosing", "show", "shown"),
	},
	Terminal: []agents.State{"shown"},
}

func newCoins(bug string) *coins {
	return &coins{
		bug:   bug,
		calls: &atomic.Int64{},
		info: &env.Info{
			Name:     "coins",
			Summary:  "match your coins",
			Schedule: env.Simultaneous,
			// Every player sees the same table, except under the
			// "private view" and "private legal" bugs.
			PublicView: true,
			Roles:      []*agents.Role{player},
			Params:     []env.ParamSpec{env.Int("players", 2, 1, 10, "players")},
			Policies: map[string]env.PolicyMaker{
				"heads": func(env.PolicyRequest) (agents.Policy, error) {
					return agents.Scripted(func(*agents.Observation) string { return "heads" }), nil
				},
			},
			Counterfactual: &env.CounterfactualSpec{NullAction: map[string]string{"player": "none"}, AbsentOK: true},
		},
	}
}

func (c *coins) Info() *env.Info {
	if c.bug == "unstable info" && c.calls.Add(1) > 1 {
		i := *c.info
		i.Summary = "changed"
		return &i
	}
	return c.info
}

func (c *coins) New(p env.Params, seed uint64) (env.Game, error) {
	n := p.Int("players")
	g := &coinGame{c: c, seats: make([]env.Seat, n), shown: make([]string, n)}
	for i := range g.seats {
		g.seats[i] = env.Seat{ID: fmt.Sprintf("p%d", i), Role: "player"}
	}
	return g, nil
}

// MetricNames and EpisodeMetrics make coins an env.EpisodeMetricer: the
// team's score, or, with the "nan metric" bug, NaN, and with "long
// metrics", a value more than it names.
func (c *coins) MetricNames(env.Params) []string { return []string{"matched"} }

func (c *coins) EpisodeMetrics(_ env.Params, rec *episode.Record, dst []float64) {
	switch c.bug {
	case "nan metric":
		dst[0] = math.NaN()
	case "long metrics":
		dst[1] = 1
	default:
		dst[0] = rec.Score.Team
	}
}

type coinGame struct {
	c     *coins
	seats []env.Seat
	shown []string
	// peeked is set by the "peeks at tokens" bug: the game reads what only
	// a policy should know.
	peeked bool
}

func (g *coinGame) Seats() []env.Seat     { return g.seats }
func (g *coinGame) Start(*env.Step) error { return nil }
func (g *coinGame) Next(*env.Step) []int  { return nil }
func (g *coinGame) Observe(seat int) env.View {
	switch {
	case g.c.bug == "private view":
		return env.View{Text: fmt.Sprintf("%s, player %d", g.view(), seat), Legal: []string{"heads", "tails"}}
	case g.c.bug == "private legal" && seat > 0:
		return env.View{Text: g.view(), Legal: []string{"tails", "heads"}}
	}
	return env.View{Text: g.view(), Legal: []string{"heads", "tails"}}
}
func (g *coinGame) view() string { return "show heads or tails" + g.counter() }
func (g *coinGame) counter() string {
	if g.c.bug == "nondeterministic" {
		return fmt.Sprintf(" (call %d)", g.c.calls.Add(1))
	}
	return ""
}

func (g *coinGame) Apply(s *env.Step, moves []env.Move) error {
	if g.c.bug == "apply error" {
		return s.Errorf("the referee is broken")
	}
	for _, m := range moves {
		g.shown[m.Seat] = m.Action.Text
		if m.Action.Generation != nil && m.Action.Generation.Tokens != nil && g.c.bug == "peeks at tokens" {
			g.peeked = true
		}
		if g.c.bug == "reserved note" {
			s.Note(m.Seat, "agent", "me")
		}
		if err := s.Fire(m.Seat, "show"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}

func (g *coinGame) Score() env.Score {
	team := 1.0
	var first string
	for i, v := range g.shown {
		if v == "" {
			if g.c.bug == "absent crash" {
				panic("nobody expected an absent player")
			}
			continue
		}
		if first == "" {
			first = v
		} else if v != first {
			team = 0
		}
		_ = i
	}
	missing := 0
	for _, v := range g.shown {
		if v == "" {
			missing++
		}
	}
	switch {
	case g.c.bug == "empty crash" && missing == len(g.shown):
		panic("nobody expected an empty table")
	case g.c.bug == "two absent" && missing == 2:
		team = math.Inf(1)
	case g.c.bug == "empty varies" && missing == len(g.shown):
		team = float64(g.c.calls.Add(1))
	case g.c.bug == "nan score":
		team = math.NaN()
	case g.peeked:
		team = 2
	case g.c.bug == "run counter":
		team += float64(g.c.calls.Add(1))
	}
	agentScores := make([]float64, len(g.seats))
	if g.c.bug == "short scores" {
		agentScores = agentScores[:1]
	}
	return env.Score{Team: team, Agents: agentScores}
}

func TestVerifyPassesAGoodScenario(t *testing.T) {
	err := scenariotest.Verify(context.Background(), newCoins(""), scenariotest.Options{
		Params: []map[string]string{{}, {"players": "5"}},
	})
	require.NoError(t, err)
}

// tokens is a policy that reports token ids, as an LLM policy does.
var tokens = agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
	return agents.Action{Text: "tails", Generation: &agents.Generation{Tokens: &agents.Tokens{Prompt: []int{1}, Response: []int{2}}}}, nil
})

func TestVerifyCatchesBrokenScenarios(t *testing.T) {
	for _, tc := range []struct {
		bug  string
		opts scenariotest.Options
		want error
	}{
		{bug: "nondeterministic", want: scenariotest.ErrNondeterministic},
		{bug: "apply error", want: scenariotest.ErrEpisode},
		{bug: "nan score", want: scenariotest.ErrEpisode}, // the engine fails the episode (env.ErrBadScore)
		{bug: "nan metric", want: scenariotest.ErrMetrics},
		{bug: "long metrics", want: scenariotest.ErrMetrics},
		{bug: "short scores", want: scenariotest.ErrEpisode}, // the engine fails the episode
		{bug: "reserved note", want: scenariotest.ErrSample},
		{bug: "unstable info", want: scenariotest.ErrInfo},
		{bug: "absent crash", want: scenariotest.ErrCounterfactual},
		// A view said to be public that is not: the text, or only the
		// order of the legal actions.
		{bug: "private view", want: scenariotest.ErrPublicView},
		{bug: "private legal", want: scenariotest.ErrPublicView},
		// Only the new checks see these: the empty coalition, replayed by
		// itself; a coalition of one of three, which only Shapley replays;
		// an empty coalition worth something else at every replay, which
		// breaks Shapley's efficiency.
		{bug: "empty crash", want: scenariotest.ErrCounterfactual},
		{bug: "two absent", want: scenariotest.ErrCredit, opts: scenariotest.Options{Params: []map[string]string{{"players": "3"}}}},
		{bug: "empty varies", want: scenariotest.ErrCredit},
		{bug: "peeks at tokens", want: scenariotest.ErrReplay, opts: scenariotest.Options{
			Policies: []string{}, Play: map[string]env.PolicyFor{"llm": env.SamePolicy(tokens)},
		}},
		// With no seeds, only the runs are compared: a scenario whose
		// episodes share state then differs between them.
		{bug: "run counter", want: scenariotest.ErrConcurrency, opts: scenariotest.Options{Seeds: []uint64{}}},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			err := scenariotest.Verify(context.Background(), newCoins(tc.bug), tc.opts)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// TestVerifyCreditChecksCanBeTurnedOff: with CreditEpisodes negative, the
// allocators are not run, and a bug only they see goes unnoticed.
func TestVerifyCreditChecksCanBeTurnedOff(t *testing.T) {
	err := scenariotest.Verify(context.Background(), newCoins("two absent"), scenariotest.Options{
		Params: []map[string]string{{"players": "3"}}, CreditEpisodes: -1,
	})
	require.NoError(t, err)
}

func TestVerifyReportsBadOptions(t *testing.T) {
	err := scenariotest.Verify(context.Background(), newCoins(""), scenariotest.Options{
		Params:   []map[string]string{{"players": "zero"}, {"colour": "red"}},
		Policies: []string{"random"},
	})
	require.ErrorIs(t, err, scenariotest.ErrInfo)
	assert.Contains(t, err.Error(), "players=zero")
	assert.Contains(t, err.Error(), "colour")

	err = scenariotest.Verify(context.Background(), newCoins(""), scenariotest.Options{Policies: []string{"tails"}})
	require.ErrorIs(t, err, scenariotest.ErrPolicy)
	assert.Contains(t, err.Error(), `unknown policy "tails"`)
}

func TestVerifyRejectsAnInvalidDefinition(t *testing.T) {
	c := newCoins("")
	c.info.Roles = nil
	err := scenariotest.Verify(context.Background(), c, scenariotest.Options{})
	require.ErrorIs(t, err, scenariotest.ErrInfo)
	require.ErrorIs(t, err, env.ErrBadScenario)
}

// fakeT records what a check reports instead of failing the real test.
// FailNow ends the calling goroutine, as testing.T's does, so checks must
// run on a goroutine of their own (see run).
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.mu.Lock()
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Context() context.Context { return context.Background() }

// run calls check with a fake T and returns it once check has returned or
// called Fatalf.
func run(t *testing.T, check func(tb testing.TB)) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	<-done
	return f
}

func TestCheckReportsThroughTB(t *testing.T) {
	f := run(t, func(tb testing.TB) { scenariotest.Check(tb, newCoins(""), scenariotest.Options{}) })
	assert.Empty(t, f.errors)

	f = run(t, func(tb testing.TB) {
		scenariotest.Check(tb, newCoins("nondeterministic"), scenariotest.Options{
			Params: []map[string]string{{}, {"players": "3"}},
		})
	})
	// One finding per parameter set and policy (it stops at the first bad
	// seed), and one per parameter set for the runs, each naming where it
	// happened.
	require.Len(t, f.errors, 6)
	for i, prefix := range []string{
		"params {defaults}, policy heads, seed 1: scenariotest: same seed, different episode",
		"params {defaults}, policy random, seed 1: scenariotest: same seed, different episode",
		"params {defaults}, policy heads: scenariotest: output depends on concurrency",
		"params {players=3}, policy heads, seed 1: scenariotest: same seed, different episode",
		"params {players=3}, policy random, seed 1: scenariotest: same seed, different episode",
		"params {players=3}, policy heads: scenariotest: output depends on concurrency",
	} {
		assert.True(t, strings.HasPrefix(f.errors[i], prefix), "finding %d: %s", i, f.errors[i])
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")

	f := run(t, func(tb testing.TB) { scenariotest.Golden(tb, path, "a\nb\n", false) })
	assert.True(t, f.fatal, "a missing golden file is fatal")
	assert.Contains(t, f.errors[0], "-update")

	f = run(t, func(tb testing.TB) { scenariotest.Golden(tb, path, "a\nb\n", true) })
	require.Empty(t, f.errors)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "a\nb\n", string(data))

	f = run(t, func(tb testing.TB) { scenariotest.Golden(tb, path, "a\nb\n", false) })
	assert.Empty(t, f.errors)

	f = run(t, func(tb testing.TB) { scenariotest.Golden(tb, path, "a\nc\n", false) })
	require.Len(t, f.errors, 1)
	assert.False(t, f.fatal)
	assert.Contains(t, f.errors[0], "first difference at line 2\n    a\n  - b\n  + c\n")
	assert.NotContains(t, f.errors[0], "(want", "same line count")
}

func TestFirstDifference(t *testing.T) {
	assert.Empty(t, scenariotest.FirstDifference("same", "same"))
	got := scenariotest.FirstDifference("1\n2\n3\n4\n5\n6\n7", "1\n2\n3\n4\nX\n7")
	assert.Equal(t, "first difference at line 5\n    2\n    3\n    4\n  - 5\n  - 6\n  + X\n(want 7 lines, got 6)\n", got)

	// A long line is cut to a window around its first differing byte.
	long := strings.Repeat("a", 500)
	got = scenariotest.FirstDifference(long+"b"+long, long+"c"+long)
	assert.True(t, strings.HasPrefix(got, "first difference at line 1, byte 501\n"), got)
	assert.Contains(t, got, "  - ..."+strings.Repeat("a", 80)+"b"+strings.Repeat("a", 79)+"...\n")
	assert.Contains(t, got, "  + ..."+strings.Repeat("a", 80)+"c")
}

func TestDocDiagrams(t *testing.T) {
	diagram, err := player.Diagram(agents.Mermaid)
	require.NoError(t, err)
	block := "//\t" + strings.ReplaceAll(strings.TrimRight(diagram, "\n"), "\n", "\n//\t")
	write := func(doc string) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte(strings.TrimRight(doc, "\n")+"\npackage a\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("// Package a is not documented here.\npackage a\n"), 0o644))
		return dir
	}

	good := write("// Package a plays.\n//\n// The player:\n//\n" + block)
	assert.NoError(t, scenariotest.DocDiagrams(good, player))

	stale := write("// Package a plays.\n//\n//\tstateDiagram-v2\n//\t    [*] --> choosing\n")
	err = scenariotest.DocDiagrams(stale, player)
	require.ErrorIs(t, err, scenariotest.ErrDocDrift)
	assert.Contains(t, err.Error(), "choosing --> shown: show")

	undocumented := write("")
	require.ErrorIs(t, scenariotest.DocDiagrams(undocumented, player), scenariotest.ErrDocDrift)

	f := run(t, func(tb testing.TB) { scenariotest.CheckDoc(tb, stale, player) })
	assert.Len(t, f.errors, 1)
}

// narrowFeatures is tic-tac-toe declaring features narrower than its
// game writes.
type narrowFeatures struct{ *tictactoe.Scenario }

func (n narrowFeatures) ObservationSpace(env.Params, string) env.Space {
	return env.Space{Shape: []int{3, 3, 2}, Low: 0, High: 0.5}
}

// TestVerifyChecksFeatures: features outside their declared space are
// ErrFeatures; the built-in scenarios' pass (their own tests run Check).
func TestVerifyChecksFeatures(t *testing.T) {
	err := scenariotest.Verify(t.Context(), narrowFeatures{tictactoe.New()}, scenariotest.Options{Seeds: []uint64{1}, Policies: []string{"random"}, CreditEpisodes: -1})
	require.ErrorIs(t, err, scenariotest.ErrFeatures)
	assert.Contains(t, err.Error(), "outside float32[3,3,2] in [0,0.5]")
}
