package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// rawSamples decodes a 200 answer keeping every sample as its raw JSON
// keys, so that values can be compared byte for byte.
func rawSamples(t testing.TB, a answer) []map[string]json.RawMessage {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, "body: %s", a.body)
	var res struct {
		Rollouts []struct {
			Samples []map[string]json.RawMessage `json:"samples"`
		} `json:"rollouts"`
	}
	require.NoError(t, json.Unmarshal(a.body, &res))
	var out []map[string]json.RawMessage
	for _, r := range res.Rollouts {
		out = append(out, r.Samples...)
	}
	return out
}

func TestLabelsPassThroughByteIdentically(t *testing.T) {
	s := newServer(t, server.Config{})
	for _, label := range []string{
		`"42"`, `"ünïcode \u00e9 \"quoted\""`, `7`, `-12345678901234567890`, `3.50`, `1e-7`, `0.1`,
		`{"b":[1,2.0],"a":{"nested":null},"c":"x"}`, `[1,"two",null,true,{"k":[]}]`, `true`, `null`,
	} {
		t.Run(label, func(t *testing.T) {
			// Tic-tac-toe has no label of its own: every sample of every
			// episode carries the request's label.
			body := fmt.Sprintf(`{"scenario":"tictactoe","n":3,"label":%s}`, label)
			samples := rawSamples(t, post(t, s, body))
			require.Greater(t, len(samples), 3)
			for _, sm := range samples {
				assert.Equal(t, label, string(sm["label"]))
			}
		})
	}

	// Insignificant whitespace is dropped; numbers, key order and escapes
	// are kept as sent.
	samples := rawSamples(t, post(t, s, `{"scenario":"tictactoe","label":{ "b" : [ 1 , 2.50 ] ,"a":"\u00e9" }}`))
	for _, sm := range samples {
		assert.Equal(t, `{"b":[1,2.50],"a":"\u00e9"}`, string(sm["label"]))
	}

	// A number label reaches a "label" parameter as its text: the parrot's
	// "42" matches the label 42, and the sample keeps the number.
	a := post(t, s, `{"scenario":"quiz","prompt":"six times seven?","label":42}`)
	res := decodeResponse(t, a)
	assert.Equal(t, 1.0, res.Rollouts[0].TeamReward)
	assert.Equal(t, `42`, string(rawSamples(t, a)[0]["label"]))
	assert.NotContains(t, res.Rollouts[0].Samples[0].Metadata.Extra, "game_label", "42 and \"42\" say the same")
}

func TestBadLabelIsRefusedNamingTheField(t *testing.T) {
	s := newServer(t, server.Config{})
	for _, body := range []string{
		`{"scenario":"quiz","label": }`,
		`{"scenario":"quiz","label":{"a":}}`,
		`{"scenario":"quiz","label":[1,,2]}`,
		`{"scenario":"quiz","label":tru}`,
	} {
		a := post(t, s, body)
		require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", body, a.body)
		e := decodeError(t, a)
		assert.Equal(t, rollout.CodeBadJSON, e.Code, body)
		assert.Contains(t, e.Message, "field label", body)
	}
}

// failAt plays the first legal action, and fails the o player's second
// turn: the episode ends aborted with the samples of the turns before.
func failAt() agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		if obs.Role == "o" && obs.Turn == 1 {
			return agents.Action{}, fmt.Errorf("the model server is down")
		}
		return agents.Action{Text: obs.Legal[0]}, nil
	})
}

func TestFailedSamplesAreRemovedUnlessKept(t *testing.T) {
	s := newServer(t, server.Config{Policies: factory(failAt())})
	a := post(t, s, `{"scenario":"tictactoe","n":2}`)
	res := decodeResponse(t, a)
	for _, r := range res.Rollouts {
		require.Equal(t, protocol.StatusAborted, r.Status)
		require.NotEmpty(t, r.Samples)
		for _, sm := range r.Samples {
			assert.True(t, sm.RemoveSample, "an aborted episode's samples train nothing")
		}
	}
	for _, sm := range rawSamples(t, a) {
		assert.Equal(t, `true`, string(sm["remove_sample"]))
	}

	res = decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":2,"keep_failed":true}`))
	for _, r := range res.Rollouts {
		require.Equal(t, protocol.StatusAborted, r.Status)
		for _, sm := range r.Samples {
			assert.False(t, sm.RemoveSample, "keep_failed keeps them trainable")
			assert.Equal(t, protocol.StatusAborted, sm.Status)
		}
	}

	// A broken game fails its episode: same rule.
	broken := env.Define(&env.Info{Name: "broken", Summary: "fails", Schedule: env.Sequential, Roles: tictactoe.New().Info().Roles[:1]},
		func(env.Params, uint64) (env.Game, error) { return &brokenGame{}, nil })
	reg, err := env.NewRegistry(broken)
	require.NoError(t, err)
	s = newServer(t, server.Config{Scenarios: reg})
	res = decodeResponse(t, post(t, s, `{"scenario":"broken"}`))
	require.Equal(t, protocol.StatusFailed, res.Rollouts[0].Status)
	require.NotEmpty(t, res.Rollouts[0].Samples)
	for _, sm := range res.Rollouts[0].Samples {
		assert.True(t, sm.RemoveSample)
	}

	// Completed and truncated episodes stay trainable.
	s = newServer(t, server.Config{})
	for _, body := range []string{`{"scenario":"tictactoe","n":2}`, `{"scenario":"tictactoe","limits":{"max_turns":3}}`} {
		res = decodeResponse(t, post(t, s, body))
		for _, r := range res.Rollouts {
			for _, sm := range r.Samples {
				assert.False(t, sm.RemoveSample, "%s: %s", body, r.Status)
			}
		}
	}
}

// brokenGame lets its one seat play, then breaks a rule of its own.
type brokenGame struct{}

func (g *brokenGame) Seats() []env.Seat       { return []env.Seat{{ID: "x", Role: "x"}} }
func (g *brokenGame) Start(s *env.Step) error { return s.Fire(0, tictactoe.YourTurn) }
func (g *brokenGame) Observe(int) env.View    { return env.View{Text: "?", Legal: []string{"a"}} }
func (g *brokenGame) Apply(*env.Step, []env.Move) error {
	return fmt.Errorf("the board is on fire")
}
func (g *brokenGame) Score() env.Score { return env.Score{} }

// crowd is El Farol's shape: agents members, who all decide at once, once.
func crowd(name string) (*env.Info, func(env.Params, uint64) (env.Game, error)) {
	member := &agents.Role{
		Name: "member", Doc: "decides once", Initial: "deciding",
		Events:   fsm.Events{agents.Edge("deciding", "go", "done")},
		Terminal: []agents.State{"done"},
	}
	info := &env.Info{
		Name: name, Summary: "everyone decides once", Schedule: env.Simultaneous,
		Roles:  []*agents.Role{member},
		Params: []env.ParamSpec{env.Int("agents", 3, 1, 1_000_000, "members")},
	}
	return info, func(p env.Params, _ uint64) (env.Game, error) { return &crowdGame{n: p.Int("agents")}, nil }
}

type crowdGame struct{ n int }

func (g *crowdGame) Seats() []env.Seat {
	seats := make([]env.Seat, g.n)
	for i := range seats {
		seats[i] = env.Seat{ID: fmt.Sprintf("m%d", i), Role: "member"}
	}
	return seats
}
func (g *crowdGame) Start(*env.Step) error { return nil }
func (g *crowdGame) Observe(int) env.View  { return env.View{Text: "go?", Legal: []string{"go"}} }
func (g *crowdGame) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		if err := s.Fire(m.Seat, "go"); err != nil {
			return err
		}
	}
	s.End()
	return nil
}
func (g *crowdGame) Score() env.Score { return env.Score{Team: 1} }

// boundedCrowd tells the service how many turns its episodes take.
type boundedCrowd struct{ env.Scenario }

func (boundedCrowd) MinTurns(p env.Params) map[string]int {
	return map[string]int{"member": p.Int("agents")}
}

// counting plays "go" and counts its turns.
type counting struct{ n atomic.Int64 }

func (c *counting) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	c.n.Add(1)
	return agents.Action{Text: obs.Legal[0]}, nil
}

func crowdServer(t *testing.T, cfg server.Config) (*server.Server, *counting) {
	t.Helper()
	reg, err := env.NewRegistry(boundedCrowd{env.Define(crowd("crowd"))}, env.Define(crowd("blind-crowd")), tictactoe.New())
	require.NoError(t, err)
	c := &counting{}
	cfg.Scenarios, cfg.Policies = reg, factory(c)
	return newServer(t, cfg), c
}

func requireTooMany(t *testing.T, a answer) *rollout.Error {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	e := decodeError(t, a)
	assert.Equal(t, rollout.CodeTooManySamples, e.Code)
	assert.Contains(t, e.Message, "--max-samples-per-answer")
	assert.Contains(t, e.Message, "10 samples")
	return e
}

func TestTooManySamplesIsRefusedBeforePlaying(t *testing.T) {
	s, c := crowdServer(t, server.Config{MaxSamplesPerAnswer: 10})
	e := requireTooMany(t, post(t, s, `{"scenario":"crowd","n":3,"params":{"agents":4}}`))
	assert.Contains(t, e.Message, "at least 4 emitted turns per episode")
	assert.Contains(t, e.Message, "12 samples")
	assert.Zero(t, c.n.Load(), "nothing was played")

	// Within the limit it plays; a turn limit lowers the bound.
	res := decodeResponse(t, post(t, s, `{"scenario":"crowd","n":2,"params":{"agents":5}}`))
	assert.Len(t, res.Samples(), 10)
	requireTooMany(t, post(t, s, `{"scenario":"crowd","n":11,"params":{"agents":4},"limits":{"max_turns":1}}`))

	// The n=1 request of 200,000 agents is refused for the price of its
	// parameters.
	requireTooMany(t, post(t, s, `{"scenario":"crowd","params":{"agents":200000}}`))
	assert.Equal(t, int64(10), c.n.Load())
}

func TestTooManySamplesIsCutWhilePlaying(t *testing.T) {
	s, c := crowdServer(t, server.Config{MaxSamplesPerAnswer: 10})
	// One episode over the limit stops at its first step, before any
	// policy is asked (every role is emitted: the turn cap stops it).
	requireTooMany(t, post(t, s, `{"scenario":"blind-crowd","params":{"agents":200000}}`))
	assert.Zero(t, c.n.Load())

	// Several episodes, each within the limit, together over it: they are
	// stopped once their turns pass it, and no policy is asked past it.
	requireTooMany(t, post(t, s, `{"scenario":"blind-crowd","n":3,"params":{"agents":6}}`))
	assert.LessOrEqual(t, c.n.Load(), int64(10))

	// With an emit filter too.
	c.n.Store(0)
	requireTooMany(t, post(t, s, `{"scenario":"blind-crowd","n":4,"emit":["member"],"params":{"agents":3}}`))
	assert.LessOrEqual(t, c.n.Load(), int64(10))

	// Exactly at the limit is fine.
	res := decodeResponse(t, post(t, s, `{"scenario":"blind-crowd","n":2,"params":{"agents":5}}`))
	assert.Len(t, res.Samples(), 10)
	res = decodeResponse(t, post(t, s, `{"scenario":"blind-crowd","params":{"agents":10}}`))
	assert.Len(t, res.Samples(), 10)
}

func TestAnswerBytesLimit(t *testing.T) {
	body := `{"scenario":"tictactoe","n":4,"rollout_id":0,"group_index":0,"index":0,"seed":3}`
	full := post(t, newServer(t, server.Config{}), body)
	require.Equal(t, http.StatusOK, full.status)
	size := int64(len(full.body))

	// At the limit the answer is whole; one byte under, it is refused,
	// never truncated.
	at := post(t, newServer(t, server.Config{MaxAnswerBytes: size}), body)
	require.Equal(t, http.StatusOK, at.status)
	assert.Equal(t, full.body, at.body)
	for _, limit := range []int64{size - 1, 1000, 1} {
		a := post(t, newServer(t, server.Config{MaxAnswerBytes: limit}), body)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "limit %d", limit)
		e := decodeError(t, a)
		assert.Equal(t, rollout.CodeAnswerTooLarge, e.Code)
		assert.Contains(t, e.Message, fmt.Sprintf("limit of %d bytes", limit))
		assert.Contains(t, e.Message, "--max-answer-bytes")
		assert.Less(t, len(a.body), 1000, "the error body is small")
	}
}

func TestLimitConfigErrors(t *testing.T) {
	for _, cfg := range []server.Config{{MaxSamplesPerAnswer: -1}, {MaxAnswerBytes: -1}} {
		_, err := server.New(cfg)
		require.ErrorIs(t, err, server.ErrBadConfig)
	}
	for _, name := range []string{"MaxSamplesPerAnswer", "MaxAnswerBytes"} {
		cfg := server.Config{}
		switch name {
		case "MaxSamplesPerAnswer":
			cfg.MaxSamplesPerAnswer = -5
		default:
			cfg.MaxAnswerBytes = -5
		}
		_, err := server.New(cfg)
		assert.True(t, strings.Contains(err.Error(), name), "%v names %s", err, name)
	}
}

// A scenario with teams answers each side's reward and each seat's side,
// and every sample's team_reward is its own side's: what a trainer that
// reads the rollout rather than the samples needs to tell the sides apart.
func TestAnswerCarriesEachSidesReward(t *testing.T) {
	reg, err := env.NewRegistry(bargain.New())
	require.NoError(t, err)
	s := newServer(t, server.Config{Scenarios: reg})
	res := decodeResponse(t, post(t, s, `{"scenario":"bargain","n":30,"seed":3,"policy":"random"}`))
	require.Len(t, res.Rollouts, 30)
	differ := false
	for _, r := range res.Rollouts {
		require.Len(t, r.Teams, 2, "bargain's two sides")
		sum := 0.0
		reward := map[string]float64{}
		for _, tr := range r.Teams {
			sum += tr.Reward
			reward[tr.Team] = tr.Reward
		}
		assert.InDelta(t, r.TeamReward, sum, 1e-12, "team_reward is the sum of the sides'")
		differ = differ || r.Teams[0].Reward != r.Teams[1].Reward
		team := map[string]string{}
		for _, seat := range r.Seats {
			require.Contains(t, reward, seat.Team, "seat %s", seat.ID)
			team[seat.ID] = seat.Team
		}
		require.NotEmpty(t, r.Samples)
		for _, sm := range r.Samples {
			assert.Equal(t, team[sm.Metadata.Agent], sm.Metadata.Team)
			assert.Equal(t, reward[sm.Metadata.Team], sm.Metadata.TeamReward, "sample %s", sm.Metadata.Agent)
		}
	}
	assert.True(t, differ, "a general-sum game whose sides always scored alike proves nothing")

	// A scenario without teams says so with null, and its seats name none.
	a := post(t, newServer(t, server.Config{}), `{"scenario":"tictactoe","n":1}`)
	assert.Contains(t, string(a.body), `"teams":null`)
	assert.NotContains(t, string(a.body), `"team":`)
}
