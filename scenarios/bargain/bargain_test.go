package bargain_test

import (
	"context"
	"flag"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func play(t *testing.T, given map[string]string, seed uint64, policy env.PolicyFor) *trajectories.Episode {
	t.Helper()
	sc := bargain.New()
	p, err := sc.Info().ParseParams(given)
	require.NoError(t, err)
	if policy == nil {
		policy, err = scenariotest.NamedPolicy(sc, p, "scripted")
		require.NoError(t, err)
	}
	return trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Seed: seed, PolicySeed: seed + 100,
	}))
}

// demands plays each seat's demands, round by round.
func demands(bySeat map[string][]string) env.PolicyFor {
	return func(s env.Seat) agents.Policy { return agents.Replay(bySeat[s.ID]...) }
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, bargain.New(), scenariotest.Options{
		Params: []map[string]string{{}, {"members": "1", "rounds": "1"}, {"members": "4", "pie": "7", "discount": "1"}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", bargain.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	ep := play(t, nil, 1, nil)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	scenariotest.Golden(t, "testdata/scripted.golden", trajectories.Transcript(ep), *update)
}

// A deal pays each side its members' demands, discounted by the round it
// was struck in; demands over the pie pay nobody: general-sum.
func TestRewards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		moves  map[string][]string
		teams  []float64
		agents []float64
	}{
		{"a deal at once", map[string][]string{"east-0": {"4"}, "east-1": {"2"}, "west-0": {"3"}, "west-1": {"3"}}, []float64{6, 6}, []float64{4, 2, 3, 3}},
		{"an uneven deal", map[string][]string{"east-0": {"6"}, "east-1": {"5"}, "west-0": {"1"}, "west-1": {"0"}}, []float64{11, 1}, []float64{6, 5, 1, 0}},
		{"a deal in the second round", map[string][]string{"east-0": {"4", "3"}, "east-1": {"4", "3"}, "west-0": {"4", "3"}, "west-1": {"4", "3"}},
			[]float64{5.4, 5.4}, []float64{2.7, 2.7, 2.7, 2.7}},
		{"no deal", map[string][]string{"east-0": {"12", "12", "12"}, "east-1": {"0", "0", "0"}, "west-0": {"1", "1", "1"}, "west-1": {"0", "0", "0"}},
			[]float64{0, 0}, []float64{0, 0, 0, 0}},
		{"an illegal demand breaks the deal", map[string][]string{"east-0": {"lots", "3"}, "east-1": {"0", "0"}, "west-0": {"0", "3"}, "west-1": {"0", "0"}},
			[]float64{2.7, 2.7}, []float64{2.7, 0, 2.7, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := play(t, nil, 1, demands(tc.moves))
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			assert.Equal(t, []string{"east", "west"}, ep.Teams)
			assert.InDeltaSlice(t, tc.teams, ep.Score.Teams, 1e-12)
			assert.InDeltaSlice(t, tc.agents, ep.Score.Agents, 1e-12)
			assert.InDelta(t, tc.teams[0]+tc.teams[1], ep.Score.Team, 1e-12, "the sum of the sides'")
			metrics := make([]float64, 3)
			bargain.New().EpisodeMetrics(env.Params{}, &ep.Record, metrics)
			assert.InDeltaSlice(t, append(slices.Clone(tc.teams), float64(ep.Steps)), metrics, 1e-12, "east, west, rounds")
		})
	}
}
