package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// servedLeague is a tic-tac-toe league whose learner is external (the
// requests' policy), with random, minimax and a snapshot of a briefly
// trained learner as opponents.
func servedLeague(t *testing.T, rule string) (string, *league.League) {
	t.Helper()
	dir := t.TempDir()
	l, err := league.Create(dir, league.Config{Name: "served", Scenario: "tictactoe", Seed: 5, Rule: rule}, registry(t))
	require.NoError(t, err)
	spec, err := learn.Parse("egreedy:alpha=0.3")
	require.NoError(t, err)
	trained, err := spec.New(learn.Options{})
	require.NoError(t, err)
	sc := tictactoe.New()
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	for i := range 50 {
		rec := env.RunEpisode(context.Background(), env.Setup{
			Play:       env.Play{Scenario: sc, Params: params, Policy: env.ByRole(map[string]agents.Policy{"x": trained}, agents.Random())},
			Seed:       uint64(i),
			PolicySeed: uint64(i),
		})
		require.Empty(t, rec.Err)
	}
	snap, err := learn.TakeSnapshot(spec, trained)
	require.NoError(t, err)
	b, err := snap.Bytes()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snapshots", "old.json"), b, 0o644))
	for _, p := range []league.Player{
		{Name: "trainee", Policy: runspec.Policy{Name: league.PolicyExternal}},
		{Name: "random", Policy: runspec.Policy{Name: "random"}},
		{Name: "minimax", Policy: runspec.Policy{Name: "minimax"}},
		{Name: "old", Policy: runspec.Policy{Name: league.PolicySnapshot, Settings: json.RawMessage(`{"file":"snapshots/old.json","greedy":true}`)}},
	} {
		require.NoError(t, l.Add(p))
	}
	return dir, l
}

func leagueServer(t *testing.T, l *league.League, rule string) *server.Server {
	t.Helper()
	svc, err := league.NewService(l, rule)
	require.NoError(t, err)
	return newServer(t, server.Config{League: svc, Seed: 1})
}

// With a league, each request is a match: the request's policy plays the
// learner's role, the league's opponents the others; only the learner's
// turns come back, each naming the opponent; the results are logged and
// rated in match order, and the league reopened holds them.
func TestServeLeagueMatches(t *testing.T) {
	dir, l := servedLeague(t, "uniform")
	s := leagueServer(t, l, "")
	opponents := map[string]int{}
	next := int64(0)
	for i := range 16 {
		a := post(t, s, `{"scenario":"tictactoe","n":3,"policy":"center-first","allocators":["individual"]}`)
		r := decodeResponse(t, a)
		require.Len(t, r.Rollouts, 3)
		var opponent string
		for k, ro := range r.Rollouts {
			require.NoError(t, protocol.ValidateRollout(ro.Samples))
			for _, sm := range ro.Samples {
				x := sm.Metadata.Extra
				assert.Equal(t, "trainee", x[server.MetaLearner])
				assert.Equal(t, sm.Metadata.Role, x[server.MetaLearnerRole], "only the learner's turns")
				assert.EqualValues(t, next+int64(k), x[server.MetaLeagueMatch])
				opp, _ := x[server.MetaOpponent].(string)
				require.Contains(t, []string{"random", "minimax", "old"}, opp, "request %d", i)
				if opponent == "" {
					opponent = opp
				}
				assert.Equal(t, opponent, opp, "one opponent per request")
				other := "x"
				if sm.Metadata.Role == "x" {
					other = "o"
				}
				assert.Equal(t, map[string]any{other: opp}, x[server.MetaOpponents])
			}
		}
		opponents[opponent]++
		next += 3
	}
	assert.Len(t, opponents, 3, "uniform matchmaking met every opponent: %v", opponents)
	assert.Equal(t, int64(48), l.Matches())
	for _, res := range l.Results() {
		assert.Equal(t, protocol.StatusCompleted, res.Status)
		assert.Equal(t, "trainee", res.Roles[res.FocalRole])
		require.NotNil(t, res.RolloutID)
	}
	// Against minimax, center-first never wins.
	assert.Zero(t, l.Versus("trainee", "minimax").Wins)
	assert.Positive(t, l.Versus("trainee", "random").Games+l.Versus("trainee", "old").Games)

	// Refusals: per-role policies, another scenario; a request refused
	// after its draw logs its matches as aborted, and the next request's
	// matches come after them.
	e := decodeError(t, post(t, s, `{"scenario":"tictactoe","policies":{"x":"random"}}`))
	assert.Equal(t, rollout.CodeBadPolicy, e.Code)
	assert.Contains(t, e.Message, "league")
	e = decodeError(t, post(t, s, `{"scenario":"signal"}`))
	assert.Contains(t, e.Message, "plays tictactoe")
	e = decodeError(t, post(t, s, `{"scenario":"tictactoe","n":2,"allocators":["nosuch"]}`))
	assert.Equal(t, rollout.CodeBadAllocator, e.Code)
	r := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","emit":["x","o"],"policy":"random"}`))
	roles := map[string]bool{}
	for _, sm := range r.Rollouts[0].Samples {
		roles[sm.Metadata.Role] = true
		assert.EqualValues(t, 50, sm.Metadata.Extra[server.MetaLeagueMatch])
	}
	assert.Len(t, roles, 2, "emit asks for both roles")
	require.NoError(t, l.Close())

	reopened, err := league.Open(dir, registry(t))
	require.NoError(t, err)
	defer reopened.Close()
	res := reopened.Results()
	require.Len(t, res, 51)
	assert.Equal(t, protocol.StatusAborted, res[48].Status)
	assert.Equal(t, protocol.StatusAborted, res[49].Status)
	assert.Equal(t, protocol.StatusCompleted, res[50].Status)
	var trainee league.Rating
	for _, rt := range reopened.Ratings() {
		if rt.Player == "trainee" {
			trainee = rt
		}
	}
	assert.Equal(t, 49, trainee.Record.Games, "rated: 48 matches and the last one")
}

func TestServeLeagueNeedsAnExternalLearner(t *testing.T) {
	l, err := league.Create(t.TempDir(), league.Config{Name: "x", Scenario: "tictactoe"}, registry(t))
	require.NoError(t, err)
	defer l.Close()
	_, err = league.NewService(l, "")
	require.ErrorIs(t, err, league.ErrBadLeague)
	assert.ErrorContains(t, err, "external")
}

// The bytes a league service answers slime with, for a sequence of
// requests with PFSP matchmaking: pinned like the other golden answers.
func TestServeLeagueGoldenAnswers(t *testing.T) {
	_, l := servedLeague(t, "pfsp")
	defer l.Close()
	s := leagueServer(t, l, "")
	var got bytes.Buffer
	for i, body := range []string{
		`{"scenario":"tictactoe","n":2,"policy":"random","allocators":["individual"],"rollout_id":10,"group_index":1,"index":0}`,
		`{"scenario":"tictactoe","n":2,"policy":"center-first","allocators":["individual"]}`,
		`{"scenario":"tictactoe","policies":{"o":"random"}}`,
		`{"scenario":"tictactoe","n":3,"policy":"random","allocators":["individual","team"],"reward_format":"dict"}`,
	} {
		a := post(t, s, body)
		fmt.Fprintf(&got, "# request %d: %s\n# status %d\n", i, body, a.status)
		if a.status != http.StatusOK {
			fmt.Fprintf(&got, "%s\n", decodeError(t, a).Code)
			continue
		}
		decodeResponse(t, a)
		got.Write(a.body)
	}
	var table bytes.Buffer
	require.NoError(t, l.WriteRatings(&table))
	fmt.Fprintf(&got, "# ratings\n%s", table.String())
	path := filepath.Join("testdata", "golden", "league.txt")
	if *update {
		require.NoError(t, os.WriteFile(path, got.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run TestServeLeagueGoldenAnswers -update to write it")
	if !bytes.Equal(want, got.Bytes()) {
		assert.Equal(t, strings.Split(string(want), "\n"), strings.Split(got.String(), "\n"), "the answers changed (rerun with -update only if that is meant)")
	}
}

// The learner's policy is the service's "llm" (here a stand-in maker): a
// league opponent's policy of the same name does not take its place.
func TestServeLeagueLearnerIsTheServicesLLM(t *testing.T) {
	_, l := servedLeague(t, "uniform")
	defer l.Close()
	svc, err := league.NewService(l, "")
	require.NoError(t, err)
	first := policyFunc(func(context.Context) error { return nil })
	s := newServer(t, server.Config{League: svc, Policies: func(req env.PolicyRequest) (agents.Policy, error) {
		if req.Name != "llm" {
			return nil, env.ErrUnknownPolicy
		}
		return first, nil
	}})
	for range 6 {
		r := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","policy":"llm","allocators":["individual"]}`))
		for _, sm := range r.Rollouts[0].Samples {
			assert.Equal(t, sm.Metadata.Role, sm.Metadata.Extra[server.MetaLearnerRole])
		}
	}
	assert.Equal(t, int64(6), l.Matches())
}
