package env_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
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
	sum, err := play.Run(context.Background(), play.Config{
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

// An Episode is driven from outside, with no policy: the driver asks who
// must act and what each sees, and gives their moves. Here a driver plays
// tic-tac-toe, x taking the centre and then the first legal square, o the
// last legal square; a fork after move 3 plays on differently.
func ExampleEpisode() {
	sc := tictactoe.New()
	params, _ := sc.Info().ParseParams(nil)
	ep, err := env.NewEpisode(env.Setup{Play: env.Play{Scenario: sc, Params: params}, Seed: 1})
	if err != nil {
		panic(err)
	}
	move := func(ep *env.Episode) {
		o := ep.Pending()[0] // sequential: one mover a step
		choice := o.Legal[len(o.Legal)-1]
		if o.Role == "x" {
			choice = o.Legal[0]
			if slices.Contains(o.Legal, "b2") {
				choice = "b2"
			}
		}
		fmt.Printf("step %d: %s plays %s\n", o.Step, o.Agent, choice)
		if err := ep.Step(agents.Action{Text: choice}); err != nil {
			panic(err)
		}
	}
	for ep.Time() <= 3 { // Time is the step waiting for its moves
		move(ep)
	}
	fork, err := ep.Fork()
	if err != nil {
		panic(err)
	}
	// The fork: o answers with the first legal square instead.
	o := fork.Pending()[0]
	fmt.Printf("fork, step %d: %s plays %s\n", o.Step, o.Agent, o.Legal[0])
	_ = fork.Step(agents.Action{Text: o.Legal[0]})
	for !ep.Done() {
		move(ep)
	}
	rec := ep.Record()
	fmt.Println(rec.Status, rec.End, "after", len(rec.Turns), "turns; scores", rec.Score.Agents)
	fmt.Println("the fork is at step", fork.Time(), "with", len(fork.Pending()), "mover")
	// Output:
	// step 1: x plays b2
	// step 2: o plays c3
	// step 3: x plays a1
	// fork, step 4: o plays b1
	// step 4: o plays b3
	// step 5: x plays b1
	// step 6: o plays a3
	// completed terminated after 6 turns; scores [-1 1]
	// the fork is at step 5 with 1 mover
}
