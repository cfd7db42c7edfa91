package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	rcli "github.com/troupe-rl/troupe/rollout/client"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// noEnv keeps the machine's TROUPE_LLM_* variables out of a test.
func noEnv(string) (string, bool) { return "", false }

func llmRun(t *testing.T, args ...string) (result, [][]protocol.Sample) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.jsonl")
	r := invokeWithEnv(t, noEnv, append(args, "-o", path)...)
	if r.code != ExitOK {
		return r, nil
	}
	return r, readRollouts(t, readFile(t, path))
}

// invokeWithEnv runs the command line with the built-in scenarios and the
// given environment.
func invokeWithEnv(t *testing.T, lookup func(string) (string, bool), args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := New(&stdout, &stderr)
	app.Scenarios = scenarios.Builtin()
	app.LookupEnv = lookup
	app.Terminal = func(io.Writer) bool { return false }
	code := app.Main(context.Background(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestRunWithTheLLMPolicy(t *testing.T) {
	for _, kind := range []llmtest.Kind{llmtest.VLLM, llmtest.SGLang, llmtest.LlamaCpp} {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.Options{Kind: kind})
			r, rollouts := llmRun(t, "run", "tictactoe", "-n", "4", "-c", "2", "--policy", "llm",
				"--llm-base-url", srv.URL(), "--llm-kind", string(kind), "--llm-model", "test")
			require.Equal(t, ExitOK, r.code, r.stderr)
			require.Len(t, rollouts, 4, r.stderr)
			for _, ro := range rollouts {
				require.NoError(t, protocol.ValidateRollout(ro))
				for _, s := range ro {
					assert.False(t, s.Metadata.TextOnly, "the server's token ids are kept")
					assert.Equal(t, len(s.RolloutLogProbs), s.ResponseLength)
					require.NotNil(t, s.Prompt.Messages, "the chat that was sent is the prompt")
					assert.Equal(t, "test", s.Metadata.Extra["llm_model"])
				}
			}
			assert.Contains(t, r.stderr, "policies:    x=llm, o=llm")
		})
	}
}

func TestRunLLMWithStructuredAnswers(t *testing.T) {
	// The model walks away, a move the rules accept, after one answer they
	// refuse (a proposal without its "take").
	calls := 0
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM, Brain: func(*llmtest.Request) llmtest.Reply {
		calls++
		if calls%2 == 1 {
			return llmtest.Reply{Text: `{"type":"propose"}`}
		}
		return llmtest.Reply{Text: `{"type":"walk"}`}
	}})
	r, rollouts := llmRun(t, "run", "negotiation", "-n", "3", "-c", "1", "--policy", "alice=llm",
		"--llm-base-url", srv.URL(), "--on-invalid", "forfeit")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Len(t, rollouts, 3)
	for _, ro := range rollouts {
		require.NoError(t, protocol.ValidateRollout(ro))
		for _, s := range ro {
			if s.Metadata.Role == "alice" {
				assert.False(t, s.Metadata.TextOnly)
				assert.JSONEq(t, `{"type":"walk"}`, s.Response)
				assert.Equal(t, 2.0, s.Metadata.Extra["llm_attempts"], "the refused answer was asked again")
				assert.NotContains(t, s.Metadata.Extra, "invalid")
			} else {
				assert.True(t, s.Metadata.TextOnly, "bob plays the scripted default")
			}
		}
	}
}

func TestRunLLMBadSettings(t *testing.T) {
	r := invokeWithEnv(t, noEnv, "run", "tictactoe", "--policy", "llm", "--llm-base-url", "not a url")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "base URL")

	r = invokeWithEnv(t, func(k string) (string, bool) {
		if k == "TROUPE_LLM_TEMPERATURE" {
			return "hot", true
		}
		return "", false
	}, "run", "tictactoe", "--policy", "llm")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "TROUPE_LLM_TEMPERATURE")

	r = invokeWithEnv(t, noEnv, "run", "tictactoe", "--on-invalid", "shrug")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, `--on-invalid "shrug"`)
}

// TestRunAgainstRealLlamaServer plays LLM self-play against a real
// llama.cpp server (tools/llama builds it, with a tiny random-weight model
// and a real tokenizer): the token ids, log-probs and schema-constrained
// answers in the samples are the server's own. It skips when the server is
// not built, unless TROUPE_REQUIRE_LLAMA=1 (as in CI).
func TestRunAgainstRealLlamaServer(t *testing.T) {
	srv := sharedLlama.Get(t)
	r, rollouts := llmRun(t, "run", "tictactoe", "-n", "2", "-c", "2", "--policy", "llm",
		"--llm-base-url", srv.URL+"/v1", "--llm-kind", "llamacpp", "--llm-temperature", "0",
		"--llm-max-tokens", "24", "--llm-timeout", "60s", "--on-invalid", "forfeit")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Len(t, rollouts, 2)
	tokens := 0
	for _, ro := range rollouts {
		require.NoError(t, protocol.ValidateRollout(ro))
		for _, s := range ro {
			assert.Contains(t, []protocol.Status{protocol.StatusCompleted, protocol.StatusTruncated}, s.Status, s.Metadata.Error)
			if !s.Metadata.TextOnly {
				tokens++
				assert.Len(t, s.RolloutLogProbs, s.ResponseLength)
				assert.Greater(t, len(s.Tokens), s.ResponseLength, "prompt tokens come first")
				assertResponseIsDetokenized(t, srv, s)
			}
		}
	}
	assert.Positive(t, tokens, "llama.cpp gives token ids: some samples carry them")
}

// TestServeLLMRolloutsAgainstRealLlamaServer is the slime path end to end:
// the rollout service of `troupe serve`, with the "llm" policy on a real
// llama.cpp server, answers a rollout request with sibling samples whose
// tokens and log-probs are the server's. It skips like
// TestRunAgainstRealLlamaServer.
func TestServeLLMRolloutsAgainstRealLlamaServer(t *testing.T) {
	llama := sharedLlama.Get(t)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Timeout = llama.URL+"/v1", llm.KindLlamaCpp, time.Minute
	pool := testPool(t, cfg)
	srv, err := server.New(server.Config{
		Scenarios:        scenarios.Builtin(),
		Allocators:       credit.Builtin(),
		Policies:         llmPolicyMaker(pool),
		PolicySettings:   servedLLMSettings(pool.endpoints),
		ParallelPolicies: true,
	})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c, err := rcli.New(hs.URL)
	require.NoError(t, err)

	temp, maxTokens := 0.0, 24
	rolloutID := int64(7)
	res, err := c.Rollouts(t.Context(), &rollout.Request{
		Scenario:  "tictactoe",
		Policy:    llmPolicyName,
		RolloutID: &rolloutID,
		// slime's defaults, and its sampling_seed.
		Sampling: &protocol.Sampling{Temperature: &temp, MaxTokens: &maxTokens, TopK: ptr(-1), SamplingSeed: ptr(int64(11)),
			SkipSpecialTokens: ptr(false), NoStopTrim: ptr(true), SpacesBetweenSpecialTokens: ptr(false)},
	})
	require.NoError(t, err)
	require.Len(t, res.Rollouts, 1)
	ro := res.Rollouts[0]
	require.NotEmpty(t, ro.Samples)
	require.NoError(t, protocol.ValidateRollout(ro.Samples))
	withTokens := 0
	for _, s := range ro.Samples {
		assert.Equal(t, rolloutID, s.RolloutID, "siblings share the caller's rollout_id")
		assert.False(t, s.Metadata.TextOnly, "%v", s.Metadata.Extra["llm_text_only"])
		if !s.Metadata.TextOnly {
			withTokens++
			assert.Len(t, s.RolloutLogProbs, s.ResponseLength)
			assertResponseIsDetokenized(t, llama, s)
		}
	}
	assert.Positive(t, withTokens)
}

// assertResponseIsDetokenized checks that an LLM sample's response is the
// server's /detokenize of its response token ids, less a trailing
// end-of-generation token: the text of what the model wrote, not the move
// the game read from it (which is under metadata action).
func assertResponseIsDetokenized(t *testing.T, llama *llamatest.Server, s protocol.Sample) {
	t.Helper()
	ids := s.Tokens[len(s.Tokens)-s.ResponseLength:]
	if n := len(ids); n > 0 && slices.Contains(llamatest.EndOfGeneration, ids[n-1]) {
		assert.Contains(t, []any{"stop", "tool_calls"}, s.Metadata.Extra["llm_finish_reason"], "only a stopped answer ends on the end token")
		ids = ids[:n-1]
	}
	body, err := json.Marshal(map[string][]int{"tokens": ids})
	require.NoError(t, err)
	resp, err := http.Post(llama.URL+"/detokenize", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var d struct {
		Content string `json:"content"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
	assert.Equal(t, d.Content, s.Response, "turn %d of %s", s.Metadata.Turn, s.Metadata.Agent)
	assert.Equal(t, "detokenize", s.Metadata.Extra["llm_response_source"])
	assert.NotEmpty(t, s.Metadata.Action, "the move read from the answer is kept beside it")
}

// TestRunLLMToolFormatAgainstRealLlamaServer plays tic-tac-toe with the
// tool format on a real llama.cpp server whose template renders tools
// (llamatest.ToolTemplate): llama.cpp shows the model the tool's schema
// and constrains its answer to one call of it by grammar, so every move is
// a legal one read from a real tool call, on the first attempt, and the
// prompt ids (from /apply-template of the same body, tools included) match
// the server's count. logit_bias {"{": 20} stands in for a trained model's
// will to call the tool at once (see llamatest.ToolTemplate).
func TestRunLLMToolFormatAgainstRealLlamaServer(t *testing.T) {
	llama := llamatest.New(t, llamatest.Options{ToolTemplate: true})
	// One game: every one of its turns is a grammar-constrained call, at
	// about 35 ms of the tiny model's CPU a token, and a second game's
	// turns would prove the same again.
	r, rollouts := llmRun(t, "run", "tictactoe", "-n", "1", "--policy", "llm",
		"--llm-base-url", llama.URL+"/v1", "--llm-kind", "llamacpp", "--llm-format", "tool",
		"--llm-temperature", "1", "--llm-max-tokens", "200", "--llm-extra", `logit_bias={"{":20}`,
		"--llm-timeout", "60s", "--on-invalid", "forfeit")
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Len(t, rollouts, 1)
	for _, ro := range rollouts {
		require.NoError(t, protocol.ValidateRollout(ro))
		require.GreaterOrEqual(t, len(ro), 5, "a game of tic-tac-toe lasts five moves at least")
		for _, s := range ro {
			assert.Equal(t, protocol.StatusCompleted, s.Status, s.Metadata.Error)
			assert.NotContains(t, s.Metadata.Extra, "invalid", "turn %d: %v", s.Metadata.Turn, s.Metadata.Extra["llm_rejected"])
			assert.Equal(t, 1.0, s.Metadata.Extra["llm_attempts"], "the call is valid at once")
			assert.Equal(t, "tool_calls", s.Metadata.Extra["llm_finish_reason"])
			require.False(t, s.Metadata.TextOnly, "%v", s.Metadata.Extra["llm_text_only"])
			assert.Greater(t, len(s.Tokens), s.ResponseLength, "prompt ids come first")
			assertResponseIsDetokenized(t, llama, s)
			var call struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			require.NoError(t, json.Unmarshal([]byte(s.Response), &call), "the response is the call as the model wrote it: %q", s.Response)
			assert.Equal(t, "act", call.Name)
		}
	}
}

// serveLLM runs the rollout service with the "llm" policy on cfg's model
// server, and returns a client for it.
func serveLLM(t *testing.T, cfg llm.Config, endpoints ...string) *rcli.Client {
	t.Helper()
	pool := testPool(t, cfg, endpoints...)
	srv, err := server.New(server.Config{
		Scenarios:      scenarios.Builtin(),
		Allocators:     credit.Builtin(),
		Policies:       llmPolicyMaker(pool),
		PolicySettings: servedLLMSettings(pool.endpoints),
	})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := rcli.New(hs.URL)
	require.NoError(t, err)
	return c
}

func ptr[T any](v T) *T { return &v }

// TestServeLLMSlimeSampling: slime's sampling parameters reach the model
// server under its kind's names: top_k and max_tokens -1 are unset (the
// service's --llm-max-tokens stays), the sampling seed roots every call's
// seed, and the detokenizer switches go out as the kind knows them.
func TestServeLLMSlimeSampling(t *testing.T) {
	for _, kind := range []llmtest.Kind{llmtest.VLLM, llmtest.SGLang, llmtest.LlamaCpp} {
		t.Run(string(kind), func(t *testing.T) {
			srv := llmtest.Start(t, llmtest.Options{Kind: kind, Record: true})
			cfg := llm.DefaultConfig()
			cfg.BaseURL, cfg.Kind, cfg.Model, cfg.MaxTokens = srv.URL(), llm.Kind(kind), "test", ptr(48)
			c := serveLLM(t, cfg)
			s := &protocol.Sampling{
				Temperature: ptr(1.0), TopP: ptr(1.0), TopK: ptr(-1), MaxTokens: ptr(-1), SamplingSeed: ptr(int64(1234)),
				SkipSpecialTokens: ptr(false), NoStopTrim: ptr(true), SpacesBetweenSpecialTokens: ptr(false),
				RepetitionPenalty: ptr(1.1),
			}
			if kind != llmtest.LlamaCpp {
				s.StopTokenIDs, s.MinTokens = []int{llmtest.ImEnd}, ptr(1)
			}
			// slime's sampling as GenerateState builds it, unchanged for every
			// kind: spaces_between_special_tokens false included, which
			// SGLang's chat endpoint lacks and troupe accepts without sending.
			res, err := c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policy: llmPolicyName, Sampling: s})
			require.NoError(t, err)
			require.NoError(t, protocol.ValidateRollout(res.Rollouts[0].Samples))
			reqs := srv.Requests()
			require.NotEmpty(t, reqs)
			turns := map[string]int{}
			for _, r := range reqs {
				f := r.Fields()
				maxTokens := "max_tokens"
				if kind == llmtest.LlamaCpp {
					maxTokens = "n_predict" // agents with memory ask llama.cpp's /completion, token in
				}
				assert.JSONEq(t, "48", string(f[maxTokens]), "max_tokens -1 leaves the service's")
				agent := "x" // tic-tac-toe alternates, x first; every answer is valid
				if turns["x"] > turns["o"] {
					agent = "o"
				}
				assert.Equal(t, int64(llm.SampledRequestSeed(1234, agent, turns[agent], 0)), *r.Seed, "agent %s turn %d", agent, turns[agent])
				turns[agent]++
				switch kind {
				case llmtest.LlamaCpp:
					assert.JSONEq(t, "0", string(f["top_k"]), "slime's -1 is llama.cpp's 0 (off; its default is 40)")
					assert.JSONEq(t, "0", string(f["min_p"]), "slime samples without min-p; llama.cpp's default is 0.05")
					assert.JSONEq(t, "1.1", string(f["repeat_penalty"]))
					for _, k := range []string{"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens", "stop_token_ids", "min_tokens", "repetition_penalty"} {
						assert.NotContains(t, f, k)
					}
				default:
					assert.NotContains(t, f, "top_k")
					assert.JSONEq(t, "false", string(f["skip_special_tokens"]))
					if kind == llmtest.VLLM {
						assert.JSONEq(t, "false", string(f["spaces_between_special_tokens"]))
					} else {
						assert.NotContains(t, f, "spaces_between_special_tokens")
					}
					assert.JSONEq(t, "[2]", string(f["stop_token_ids"]))
					assert.JSONEq(t, "1", string(f["min_tokens"]))
					assert.JSONEq(t, "1.1", string(f["repetition_penalty"]))
					if kind == llmtest.SGLang {
						assert.JSONEq(t, "true", string(f["no_stop_trim"]))
					} else {
						assert.JSONEq(t, "true", string(f["include_stop_str_in_output"]))
					}
				}
			}
			for _, smp := range res.Rollouts[0].Samples {
				assert.NotEmpty(t, smp.Metadata.Action, "the move is kept beside the response")
				assert.NotEqual(t, smp.Metadata.Action, smp.Response, "the response is what the model wrote")
			}
		})
	}
}

// TestServeLLMRefusesWhatTheServerCannotDo: a sampling field the server
// kind cannot honour is answered 400 bad_policy, naming the field and the
// kind; values the server follows anyway pass.
func TestServeLLMRefusesWhatTheServerCannotDo(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.LlamaCpp})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model = srv.URL(), llm.KindLlamaCpp, "test"
	c := serveLLM(t, cfg)
	for _, tc := range []struct {
		s    protocol.Sampling
		n    int
		want []string
	}{
		{protocol.Sampling{StopTokenIDs: []int{7}}, 1, []string{"stop_token_ids", "llamacpp"}},
		{protocol.Sampling{SkipSpecialTokens: ptr(true)}, 1, []string{"skip_special_tokens", "llamacpp"}},
		{protocol.Sampling{SpacesBetweenSpecialTokens: ptr(true)}, 1, []string{"spaces_between_special_tokens", "llamacpp"}},
		{protocol.Sampling{NoStopTrim: ptr(false)}, 1, []string{"no_stop_trim", "llamacpp"}},
		{protocol.Sampling{MinTokens: ptr(3)}, 1, []string{"min_tokens", "llamacpp"}},
		{protocol.Sampling{TopK: ptr(-2)}, 1, []string{"top_k -2"}},
		{protocol.Sampling{MaxTokens: ptr(-5)}, 1, []string{"max tokens -5"}},
		{protocol.Sampling{SamplingSeed: ptr(int64(3))}, 2, []string{"sampling seed with n 2"}},
	} {
		s := tc.s
		_, err := c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policy: llmPolicyName, N: tc.n, Sampling: &s})
		require.ErrorIs(t, err, rollout.CodeBadPolicy, "%v", tc.want)
		for _, w := range tc.want {
			assert.Contains(t, err.Error(), w)
		}
	}
	for _, s := range []protocol.Sampling{
		{TopK: ptr(0), MaxTokens: ptr(0)},
		{TopK: ptr(-1), MaxTokens: ptr(-1), SkipSpecialTokens: ptr(false), NoStopTrim: ptr(true), SpacesBetweenSpecialTokens: ptr(false), MinTokens: ptr(0)},
	} {
		_, err := c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policy: llmPolicyName, Sampling: &s})
		assert.NoError(t, err)
	}
}
