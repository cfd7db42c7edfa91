package seats

import (
	"context"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
)

// Notes a seat's turns carry (agents.Action.Notes, and so the samples'
// metadata), beside the llm_ notes a Policy writes too (llm_finish_reason,
// llm_prompt_tokens, llm_completion_tokens, llm_response_source,
// llm_text_only, llm_response_error).
const (
	// NoteCalls: the model calls the harness made through the seat's
	// endpoint for this turn.
	NoteCalls = "seat_calls"
	// NoteMerged: how many of them, the last ones, the sample merges
	// (1 for a sample of the last call alone).
	NoteMerged = "seat_merged"
	// NoteEvalOnly: true when the turn's sample is for evaluation only
	// (text, no token ids); llm_text_only says why.
	NoteEvalOnly = "seat_eval_only"
	// NoteEarlier: the calls of the turn the sample does not merge, in
	// order, each with its prompt and response ids, log-probs, response
	// text and, for one that is evaluation-only, why: kept, not trained.
	NoteEarlier = "seat_earlier_calls"
	// NoteTool: the tool the move came through (act, over MCP or as a
	// function tool).
	NoteTool = "seat_tool"
)

// earlierCall is a call of a turn that its sample does not merge, as
// NoteEarlier keeps it.
type earlierCall struct {
	PromptIDs   []int     `json:"prompt_ids,omitempty"`
	ResponseIDs []int     `json:"response_ids,omitempty"`
	LogProbs    []float64 `json:"log_probs,omitempty"`
	Response    string    `json:"response"`
	EvalOnly    string    `json:"eval_only,omitempty"`
}

// extends reports whether next's prompt ids start with prev's prompt and
// response ids: next continues prev's conversation, token for token (the
// tool result and the chat template's markup between them are the new
// prompt tokens).
func extends(prev, next *llm.Capture) bool {
	if !prev.Trainable() || !next.Trainable() {
		return false
	}
	p, r, q := prev.Tokens.Prompt, prev.Tokens.Response, next.Tokens.Prompt
	return len(q) > len(p)+len(r) && slices.Equal(q[:len(p)], p) && slices.Equal(q[len(p):len(p)+len(r)], r)
}

// turnGeneration makes the Generation of a turn from the model calls the
// harness made for it, in order, and the notes that say how.
//
// A turn's sample is built around its last call, the one whose answer led
// to the move. When the calls before it are trainable and each one's
// prompt ids extend the previous call's prompt and response ids (an agent
// loop that appends the tool's result and asks again), they are merged
// into one multi-turn sample, as slime's own agent adapters do: the first
// call's prompt ids, then each call's response ids (trained: loss mask 1,
// the server's log-probs) with the tokens between them (the tool results
// and template markup: loss mask 0, log-prob 0.0). The merged response
// text is the server's own text of those ids (llama.cpp's /detokenize), so
// merging needs a client that can detokenize; for other kinds the sample is
// the last call alone. The calls that are not merged are kept in the notes
// (NoteEarlier), ids included, and not trained.
//
// A turn whose last call is evaluation-only gets a text-only sample (its
// chat and text, no tokens), whatever the earlier calls were, and a turn
// with no call at all one of the move alone. text is the move.
func turnGeneration(ctx context.Context, c *llm.Client, calls []*llm.Capture, text string) (*agents.Generation, map[string]any, error) {
	return buildTurn(ctx, c, calls, text, c.Config().Kind == llm.KindLlamaCpp)
}

// buildTurn is turnGeneration, merging prefix-extending calls when merge
// is set.
func buildTurn(ctx context.Context, c *llm.Client, calls []*llm.Capture, text string, merge bool) (*agents.Generation, map[string]any, error) {
	notes := map[string]any{NoteCalls: len(calls)}
	if len(calls) == 0 {
		notes[NoteEvalOnly] = true
		notes["llm_text_only"] = "the harness made no model call through the seat's endpoint before this move"
		return nil, notes, nil
	}
	last := calls[len(calls)-1]
	first := len(calls) - 1
	if last.Trainable() && merge {
		for first > 0 && extends(calls[first-1], calls[first]) {
			first--
		}
	}
	if first > 0 {
		earlier := make([]earlierCall, first)
		for i, k := range calls[:first] {
			earlier[i] = earlierCall{Response: k.Response, EvalOnly: k.EvalOnly}
			if k.Trainable() {
				earlier[i].PromptIDs, earlier[i].ResponseIDs, earlier[i].LogProbs = k.Tokens.Prompt, k.Tokens.Response, k.Tokens.LogProbs
			}
		}
		notes[NoteEarlier] = earlier
	}
	run := calls[first:]
	notes[NoteMerged] = len(run)
	notes["llm_finish_reason"] = last.Finish
	notes["llm_response_source"] = last.ResponseSource
	if last.ResponseError != "" {
		notes["llm_response_error"] = last.ResponseError
	}
	g := &agents.Generation{Prompt: &protocol.Prompt{Messages: run[0].Messages}}
	if !last.Trainable() {
		notes[NoteEvalOnly] = true
		notes["llm_text_only"] = last.EvalOnly
		notes["llm_prompt_tokens"], notes["llm_completion_tokens"] = last.Usage.PromptTokens, last.Usage.CompletionTokens
		if last.Response != text {
			g.Completion = last.Response
		}
		return g, notes, nil
	}
	head := run[0].Tokens.Prompt
	tk := &agents.Tokens{Prompt: head}
	if len(run) == 1 {
		tk.Response, tk.LogProbs = last.Tokens.Response, last.Tokens.LogProbs
		g.Completion = last.Response
	} else {
		// The response region: everything after the first call's prompt,
		// up to the end of the last call's response.
		region := append(slices.Clone(last.Tokens.Prompt[len(head):]), last.Tokens.Response...)
		tk.Response = region
		tk.LossMask = make([]int, len(region))
		tk.LogProbs = make([]float64, len(region))
		for _, k := range run {
			at := len(k.Tokens.Prompt) - len(head)
			for i, lp := range k.Tokens.LogProbs {
				tk.LossMask[at+i], tk.LogProbs[at+i] = 1, lp
			}
		}
		ids := region
		if last.EndToken {
			ids = region[:len(region)-1]
		}
		resp, err := c.Detokenize(ctx, ids)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, err
			}
			// The merged text is unknown: the sample is the last call
			// alone, the others kept in the notes.
			g, notes, err2 := buildTurn(ctx, c, calls, text, false)
			if err2 == nil {
				notes["llm_response_error"] = "merging the turn's calls: " + err.Error()
			}
			return g, notes, err2
		}
		g.Completion = resp
		notes["llm_response_source"] = llm.ResponseDetokenized
	}
	g.Tokens = tk
	notes["llm_prompt_tokens"], notes["llm_completion_tokens"] = len(tk.Prompt), len(tk.Response)
	if g.Completion == text {
		g.Completion = ""
	}
	return g, notes, nil
}
