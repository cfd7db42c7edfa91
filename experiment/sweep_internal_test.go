package experiment

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLearnerLabelsNameWhatDiffers(t *testing.T) {
	for _, c := range []struct{ names, want []string }{
		{[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1"}, []string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1"}},
		{
			[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1", "egreedy:alpha=0.3,epsilon=0.05,init=0,unbiased=1"},
			[]string{"alpha=0.1", "alpha=0.3"},
		},
		{
			[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1", "egreedy:alpha=0.1,epsilon=0.05,init=20,unbiased=0"},
			[]string{"init=0,unbiased=1", "init=20,unbiased=0"},
		},
		{
			// The page's sweep: only what differs from the defaults.
			[]string{
				"egreedy:alpha=0.03,epsilon=0.01,init=0,unbiased=1", "egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1",
				"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=0", "egreedy:alpha=0.1,epsilon=0.05,init=20,unbiased=0",
				"boltzmann:alpha=0.1,init=0,temperature=0.03,unbiased=1", "boltzmann:alpha=0.1,init=0,temperature=0.3,unbiased=1",
				"reinforce:baseline=0,rate=0.1", "reinforce:baseline=0,rate=1",
			},
			[]string{
				"egreedy:alpha=0.03,epsilon=0.01", "egreedy", "egreedy:unbiased=0", "egreedy:init=20,unbiased=0",
				"boltzmann:temperature=0.03", "boltzmann:temperature=0.3", "reinforce", "reinforce:rate=1",
			},
		},
		{
			// Two texts of one value: the labels would coincide.
			[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1", "egreedy:alpha=0.10,epsilon=0.05,init=0,unbiased=1"},
			[]string{"alpha=0.1", "alpha=0.10"},
		},
		{
			[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1", "boltzmann:alpha=0.1,init=0,temperature=0.1,unbiased=1", "reinforce:baseline=0,rate=0.1"},
			[]string{"egreedy", "boltzmann", "reinforce"},
		},
		{
			[]string{"egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1", "egreedy:alpha=0.3,epsilon=0.05,init=0,unbiased=1", "reinforce:baseline=0,rate=0.1"},
			[]string{"egreedy", "egreedy:alpha=0.3", "reinforce"},
		},
	} {
		assert.Equal(t, c.want, learnerLabels(c.names))
	}
}
