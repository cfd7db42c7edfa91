package learn_test

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Three patrons and three nights of capacity 1 learn to go out on
// different nights, from the team reward alone. Each week is played after
// the previous one was learned: that is what makes learning reproducible.
// The learner reads the week's record and its credit: no sample is
// projected (RecordOnly).
func ExampleValues() {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "3", "nights": "3", "capacity": "1"})
	if err != nil {
		panic(err)
	}
	patrons, err := learn.NewValues(learn.ValueConfig{Alpha: 0.2, Init: 2, Select: learn.EpsilonGreedy{Epsilon: 0.05}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var last *trajectories.Episode
	for week := range 300 {
		ep := trajectories.RecordOnly(env.RunEpisode(ctx, env.Setup{
			Play:       env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(patrons)},
			PolicySeed: uint64(week),
		}))
		if err := trajectories.Allocate(ctx, []*trajectories.Episode{ep}, []trajectories.Allocator{credit.Team{}}, trajectories.RewardScalar); err != nil {
			panic(err)
		}
		if err := patrons.Learn(&ep.Record, ep.Credit); err != nil {
			panic(err)
		}
		last = ep
	}
	fmt.Printf("week 300: G = %.4f of the best 3·e^(-1) = %.4f\n", last.Score.Team, 3*elfarol.Utility(1, 1))
	// Output:
	// week 300: G = 1.1036 of the best 3·e^(-1) = 1.1036
}
