package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The league commands end to end: create, add every kind of player, play
// with a rule, snapshot, play against the snapshot, show the table, the
// matrix and a plot.
func TestLeagueCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ttt")
	ok := func(args ...string) result {
		t.Helper()
		r := troupe(t, args...)
		require.Equal(t, ExitOK, r.code, "troupe %s: %s", strings.Join(args, " "), r.stderr)
		return r
	}
	ok("league", "create", dir, "--scenario", "tictactoe", "--seed", "5", "--rule", "pfsp")
	ok("league", "add", dir, "random", "random")
	ok("league", "add", dir, "minimax", "minimax")
	r := ok("league", "add", dir, "learner", "learner", "--learner", "egreedy:alpha=0.2,epsilon=0.1")
	assert.Contains(t, r.stderr, "3 players")
	r = ok("league", "play", dir, "-n", "300")
	assert.Contains(t, r.stderr, "300 matches played")
	assert.Contains(t, r.stdout, "learner")
	r = ok("league", "snapshot", dir, "--greedy")
	assert.Contains(t, r.stderr, "learner@300")
	ok("league", "add", dir, "old", "snapshot", "--file", "snapshots/learner@300.json")
	ok("league", "play", dir, "--until", "400", "--rule", "latest", "--concurrency", "2", "-q")
	plot := filepath.Join(t.TempDir(), "r.svg")
	r = ok("league", "show", dir, "--plot", plot, "--glicko")
	assert.Contains(t, r.stdout, "league ttt: tictactoe, 5 players, 400 matches")
	assert.Contains(t, r.stdout, "payoff")
	assert.Contains(t, r.stdout, "learner@300")
	svg, err := os.ReadFile(plot)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
	r = ok("league", "show", dir, "--nashconv", "markov")
	assert.Contains(t, r.stdout, "NashConv of each player's policy in self-play")
	assert.Regexp(t, `minimax +minimax +0\.0000 +0\.0000 +x \+0\.0000, o \+0\.0000`, r.stdout)
	assert.Regexp(t, `learner@300 +snapshot +\d\.\d{4} +\d\.\d{4} +x \+\d\.\d{4}, o \+\d\.\d{4}`, r.stdout)
}

// usageCase is a command line that must be refused, and what its message
// must say.
type usageCase struct {
	args []string
	msg  string
}

func assertUsageErrors(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, c := range cases {
		r := troupe(t, c.args...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.msg, c.args)
	}
}

func TestLeagueUsageErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "l")
	require.Equal(t, ExitOK, troupe(t, "league", "create", dir, "--scenario", "tictactoe").code)
	assertUsageErrors(t, []usageCase{
		{[]string{"league", "create", dir, "--scenario", "tictactoe"}, "exists"},
		{[]string{"league", "create", t.TempDir()}, "--scenario is required"},
		{[]string{"league", "create", t.TempDir(), "--scenario", "elfarol"}, "one role"},
		{[]string{"league", "create", t.TempDir(), "--scenario", "tictactoe", "--rule", "best"}, "unknown rule"},
		{[]string{"league", "add", dir, "x", "nosuch"}, "unknown policy"},
		{[]string{"league", "add", dir, "x", "random", "--settings", "{"}, "not JSON"},
		{[]string{"league", "add", dir, "x", "random", "--learner", "egreedy"}, "--learner is for policy learner"},
		{[]string{"league", "add", t.TempDir(), "x", "random"}, "holds no league"},
		{[]string{"league", "play", dir}, "-n N"},
		{[]string{"league", "play", dir, "-n", "5"}, "no players"},
		{[]string{"league", "snapshot", dir}, "no in-process learner"},
		{[]string{"league", "show", dir, "--nashconv", "exact"}, `--nashconv "exact": want full or markov`},
	})
}

// Ctrl-C during play keeps what was committed and says how to go on.
func TestLeaguePlayInterrupted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "l")
	for _, args := range [][]string{{"league", "create", dir, "--scenario", "tictactoe"}, {"league", "add", dir, "a", "random"}, {"league", "add", dir, "b", "minimax"}} {
		require.Equal(t, ExitOK, troupe(t, args...).code)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := invoke(t, ctx, nil, false, "league", "play", dir, "-n", "100")
	assert.Equal(t, ExitInterrupted, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--until")
}

func TestServeLeagueUsageErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "l")
	require.Equal(t, ExitOK, troupe(t, "league", "create", dir, "--scenario", "tictactoe").code)
	assertUsageErrors(t, []usageCase{
		{[]string{"serve", "--addr", "127.0.0.1:0", "--league", dir}, "external"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--league", t.TempDir()}, "holds no league"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--league-rule", "pfsp"}, "--league-rule needs --league"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--league", dir, "--nats", "embedded"}, "does not go with --nats"},
	})
	require.Equal(t, ExitOK, troupe(t, "league", "add", dir, "trainee", "external").code)
	r := troupe(t, "serve", "--addr", "127.0.0.1:0", "--league", dir, "--league-rule", "best")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "unknown rule")
}
