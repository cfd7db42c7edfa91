package scenarios_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios"
)

// TestActionSets: in the scenarios that declare action sets, every turn's
// legal actions are in the seat's set, and for JSON moves the set holds a
// move the rules accept at every turn (walk, at least); episodes played by
// drawing from the moves of the set the rules accept end as episodes do.
func TestActionSets(t *testing.T) {
	reg := scenarios.Builtin()
	for _, tc := range []struct {
		name   string
		params map[string]string
	}{
		{"tictactoe", nil},
		{"elfarol", map[string]string{"agents": "4", "nights": "5"}},
		{"negotiation", nil},
		{"negotiation", map[string]string{"items": "2", "max_count": "2"}},
		{"blotto", nil},
		{"signal", nil},
		{"signal", map[string]string{"attributes": "3", "values": "3", "vocab": "symbols"}},
		{"werewolf", nil},
		{"committee", nil},
		{"bargain", nil},
	} {
		sc, err := reg.Lookup(tc.name)
		require.NoError(t, err)
		as, ok := sc.(env.ActionSets)
		require.True(t, ok, "%s declares no action sets", tc.name)
		params, err := sc.Info().ParseParams(tc.params)
		require.NoError(t, err)
		check, _ := sc.(env.StructuredActions)
		for seed := range uint64(20) {
			ep, err := env.NewEpisode(env.Setup{Play: env.Play{Scenario: sc, Params: params}, Seed: seed, PolicySeed: seed})
			require.NoError(t, err)
			for !ep.Done() {
				for _, o := range ep.Pending() {
					set := as.ActionSet(params, o.Role)
					require.NotEmpty(t, set, "%s role %s", tc.name, o.Role)
					var ok []string
					for _, m := range set {
						switch {
						case o.Legal != nil:
							if slices.Contains(o.Legal, m) {
								ok = append(ok, m)
							}
						case check.CheckAnswer(&o.Observation, m) == nil:
							ok = append(ok, m)
						}
					}
					for _, l := range o.Legal {
						assert.Contains(t, set, l, "%s: legal %q of %s is not in the action set", tc.name, l, o.Agent)
					}
					require.NotEmpty(t, ok, "%s: no move of the set is allowed for %s at step %d", tc.name, o.Agent, o.Step)
					require.NoError(t, ep.Act(o.Seat, agents.Action{Text: ok[o.Intn(0, len(ok))]}))
				}
			}
			rec := ep.Record()
			assert.Equal(t, "completed", string(rec.Status), "%s: %s", tc.name, rec.Err)
			for _, turn := range rec.Turns {
				assert.Empty(t, turn.Invalid)
			}
		}
	}
}
