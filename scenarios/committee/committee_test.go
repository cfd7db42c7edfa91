package committee_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

func TestHarness(t *testing.T) {
	scenariotest.Check(t, committee.New(), scenariotest.Options{
		Params: []map[string]string{{}, {"informed": "0", "uninformed": "3"}, {"informed": "3", "uninformed": "0", "options": "2"}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", committee.New().Info().Roles...)
}

func params(t *testing.T, kv map[string]string) env.Params {
	t.Helper()
	p, err := committee.New().Info().ParseParams(kv)
	require.NoError(t, err)
	return p
}

func play(t *testing.T, kv map[string]string, seed uint64, policy env.PolicyFor) *trajectories.Episode {
	t.Helper()
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: committee.New(), Params: params(t, kv), Policy: policy},
		Seed:       seed,
		PolicySeed: seed,
	}))
	require.Empty(t, ep.Err)
	return ep
}

// policies plays the scripted decider and gives adviser i advice[i].
func policies(t *testing.T, advice ...string) env.PolicyFor {
	decider, err := committee.New().Info().Policies["scripted"](env.PolicyRequest{Params: env.Params{}, Role: committee.RoleDecider})
	require.NoError(t, err)
	return func(s env.Seat) agents.Policy {
		if s.Role == committee.RoleDecider {
			return decider
		}
		i, err := strconv.Atoi(s.ID[len("adviser-"):])
		require.NoError(t, err)
		return agents.Replay(advice[i])
	}
}

func TestScriptedCommitteeAlwaysWins(t *testing.T) {
	scripted, err := committee.New().Info().Policies["scripted"](env.PolicyRequest{Params: env.Params{}, Role: committee.RoleAdviser})
	require.NoError(t, err)
	decider, err := committee.New().Info().Policies["scripted"](env.PolicyRequest{Params: env.Params{}, Role: committee.RoleDecider})
	require.NoError(t, err)
	for seed := range uint64(40) {
		ep := play(t, map[string]string{"informed": "1", "uninformed": "6", "options": "5"}, seed,
			env.ByRole(map[string]agents.Policy{committee.RoleDecider: decider}, scripted))
		assert.Equal(t, 1.0, ep.Score.Team, "seed %d", seed)
		last := ep.Samples[len(ep.Samples)-1]
		assert.Equal(t, protocol.TextLabel(last.Response), last.Label, "the decider picked the labelled option")
		assert.Len(t, ep.Messages, 3, "one brief, one advice, the result")
	}
}

func TestTheDeciderFollowsThePlurality(t *testing.T) {
	kv := map[string]string{"informed": "1", "uninformed": "3", "options": "4"}
	for seed := range uint64(20) {
		ep := play(t, kv, seed, policies(t, "o2", "o2", "o1", "abstain"))
		assert.Equal(t, "o2", ep.Samples[4].Response)
		right := ep.Samples[4].Label == protocol.TextLabel("o2")
		assert.Equal(t, right, ep.Score.Team == 1)
		assert.Equal(t, []float64{ep.Score.Team, ep.Score.Team, ep.Score.Team, ep.Score.Team, ep.Score.Team}, ep.Score.Agents)
	}
	// Silence and ties are broken at random: over seeds, every tied option
	// is picked.
	picked := map[string]bool{}
	for seed := range uint64(60) {
		picked[play(t, kv, seed, policies(t, "abstain", "o1", "o3", "nonsense")).Samples[4].Response] = true
	}
	assert.Equal(t, map[string]bool{"o1": true, "o3": true}, picked)
	assert.Equal(t, true, play(t, kv, 1, policies(t, "abstain", "o1", "o3", "nonsense")).Samples[3].Metadata.Extra["illegal"])
}

func TestCounterfactualsOfAnAdviser(t *testing.T) {
	kv := map[string]string{"informed": "1", "uninformed": "2", "options": "3"}
	// The informed adviser alone says o1; an uninformed one says o0.
	for seed := range uint64(30) {
		ep := play(t, kv, seed, policies(t, "o1", "o0", "abstain"))
		if ep.Samples[0].Label != protocol.TextLabel("o1") {
			continue // a seed where o1 is the right option
		}
		ctx := context.Background()
		without, err := ep.Replay.Replay(ctx, episode.Counterfactual{Null: []int{1}, Resimulate: true})
		require.NoError(t, err)
		assert.Equal(t, 1.0, without.Team, "without the noise the decider is right")
		absent, err := ep.Replay.Replay(ctx, episode.Counterfactual{Absent: []int{1}, Resimulate: true})
		require.NoError(t, err)
		assert.Equal(t, without, absent, "absent is abstaining")
		noDecider, err := ep.Replay.Replay(ctx, episode.Counterfactual{Absent: []int{3}, Resimulate: true})
		require.NoError(t, err)
		assert.Equal(t, 0.0, noDecider.Team)
		return
	}
	t.Fatal("no seed drew o1 as the right option")
}

func TestParamsNeedAnAdviser(t *testing.T) {
	_, err := committee.New().Info().ParseParams(map[string]string{"informed": "0", "uninformed": "0"})
	assert.ErrorContains(t, err, "at least one adviser")
}
