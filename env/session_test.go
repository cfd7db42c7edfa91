package env_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// TestSessionIsOneAgentsEpisode: an agent's session key is the same at
// every one of its turns in an episode, and differs between agents and
// between episodes; replaying an episode gives the same keys.
func TestSessionIsOneAgentsEpisode(t *testing.T) {
	sc := relayScenario(env.Sequential, 9, relayHooks{}, nil)
	var mu sync.Mutex
	sessions := map[[2]uint64]map[string]uint64{} // (policy seed, run) -> agent -> session
	run := 0
	record := func(policySeed uint64) agents.Policy {
		return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			mu.Lock()
			defer mu.Unlock()
			k := [2]uint64{policySeed, uint64(run)}
			if sessions[k] == nil {
				sessions[k] = map[string]uint64{}
			}
			if s, ok := sessions[k][obs.Agent]; ok {
				assert.Equal(t, s, obs.Session, "agent %s's session changed at turn %d", obs.Agent, obs.Turn)
			}
			sessions[k][obs.Agent] = obs.Session
			return agents.Action{Text: "1"}, nil
		})
	}
	for _, seed := range []uint64{1, 2, 1} {
		if seed == 1 && len(sessions) > 0 {
			run++ // the replay of seed 1
		}
		x := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(record(seed))}}
		rec := x.Execute(context.Background(), env.Request{Seed: 7, PolicySeed: seed})
		require.Equal(t, protocol.StatusCompleted, rec.Status)
	}
	first, other, again := sessions[[2]uint64{1, 0}], sessions[[2]uint64{2, 0}], sessions[[2]uint64{1, 1}]
	require.Len(t, first, 3)
	assert.Equal(t, first, again, "a replay has the same sessions")
	seen := map[uint64]bool{}
	for _, m := range []map[string]uint64{first, other} {
		for _, s := range m {
			assert.False(t, seen[s], "session %x shared", s)
			seen[s] = true
		}
	}
}

// TestHistoryIsKeptForPoliciesThatReadIt: the engine hands an agent its
// earlier turns when its policy remembers (agents.Remember, or a wrapper
// that passes it on with agents.Wrap), also in a counterfactual replay
// that plays the seat afresh; a policy that does not remember sees none.
func TestHistoryIsKeptForPoliciesThatReadIt(t *testing.T) {
	sc := relayScenario(env.Sequential, 9, relayHooks{}, nil)
	var mu sync.Mutex
	var lens map[string][]int // agent -> len(History) at each turn
	record := func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		mu.Lock()
		defer mu.Unlock()
		lens[obs.Agent] = append(lens[obs.Agent], len(obs.History))
		for k, h := range obs.History {
			if h.Action.Text != "1" {
				return agents.Action{}, fmt.Errorf("turn %d of %s: history turn %d played %q", obs.Turn, obs.Agent, k, h.Action.Text)
			}
		}
		return agents.Action{Text: "1"}, nil
	}
	plain := agents.PolicyFunc(record)
	counted := 0
	counter := func(p agents.Policy) agents.Policy {
		return agents.Wrap(p, agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
			counted++
			return p.Act(ctx, obs)
		}))
	}
	for _, tc := range []struct {
		name     string
		policy   agents.Policy
		remember bool
	}{
		{"plain", plain, false},
		{"wrapped plain", counter(plain), false},
		{"remembering", agents.Remember(plain), true},
		{"wrapped remembering", counter(agents.Remember(plain)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.remember, agents.Remembers(tc.policy))
			lens = map[string][]int{}
			x := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(tc.policy)}}
			rec := x.Execute(context.Background(), env.Request{Seed: 7, PolicySeed: 1})
			require.Equal(t, protocol.StatusCompleted, rec.Status, rec.Err)
			check := func(what string) {
				require.NotEmpty(t, lens)
				for agent, ls := range lens {
					require.Greater(t, len(ls), 1, "%s plays several turns", agent)
					for turn, n := range ls {
						want := 0
						if tc.remember {
							want = turn
						}
						assert.Equal(t, want, n, "%s: %s's history at its turn %d", what, agent, turn)
					}
				}
			}
			check("the episode")
			lens = map[string][]int{}
			_, err := rec.Replay.Replay(context.Background(), episode.Counterfactual{Reseed: map[int]uint64{0: 1}, Resimulate: true})
			require.NoError(t, err)
			check("a re-simulation")
		})
	}
}
