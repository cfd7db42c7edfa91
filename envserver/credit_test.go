package envserver_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestCreditInTheAnswer: an episode over answers every seat's credit from
// every allocator the reset asked for, the values `troupe run
// --episodes-out` writes for the same seed and moves, on both sides of a
// two-sided game (bargain, werewolf), and rewards each seat with the
// reward allocator's credit (the scenario's score without one).
func TestCreditInTheAnswer(t *testing.T) {
	c, _, _, _ := start(t, envserver.Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		scenario string
		params   map[string]string
		allocs   []string
		reward   string
	}{
		{"bargain", map[string]string{"rounds": "2"}, []string{"team", "individual", "difference", "shapley", "discount:gamma=0.5"}, "difference"},
		{"werewolf", map[string]string{"players": "5", "wolves": "1", "days": "2"}, []string{"team", "equal-split", "difference", "leave-one-out"}, "leave-one-out"},
		{"elfarol", map[string]string{"agents": "4", "nights": "3"}, []string{"team", "coma:samples=3"}, "shapley"},
		{"tictactoe", nil, nil, ""},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			seed, rid := uint64(5), int64(40)
			s, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: tc.scenario, Params: tc.params, Seed: &seed, RolloutID: &rid,
				Allocators: tc.allocs, Reward: tc.reward})
			require.NoError(t, err)
			moves, res, err := playFirst(ctx, s, res)
			require.NoError(t, err)
			require.True(t, res.Done)
			o := res.Observation
			require.Empty(t, o.CreditError)

			allocs := tc.allocs
			if tc.reward != "" && !strings.Contains(strings.Join(allocs, " "), tc.reward) {
				allocs = append(allocs, tc.reward)
			}
			// troupe run of a spec whose every role replays these
			// moves, then plays its house policy.
			spec := runspec.Spec{Scenario: tc.scenario, Params: tc.params, Seed: seed, Allocators: allocs, RolloutIDBase: rid, GroupIndexBase: rid, Episodes: 1,
				Policies: map[string]runspec.Policy{}}
			sc, err := scenarios.Builtin().Lookup(tc.scenario)
			require.NoError(t, err)
			settings, err := json.Marshal(map[string]any{"moves": moves, "then": sc.Info().DefaultPolicy})
			require.NoError(t, err)
			for _, r := range sc.Info().Roles {
				spec.Policies[r.Name] = runspec.Policy{Name: runspec.ReplayPolicy, Settings: settings}
			}
			resolved, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
			require.NoError(t, err)
			var b bytes.Buffer
			_, err = play.Run(t.Context(), resolved.Config, resolved.Output(trajectories.NewEpisodeWriter(&b)))
			require.NoError(t, err)
			line := b.String()
			rec, cr, err := trajectories.DecodeEpisode([]byte(line))
			require.NoError(t, err)
			want, err := credit.SeatsOf(rec, cr)
			require.NoError(t, err)

			assert.Equal(t, tc.reward, o.RewardAllocator)
			require.Len(t, o.Credit, len(rec.Seats))
			sum := 0.0
			for _, seat := range want.Seats {
				got := o.Credit[seat.Agent]
				assert.Equal(t, seat.SideName, got.Side)
				assert.Equal(t, seat.Reward, got.SideReward)
				if seat.Steps == nil {
					seat.Steps = []int{}
				}
				assert.Equal(t, seat.Steps, got.Steps)
				for a, name := range want.Allocators {
					assert.Equal(t, seat.Turns[a], got.Turns[name], "%s of %s", name, seat.Agent)
					if seat.End != nil {
						assert.Equal(t, seat.End[a], got.Credit[name], "%s of %s", name, seat.Agent)
					}
				}
				if tc.reward == "" {
					assert.Equal(t, seat.ScoreOr(), got.Reward)
					assert.Equal(t, o.Scores[seat.Agent], got.Reward)
				} else {
					assert.Equal(t, got.Credit[tc.reward], got.Reward)
				}
				sum += got.Reward
			}
			require.NotNil(t, res.Reward)
			assert.InDelta(t, sum, *res.Reward, 1e-9, "a controller's reward sums its seats'")
			if rec.Teams != nil {
				require.Len(t, o.Sides, len(rec.Teams))
				for k, name := range rec.Teams {
					assert.Equal(t, rec.Score.Teams[k], o.Sides[name])
				}
			} else {
				assert.Nil(t, o.Sides)
			}
		})
	}
}

// A reward allocator the registry does not know is refused, naming the
// field; one the scenario does not allow (a counterfactual one where it
// declares no counterfactual) too.
func TestRewardAllocatorErrors(t *testing.T) {
	c, _, _, _ := start(t, envserver.Config{})
	_, _, err := c.Reset(t.Context(), envclient.ResetRequest{Scenario: "tictactoe", Reward: "bogus"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reward")
	assert.Contains(t, err.Error(), "bogus")
	_, _, err = c.Reset(t.Context(), envclient.ResetRequest{Join: "x", Reward: "team"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "join")
}
