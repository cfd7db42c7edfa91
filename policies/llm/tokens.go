package llm

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/seeds"
)

// serverTokens is what a chat answer says about its tokens, read in the
// server kind's own fields.
type serverTokens struct {
	prompt, completion []int
	logprobs           []float64
	// why, when set, says why the ids cannot be trusted or are missing;
	// lpNote says why the log-probs are left out.
	why, lpNote string
	// lastNoText: llama.cpp wrote the last completion token's text as ""
	// (a control token).
	lastNoText bool
}

// vllmTokenPrefix starts a token's text under vLLM's
// return_tokens_as_token_ids: "token_id:123".
const vllmTokenPrefix = "token_id:"

// readTokens reads choice 0's token ids and log-probs, as a server of
// kind reports them, from a scanned answer. Nothing is guessed: a missing
// field stays missing, and ids that two fields report differently are
// rejected.
func readTokens(kind Kind, a *answerTokens) (t serverTokens) {
	switch {
	case kind == KindOpenAI:
		t.why = "kind openai: the server returns no token ids"
		return t
	case a.scanErr != nil:
		t.why = "cannot read the token ids: " + a.scanErr.Error()
		return t
	case a.choices == 0:
		t.why = "the answer has no choices"
		return t
	}
	ch := &a.choice
	// The ids the log-prob entries name: llama.cpp's "id", vLLM's
	// "token_id:N" texts.
	var lpIDs []int
	lpIDsOK := ch.logprobs && len(ch.entries) > 0
	if ch.logprobs {
		t.logprobs = make([]float64, len(ch.entries))
		lpIDs = make([]int, 0, len(ch.entries))
		for i, e := range ch.entries {
			t.logprobs[i] = e.logprob
			switch {
			case kind == KindLlamaCpp && e.hasID:
				lpIDs = append(lpIDs, e.id)
			case kind == KindVLLM && e.hasText:
				lpIDs = append(lpIDs, e.textID)
			default:
				lpIDsOK = false
			}
		}
	}
	switch kind {
	case KindVLLM:
		t.prompt, t.completion = a.prompt, ch.tokenIDs
		if t.prompt == nil {
			t.prompt = ch.promptIDs
		}
		switch {
		case t.completion == nil && lpIDsOK:
			t.completion = lpIDs
		case t.completion != nil && lpIDsOK && !slices.Equal(t.completion, lpIDs):
			t.why = "vllm: token_ids and the log-prob tokens name different ids"
			return t
		}
	case KindSGLang:
		t.prompt, t.completion = ch.promptIDs, ch.tokenIDs
		if t.prompt == nil {
			t.prompt = a.prompt
		}
	case KindLlamaCpp:
		if lpIDsOK {
			t.completion = lpIDs
			t.lastNoText = ch.entries[len(ch.entries)-1].noText
		}
	}
	t.checkLogProbs(ch.logprobs)
	return t
}

// checkLogProbs keeps the log-probs only when there is exactly one finite,
// non-positive value per completion token.
func (t *serverTokens) checkLogProbs(present bool) {
	drop := func(why string) { t.logprobs, t.lpNote = nil, why }
	switch {
	case !present:
		drop("the answer has no log-probs")
		return
	case len(t.logprobs) != len(t.completion):
		drop(fmt.Sprintf("%d log-probs for %d completion tokens", len(t.logprobs), len(t.completion)))
		return
	}
	for i, lp := range t.logprobs {
		switch {
		case math.IsNaN(lp) || math.IsInf(lp, 0):
			drop(fmt.Sprintf("log-prob %d is %v", i, lp))
			return
		case lp > 0 && lp <= 1e-6:
			t.logprobs[i] = 0 // rounding in the server's arithmetic
		case lp > 0:
			drop(fmt.Sprintf("log-prob %d is %v, above 0", i, lp))
			return
		}
	}
}

// noPromptIDs is why a sample is text-only when the server gave the
// completion's ids but not the prompt's.
const noPromptIDs = "the answer has no prompt token ids (is the server recent enough to know the fields troupe asks for?)"

// assemble returns the sample's tokens, or nil and why there are none. A
// sample needs at least one prompt and one response token.
func (t *serverTokens) assemble() (*agents.Tokens, string) {
	switch {
	case t.why != "":
		return nil, t.why
	case len(t.completion) == 0:
		return nil, "the answer has no completion token ids (is the server recent enough to know the fields troupe asks for?)"
	case len(t.prompt) == 0:
		return nil, noPromptIDs
	}
	return &agents.Tokens{Prompt: t.prompt, Response: t.completion, LogProbs: t.logprobs}, ""
}

// llamaPromptIDs asks a llama.cpp server for the prompt token ids of the
// chat request body it was sent: /apply-template renders the body exactly
// as the chat endpoint does (the same request parser and template), and
// /tokenize with add_special and parse_special tokenizes the text as the
// chat endpoint does. want, when positive, is the chat answer's
// usage.prompt_tokens: ids of another length are rejected. It returns the
// retries taken.
func (c *Client) llamaPromptIDs(ctx context.Context, chatBody []byte, jitter uint64, want int) ([]int, int, error) {
	prompt, r1, err := c.llamaApplyTemplate(ctx, chatBody, seeds.Mix(jitter, 1))
	if err != nil {
		return nil, r1, err
	}
	ids, r2, err := c.llamaTokenize(ctx, prompt, true, seeds.Mix(jitter, 2))
	switch {
	case err != nil:
		return nil, r1 + r2, err
	case want > 0 && len(ids) != want:
		return nil, r1 + r2, fmt.Errorf("/tokenize gave %d prompt tokens where the chat answer counted %d", len(ids), want)
	}
	return ids, r1 + r2, nil
}

// llamaResponseIDs returns the completion ids whose text is the sample's
// response: all of them, less the last when it is the end-of-generation
// token. llama.cpp stops for one of two reasons, both with finish_reason
// "stop" (or "tool_calls" when it parsed a call): an end-of-generation token, which it samples, returns among the
// completion's ids and writes as "" (it never writes control tokens' text
// into an answer), or a stop string, which ends in text: so a completion
// that stopped on a token written as "" stopped on an end-of-generation
// token. A completion cut at max_tokens ("length") keeps every id.
func llamaResponseIDs(ids []int, finish string, lastNoText bool) []int {
	if (finish == "stop" || finish == "tool_calls") && lastNoText && len(ids) > 0 {
		return ids[:len(ids)-1]
	}
	return ids
}

// llamaDetokenize returns llama.cpp's text of ids: POST /detokenize, which
// writes every token's text, special tokens included. It returns the
// retries taken.
func (c *Client) llamaDetokenize(ctx context.Context, ids []int, jitter uint64) (string, int, error) {
	if len(ids) == 0 {
		return "", 0, nil
	}
	body := append(make([]byte, 0, 12+11*len(ids)), `{"tokens":`...)
	body = append(appendInts(body, ids), '}')
	var text string
	n, err := c.llamaPost(ctx, "/detokenize", body, jitter, func(b []byte) error {
		content, err := readStringKey(b, "content")
		if err != nil || content == nil {
			return fmt.Errorf("%w: the /detokenize answer has no content string", ErrMalformed)
		}
		text = *content
		return nil
	})
	return text, n, err
}
