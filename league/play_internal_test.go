package league

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/scenarios"
)

// A batch's matches are played by play.Run, whose requests must be the
// league's own: match k's seeds derive from the league's seed, its stream
// and k alone, and k is its index, rollout id and group index. A league's
// files depend on them: a change here changes every league played again.
func TestMatchRequestsAreTheLeaguesSeeds(t *testing.T) {
	l, err := Create(t.TempDir(), Config{Name: "seeds", Scenario: "tictactoe", Seed: 0x5eed}, scenarios.Builtin())
	require.NoError(t, err)
	defer l.Close()
	for _, batch := range []struct{ k0, n int }{{0, 1}, {0, 16}, {16, 16}, {1000, 7}} {
		run := l.run(int64(batch.k0), batch.n, 2, env.ExecutorFunc(nil))
		for k := batch.k0; k < batch.k0+batch.n; k++ {
			want := env.Request{Scenario: l.info.Name, Params: l.params.Map(),
				Seed: seeds.Mix(l.state.Seed, streamScenario, uint64(k)), PolicySeed: seeds.Mix(l.state.Seed, streamPolicy, uint64(k)),
				Index: int64(k), RolloutID: int64(k), GroupIndex: int64(k)}
			assert.Equal(t, want, run.Request(k), "match %d", k)
		}
	}
}
