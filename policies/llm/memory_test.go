package llm_test

import (
	"context"
	"fmt"
	"strings"
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
)

// playWhisper plays one whisper episode with an LLM policy against an
// in-process test server whose answers name the turn they answer.
func playWhisper(t *testing.T, rounds int, edit func(*llm.Config)) *trajectories.Episode {
	t.Helper()
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Brain: func(r *llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Text: fmt.Sprintf("said after %d messages", len(r.Messages))}
	}})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.Format = "http://in-process/v1", "test", llm.FormatText
	if edit != nil {
		edit(&cfg)
	}
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	p, err := llm.NewPolicy(c, cfg)
	require.NoError(t, err)
	sc := whisper(rounds)
	var col trajectories.Collector
	_, err = play.Run(context.Background(), play.Config{
		Play: env.Play{Scenario: sc, Policy: env.SamePolicy(p)}, Episodes: 1, Seed: 1,
	}, &trajectories.Output{Sink: &col})
	require.NoError(t, err)
	require.Len(t, col.Episodes(), 1)
	return col.Episodes()[0]
}

// With memory, each turn's chat is the agent's previous chat, its answer,
// and a user message of what it observed since: the private channel's
// messages reach p0 and p1 only, p2's broadcasts everyone.
func TestMemoryExtendsTheConversation(t *testing.T) {
	ep := playWhisper(t, 3, nil)
	last := map[string]protocol.Sample{}
	for _, s := range ep.Samples {
		msgs := s.Prompt.Messages
		if prev, ok := last[s.Metadata.Agent]; ok {
			n := len(prev.Prompt.Messages)
			require.Len(t, msgs, n+2, "%s turn %d", s.Metadata.Agent, s.Metadata.Turn)
			assert.Equal(t, prev.Prompt.Messages, msgs[:n], "the previous chat, unchanged")
			assert.Equal(t, protocol.ChatMessage{Role: llm.RoleAssistant, Content: prev.Response}, msgs[n], "its own answer")
			assert.Equal(t, llm.RoleUser, msgs[n+1].Role)
			assert.EqualValues(t, s.Metadata.Turn, s.Metadata.Extra["llm_memory_turns"])
		} else {
			require.Len(t, msgs, 2, "system and the first user message")
		}
		user := msgs[len(msgs)-1].Content
		switch s.Metadata.Agent {
		case "player-2":
			assert.NotContains(t, user, "#pair", "the private channel stays private")
		case "player-0":
			if s.Metadata.Turn == 0 {
				assert.Contains(t, user, "the password is ocelot")
			}
		}
		last[s.Metadata.Agent] = s
	}
	assert.Contains(t, last["player-1"].Prompt.Messages[1].Content, "player-0 -> #pair", "p1 hears p0 on the channel")
}

// Without memory the agent's earlier answers are nowhere in its prompt:
// the stateless behaviour, kept behind Config.NoMemory.
func TestNoMemoryForgets(t *testing.T) {
	ep := playWhisper(t, 2, func(c *llm.Config) { c.NoMemory = true })
	for _, s := range ep.Samples {
		for _, m := range s.Prompt.Messages {
			assert.NotEqual(t, llm.RoleAssistant, m.Role, "%s turn %d", s.Metadata.Agent, s.Metadata.Turn)
		}
		assert.NotContains(t, s.Metadata.Extra, "llm_memory_turns")
	}
}

// Under a context budget the conversation's oldest turns are left out once
// its bound passes the budget: the sample says how many, the new
// conversation starts with a note saying so, and max_tokens never asks
// past the budget.
func TestMemoryBudgetLeavesOldTurnsOut(t *testing.T) {
	const budget = 700
	ep := playWhisper(t, 12, func(c *llm.Config) { c.MaxContext = budget })
	dropped := 0
	for _, s := range ep.Samples {
		if d, ok := s.Metadata.Extra["llm_memory_dropped"]; ok {
			dropped++
			n := d.(int)
			assert.True(t, strings.HasPrefix(s.Prompt.Messages[1].Content, fmt.Sprintf("[%d earlier turns of yours are left out]", n)), s.Prompt.Messages[1].Content)
		}
		// The server's count of the prompt's tokens, and the eighth of the
		// budget kept for the answer (no max_tokens is set).
		prompt := len(s.Tokens) - s.ResponseLength
		assert.LessOrEqual(t, prompt+budget/8, budget, "turn %d of %s", s.Metadata.Turn, s.Metadata.Agent)
	}
	assert.Positive(t, dropped)
}

// A prompt that cannot fit even alone fails the turn with ErrContextFull.
func TestMemoryBudgetTooSmall(t *testing.T) {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.Format, cfg.MaxContext = "http://in-process/v1", "test", llm.FormatText, 100
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	p, err := llm.NewPolicy(c, cfg)
	require.NoError(t, err)
	_, err = p.Act(context.Background(), &agents.Observation{Agent: "a", Role: "r", View: strings.Repeat("long view ", 20)})
	require.ErrorIs(t, err, llm.ErrContextFull)
}
