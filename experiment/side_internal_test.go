package experiment

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// A cell's allocator with a compared side gives each team's samples the
// values of its own allocator: red's the cell's (difference), blue's the
// fixed one (team), sample by sample as those allocators give them; group
// allocators too, which normalise each side apart.
func TestCellAllocatorGivesEachSideItsOwn(t *testing.T) {
	spec, err := learn.Parse("egreedy")
	require.NoError(t, err)
	sc := blotto.New()
	for _, tc := range []struct {
		compared, fixed string
	}{{"difference", "team"}, {"team", "difference"}, {"individual", "difference"}, {"difference", "difference"}, {"dr-grpo", "magrpo"}} {
		p, err := newPlan(Config{Scenario: sc, Allocators: []string{tc.compared}, Side: "red", SideAllocators: map[string]string{"blue": tc.fixed},
			Learners: []learn.Spec{spec}, Seeds: 1, Episodes: 10, Group: 2, Params: map[string]string{"n": "5"}})
		require.NoError(t, err)
		a, err := p.cellAllocator(p.cells[0])
		require.NoError(t, err)
		assert.Equal(t, "red="+tc.compared+",blue="+tc.fixed, a.Name())
		params, err := sc.Info().ParseParams(map[string]string{"n": "5"})
		require.NoError(t, err)
		var eps []*trajectories.Episode
		for seed := range uint64(6) {
			eps = append(eps, trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
				Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Seed: seed, PolicySeed: seed,
			})))
		}
		got := make([][]float64, len(eps))
		want := map[string][][]float64{}
		for _, name := range []string{tc.compared, tc.fixed} {
			b, err := credit.Builtin().Parse(name)
			require.NoError(t, err)
			want[name] = make([][]float64, len(eps))
			for e := range eps {
				want[name][e] = make([]float64, len(eps[e].Samples))
			}
			require.NoError(t, b.Allocate(context.Background(), eps, want[name]))
		}
		for e := range eps {
			got[e] = make([]float64, len(eps[e].Samples))
		}
		require.NoError(t, a.Allocate(context.Background(), eps, got))
		for e, ep := range eps {
			for k, s := range ep.Samples {
				name := tc.fixed
				if s.Metadata.Team == "red" {
					name = tc.compared
				}
				assert.Equal(t, want[name][e][k], got[e][k], "%s episode %d sample %d (%s)", a.Name(), e, k, s.Metadata.Agent)
			}
		}
	}
}
