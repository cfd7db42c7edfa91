package werewolf_test

import (
	"context"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/scenarios/werewolf"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func params(t *testing.T, given map[string]string) env.Params {
	t.Helper()
	p, err := werewolf.New().Info().ParseParams(given)
	require.NoError(t, err)
	return p
}

func scripted(t *testing.T, sc env.Scenario, p env.Params) env.PolicyFor {
	t.Helper()
	policy, err := scenariotest.NamedPolicy(sc, p, "scripted")
	require.NoError(t, err)
	return policy
}

func play(t *testing.T, given map[string]string, seed uint64, policy env.PolicyFor) *trajectories.Episode {
	t.Helper()
	sc := werewolf.New()
	p := params(t, given)
	if policy == nil {
		policy = scripted(t, sc, p)
	}
	return trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Seed: seed, PolicySeed: seed + 100,
	}))
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, werewolf.New(), scenariotest.Options{
		Params: []map[string]string{{}, {"players": "5", "wolves": "1", "seers": "0"}, {"players": "9", "wolves": "3", "days": "2"}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", werewolf.New().Info().Roles[0])
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seed   uint64
		random bool
		winner int
	}{
		{"scripted-village", 2, false, werewolf.Village},
		{"scripted-wolves", 4, false, werewolf.Wolves},
		{"random", 3, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var policy env.PolicyFor
			if tc.random {
				policy = env.SamePolicy(agents.Random())
			}
			ep := play(t, nil, tc.seed, policy)
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			if tc.winner >= 0 {
				assert.Equal(t, 1.0, ep.Score.Teams[tc.winner], "the winner")
			}
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

// The seed deals the roles: the right numbers of each, on the right
// teams, and different deals for different seeds; the record keeps them.
func TestDeal(t *testing.T) {
	deals := map[string]bool{}
	for seed := range uint64(20) {
		ep := play(t, nil, seed, nil)
		require.Equal(t, []string{"village", "wolves"}, ep.Teams)
		count := map[string]int{}
		var deal []string
		for _, s := range ep.Seats {
			count[s.Role]++
			deal = append(deal, s.Role)
			want := werewolf.Village
			if s.Role == werewolf.RoleWolf {
				want = werewolf.Wolves
			}
			assert.Equal(t, want, s.Team, s.ID)
		}
		assert.Equal(t, map[string]int{werewolf.RoleWolf: 2, werewolf.RoleSeer: 1, werewolf.RoleVillager: 5}, count)
		deals[strings.Join(deal, ",")] = true
		// Zero-sum, and every seat's own score is its side's.
		assert.Equal(t, 0.0, ep.Score.Teams[0]+ep.Score.Teams[1])
		assert.Equal(t, 0.0, ep.Score.Team, "the sum of the sides' rewards")
		for i := range ep.Seats {
			assert.Equal(t, ep.SeatReward(i), ep.Score.Agents[i])
		}
		// Experiments see each side's reward apart (env.EpisodeMetricer).
		sc := werewolf.New()
		metrics := make([]float64, len(sc.MetricNames(env.Params{})))
		sc.EpisodeMetrics(env.Params{}, &ep.Record, metrics)
		assert.Equal(t, []float64{ep.Score.Teams[0], ep.Score.Teams[1], float64((ep.Steps + 2) / 3)}, metrics)
	}
	assert.Greater(t, len(deals), 10)
}

// A player learns its own role only: no view or message a non-wolf gets
// names who the wolves are (but the announcements of the dead), and the
// wolves' channel reaches wolves only.
func TestRolesAreHidden(t *testing.T) {
	for seed := range uint64(10) {
		ep := play(t, nil, seed, nil)
		var wolves []string
		for _, s := range ep.Seats {
			if s.Role == werewolf.RoleWolf {
				wolves = append(wolves, s.ID)
			}
		}
		for _, turn := range ep.Turns {
			seat := ep.Seats[turn.Seat]
			assert.Contains(t, turn.View, "You are "+seat.ID+", a "+seat.Role)
			if seat.Role == werewolf.RoleWolf {
				continue
			}
			assert.NotContains(t, turn.View, "The wolves:")
			for _, w := range wolves {
				assert.NotContains(t, turn.View, w+", a wolf", "seed %d: %s's view", seed, seat.ID)
			}
			for _, other := range ep.Seats {
				if other.ID != seat.ID {
					assert.NotContains(t, turn.View, other.ID+", a "+other.Role)
				}
			}
		}
		for _, m := range ep.Messages {
			switch m.Kind {
			case werewolf.KindPack, werewolf.KindHunt:
				for _, r := range m.Recipients {
					assert.Equal(t, werewolf.RoleWolf, ep.Seats[r].Role, "seed %d: %s message %q reached %s", seed, m.Kind, m.Payload, ep.Seats[r].ID)
				}
			case werewolf.KindVision:
				for _, r := range m.Recipients {
					assert.Equal(t, werewolf.RoleSeer, ep.Seats[r].Role)
				}
			}
		}
	}
}

// An absent side has lost before the first night; the empty game is the
// village's.
func TestAbsentSides(t *testing.T) {
	ep := play(t, nil, 4, nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	var wolves, village []int
	for i, s := range ep.Seats {
		if s.Team == werewolf.Wolves {
			wolves = append(wolves, i)
		} else {
			village = append(village, i)
		}
	}
	for _, tc := range []struct {
		absent []int
		want   []float64
	}{
		{wolves, []float64{1, -1}},
		{village, []float64{-1, 1}},
		{append(slices.Clone(wolves), village...), []float64{1, -1}},
	} {
		score, err := ep.Replay.Replay(t.Context(), episode.Counterfactual{Absent: tc.absent, Resimulate: true})
		require.NoError(t, err)
		assert.Equal(t, tc.want, score.Teams, "absent %v", tc.absent)
	}
}

// Illegal answers count as passes, noted.
func TestIllegalAnswersPass(t *testing.T) {
	ep := play(t, nil, 1, env.SamePolicy(agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: "eat everyone"}, nil
	})))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, []float64{0, 0}, ep.Score.Teams, "nobody dies: a draw")
	assert.Equal(t, true, ep.Turns[0].Notes["illegal"])
}
