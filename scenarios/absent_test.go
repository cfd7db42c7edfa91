package scenarios_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
)

// TestEveryBuiltinReplaysTheEmptyCoalition replays, for every built-in
// scenario that declares absent seats, an episode with every seat absent,
// frozen and re-simulated: v(∅) of Shapley. The engine ends such an
// episode by itself, so it must finish with a finite score.
func TestEveryBuiltinReplaysTheEmptyCoalition(t *testing.T) {
	reg := scenarios.Builtin()
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		info := sc.Info()
		if info.Counterfactual == nil || !info.Counterfactual.AbsentOK {
			continue
		}
		t.Run(name, func(t *testing.T) {
			p, err := info.ParseParams(nil)
			require.NoError(t, err)
			policy, err := scenariotest.NamedPolicy(sc, p, "random")
			require.NoError(t, err)
			ep := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: policy}, Seed: 3, PolicySeed: 4})
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			all := make([]int, len(ep.Seats))
			for i := range all {
				all[i] = i
			}
			for _, resim := range []bool{false, true} {
				score, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Absent: all, Resimulate: resim})
				require.NoError(t, err, "resimulate=%v", resim)
				require.False(t, math.IsNaN(score.Team) || math.IsInf(score.Team, 0), "team reward %v", score.Team)
				for _, v := range score.Agents {
					require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "agent score %v", v)
				}
			}
		})
	}
}
