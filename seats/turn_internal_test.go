package seats

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
)

func testClient(t *testing.T, kind llm.Kind) *llm.Client {
	t.Helper()
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.Kind(kind)})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model = "http://llmtest.invalid/v1", kind, "m"
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	require.NoError(t, err)
	return c
}

// capture is a trainable capture of a call.
func capture(prompt, resp []int, lps []float64, text string, end bool) *llm.Capture {
	return &llm.Capture{
		Status: 200, Messages: []protocol.ChatMessage{{Role: "user", Content: text}},
		Tokens: &agents.Tokens{Prompt: prompt, Response: resp, LogProbs: lps}, Response: text, EndToken: end,
		ResponseSource: llm.ResponseDetokenized, Finish: "stop",
	}
}

func TestTurnGeneration(t *testing.T) {
	ctx := context.Background()
	llama := testClient(t, llm.KindLlamaCpp)
	// An agent loop: the first call's answer (a tool call) and the tool's
	// result (20, 21) are the second call's prompt, which extends the
	// first's token for token.
	c1 := capture([]int{1, 2, 3}, []int{10, 11}, []float64{-0.1, -0.2}, "call", false)
	c2 := capture([]int{1, 2, 3, 10, 11, 20, 21}, []int{30, 31}, []float64{-0.3, -0.4}, "move", true)
	unrelated := capture([]int{7, 7}, []int{8}, []float64{-1}, "other", false)
	evalOnly := &llm.Capture{Status: 200, Messages: c2.Messages, Response: "text", EvalOnly: "kind openai: the server returns no token ids"}

	t.Run("merged", func(t *testing.T) {
		g, notes, err := turnGeneration(ctx, llama, []*llm.Capture{unrelated, c1, c2}, "walk")
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3}, g.Tokens.Prompt)
		require.Equal(t, []int{10, 11, 20, 21, 30, 31}, g.Tokens.Response)
		require.Equal(t, []int{1, 1, 0, 0, 1, 1}, g.Tokens.LossMask)
		require.Equal(t, []float64{-0.1, -0.2, 0, 0, -0.3, -0.4}, g.Tokens.LogProbs)
		want, err := llama.Detokenize(ctx, []int{10, 11, 20, 21, 30}) // less the end token
		require.NoError(t, err)
		require.Equal(t, want, g.Completion)
		require.Equal(t, c1.Messages, g.Prompt.Messages, "the first merged call's chat")
		require.Equal(t, 3, notes[NoteCalls])
		require.Equal(t, 2, notes[NoteMerged])
		earlier := notes[NoteEarlier].([]earlierCall)
		require.Len(t, earlier, 1)
		require.Equal(t, []int{8}, earlier[0].ResponseIDs)

		// The sample slime gets is valid: masks and log-probs agree.
		s := protocol.Sample{Tokens: append(append([]int{}, g.Tokens.Prompt...), g.Tokens.Response...), ResponseLength: len(g.Tokens.Response),
			LossMask: g.Tokens.LossMask, RolloutLogProbs: g.Tokens.LogProbs, Status: protocol.StatusCompleted}
		require.NoError(t, s.Validate())
	})
	t.Run("one call", func(t *testing.T) {
		g, notes, err := turnGeneration(ctx, llama, []*llm.Capture{c2}, "walk")
		require.NoError(t, err)
		require.Equal(t, c2.Tokens.Prompt, g.Tokens.Prompt)
		require.Equal(t, c2.Tokens.Response, g.Tokens.Response)
		require.Nil(t, g.Tokens.LossMask)
		require.Equal(t, "move", g.Completion)
		require.Equal(t, 1, notes[NoteMerged])
		require.NotContains(t, notes, NoteEarlier)
		g, _, err = turnGeneration(ctx, llama, []*llm.Capture{c2}, "move")
		require.NoError(t, err)
		require.Empty(t, g.Completion, "the response is the move itself")
	})
	t.Run("not merged without a detokenizer", func(t *testing.T) {
		g, notes, err := turnGeneration(ctx, testClient(t, llm.KindVLLM), []*llm.Capture{c1, c2}, "walk")
		require.NoError(t, err)
		require.Equal(t, c2.Tokens.Prompt, g.Tokens.Prompt)
		require.Equal(t, 1, notes[NoteMerged])
		require.Len(t, notes[NoteEarlier], 1)
	})
	t.Run("last call evaluation-only", func(t *testing.T) {
		g, notes, err := turnGeneration(ctx, llama, []*llm.Capture{c1, evalOnly}, "walk")
		require.NoError(t, err)
		require.Nil(t, g.Tokens)
		require.Equal(t, "text", g.Completion)
		require.Equal(t, true, notes[NoteEvalOnly])
		require.Contains(t, notes["llm_text_only"], "no token ids")
		require.Len(t, notes[NoteEarlier], 1, "the trainable call before it is kept")
	})
	t.Run("no call", func(t *testing.T) {
		g, notes, err := turnGeneration(ctx, llama, nil, "walk")
		require.NoError(t, err)
		require.Nil(t, g)
		require.Equal(t, 0, notes[NoteCalls])
		require.Equal(t, true, notes[NoteEvalOnly])
	})
	t.Run("a chain broken by an evaluation-only call", func(t *testing.T) {
		_, notes, err := turnGeneration(ctx, llama, []*llm.Capture{c1, evalOnly, c2}, "walk")
		require.NoError(t, err)
		require.Equal(t, 1, notes[NoteMerged])
		require.Len(t, notes[NoteEarlier], 2)
	})
}

// FuzzMoveText: whatever arguments a harness's act call brings, moveText
// refuses them with ErrBadMove or returns the move: compact JSON for a
// JSON move, the string for a text action.
func FuzzMoveText(f *testing.F) {
	f.Add([]byte(`{"move":{"type":"walk"}}`), true)
	f.Add([]byte(`{"action":"b2"}`), false)
	f.Add([]byte(`{"move": {"type" : "propose", "take": {"book": 1}} }`), true)
	f.Add([]byte(`[1]`), false)
	f.Add([]byte(`{"action":3}`), false)
	f.Fuzz(func(t *testing.T, args []byte, structured bool) {
		s := &Seat{moveIn: "action"}
		if structured {
			s.moveIn = "move"
		}
		text, err := s.moveText(args)
		if err != nil {
			require.ErrorIs(t, err, ErrBadMove)
			return
		}
		if structured {
			require.True(t, json.Valid([]byte(text)), text)
			var b bytes.Buffer
			require.NoError(t, json.Compact(&b, []byte(text)))
			require.Equal(t, b.String(), text, "compact")
		}
	})
}
