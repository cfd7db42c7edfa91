package table_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// setupOf is episode 0 of the spec's run, resolved as every run's is.
func setupOf(t *testing.T, spec runspec.Spec) env.Setup {
	t.Helper()
	spec.Episodes = 1
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	require.NoError(t, err)
	req := res.Config.Request(0)
	return env.Setup{Play: res.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed, Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex}
}

// encode is the record as an episode file holds it.
func encode(t *testing.T, rec *episode.Record) string {
	t.Helper()
	require.NotNil(t, rec)
	b, err := trajectories.AppendEpisodeJSON(nil, rec, nil)
	require.NoError(t, err)
	return string(b)
}

// candidates are the moves a player tries, in an order drawn from the
// turn's seed: the legal list, or moves of the scenario's JSON grammar
// (some illegal, which the table refuses).
func candidates(o agents.Observation) []string {
	var c []string
	if o.Legal != nil {
		c = append(c, o.Legal...)
	} else {
		c = []string{`{"type":"accept"}`, `not json`, `{"type":"walk"}`}
		for k := range 3 {
			c = append(c, fmt.Sprintf(`{"type":"propose","take":{"book":%d,"hat":%d,"ball":%d}}`, o.Intn(uint64(k), 3), o.Intn(uint64(k+3), 3), o.Intn(uint64(k+6), 2)))
		}
	}
	for i := len(c) - 1; i > 0; i-- {
		j := o.Intn(uint64(100+i), i+1)
		c[i], c[j] = c[j], c[i]
	}
	return c
}

// play plays the session's seats until the episode ends, trying each
// turn's candidates until the table takes one, and returns the moves it
// gave, by agent.
func play(ctx context.Context, s *table.Session) (map[string][]string, error) {
	moves := map[string][]string{}
	for {
		obs, err := s.Observe(ctx)
		if err != nil {
			return moves, err
		}
		if len(obs) == 0 {
			return moves, nil
		}
		for _, o := range obs {
			taken := false
			for _, c := range candidates(o.Observation) {
				err := s.Act(ctx, o.Seat, agents.Action{Text: c})
				if errors.Is(err, table.ErrIllegal) {
					continue
				}
				if err != nil {
					return moves, err
				}
				moves[o.Agent] = append(moves[o.Agent], c)
				taken = true
				break
			}
			if !taken {
				return moves, fmt.Errorf("agent %s: no candidate was legal", o.Agent)
			}
		}
	}
}

// replay plays setup on the engine, the seats in moves replaying them and
// the others playing setup's policies.
func replay(setup env.Setup, moves map[string][]string) *episode.Record {
	house := setup.Policy
	setup.Policy = func(s env.Seat) agents.Policy {
		if m, ok := moves[s.ID]; ok {
			return agents.Replay(m...)
		}
		return house(s)
	}
	return env.NewEngine().Run(context.Background(), setup)
}

// TestSessionsGiveTheEngineRecord plays every seat from its own session,
// each on its own goroutine, and checks that the record is the engine's
// given the same moves, byte for byte.
func TestSessionsGiveTheEngineRecord(t *testing.T) {
	for _, name := range []string{"tictactoe", "negotiation", "elfarol"} {
		t.Run(name, func(t *testing.T) {
			params := map[string]string{}
			if name == "elfarol" {
				params = map[string]string{"agents": "7", "nights": "3"}
			}
			setup := setupOf(t, runspec.Spec{Scenario: name, Params: params, Seed: 5})
			tb, err := table.New(t.Context(), table.Config{Setup: setup})
			require.NoError(t, err)
			var wg sync.WaitGroup
			var mu sync.Mutex
			all := map[string][]string{}
			for i := range tb.Seats() {
				s, err := tb.Join(i)
				require.NoError(t, err)
				wg.Go(func() {
					m, err := play(t.Context(), s)
					assert.NoError(t, err)
					mu.Lock()
					defer mu.Unlock()
					for k, v := range m {
						all[k] = v
					}
				})
			}
			wg.Wait()
			<-tb.Done()
			rec := tb.Record()
			assert.Equal(t, protocol.StatusCompleted, rec.Status, rec.Err)
			assert.Equal(t, encode(t, replay(setup, all)), encode(t, rec))
		})
	}
}

// TestControllerAndHouse has one controller hold o, the house (minimax)
// play x: the record is the engine's with x on minimax.
func TestControllerAndHouse(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe", Policies: map[string]runspec.Policy{"x": {Name: "minimax"}}})
	tb, err := table.New(t.Context(), table.Config{Setup: setup, Open: []int{1}})
	require.NoError(t, err)
	_, err = tb.Join(0)
	require.ErrorIs(t, err, table.ErrNoSeat)
	s, err := tb.Join()
	require.NoError(t, err)
	assert.Equal(t, []int{1}, s.Seats())
	_, err = tb.Join(1)
	require.ErrorIs(t, err, table.ErrTaken)
	moves, err := play(t.Context(), s)
	require.NoError(t, err)
	assert.Equal(t, encode(t, replay(setup, moves)), encode(t, tb.Record()))
}

func TestRefusals(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe"})
	tb, err := table.New(t.Context(), table.Config{Setup: setup})
	require.NoError(t, err)
	x, err := tb.Join(0)
	require.NoError(t, err)
	o, err := tb.Join(1)
	require.NoError(t, err)
	ctx := t.Context()

	require.ErrorIs(t, o.Act(ctx, 1, agents.Action{Text: "a1"}), table.ErrNotPending)
	require.ErrorIs(t, o.Act(ctx, 0, agents.Action{Text: "a1"}), table.ErrNotYours)
	err = x.Act(ctx, 0, agents.Action{Text: "z9"})
	require.ErrorIs(t, err, table.ErrIllegal)
	assert.Contains(t, err.Error(), `"z9" is not one of agent x's legal actions`)
	assert.Equal(t, []int{0}, tb.Waiting(), "a refused move changes nothing")
	require.Len(t, o.Pending(), 0)

	for _, m := range []struct {
		s    *table.Session
		seat int
		cell string
	}{{x, 0, "a1"}, {o, 1, "b1"}, {x, 0, "a2"}, {o, 1, "b2"}, {x, 0, "a3"}} {
		require.NoError(t, m.s.Act(ctx, m.seat, agents.Action{Text: m.cell}))
	}
	<-tb.Done()
	require.ErrorIs(t, o.Act(ctx, 1, agents.Action{Text: "c1"}), table.ErrEpisodeOver)
	obs, err := o.Observe(ctx)
	require.NoError(t, err)
	assert.Empty(t, obs)
	assert.Equal(t, []float64{1, -1}, tb.Record().Score.Agents)
}

// TestLeave: a session that leaves hands its seat to the house policy,
// whose turns say so, or forfeits the episode.
func TestLeave(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe", Policies: map[string]runspec.Policy{"o": {Name: "minimax"}}})
	for _, fb := range []table.Fallback{table.FallbackPolicy, table.Forfeit} {
		t.Run(fb.String(), func(t *testing.T) {
			tb, err := table.New(t.Context(), table.Config{Setup: setup, Open: []int{0}, Fallback: fb})
			require.NoError(t, err)
			x, err := tb.Join(0)
			require.NoError(t, err)
			require.NoError(t, x.Act(t.Context(), 0, agents.Action{Text: "b2"}))
			x.Leave(t.Context(), "connection lost")
			_, err = x.Observe(t.Context())
			require.ErrorIs(t, err, table.ErrLeft)
			<-tb.Done()
			rec := tb.Record()
			if fb == table.Forfeit {
				assert.Equal(t, protocol.StatusAborted, rec.Status)
				assert.Equal(t, table.EndForfeit, rec.End)
				assert.Equal(t, "seat 0 (x) forfeited: connection lost", rec.Err)
				assert.Len(t, rec.Turns, 2)
				return
			}
			assert.Equal(t, protocol.StatusCompleted, rec.Status)
			for _, turn := range rec.Turns[2:] {
				if turn.Seat == 0 {
					assert.Equal(t, "connection lost", turn.Notes[table.NoteFallback])
				}
			}
			assert.Nil(t, rec.Turns[0].Notes[table.NoteFallback])
		})
	}
}

// TestObserveWaits: Observe blocks until the seat must act, and honours
// its context.
func TestObserveWaits(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe"})
	tb, err := table.New(t.Context(), table.Config{Setup: setup})
	require.NoError(t, err)
	x, _ := tb.Join(0)
	o, _ := tb.Join(1)
	got := make(chan []env.PendingSeat)
	go func() {
		obs, err := o.Observe(t.Context())
		assert.NoError(t, err)
		got <- obs
	}()
	require.NoError(t, x.Act(t.Context(), 0, agents.Action{Text: "c3"}))
	obs := <-got
	require.Len(t, obs, 1)
	assert.Equal(t, "o", obs[0].Agent)
	assert.Equal(t, 1, obs[0].Seat, "the pending seat's index, the key Act takes")
	assert.NotContains(t, obs[0].Legal, "c3")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = x.Observe(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestPassIllegal(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe"})
	tb, err := table.New(t.Context(), table.Config{Setup: setup, PassIllegal: true})
	require.NoError(t, err)
	x, _ := tb.Join(0)
	require.NoError(t, x.Act(t.Context(), 0, agents.Action{Text: "z9"}))
	<-tb.Done()
	rec := tb.Record()
	assert.Contains(t, rec.Turns[0].Invalid, "illegal action")
	assert.Equal(t, []float64{-1, 1}, rec.Score.Agents, "the game's forfeit rule judged it")
}

func TestBadConfig(t *testing.T) {
	setup := setupOf(t, runspec.Spec{Scenario: "tictactoe"})
	_, err := table.New(t.Context(), table.Config{})
	require.ErrorIs(t, err, table.ErrBadConfig)
	_, err = table.New(t.Context(), table.Config{Setup: setup, Open: []int{2}})
	require.ErrorIs(t, err, table.ErrBadConfig)
	setup.Policy = nil
	_, err = table.New(t.Context(), table.Config{Setup: setup, Open: []int{0}, Fallback: table.Forfeit})
	require.ErrorIs(t, err, table.ErrBadConfig)
	_, err = table.New(t.Context(), table.Config{Setup: setup, Fallback: table.Forfeit})
	require.NoError(t, err)
	_, err = table.ParseFallback("pass")
	require.ErrorIs(t, err, table.ErrBadConfig)
}
