package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// tokenInWhisper plays whisper with token-in generation on the fake
// server of kind (vLLM or SGLang), whose answers name the turn they
// answer, and returns the episode (per turn, and merged) and the server.
func tokenInWhisper(t *testing.T, kind llm.Kind, rounds int, bytewise bool, edit func(*llm.Config)) (*trajectories.Episode, []protocol.Sample, *llmtest.Server) {
	t.Helper()
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.Kind(kind), Record: true, Brain: func(r *llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Text: fmt.Sprintf("said after %d messages", len(r.Messages)), Bytewise: bytewise}
	}})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.Format, cfg.Kind, cfg.TokenIn = "http://in-process/v1", "test", llm.FormatText, kind, true
	if edit != nil {
		edit(&cfg)
	}
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	p, err := llm.NewPolicy(c, cfg)
	require.NoError(t, err)
	var col trajectories.Collector
	out := &trajectories.Output{Sink: &col, Allocators: []trajectories.Allocator{credit.Team{}}}
	_, err = play.Run(context.Background(), play.Config{
		Play: env.Play{Scenario: whisper(rounds), Policy: env.SamePolicy(p)}, Episodes: 1, Seed: 1,
	}, out)
	require.NoError(t, err)
	require.Len(t, col.Episodes(), 1)
	ep := col.Episodes()[0]
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	return ep, trajectories.MergeTurns(slices.Clone(ep.Samples)), srv
}

// On vLLM and SGLang with TokenIn, memory is token-exact as on llama.cpp:
// every turn's prompt ids begin with the agent's previous prompt and
// response ids, exactly as sampled (the end token included), then the
// server's tokenization of what the template adds; each prompt reads back
// as the template's rendering of the chat sent and each response span as
// the response; generation goes through the kind's own token-in endpoint
// (vLLM's /v1/completions with a prompt of ids, SGLang's /generate with
// input_ids), and the merged samples are the agents' whole conversations.
// Bytewise, the model samples its answers one byte a token, which the
// server's tokenization of the next chat packs otherwise: the sampled ids
// stay all the same, and the rest is tokenized from the text that follows
// them.
func TestTokenInIsTokenExact(t *testing.T) {
	for _, tc := range []struct {
		kind     llm.Kind
		bytewise bool
	}{{llm.KindVLLM, false}, {llm.KindSGLang, false}, {llm.KindVLLM, true}, {llm.KindSGLang, true}} {
		kind := tc.kind
		t.Run(fmt.Sprintf("%s/bytewise=%v", kind, tc.bytewise), func(t *testing.T) {
			ep, merged, srv := tokenInWhisper(t, kind, 3, tc.bytewise, nil)
			by := map[string][]protocol.Sample{}
			for _, s := range ep.Samples {
				require.False(t, s.Metadata.TextOnly, "%v", s.Metadata.Extra["llm_text_only"])
				assert.Equal(t, llm.ResponseDetokenized, s.Metadata.Extra["llm_response_source"])
				assert.NotContains(t, s.Metadata.Extra, "llm_memory_rebuilt")
				assert.NotContains(t, s.Metadata.Extra, "llm_no_logprobs")
				agent := s.Metadata.Agent
				prompt := s.Tokens[:len(s.Tokens)-s.ResponseLength]
				msgs := make([]llmtest.Message, len(s.Prompt.Messages))
				for i, m := range s.Prompt.Messages {
					msgs[i] = llmtest.Message{Role: m.Role, Content: m.Content}
				}
				if k := len(by[agent]); k > 0 {
					prev := by[agent][k-1].Tokens
					require.True(t, len(prompt) > len(prev) && slices.Equal(prompt[:len(prev)], prev), "%s turn %d", agent, k)
					anew := llmtest.PromptIDs(msgs)
					if tc.bytewise {
						assert.False(t, len(anew) > len(prev) && slices.Equal(anew[:len(prev)], prev),
							"bytewise, the chat tokenized anew does not begin with the sampled ids")
					}
				}
				assert.Equal(t, llmtest.ApplyTemplate(msgs), llmtest.Detokenize(prompt), "the prompt ids are the template's rendering")
				resp := s.Tokens[len(prompt):]
				require.Equal(t, llmtest.ImEnd, resp[len(resp)-1], "the end token, as sampled")
				assert.Equal(t, s.Response, llmtest.Detokenize(resp[:len(resp)-1]))
				for i, lp := range s.RolloutLogProbs {
					assert.Equal(t, llmtest.LogProb(resp[i], i), lp)
				}
				by[agent] = append(by[agent], s)
			}
			require.Len(t, by, 3)
			checkMerged(t, by, merged, ep.RolloutID)

			generate := 0
			for _, r := range srv.Requests() {
				f := r.Fields()
				switch {
				case kind == llm.KindVLLM && f["prompt"] != nil:
					generate++
					var ids []int
					require.NoError(t, json.Unmarshal(f["prompt"], &ids), "the prompt is token ids")
					assert.Contains(t, string(r.Body), `"return_token_ids":true`)
				case kind == llm.KindSGLang && f["input_ids"] != nil:
					generate++
					assert.Contains(t, string(r.Body), `"sampling_seed":`)
				case kind == llm.KindSGLang:
					// SGLang renders a chat by asking for one token.
					assert.JSONEq(t, "1", string(f["max_tokens"]), "%s", r.Body)
				default:
					t.Errorf("unexpected request %s", r.Body)
				}
			}
			assert.Equal(t, len(ep.Samples), generate, "one generation per turn")
			assert.Zero(t, srv.Stats().BadRequests)
		})
	}
}

// TokenIn under a context budget: no generation asks for more than the
// budget, prompt and answer together; the oldest turns are left out once
// the conversation no longer fits, and the samples say so.
func TestTokenInBudget(t *testing.T) {
	const budget = 700
	for _, kind := range []llm.Kind{llm.KindVLLM, llm.KindSGLang} {
		t.Run(string(kind), func(t *testing.T) {
			ep, _, srv := tokenInWhisper(t, kind, 12, true, func(c *llm.Config) { c.MaxContext = budget })
			dropped := 0
			for _, s := range ep.Samples {
				if _, ok := s.Metadata.Extra["llm_memory_dropped"]; ok {
					dropped++
				}
			}
			assert.Positive(t, dropped)
			for _, r := range srv.Requests() {
				f := r.Fields()
				var ids []int
				var max int
				switch {
				case f["prompt"] != nil:
					require.NoError(t, json.Unmarshal(f["prompt"], &ids))
					require.NoError(t, json.Unmarshal(f["max_tokens"], &max))
				case f["input_ids"] != nil:
					require.NoError(t, json.Unmarshal(f["input_ids"], &ids))
					var sp struct {
						Max int `json:"max_new_tokens"`
					}
					require.NoError(t, json.Unmarshal(f["sampling_params"], &sp))
					max = sp.Max
				default:
					continue
				}
				assert.Positive(t, max)
				assert.LessOrEqual(t, len(ids)+max, budget)
			}
		})
	}
}

// TokenIn is refused where it does not exist; on SGLang, an Extra field
// that /generate takes neither as a sampling parameter nor as a request
// field is refused by name, and the others go where SGLang reads them.
func TestTokenInConfig(t *testing.T) {
	// The policy's lists are the fake's, which are the source's
	// (llmtest.TestTokenInFieldsMatchTheSource).
	assert.Equal(t, llmtest.SGLangSamplingFields, llm.SGLangSamplingFields)
	assert.Equal(t, llmtest.SGLangGenerateFields, llm.SGLangGenerateFields)

	cfg := llm.DefaultConfig()
	cfg.Kind, cfg.TokenIn = llm.KindOpenAI, true
	require.ErrorIs(t, cfg.Validate(), llm.ErrBadConfig)
	cfg.Kind = llm.KindLlamaCpp
	require.ErrorContains(t, cfg.Validate(), "--llm-tokenize")

	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.SGLang, Record: true})
	cfg = llm.DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.Format, cfg.Kind, cfg.TokenIn = "http://in-process/v1", "test", llm.FormatText, llm.KindSGLang, true
	cfg.Extra = map[string]json.RawMessage{"n_predict": json.RawMessage("3")}
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	_, err = llm.NewPolicy(c, cfg)
	require.ErrorContains(t, err, `"n_predict"`)

	cfg.Extra = map[string]json.RawMessage{"min_p": json.RawMessage("0.1"), "lora_path": json.RawMessage(`"a"`),
		"chat_template_kwargs": json.RawMessage(`{"enable_thinking":false}`)}
	minTokens := 2
	cfg.MinTokens = &minTokens
	p, err := llm.NewPolicy(c, cfg)
	require.NoError(t, err)
	_, err = p.Act(context.Background(), &agents.Observation{Agent: "a", Role: "r", View: "a view"})
	require.NoError(t, err)
	var gen, render bool
	for _, r := range srv.Requests() {
		body := string(r.Body)
		if r.Fields()["input_ids"] != nil {
			gen = true
			assert.Contains(t, body, `"lora_path":"a"`)
			assert.Contains(t, string(r.Fields()["sampling_params"]), `"min_p":0.1`)
			assert.Contains(t, string(r.Fields()["sampling_params"]), `"min_new_tokens":2`)
			assert.NotContains(t, body, "chat_template_kwargs")
		} else {
			render = true
			assert.Contains(t, body, `"chat_template_kwargs":{"enable_thinking":false}`)
		}
	}
	assert.True(t, gen && render)
}
