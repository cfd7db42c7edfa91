package experiment_test

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/blotto"
)

// The seeds' final results of one reward: half of them ended near 0.81 of
// the optimum, half near 0.97. Their mean, 0.89, is where no seed ended.
func ExampleFindModes() {
	finals := []float64{0.80, 0.97, 0.81, 0.98, 0.82, 0.96, 0.81, 0.97}
	for _, m := range experiment.FindModes(finals, experiment.ModeRule{}) {
		fmt.Printf("%.3f (%.3f to %.3f): %d seeds, %.0f%%\n", m.Center, m.Low, m.High, m.Seeds, 100*m.Share)
	}
	// Output:
	// 0.810 (0.800 to 0.820): 4 seeds, 50%
	// 0.970 (0.960 to 0.980): 4 seeds, 50%
}

// A sweep of two learning rates and two exploration rates: four learners,
// each a dimension of the grid (Config.Learners).
func ExampleParseLearners() {
	learners, err := experiment.ParseLearners("egreedy:alpha=0.1/0.3,epsilon=0.02/0.05")
	if err != nil {
		panic(err)
	}
	for _, l := range learners {
		fmt.Println(l)
	}
	// Output:
	// egreedy:alpha=0.1,epsilon=0.02,init=0,unbiased=1
	// egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1
	// egreedy:alpha=0.3,epsilon=0.02,init=0,unbiased=1
	// egreedy:alpha=0.3,epsilon=0.05,init=0,unbiased=1
}

// Per-side rewards in a zero-sum game: red's soldiers learn from the team
// reward or the difference reward, blue's from the team reward in every
// cell, and the metric is red's own share of the battlefields (G_red), not
// the sum of the sides' (always 1). A small grid: 24 soldiers a side, 5
// seeds of 1,000 episodes.
func ExampleConfig_side() {
	learner, err := learn.Parse("egreedy:alpha=0.1,epsilon=0.1")
	if err != nil {
		panic(err)
	}
	res, err := experiment.Run(context.Background(), experiment.Config{
		Scenario:       blotto.New(),
		Params:         map[string]string{"n": "24"},
		Allocators:     []string{"team", "difference"},
		Side:           "red",
		SideAllocators: map[string]string{"blue": "team"},
		Learners:       []learn.Spec{learner},
		Seeds:          5,
		Episodes:       1000,
	})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Rows {
		fmt.Printf("red on %s against blue on team: final %s %.2f\n", r.Allocator, res.Metric, r.FinalStats.Mean)
	}
	// Output:
	// red on team against blue on team: final G_red 0.50
	// red on difference against blue on team: final G_red 0.52
}
