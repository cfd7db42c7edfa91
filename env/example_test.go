package env_test

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Run plays many episodes in parallel and streams one sample per agent turn
// to a sink; the output does not depend on the concurrency.
func ExampleRun() {
	sc := elfarol.New()
	params, err := sc.Info().ParseParams(map[string]string{"agents": "3", "nights": "2"})
	if err != nil {
		panic(err)
	}
	var episodes trajectories.Collector
	sum, err := env.Run(context.Background(), env.RunConfig{
		Play:        env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())},
		Episodes:    4,
		Concurrency: 2,
		Seed:        7,
	}, &trajectories.Output{Sink: &episodes, Allocators: []trajectories.Allocator{credit.EqualSplit{}}})
	if err != nil {
		panic(err)
	}
	fmt.Println("samples:", sum.Samples, "statuses:", sum.ByStatus)
	for _, ep := range episodes.Episodes() {
		fmt.Printf("rollout %d: G=%.3f, %s played night %s and got %.3f\n",
			ep.RolloutID, ep.Score.Team, ep.Samples[0].Metadata.Agent, ep.Samples[0].Response, ep.Samples[0].Reward.Value)
	}
	// Output:
	// samples: 12 statuses: map[completed:4]
	// rollout 0: G=2.280, patron-0 played night 0 and got 0.760
	// rollout 1: G=2.280, patron-0 played night 1 and got 0.760
	// rollout 2: G=2.280, patron-0 played night 1 and got 0.760
	// rollout 3: G=2.280, patron-0 played night 1 and got 0.760
}

// RunEpisode plays one episode; Replay re-runs it with an agent's actions
// replaced, which is how counterfactual credit is computed.
func ExampleRunEpisode() {
	sc := elfarol.New()
	params, _ := sc.Info().ParseParams(map[string]string{"agents": "4", "nights": "1", "capacity": "2"})
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())},
	}))
	fmt.Printf("%s: everyone on night 0, G = 4·e^(-2) = %.4f\n", ep.Status, ep.Score.Team)
	home, _ := ep.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}})
	fmt.Printf("with patron 0 at home, G = 3·e^(-1.5) = %.4f\n", home.Team)
	// Output:
	// completed: everyone on night 0, G = 4·e^(-2) = 0.5413
	// with patron 0 at home, G = 3·e^(-1.5) = 0.6694
}
