package learn_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/learn"
)

func TestParseReadsSpecsBack(t *testing.T) {
	for spec, want := range map[string]string{
		"egreedy":                          "egreedy:alpha=0.1,epsilon=0.05,init=0,unbiased=1",
		" egreedy:epsilon=0.2 , alpha=0.5": "egreedy:alpha=0.5,epsilon=0.2,init=0,unbiased=1",
		"boltzmann:temperature=2":          "boltzmann:alpha=0.1,init=0,temperature=2,unbiased=1",
		"reinforce:rate=0.3":               "reinforce:baseline=0,rate=0.3",
	} {
		s, err := learn.Parse(spec)
		require.NoError(t, err, spec)
		assert.Equal(t, want, s.String())
		again, err := learn.Parse(s.String())
		require.NoError(t, err)
		assert.Equal(t, s, again)
		l, err := s.New(learn.Options{})
		require.NoError(t, err)
		assert.NotNil(t, l)
	}
	s, err := learn.Parse("reinforce")
	require.NoError(t, err)
	assert.Equal(t, "reinforce", s.Name())
	l, err := s.New(learn.Options{})
	require.NoError(t, err)
	assert.IsType(t, &learn.Gradient{}, l)
}

func TestParseNamesWhatIsWrong(t *testing.T) {
	for spec, want := range map[string]string{
		"sarsa":                        "known: boltzmann, egreedy, pg-linear, pg-mlp, pg-table, reinforce",
		"egreedy:":                     "nothing after ':'",
		"egreedy:alpha":                `"alpha" is not key=value`,
		"egreedy:gamma=1":              `no parameter "gamma" (it takes alpha, epsilon, init, unbiased)`,
		"egreedy:alpha=0.1,alpha=0.2":  "alpha given twice",
		"egreedy:alpha=fast":           `alpha="fast" is not a finite number`,
		"egreedy:alpha=2":              "alpha 2: want a number in (0, 1]",
		"boltzmann:temperature=0":      "temperature 0: want a positive number",
		"reinforce:baseline=NaN":       `baseline="NaN" is not a finite number`,
		"egreedy:epsilon=1.5,alpha=.1": "epsilon 1.5",
	} {
		_, err := learn.Parse(spec)
		require.Error(t, err, spec)
		assert.ErrorContains(t, err, want, spec)
	}
	_, err := learn.Parse("sarsa")
	assert.ErrorIs(t, err, learn.ErrUnknownLearner)
	_, err = learn.Parse("egreedy:alpha=0")
	assert.ErrorIs(t, err, learn.ErrBadConfig)
	_, err = learn.Spec{}.New(learn.Options{})
	assert.ErrorIs(t, err, learn.ErrUnknownLearner)
}

func TestUsageListsEveryLearner(t *testing.T) {
	var b strings.Builder
	require.NoError(t, learn.Usage(&b))
	for _, name := range learn.Names() {
		assert.Contains(t, b.String(), "\n"+name+"\n")
	}
	assert.Contains(t, b.String(), "epsilon=0.05")
}
