package envserver_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// episodesAndSamples is a sink writing records (with credit) and samples.
func episodesAndSamples() (trajectories.Sink, *lockedBuffer, *lockedBuffer) {
	eps, samples := &lockedBuffer{}, &lockedBuffer{}
	return trajectories.Tee(trajectories.NewEpisodeWriter(eps), trajectories.NewJSONLWriter(samples, trajectories.Flat)), eps, samples
}

// played is one episode a vector played: its seeds and its moves, in
// order, by agent.
type played struct {
	seed  uint64
	rid   int64
	moves []map[string]string // one map per step: the moves of its actors
}

// TestVectorEpisodesAreAlone: episodes stepped in a batch write the records
// and samples, byte for byte, of the same episodes each played alone
// through /reset and /step (same run seed, rollout id and moves), in a
// sequential game, a simultaneous one with features, and one of sides
// rewarded by team with a counterfactual allocator.
func TestVectorEpisodesAreAlone(t *testing.T) {
	// Tic-tac-toe without its features: observations are view bytes.
	ttt, err := scenarios.Builtin().Lookup("tictactoe")
	require.NoError(t, err)
	textOnly, err := env.NewRegistry(viewsOnly{ttt, ttt.(env.ActionSets)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		req  envclient.VectorRequest
		reg  *env.Registry
	}{
		{"tictactoe", envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 5}, nil},
		{"tictactoe-views", envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 4, ViewBytes: 200, FinalObservations: true}, textOnly},
		{"tictactoe-house", envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 4, Open: []string{"x"}, Policies: map[string]string{"o": "center-first"}}, nil},
		{"blotto-house", envclient.VectorRequest{Scenario: "blotto", Params: map[string]string{"n": "2", "fields": "3"}, NumEnvs: 3, Open: []string{"red-0", "red-1"}, Policies: map[string]string{"soldier": "scripted"}}, nil},
		{"elfarol", envclient.VectorRequest{Scenario: "elfarol", Params: map[string]string{"agents": "5", "nights": "3", "capacity": "2"}, NumEnvs: 4, Allocators: []string{"difference", "team"}}, nil},
		{"blotto", envclient.VectorRequest{Scenario: "blotto", Params: map[string]string{"n": "2", "fields": "3"}, NumEnvs: 3, Reward: "team", Allocators: []string{"difference"}, FinalObservations: true}, nil},
		{"negotiation", envclient.VectorRequest{Scenario: "negotiation", NumEnvs: 3}, nil},
		{"bargain", envclient.VectorRequest{Scenario: "bargain", Params: map[string]string{"members": "2", "pie": "6", "rounds": "3"}, NumEnvs: 3, Allocators: []string{"shapley"}}, nil},
		{"signal", envclient.VectorRequest{Scenario: "signal", NumEnvs: 4, Allocators: []string{"team", "individual"}}, nil},
		{"werewolf", envclient.VectorRequest{Scenario: "werewolf", Params: map[string]string{"players": "5", "wolves": "1"}, NumEnvs: 3, Reward: "team"}, nil},
		{"committee", envclient.VectorRequest{Scenario: "committee", NumEnvs: 3, Emit: []string{"adviser"}, Allocators: []string{"difference"}, Reward: "difference"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			sink, eps, samples := episodesAndSamples()
			c, _, _, _ := start(t, envserver.Config{Sink: sink, Scenarios: tc.reg})
			seed, rid := uint64(11), int64(1000)
			req := tc.req
			req.Seed, req.RolloutID = &seed, &rid
			v, err := c.Vector(ctx, req)
			require.NoError(t, err)
			na := len(v.Agents)
			b, err := v.Reset(ctx, nil)
			require.NoError(t, err)
			require.Len(t, b.Started, req.NumEnvs)
			if tc.reg != nil {
				require.Equal(t, envclient.DTypeUint8, b.ObsDType)
				require.Equal(t, 200, b.ObsDim)
				assert.True(t, bytes.HasPrefix(b.ObsBytes, []byte("Tic-tac-toe. You play X")), "%q", b.ObsBytes[:40])
			}
			inPlay := make([]*played, req.NumEnvs)
			var ended []*played
			for _, s := range b.Started {
				inPlay[s.Env] = &played{seed: s.Seed, rid: s.RolloutID}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 40 {
				acts := make([]int32, req.NumEnvs*na)
				for e := range req.NumEnvs {
					step := map[string]string{}
					for a := range na {
						acts[e*na+a] = envclient.NoAction
						if b.Acting[e*na+a] == 0 {
							continue
						}
						mask := b.Masks[(e*na+a)*b.NumActions : (e*na+a+1)*b.NumActions]
						var ok []int
						for j, m := range mask {
							if m == 1 {
								ok = append(ok, j)
							}
						}
						require.NotEmpty(t, ok)
						j := ok[rng.IntN(len(ok))]
						acts[e*na+a] = int32(j)
						step[v.Agents[a].Agent] = v.Agents[a].Actions[j]
					}
					inPlay[e].moves = append(inPlay[e].moves, step)
				}
				b, err = v.Step(ctx, acts)
				require.NoError(t, err)
				for _, en := range b.Ended {
					require.Equal(t, inPlay[en.Env].rid, en.RolloutID)
					ended = append(ended, inPlay[en.Env])
					if req.FinalObservations {
						assert.Len(t, en.FinalState, b.StateDim)
					}
				}
				for _, s := range b.Started {
					inPlay[s.Env] = &played{seed: s.Seed, rid: s.RolloutID}
				}
			}
			require.NotEmpty(t, ended)
			t.Logf("%d episodes ended, %d bytes of records, %d of samples", len(ended), len(eps.String()), len(samples.String()))
			// The same episodes alone, in the order they ended.
			sink2, eps2, samples2 := episodesAndSamples()
			c2, _, _, _ := start(t, envserver.Config{Sink: sink2, Scenarios: tc.reg})
			for _, p := range ended {
				r := envclient.ResetRequest{Scenario: req.Scenario, Params: req.Params, Seed: &p.seed, RolloutID: &p.rid, Allocators: req.Allocators, Fallback: "forfeit",
					Open: req.Open, Policies: req.Policies, Emit: req.Emit}
				s, res, err := c2.Reset(ctx, r)
				require.NoError(t, err)
				for _, m := range p.moves {
					require.False(t, res.Done)
					if len(m) == 0 {
						continue // only the house acted: not a step of the caller's
					}
					res, err = s.StepAll(ctx, m)
					require.NoError(t, err)
				}
				require.True(t, res.Done)
			}
			assert.Equal(t, eps2.String(), eps.String(), "records")
			assert.Equal(t, samples2.String(), samples.String(), "samples")
			assert.Equal(t, len(ended), strings.Count(eps.String(), "\n"))
			require.NoError(t, v.Close(ctx))
		})
	}
}

// TestVectorRefusals: bad requests and frames are refused, naming what
// was wrong, and a refused step changes nothing.
func TestVectorRefusals(t *testing.T) {
	ctx := t.Context()
	c, hs, _, _ := start(t, envserver.Config{MaxVectorEnvs: 8})
	_, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 9})
	require.ErrorContains(t, err, "over the server's limit of 8")
	_, err = c.Vector(ctx, envclient.VectorRequest{Scenario: "debate", NumEnvs: 1})
	require.ErrorContains(t, err, "declares no action sets")
	_, err = c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1, Reward: "mine"})
	require.ErrorContains(t, err, "reward")
	_, err = c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1, Open: []string{"z"}})
	require.ErrorContains(t, err, `open: no agent "z"`)
	_, err = c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1, Policies: map[string]string{"o": "nobody"}})
	require.ErrorContains(t, err, "nobody")
	v, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 2})
	require.NoError(t, err)
	_, err = v.Step(ctx, []int32{0, -1, 0, -1})
	require.ErrorContains(t, err, "step before reset")
	b, err := v.Reset(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 1, 0}, b.Acting)
	_, err = v.Step(ctx, []int32{0, -1, 9, -1})
	require.ErrorContains(t, err, "action 9 is not one of its 9 actions")
	// a1 twice in env 0: the second is illegal; env 1's move is not made.
	_, err = v.Step(ctx, []int32{0, -1, 4, -1})
	require.NoError(t, err)
	_, err = v.Step(ctx, []int32{-1, 0, -1, 1})
	require.ErrorContains(t, err, `"a1" is not one of agent o's legal actions`)
	b, err = v.Step(ctx, []int32{-1, 1, -1, 1})
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 1, 0}, b.Acting)
	// Frames.
	for _, body := range [][]byte{nil, []byte("TVA1"), envclient.AppendActions(nil, envclient.Actions{NumEnvs: 1, NumAgents: 2, Actions: []int32{0, 0}}),
		append(envclient.AppendActions(nil, envclient.Actions{NumEnvs: 2, NumAgents: 2, Actions: []int32{0, 0, 0, 0}}), 0)} {
		resp, err := hs.Client().Post(hs.URL+envclient.PathVector+v.VectorID+"/step", envclient.ContentBinary, bytes.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, resp.StatusCode, "%q", body)
	}
	resp, err := hs.Client().Post(hs.URL+envclient.PathVector+v.VectorID+"/step", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	require.NoError(t, v.Close(ctx))
	_, err = v.Step(ctx, []int32{0, 0, 0, 0})
	require.ErrorContains(t, err, "no vector environment")
}

// TestSessionFeatures: a session that asks for features gets its seats'
// and, holding every seat, the global state; /seats tells their spaces; a
// scenario without features refuses the request.
func TestSessionFeatures(t *testing.T) {
	ctx := t.Context()
	c, _, _, _ := start(t, envserver.Config{})
	seats, err := c.Seats(ctx, envclient.SeatsRequest{Scenario: "tictactoe"})
	require.NoError(t, err)
	require.NotNil(t, seats.State)
	assert.Equal(t, []int{3, 3, 3}, seats.State.Shape)
	assert.Equal(t, []int{3, 3, 2}, seats.Seats[0].Observation.Shape)
	s, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Features: true})
	require.NoError(t, err)
	assert.Len(t, res.Observation.Features["x"], 18)
	assert.Len(t, res.Observation.State, 27)
	res, err = s.Step(ctx, "", "b2")
	require.NoError(t, err)
	assert.Equal(t, float32(1), res.Observation.Features["x"][2*4], "x's own mark on b2")
	assert.Equal(t, float32(1), res.Observation.Features["o"][2*4+1], "o sees x's mark as its opponent's")
	assert.Equal(t, float32(1), res.Observation.State[3*4])
	// One seat of two: its features, no state.
	_, res, err = c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Features: true, Open: []string{"o"}, Seats: []string{"o"}})
	require.NoError(t, err)
	assert.Len(t, res.Observation.Features, 1)
	assert.Nil(t, res.Observation.State)
	_, _, err = c.Reset(ctx, envclient.ResetRequest{Scenario: "debate", Features: true})
	require.ErrorContains(t, err, "declares no numeric observation")
}

// TestVectorCredit: an ended episode carries each agent's side reward,
// score and every named allocator's credit, as the output stage gives
// them to the episode it writes (what `troupe run --episodes-out`
// writes), and the reward an allocator names is its credit; on both sides
// of a game of sides.
func TestVectorCredit(t *testing.T) {
	ctx := t.Context()
	got := map[int64]*credit.Seats{}
	var mu sync.Mutex
	sink := trajectories.SinkFunc(func(ep *trajectories.Episode) error {
		s, err := credit.SeatsOf(&ep.Record, ep.Credit)
		mu.Lock()
		got[ep.RolloutID] = s
		mu.Unlock()
		return err
	})
	c, _, _, _ := start(t, envserver.Config{Sink: sink})
	for _, tc := range []envclient.VectorRequest{
		{Scenario: "blotto", Params: map[string]string{"n": "2", "fields": "3"}, NumEnvs: 3, Allocators: []string{"team", "difference", "shapley"}, Reward: "difference"},
		{Scenario: "elfarol", Params: map[string]string{"agents": "4", "nights": "2"}, NumEnvs: 2, Allocators: []string{"difference"}, Reward: "difference"},
	} {
		v, err := c.Vector(ctx, tc)
		require.NoError(t, err)
		assert.Equal(t, tc.Allocators, v.Allocators)
		na := len(v.Agents)
		b, err := v.Reset(ctx, nil)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(3, 4))
		n := 0
		for range 5 {
			acts := make([]int32, tc.NumEnvs*na)
			for i := range acts {
				acts[i] = int32(rng.IntN(len(v.Agents[i%na].Actions)))
			}
			b, err = v.Step(ctx, acts)
			require.NoError(t, err)
			require.Len(t, b.Ended, tc.NumEnvs, "one-step games")
			for _, e := range b.Ended {
				mu.Lock()
				want := got[e.RolloutID]
				mu.Unlock()
				require.NotNil(t, want)
				w := 2 + len(tc.Allocators)
				require.Len(t, e.Credit, na*w)
				for a := range na {
					sc := want.Seats[a]
					assert.Equal(t, sc.Reward, e.Credit[a*w])
					assert.Equal(t, sc.ScoreOr(), e.Credit[a*w+1])
					assert.Equal(t, sc.End, e.Credit[a*w+2:(a+1)*w])
					assert.Equal(t, float32(sc.End[slices.Index(tc.Allocators, "difference")]), b.Rewards[e.Env*na+a])
					n++
				}
			}
		}
		t.Logf("%s: %d agents' credit checked", tc.Scenario, n)
		require.NoError(t, v.Close(ctx))
	}
}

// viewsOnly is a scenario with its action sets but without its features.
type viewsOnly struct {
	env.Scenario
	as env.ActionSets
}

func (v viewsOnly) ActionSet(p env.Params, role string) []string { return v.as.ActionSet(p, role) }

// TestVectorIdle: a vector silent for SessionTimeout is closed (reaped by
// the next creation), its episodes in play written aborted, end "closed".
func TestVectorIdle(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var ends []string
	sink := trajectories.SinkFunc(func(ep *trajectories.Episode) error {
		mu.Lock()
		defer mu.Unlock()
		ends = append(ends, string(ep.Status)+" "+ep.End)
		return nil
	})
	c, _, _, _ := start(t, envserver.Config{Sink: sink, SessionTimeout: 20 * time.Millisecond})
	v, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 2})
	require.NoError(t, err)
	_, err = v.Reset(ctx, nil)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1})
	require.NoError(t, err)
	_, err = v.Step(ctx, []int32{0, -1, 0, -1})
	require.ErrorContains(t, err, "no vector environment")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"aborted closed", "aborted closed"}, ends)
}

// TestVectorStepFailureStops: a step that fails after its moves were
// made (here: the credit of env 1's ended episode, whose writing failed)
// leaves the vector refusing steps until a reset, rather than letting
// the next step play env 0 again on observations its caller never got
// and fail at env 1 once more, episode after episode.
func TestVectorStepFailureStops(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	written := 0
	sink := trajectories.SinkFunc(func(*trajectories.Episode) error {
		mu.Lock()
		defer mu.Unlock()
		written++
		if written == 2 {
			return errors.New("disk full")
		}
		return nil
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return written
	}
	c, _, _, _ := start(t, envserver.Config{Sink: sink})
	v, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "elfarol", Params: map[string]string{"agents": "2", "nights": "1"}, NumEnvs: 2, Allocators: []string{"team"}})
	require.NoError(t, err)
	_, err = v.Reset(ctx, nil)
	require.NoError(t, err)
	acts := []int32{0, 0, 0, 0}
	_, err = v.Step(ctx, acts)
	require.ErrorContains(t, err, "could not be computed")
	require.Equal(t, 2, count())
	_, err = v.Step(ctx, acts)
	require.ErrorContains(t, err, "reset")
	assert.Equal(t, 2, count(), "no episode is played past the failure")
	_, err = v.Reset(ctx, nil)
	require.NoError(t, err)
	b, err := v.Step(ctx, acts)
	require.NoError(t, err)
	assert.Len(t, b.Ended, 2)
}

// blockingPolicies makes "block": a house policy that blocks until its
// context is done (a slow LLM), telling entered each time it starts.
func blockingPolicies(entered chan<- struct{}) env.PolicyMaker {
	return func(req env.PolicyRequest) (agents.Policy, error) {
		if req.Name != "block" {
			return nil, env.ErrUnknownPolicy
		}
		return agents.PolicyFunc(func(ctx context.Context, _ *agents.Observation) (agents.Action, error) {
			entered <- struct{}{}
			<-ctx.Done()
			return agents.Action{}, context.Cause(ctx)
		}), nil
	}
}

// endsSink records each written episode's status and end.
func endsSink() (trajectories.Sink, func() []string) {
	var mu sync.Mutex
	var ends []string
	return trajectories.SinkFunc(func(ep *trajectories.Episode) error {
			mu.Lock()
			defer mu.Unlock()
			ends = append(ends, string(ep.Status)+" "+ep.End)
			return nil
		}), func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(ends)
		}
}

// TestVectorHousePolicyShutdown: Shutdown cancels a house policy that
// blocks a vector's reset until its context is done, rather than waiting
// on the vector for ever; the episode is written aborted, interrupted.
func TestVectorHousePolicyShutdown(t *testing.T) {
	ctx := t.Context()
	entered := make(chan struct{}, 1)
	sink, ends := endsSink()
	c, _, _, s := start(t, envserver.Config{Sink: sink, Policies: blockingPolicies(entered)})
	v, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1, Open: []string{"o"}, Policies: map[string]string{"x": "block"}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := v.Reset(ctx, nil)
		done <- err
	}()
	<-entered
	s.Shutdown() // returns: it would wait on the vector's lock for ever
	err = <-done
	require.ErrorContains(t, err, "while a house policy played")
	assert.ErrorContains(t, err, "closed")
	assert.Equal(t, []string{"aborted interrupted"}, ends())
}

// TestVectorHousePolicyRequestEnds: a caller that gives up on a step
// cancels the house policy it waits on; the vector answers its next call
// at once.
func TestVectorHousePolicyRequestEnds(t *testing.T) {
	ctx := t.Context()
	entered := make(chan struct{}, 1)
	sink, ends := endsSink()
	c, _, _, _ := start(t, envserver.Config{Sink: sink, Policies: blockingPolicies(entered)})
	v, err := c.Vector(ctx, envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 1, Open: []string{"x"}, Policies: map[string]string{"o": "block"}})
	require.NoError(t, err)
	_, err = v.Reset(ctx, nil)
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := v.Step(sctx, []int32{4, -1})
		done <- err
	}()
	<-entered
	cancel()
	require.Error(t, <-done)
	_, err = v.Step(ctx, []int32{4, -1}) // waits for the vector's lock: the policy gave it up
	require.ErrorContains(t, err, "reset")
	assert.Equal(t, []string{"aborted interrupted"}, ends())
}
