package experiment_test

import (
	"fmt"

	"github.com/troupe-rl/troupe/experiment"
)

// The seeds' final results of one reward: half of them ended near 0.81 of
// the optimum, half near 0.97. Their mean, 0.89, is where no seed ended.
func ExampleFindModes() {
	finals := []float64{0.80, 0.97, 0.81, 0.98, 0.82, 0.96, 0.81, 0.97}
	for _, m := range experiment.FindModes(finals) {
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
