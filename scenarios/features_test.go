package scenarios_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios"
)

// TestFeatures: the scenarios that declare numeric observations declare
// valid spaces, and at every decision and at the end every seat's features
// and the global state fill their spaces within bounds, and are functions
// of the moves played (the same moves, the same values).
func TestFeatures(t *testing.T) {
	reg := scenarios.Builtin()
	for _, tc := range []struct {
		name   string
		params map[string]string
	}{
		{"tictactoe", nil},
		{"elfarol", map[string]string{"agents": "6", "nights": "3", "capacity": "2"}},
		{"blotto", map[string]string{"n": "3", "fields": "4"}},
		{"bargain", map[string]string{"members": "2", "pie": "6", "rounds": "3"}},
		{"negotiation", nil},
		{"negotiation", map[string]string{"items": "2", "max_count": "2", "rounds": "2"}},
		{"signal", nil},
		{"signal", map[string]string{"vocab": "symbols", "candidates": "3"}},
		{"werewolf", nil},
		{"werewolf", map[string]string{"players": "5", "wolves": "1", "seers": "0"}},
		{"committee", nil},
		{"committee", map[string]string{"informed": "1", "uninformed": "2", "options": "3"}},
	} {
		sc, err := reg.Lookup(tc.name)
		require.NoError(t, err)
		fs, ok := sc.(env.Features)
		require.True(t, ok, "%s declares no features", tc.name)
		params, err := sc.Info().ParseParams(tc.params)
		require.NoError(t, err)
		state := fs.StateSpace(params)
		require.NoError(t, state.Validate(), tc.name)
		for seed := range uint64(10) {
			setup := env.Setup{Play: env.Play{Scenario: sc, Params: params}, Seed: seed, PolicySeed: seed}
			ep, err := env.NewEpisode(setup)
			require.NoError(t, err)
			var trace [][]float32
			snap := func() {
				for i, seat := range ep.Seats() {
					sp := fs.ObservationSpace(params, seat.Role)
					require.NoError(t, sp.Validate())
					dst := make([]float32, sp.Size())
					for k := range dst {
						dst[k] = float32(math.NaN()) // every element is written
					}
					require.NoError(t, ep.Features(i, dst))
					inside(t, tc.name+" "+seat.ID, sp, dst)
					trace = append(trace, dst)
				}
				dst := make([]float32, state.Size())
				require.NoError(t, ep.State(dst))
				inside(t, tc.name+" state", state, dst)
				trace = append(trace, dst)
			}
			var moves []agents.Action
			snap()
			// A seat's features are what it may know: a fork from its
			// information set (the hidden state re-drawn) shows it the
			// same.
			sameForks := func() {
				if ep.Done() {
					return
				}
				for i, seat := range ep.Seats() {
					f, err := ep.ForkFor(i, seed+99)
					if errors.Is(err, env.ErrNoHiddenState) {
						return
					}
					require.NoError(t, err)
					sp := fs.ObservationSpace(params, seat.Role)
					want, got := make([]float32, sp.Size()), make([]float32, sp.Size())
					require.NoError(t, ep.Features(i, want))
					require.NoError(t, f.Features(i, got))
					require.Equal(t, want, got, "%s: %s's features in a fork from its information set", tc.name, seat.ID)
				}
			}
			sameForks()
			for !ep.Done() {
				for _, o := range ep.Pending() {
					legal := o.Legal
					if legal == nil {
						// JSON moves: those of the action set the rules take.
						for _, m := range sc.(env.ActionSets).ActionSet(params, o.Role) {
							if sc.(env.StructuredActions).CheckAnswer(&o.Observation, m) == nil {
								legal = append(legal, m)
							}
						}
					}
					a := agents.Action{Text: legal[o.Intn(0, len(legal))]}
					moves = append(moves, a)
					require.NoError(t, ep.Act(o.Seat, a))
				}
				snap()
				sameForks()
			}
			// The same moves again: the same features.
			again, err := env.NewEpisode(setup)
			require.NoError(t, err)
			for _, a := range moves {
				require.NoError(t, again.Act(again.Pending()[0].Seat, a))
			}
			dst := make([]float32, state.Size())
			require.NoError(t, again.State(dst))
			assert.Equal(t, trace[len(trace)-1], dst, "%s: the state is a function of the moves", tc.name)
		}
	}
}

func inside(t *testing.T, what string, sp env.Space, v []float32) {
	t.Helper()
	for k, x := range v {
		if !(x >= sp.Low && x <= sp.High) {
			t.Fatalf("%s: element %d is %v, outside %v", what, k, x, sp)
		}
	}
}

// TestNoFeatures: a scenario that declares none answers ErrNoFeatures.
func TestNoFeatures(t *testing.T) {
	sc, err := scenarios.Builtin().Lookup("debate")
	require.NoError(t, err)
	if _, ok := sc.(env.Features); ok {
		t.Skip("debate declares features")
	}
	params, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	ep, err := env.NewEpisode(env.Setup{Play: env.Play{Scenario: sc, Params: params}})
	require.NoError(t, err)
	require.ErrorIs(t, ep.State(make([]float32, 4)), env.ErrNoFeatures)
	require.ErrorIs(t, ep.Features(0, make([]float32, 4)), env.ErrNoFeatures)
}
