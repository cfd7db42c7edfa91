package learn_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// TestUnbiasedStepFollowsSuttonAndBarto checks the unbiased constant step
// size against its definition: β_n = α/ō_n, ō_n = ō_(n−1) + α(1 − ō_(n−1)),
// so that an action's first reward replaces the initial value.
func TestUnbiasedStepFollowsSuttonAndBarto(t *testing.T) {
	payoff := []float64{1, 3}
	sc := newBandit(payoff, "s")
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.25, Init: 100, Unbiased: true, Select: learn.EpsilonGreedy{Epsilon: 1}})
	require.NoError(t, err)
	eps := train(t, sc, l, credit.Individual{}, 30)
	want, trace := []float64{100, 100}, []float64{0, 0}
	first := []bool{true, true}
	for _, ep := range eps {
		i := int(strings.TrimPrefix(ep.Samples[0].Response, "arm")[0] - '0')
		trace[i] += 0.25 * (1 - trace[i])
		want[i] += 0.25 / trace[i] * (payoff[i] - want[i])
		if first[i] {
			assert.Equal(t, payoff[i], want[i], "the first reward replaces init")
			first[i] = false
		}
	}
	_, got, ok := l.Values("p0", "s")
	require.True(t, ok)
	assert.InDeltaSlice(t, want, got, 1e-12)
}

// TestLockInIsMeasured reproduces the lock-in of issue 14 on a bandit
// whose rewards are always positive: with plain α steps from 0 and ε-greedy
// exploration, an arm tried once sits at α·r, below the arm played from
// the start, so no agent ever changes its greedy arm, even when the
// better arm pays three times as much; with the unbiased step (the
// default of the egreedy spec) they do, and find it.
func TestLockInIsMeasured(t *testing.T) {
	payoff := []float64{1, 1.2, 1.1, 2}
	views := make([]string, 16)
	for i := range views {
		views[i] = "s"
	}
	sc := newBandit(payoff, views...)
	run := func(spec string) (learn.Lock, learn.Learner) {
		s, err := learn.Parse(spec)
		require.NoError(t, err)
		l, err := s.New(learn.Options{})
		require.NoError(t, err)
		train(t, sc, l, credit.Individual{}, 400)
		return l.(learn.Locker).Lock(), l
	}
	plain, _ := run("egreedy:alpha=0.1,epsilon=0.05,unbiased=0")
	assert.Equal(t, 16, plain.Rows)
	// Only an agent that explores arm 3 in its first few episodes, before
	// its first arm's value passes α·2, can switch.
	assert.LessOrEqual(t, plain.Switched, 2, "plain steps from 0 lock in")
	assert.GreaterOrEqual(t, plain.LockedIn(), 14.0/16)

	t.Logf("plain: %+v", plain)
	fair, l := run("egreedy:alpha=0.1,epsilon=0.05")
	t.Logf("unbiased: %+v", fair)
	assert.Equal(t, 16, fair.Rows)
	assert.Greater(t, fair.Switched, 8, "the unbiased step lets agents leave their first arm")
	best := 0
	for i := range views {
		_, v, ok := l.(*learn.Values).Values(fmt.Sprintf("p%d", i), "s")
		require.True(t, ok)
		if v[3] == max(v[0], v[1], v[2], v[3]) {
			best++
		}
	}
	assert.GreaterOrEqual(t, best, 14, "and find the arm that pays most")
}
