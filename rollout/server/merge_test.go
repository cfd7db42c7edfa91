package server_test

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// memo is a policy with memory, as an LLM policy with a token-in server
// plays: each turn's prompt ids are the agent's previous prompt and
// response ids, then one id for what it observed since (100 + its turn);
// its response is one id, 500 + its turn, with log-prob -0.5.
type memo struct{}

// Remembers: memo reads its history (agents.Remembering).
func (memo) Remembers() bool { return true }

func (memo) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	var prompt []int
	if n := len(obs.History); n > 0 {
		t := obs.History[n-1].Action.Generation.Tokens
		prompt = append(slices.Clone(t.Prompt), t.Response...)
	}
	prompt = append(prompt, 100+obs.Turn)
	return agents.Action{Text: obs.Legal[0], Generation: &agents.Generation{
		Tokens: &agents.Tokens{Prompt: prompt, Response: []int{500 + obs.Turn}, LogProbs: []float64{-0.5}},
	}}, nil
}

// TestMergeTurnsThroughServe: a request with merge_turns answers one
// sample per agent per episode (tictactoe: two), each the agent's whole
// conversation with its loss mask on the agent's own tokens; the samples
// limit counts the merged samples, so an answer the per-turn layout may
// not hold is served merged; the indexes, given or reserved, are
// contiguous across requests of both layouts, a refused request taking
// none; and the run spec records the layout, its hash changing with it.
func TestMergeTurnsThroughServe(t *testing.T) {
	var logs bytes.Buffer
	s := newServer(t, server.Config{Seed: 5, Policies: factory(memo{}), MaxSamplesPerAnswer: 4,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const body = `{"scenario":"tictactoe","policy":"memo","n":2,"rollout_id":0,"group_index":0,"merge_turns":true}`

	res := decodeResponse(t, post(t, s, body))
	require.Len(t, res.Rollouts, 2)
	next := int64(0) // the service's first reserved index
	for _, ro := range res.Rollouts {
		require.Len(t, ro.Samples, 2, "one sample per agent")
		assert.Greater(t, ro.Turns, 2, "a game of more turns than samples")
		turns := 0
		for _, sm := range ro.Samples {
			assert.Equal(t, next, sm.Index, "indexes contiguous from the reserved block")
			next++
			require.NoError(t, sm.Validate())
			n := sm.Metadata.Extra[trajectories.MergedTurnsKey].(float64)
			turns += int(n)
			// The agent's turns k = 0..n-1 put 100+k in the prompt and
			// 500+k in the response: the merged response region after the
			// first prompt (100) alternates them.
			var want []int
			var mask []int
			for k := range int(n) {
				if k > 0 {
					want = append(want, 100+k)
					mask = append(mask, 0)
				}
				want = append(want, 500+k)
				mask = append(mask, 1)
			}
			assert.Equal(t, append([]int{100}, want...), sm.Tokens, "%s: the last turn's prompt and response", sm.Metadata.Agent)
			assert.Equal(t, len(want), sm.ResponseLength)
			assert.Equal(t, mask, sm.LossMask, "1 on the agent's own tokens only")
			for i, lp := range sm.RolloutLogProbs {
				assert.Equal(t, -0.5*float64(mask[i]), lp)
			}
		}
		assert.Equal(t, ro.Turns, turns, "every turn in one merged sample")
	}
	merged := lastSpec(t, &logs)
	spec, err := runspec.DecodeBytes([]byte(merged.Spec))
	require.NoError(t, err)
	assert.True(t, spec.MergeTurns, "the run spec records the layout")

	// The same request per turn holds more samples than the limit of 4:
	// refused, taking no index.
	perTurn := strings.Replace(body, `,"merge_turns":true`, ``, 1)
	e := decodeError(t, post(t, s, perTurn))
	assert.Equal(t, rollout.CodeTooManySamples, e.Code, e.Message)
	assert.NotEqual(t, merged.Hash, lastSpec(t, &logs).Hash, "the layout is part of the run's identity")
	assert.NotContains(t, lastSpec(t, &logs).Spec, "merge_turns", "absent when off: per-turn specs keep their hash")

	// A merged answer over the limit is refused too, counted merged.
	e = decodeError(t, post(t, s, strings.Replace(body, `"n":2`, `"n":3`, 1)))
	assert.Equal(t, rollout.CodeTooManySamples, e.Code)
	assert.Contains(t, e.Message, "made 6 samples")

	// The next accepted request's indexes go on from the last answer's.
	res = decodeResponse(t, post(t, s, strings.Replace(body, `"n":2`, `"n":1`, 1)))
	for _, sm := range res.Samples() {
		assert.Equal(t, next, sm.Index, "no gap left by the refused requests")
		next++
	}

	// A caller's index: the merged samples are numbered from it.
	res = decodeResponse(t, post(t, s, strings.Replace(body, `"n":2`, `"n":1,"index":70`, 1)))
	got := make([]int64, 0, 2)
	for _, sm := range res.Samples() {
		got = append(got, sm.Index)
	}
	assert.Equal(t, []int64{70, 71}, got)
}

// TestMergeTurnsKeepsTextOnlyTurns: turns without token ids (a scripted
// policy's) cannot merge: each stays a sample of its own, counted as one
// against the limit, so the merged request of tictactoe with random
// players is refused where the merged one of memo players was served.
func TestMergeTurnsKeepsTextOnlyTurns(t *testing.T) {
	s := newServer(t, server.Config{Seed: 5, MaxSamplesPerAnswer: 4})
	e := decodeError(t, post(t, s, `{"scenario":"tictactoe","n":2,"merge_turns":true}`))
	assert.Equal(t, rollout.CodeTooManySamples, e.Code, e.Message)

	s = newServer(t, server.Config{Seed: 5, MaxSamplesPerAnswer: 100})
	res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":1,"merge_turns":true}`))
	require.Len(t, res.Rollouts, 1)
	assert.Len(t, res.Rollouts[0].Samples, res.Rollouts[0].Turns, "text-only turns stay samples of their own")
	for _, sm := range res.Samples() {
		assert.Equal(t, protocol.StatusCompleted, sm.Status)
	}
	assert.Equal(t, http.StatusOK, post(t, s, `{"scenario":"tictactoe","merge_turns":false}`).status)
}

// TestMergeRewardThroughServe: a merged answer's rewards are the mean of
// its turns' by default, or the sum or the last as merge_reward says,
// each exactly that of the per-turn answer of the same episodes; the
// samples' metadata and the run spec name the choice (sum, what specs
// before the field meant, by leaving it out), and a bad one is refused
// naming the field.
func TestMergeRewardThroughServe(t *testing.T) {
	var logs bytes.Buffer
	s := newServer(t, server.Config{Seed: 5, Policies: factory(memo{}),
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const body = `{"scenario":"tictactoe","policy":"memo","n":2,"rollout_id":0,"group_index":0,"seed":3,"policy_seed":4,"allocators":["individual","team"],"reward_format":"dict"}`
	perTurn := decodeResponse(t, post(t, s, body))
	for _, how := range []string{"", "mean", "sum", "last"} {
		t.Run(how, func(t *testing.T) {
			req := strings.Replace(body, `}`, `,"merge_turns":true}`, 1)
			if how != "" {
				req = strings.Replace(req, `}`, `,"merge_reward":"`+how+`"}`, 1)
			}
			merged := decodeResponse(t, post(t, s, req))
			want := cmp.Or(how, "mean")
			spec, err := runspec.DecodeBytes([]byte(lastSpec(t, &logs).Spec))
			require.NoError(t, err)
			if want == "sum" {
				assert.Empty(t, spec.MergeReward, "sum is the field left out")
			} else {
				assert.Equal(t, want, spec.MergeReward)
			}
			require.Len(t, merged.Rollouts, len(perTurn.Rollouts))
			for i, ro := range merged.Rollouts {
				for _, m := range ro.Samples {
					assert.Equal(t, want, m.Metadata.Extra[trajectories.MergedRewardKey])
					var own []map[string]float64
					for _, p := range perTurn.Rollouts[i].Samples {
						if p.Metadata.Agent == m.Metadata.Agent {
							own = append(own, p.Reward.Dict)
						}
					}
					require.Equal(t, float64(len(own)), m.Metadata.Extra[trajectories.MergedTurnsKey])
					for _, key := range []string{"individual", "team"} {
						sum, last := 0.0, own[len(own)-1][key]
						for _, r := range own {
							sum += r[key]
						}
						wantReward := map[string]float64{"mean": sum / float64(len(own)), "sum": sum, "last": last}[want]
						assert.Equal(t, wantReward, m.Reward.Dict[key], "%s of %s, %s", key, m.Metadata.Agent, want)
					}
				}
			}
		})
	}
	for req, want := range map[string]string{
		`{"scenario":"tictactoe","merge_turns":true,"merge_reward":"median"}`: `merge_reward = "median"`,
		`{"scenario":"tictactoe","merge_reward":"mean"}`:                      "without merge_turns",
		`{"scenario":"tictactoe","max_context":-1}`:                           "max_context = -1",
		`{"scenario":"tictactoe","roles":{"x":{"max_context":-2}}}`:           "roles.x.max_context = -2",
	} {
		e := decodeError(t, post(t, s, req))
		assert.Equal(t, rollout.CodeBadRequest, e.Code, req)
		assert.Contains(t, e.Message, want, req)
	}
}
