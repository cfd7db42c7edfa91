package cli

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents/llm"
	"github.com/troupe-rl/troupe/agents/llm/llmtest"
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
	srv := llamatest.New(t, llamatest.Options{})
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
	llama := llamatest.New(t, llamatest.Options{})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Timeout = llama.URL+"/v1", llm.KindLlamaCpp, time.Minute
	client, err := llm.NewClient(cfg)
	require.NoError(t, err)
	defer client.Close()
	srv, err := server.New(server.Config{
		Scenarios:        scenarios.Builtin(),
		Allocators:       credit.Builtin(),
		Policies:         server.Named(llmPolicyMaker(client, cfg)),
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
		Sampling:  &rollout.Sampling{Temperature: &temp, MaxTokens: &maxTokens},
	})
	require.NoError(t, err)
	require.Len(t, res.Rollouts, 1)
	ro := res.Rollouts[0]
	require.NotEmpty(t, ro.Samples)
	require.NoError(t, protocol.ValidateRollout(ro.Samples))
	withTokens := 0
	for _, s := range ro.Samples {
		assert.Equal(t, rolloutID, s.RolloutID, "siblings share the caller's rollout_id")
		if !s.Metadata.TextOnly {
			withTokens++
			assert.Len(t, s.RolloutLogProbs, s.ResponseLength)
		}
	}
	assert.Positive(t, withTokens)
}
