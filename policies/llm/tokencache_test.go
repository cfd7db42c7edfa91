package llm_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/trajectories"
)

// playJSONL plays episodes of sc with p and returns their samples as
// JSONL.
func playJSONL(t *testing.T, sc env.Scenario, p *llm.Policy, episodes int) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := play.Run(context.Background(), play.Config{
		Play: env.Play{Scenario: sc, Policy: env.SamePolicy(p)}, Episodes: episodes, Concurrency: episodes, Seed: 3,
	}, &trajectories.Output{Sink: trajectories.NewJSONLWriter(&buf, trajectories.Flat)})
	require.NoError(t, err)
	return buf.Bytes()
}

// The token path on llama.cpp keeps each turn's rendering, and its
// answer's text, for the next turn: the samples are byte for byte those
// of a client that asks the server again every turn, with one
// /apply-template a turn instead of two, and one /detokenize instead of
// two (but the first time an end token's text is learnt).
func TestKeptRenderingsChangeNothing(t *testing.T) {
	const rounds, episodes = 4, 2
	run := func(keep bool) ([]byte, llmtest.Stats) {
		srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp, Brain: func(r *llmtest.Request) llmtest.Reply {
			return llmtest.Reply{Text: fmt.Sprintf("said after %d messages <&> \"é\"", len(r.Messages))}
		}})
		cfg := llm.DefaultConfig()
		cfg.BaseURL, cfg.Model, cfg.Format, cfg.Kind = "http://in-process/v1", "test", llm.FormatText, llm.KindLlamaCpp
		c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
		require.NoError(t, err)
		if !keep {
			llm.ForgetRenderings(c)
		}
		p, err := llm.NewPolicy(c, cfg)
		require.NoError(t, err)
		return playJSONL(t, whisper(rounds), p, episodes), srv.Stats()
	}
	kept, keptStats := run(true)
	asked, askedStats := run(false)
	require.Equal(t, string(asked), string(kept))
	assert.NotContains(t, string(kept), "llm_memory_rebuilt")
	turns := 3 * rounds * episodes
	later := turns - 3*episodes // the turns that extend an earlier one
	assert.Equal(t, turns+later, askedStats.ApplyTemplate)
	assert.Equal(t, turns+later, askedStats.Detokenize)
	assert.Equal(t, turns, keptStats.ApplyTemplate)
	t.Logf("%d turns: /detokenize %d times (asked anew: %d)", turns, keptStats.Detokenize, askedStats.Detokenize)
	assert.LessOrEqual(t, keptStats.Detokenize, turns+episodes, "an end token's text is learnt once, save for turns asked at once")
}
