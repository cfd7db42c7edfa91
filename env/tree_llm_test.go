package env_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// The K candidates of an LLM seat are K requests with the same prompt and
// different sampling seeds: the fake server saw, for every tree-sampled
// turn, K requests with one chat and K seeds, and the candidates' prompt
// token ids are identical.
func TestTreeLLMCandidatesShareTheirPrompt(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Record: true})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model, cfg.Timeout = srv.URL(), llm.KindVLLM, "test-model", 10*time.Second
	pol, err := llm.New(cfg)
	require.NoError(t, err)
	t.Cleanup(pol.Client().Close)
	sc := tictactoe.New()
	p, err := sc.Info().ParseParams(nil)
	require.NoError(t, err)
	const k = 3
	setup := env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pol)}, Drive: env.Drive{Tree: &episode.Tree{K: k, Alpha: 1}, ParallelPolicies: true},
		Seed: 5, PolicySeed: 6,
	}
	rec := env.PlayTree(t.Context(), setup)
	require.True(t, rec.Finished(), rec.Err)
	// The server's requests by chat: each chat was asked with how many
	// seeds.
	seedsOf := map[string]map[int64]bool{}
	for _, r := range srv.Requests() {
		chat, err := json.Marshal(r.Messages)
		require.NoError(t, err)
		if seedsOf[string(chat)] == nil {
			seedsOf[string(chat)] = map[int64]bool{}
		}
		require.NotNil(t, r.Seed, "every request carries its sampling seed")
		seedsOf[string(chat)][*r.Seed] = true
	}
	groups := 0
	for lo := 0; lo < len(rec.Candidates); lo += k {
		cands := rec.Candidates[lo : lo+k]
		first := cands[0].Generation
		require.NotNil(t, first)
		require.NotNil(t, first.Tokens)
		require.NotEmpty(t, first.Tokens.Prompt)
		for _, c := range cands {
			assert.Equal(t, cands[0].Turn, c.Turn)
			assert.Equal(t, first.Tokens.Prompt, c.Generation.Tokens.Prompt, "turn %d candidate %d: prompt ids", c.Turn, c.Index)
			assert.Equal(t, *first.Prompt, *c.Generation.Prompt)
		}
		chat, err := json.Marshal(first.Prompt.Messages)
		require.NoError(t, err)
		// The same chat may recur in the continuations that scored the
		// candidates: at least the K seeds of the candidates.
		assert.GreaterOrEqual(t, len(seedsOf[string(chat)]), k, "turn %d: the candidates' requests have distinct seeds", cands[0].Turn)
		groups++
	}
	assert.Equal(t, len(rec.Turns), groups, "every turn is tree sampled")
}
