package blotto_test

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func playEpisode(t *testing.T, given map[string]string, seed uint64, policy env.PolicyFor) *trajectories.Episode {
	t.Helper()
	sc := blotto.New()
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

// fields makes each seat answer its entry of bySeat.
func fields(bySeat map[string]string) env.PolicyFor {
	return func(s env.Seat) agents.Policy { return agents.Replay(bySeat[s.ID]) }
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, blotto.New(), scenariotest.Options{
		Params: []map[string]string{{}, {"n": "1", "fields": "1"}, {"n": "5", "fields": "4"}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", blotto.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy env.PolicyFor
	}{
		{"scripted", nil},
		{"random", env.SamePolicy(agents.Random())},
		{"with-home-and-illegal", fields(map[string]string{"red-0": "0", "red-1": "home", "red-2": "flank", "blue-0": "2", "blue-1": "2", "blue-2": "1"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := playEpisode(t, map[string]string{"n": "3"}, 1, tc.policy)
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

// The rules of blotto.md: strictly more soldiers win a battlefield, a tie
// (an empty battlefield too) is half to each, a side's reward is its share
// of the battlefields, a soldier's score its battlefield's outcome for its
// side, 0 at home.
func TestRewards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		moves  map[string]string
		teams  []float64
		agents []float64 // red-0..2, blue-0..2
		top    []float64 // red_top, blue_top
	}{
		{"blue crowds one, red takes another, the empty one is tied", map[string]string{"red-0": "0", "red-1": "0", "red-2": "1", "blue-0": "0", "blue-1": "0", "blue-2": "0"},
			[]float64{1.5 / 3, 1.5 / 3}, []float64{0, 0, 1, 1, 1, 1}, []float64{2.0 / 3, 1}},
		{"red wins two", map[string]string{"red-0": "0", "red-1": "1", "red-2": "2", "blue-0": "2", "blue-1": "2", "blue-2": "2"},
			[]float64{2.0 / 3, 1.0 / 3}, []float64{1, 1, 0, 1, 1, 1}, []float64{1.0 / 3, 1}},
		{"every battlefield tied", map[string]string{"red-0": "0", "red-1": "1", "red-2": "2", "blue-0": "2", "blue-1": "1", "blue-2": "0"},
			[]float64{0.5, 0.5}, []float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, []float64{1.0 / 3, 1.0 / 3}},
		{"a soldier home and one illegal", map[string]string{"red-0": "0", "red-1": "home", "red-2": "flank", "blue-0": "2", "blue-1": "2", "blue-2": "1"},
			[]float64{1.0 / 3, 2.0 / 3}, []float64{1, 0, 0, 1, 1, 1}, []float64{1.0 / 3, 2.0 / 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := playEpisode(t, map[string]string{"n": "3"}, 1, fields(tc.moves))
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			assert.Equal(t, []string{"red", "blue"}, ep.Teams)
			assert.InDeltaSlice(t, tc.teams, ep.Score.Teams, 1e-12)
			assert.InDelta(t, 1, ep.Score.Team, 1e-12, "zero-sum: the sides' rewards sum to 1")
			assert.Equal(t, tc.agents, ep.Score.Agents)
			metrics := make([]float64, 4)
			p, err := blotto.New().Info().ParseParams(map[string]string{"n": "3"})
			require.NoError(t, err)
			blotto.New().EpisodeMetrics(p, &ep.Record, metrics)
			assert.InDeltaSlice(t, append(append([]float64{}, tc.teams...), tc.top...), metrics, 1e-12, "red, blue, red_top, blue_top")
		})
	}
	ep := playEpisode(t, map[string]string{"n": "3"}, 1, fields(map[string]string{"red-0": "0", "red-1": "home", "red-2": "flank", "blue-0": "2", "blue-1": "2", "blue-2": "1"}))
	assert.Nil(t, ep.Samples[1].Metadata.Extra, "home is the null action, not an illegal one")
	assert.Equal(t, map[string]any{"illegal": true}, ep.Samples[2].Metadata.Extra)
}

// TestDifferenceRewardByReplay checks the counterfactual declaration
// against the difference reward blotto.md defines: a soldier's side's
// reward minus that side's reward with the soldier home, everybody else as
// played; ±1/(2·fields) when it is pivotal on its battlefield, else 0.
// The rescored values (env.Rescorer) equal replays with the null action
// and with the soldier absent, and the difference allocator gives them.
func TestDifferenceRewardByReplay(t *testing.T) {
	ctx := context.Background()
	// Battlefield 0: red 3 - blue 1 (a red soldier leaving keeps the win);
	// 1: red 1 - blue 1 (pivotal both ways: a tie becomes a loss);
	// 2: red 0 - blue 2 (a blue soldier leaving keeps the win); and
	// battlefield 2 with blue 2 against 1 red: pivotal for blue.
	moves := map[string]string{
		"red-0": "0", "red-1": "0", "red-2": "0", "red-3": "1",
		"blue-0": "0", "blue-1": "1", "blue-2": "2", "blue-3": "2",
	}
	ep := playEpisode(t, map[string]string{"n": "4"}, 1, fields(moves))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	// Red: won 0, tied 1, lost 2: 1.5/3. Blue: 0.5/3 + 1/3.
	assert.InDeltaSlice(t, []float64{1.5 / 3, 1.5 / 3}, ep.Score.Teams, 1e-12)
	half := 1.0 / 6
	want := map[string]float64{
		"red-0": 0, "red-1": 0, "red-2": 0, "red-3": half, // red-3 alone ties battlefield 1
		"blue-0": 0, "blue-1": half, "blue-2": 0, "blue-3": 0, // blue-2 or blue-3 alone keep 2 won against none
	}
	diff, err := credit.Builtin().Parse("difference")
	require.NoError(t, err)
	dst := [][]float64{make([]float64, len(ep.Samples))}
	require.NoError(t, diff.Allocate(ctx, []*trajectories.Episode{ep}, dst))
	for i, seat := range ep.Seats {
		team := seat.Team
		for _, cf := range []episode.Counterfactual{
			{Null: []int{i}}, {Absent: []int{i}}, {Replace: map[int]string{i: blotto.NullAction}},
			{Null: []int{i}, TeamOnly: true}, {Absent: []int{i}, Resimulate: true},
		} {
			score, err := ep.Replay.Replay(ctx, cf)
			require.NoError(t, err)
			assert.InDelta(t, want[seat.ID], ep.Score.Teams[team]-score.Teams[team], 1e-12, "%s, %+v", seat.ID, cf)
			assert.InDelta(t, 1, score.Teams[0]+score.Teams[1], 1e-12, "zero-sum under %+v", cf)
		}
		assert.InDelta(t, want[seat.ID], dst[0][i], 1e-12, "the difference allocator's value for %s", seat.ID)
	}
}

// A frozen counterfactual that moves several soldiers, rescored, is the
// replay's score, agents included.
func TestRescoreIsTheReplay(t *testing.T) {
	ctx := context.Background()
	ep := playEpisode(t, map[string]string{"n": "5", "fields": "4"}, 3, env.SamePolicy(agents.Random()))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	cf := episode.Counterfactual{Absent: []int{0, 6}, Null: []int{2}, Replace: map[int]string{3: "1", 7: "3", 8: "nowhere"}}
	rescored, err := ep.Replay.Replay(ctx, cf)
	require.NoError(t, err)
	cf.Resimulate = true // the policies replay the same answers: the same seeds
	replayed, err := ep.Replay.Replay(ctx, cf)
	require.NoError(t, err)
	assert.Equal(t, replayed.Teams, rescored.Teams)
	assert.Equal(t, replayed.Agents, rescored.Agents)
}
