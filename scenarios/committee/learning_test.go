package committee_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// advisersWhoAbstain trains ε-greedy advisers under alloc, each week learned
// before the next, and returns how many uninformed advisers end up
// preferring to abstain.
func advisersWhoAbstain(t *testing.T, alloc string, uninformed, episodes int) int {
	t.Helper()
	sc := committee.New()
	p, err := sc.Info().ParseParams(map[string]string{"informed": "2", "uninformed": fmt.Sprint(uninformed), "options": "4"})
	require.NoError(t, err)
	decider, err := sc.Info().MakePolicy(env.PolicyRequest{Scenario: sc, Params: p, Role: committee.RoleDecider, Name: "scripted"})
	require.NoError(t, err)
	// Key an uninformed adviser's single state by name, and an informed
	// one's by its whole prompt (the brief).
	state := func(prompt string) string {
		if strings.Contains(prompt, "not briefed") {
			return "blind"
		}
		return prompt
	}
	l, err := learn.NewValues(learn.ValueConfig{Alpha: 0.1, Select: learn.EpsilonGreedy{Epsilon: 0.1}, Options: learn.Options{State: state}})
	require.NoError(t, err)
	a, err := credit.Builtin().Parse(alloc)
	require.NoError(t, err)
	policy := env.ByRole(map[string]agents.Policy{committee.RoleDecider: decider}, l)
	ctx := context.Background()
	for i := range uint64(episodes) {
		ep := trajectories.NewEpisode(env.RunEpisode(ctx, env.Setup{
			Play:       env.Play{Scenario: sc, Params: p, Policy: policy, Emit: env.EmitRoles(committee.RoleAdviser)},
			Seed:       seeds.Mix(1, 1, i),
			PolicySeed: seeds.Mix(1, 2, i),
			Index:      int64(i),
		}))
		require.NoError(t, trajectories.Allocate(ctx, []*trajectories.Episode{ep}, []trajectories.Allocator{a}, trajectories.RewardScalar))
		require.NoError(t, l.Learn(&ep.Record, ep.Credit))
	}
	abstain := 0
	for i := 2; i < 2+uninformed; i++ {
		legal, q, ok := l.Values(fmt.Sprintf("adviser-%d", i), "blind")
		require.True(t, ok)
		// Abstaining is the null action, listed first: it must beat every
		// option strictly.
		require.Equal(t, committee.NullAction, legal[0])
		if slices.Max(q[1:]) < q[0] {
			abstain++
		}
	}
	return abstain
}

// The mechanism behind the committee experiment (docs/experiments): under
// the team reward the null players keep advising; under the difference
// reward, which compares the outcome with and without their advice, they
// learn to abstain.
func TestUninformedAdvisersLearnToAbstainFromDifferenceRewards(t *testing.T) {
	assert.Equal(t, 5, advisersWhoAbstain(t, "difference:sim=resimulate", 5, 300), "all five learn to abstain")
	assert.Less(t, advisersWhoAbstain(t, "team", 5, 1500), 3, "most keep advising")
}
