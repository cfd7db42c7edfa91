package elfarol_test

import (
	"context"
	"flag"
	"math"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

var small = map[string]string{"agents": "5", "nights": "3", "capacity": "2"}

func play(t *testing.T, given map[string]string, policySeed uint64, policy env.PolicyFor) *trajectories.Episode {
	t.Helper()
	sc := elfarol.New()
	p, err := sc.Info().ParseParams(given)
	require.NoError(t, err)
	return trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: policy}, PolicySeed: policySeed}))
}

// nights makes patron i answer answers[i].
func nights(answers ...string) env.PolicyFor {
	return func(s env.Seat) agents.Policy {
		i, err := strconv.Atoi(s.ID[len("patron-"):])
		if err != nil {
			panic(err)
		}
		return agents.Replay(answers[i])
	}
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, elfarol.New(), scenariotest.Options{
		Params: []map[string]string{{}, small, {"agents": "2", "nights": "1"}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", elfarol.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy env.PolicyFor
	}{
		{"random-seed1", env.SamePolicy(agents.Random())},
		{"mixed-with-illegal", nights("0", "0", "2", "home", "tuesday")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := play(t, small, 1, tc.policy)
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

func TestUtility(t *testing.T) {
	c := 6.0
	assert.Equal(t, 0.0, elfarol.Utility(0, c))
	assert.InDelta(t, 6/math.E, elfarol.Utility(c, c), 1e-12)
	for _, x := range []float64{1, 3, 5, 7, 12} {
		assert.Less(t, elfarol.Utility(x, c), elfarol.Utility(c, c), "φ peaks at the capacity, not at %g", x)
	}
}

func TestScores(t *testing.T) {
	// Two patrons on night 0, one on night 2, one at home, one answering
	// nonsense (which counts as home and is noted).
	ep := play(t, small, 0, nights("0", "0", "2", "home", "tuesday"))
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	phi := func(x float64) float64 { return elfarol.Utility(x, 2) }
	assert.InDelta(t, phi(2)+phi(1), ep.Score.Team, 1e-12)
	assert.Equal(t, []float64{phi(2), phi(2), phi(1), 0, 0}, ep.Score.Agents)
	assert.Nil(t, ep.Samples[3].Metadata.Extra, "home is the null action, not an illegal one")
	assert.Equal(t, map[string]any{"illegal": true}, ep.Samples[4].Metadata.Extra)
	assert.Equal(t, 1, ep.Steps)
}

// TestDifferenceRewardByReplay checks the scenario's counterfactual
// declaration against its documented consequence: with patron i at home
// (or absent), G drops by φ(x_k) − φ(x_k − 1) for its night k.
func TestDifferenceRewardByReplay(t *testing.T) {
	ctx := context.Background()
	ep := play(t, small, 0, nights("0", "0", "2", "1", "0"))
	phi := func(x float64) float64 { return elfarol.Utility(x, 2) }
	attendance := map[string]float64{"0": 3, "1": 1, "2": 1}
	for i, night := range []string{"0", "0", "2", "1", "0"} {
		want := phi(attendance[night]) - phi(attendance[night]-1)
		for _, cf := range []episode.Counterfactual{
			{Replace: map[int]string{i: elfarol.NullAction}},
			{Absent: []int{i}},
		} {
			score, err := ep.Replay.Replay(ctx, cf)
			require.NoError(t, err)
			assert.InDelta(t, want, ep.Score.Team-score.Team, 1e-12, "patron %d, %+v", i, cf)
		}
	}
}

func TestRandomPatronsSpreadOut(t *testing.T) {
	// With the defaults (60 patrons, 7 nights, capacity 6) random choices
	// average 60/7 ≈ 8.6 a night: G stays below 7·φ(6), the most seven
	// nights can give, and far above first-night's collapse, where all 60
	// crowd one night.
	random := play(t, nil, 3, env.SamePolicy(agents.Random()))
	sc := elfarol.New()
	first, err := sc.Info().Policies["first-night"](env.PolicyRequest{Params: env.Params{}, Role: elfarol.RolePatron})
	require.NoError(t, err)
	crowd := play(t, nil, 3, env.SamePolicy(first))
	assert.InDelta(t, elfarol.Utility(60, 6), crowd.Score.Team, 1e-12)
	assert.Greater(t, random.Score.Team, 10*crowd.Score.Team)
	assert.Less(t, random.Score.Team, 7*elfarol.Utility(6, 6))
}

func TestEpisodeMetricsCountTheAttendance(t *testing.T) {
	s := elfarol.New()
	var _ env.EpisodeMetricer = s
	p, err := s.Info().ParseParams(map[string]string{"agents": "5", "nights": "3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"attendance_rank_1", "attendance_rank_2", "attendance_rank_3", "home"}, s.MetricNames(p))
	rec := &episode.Record{Turns: []episode.Turn{{Action: "2"}, {Action: "0"}, {Action: "2"}, {Action: elfarol.NullAction}, {Action: "7"}}}
	dst := make([]float64, 4)
	s.EpisodeMetrics(p, rec, dst)
	assert.Equal(t, []float64{2, 1, 0, 2}, dst, "night 2 has 2 patrons, night 0 one, night 1 none; 2 stay home")
}

// The seats the scenario shares among episodes of one size are kept for a
// few sizes, not for every size ever asked for (a server's clients may ask
// for thousands): games of 200 sizes leave little behind once dropped.
func TestSharedSeatsAreBounded(t *testing.T) {
	sc := elfarol.New()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for n := 2000; n < 2200; n++ {
		p, err := sc.Info().ParseParams(map[string]string{"agents": strconv.Itoa(n)})
		require.NoError(t, err)
		g, err := sc.New(p, 0)
		require.NoError(t, err)
		require.Len(t, g.Seats(), n)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// 200 sizes kept would be some 200 × 2,100 seats of 60 bytes: 25 MB.
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(5<<20))
	runtime.KeepAlive(sc)
}
