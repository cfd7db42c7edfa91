package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// tokenRequest is one answer asked of llama.cpp token in, token out: the
// chat is rendered by the server's template, its prompt ids extend prev's
// where the rendering allows, and POST /completion generates from the ids.
type tokenRequest struct {
	model string
	chat  []protocol.ChatMessage
	prev  *agents.Tokens // the previous prompt and answer this chat extends; nil: none
	// prevChat is prev's prompt as a chat, prevReply the text of its
	// answer less a trailing end-of-generation token.
	prevChat  []protocol.ChatMessage
	prevReply string
	seed      int
	schema    json.RawMessage // FormatJSON's schema; nil for free text
	// chatFields are the policy's chat body fields (bodyFields), sent to
	// /apply-template for what reaches the template (Extra's
	// chat_template_kwargs); fields the /completion body's (completionFields).
	// On vLLM and SGLang (remoteTurn): chatFields are Extra's chat-only
	// fields, sent with the rendering of a chat; fields the
	// /v1/completions body's (vLLM) or /generate's top-level ones
	// (SGLang), sampling SGLang's sampling_params (remoteTokenFields).
	chatFields, fields []byte
	sampling           []byte
	maxTokens          int // Config.MaxTokens; 0: the server's default
	budget             int // Config.MaxContext; 0: none
	reserve            int // the room the prompt must leave for the answer under budget
}

// errOverBudget: the prompt's exact ids leave less than the reserve in the
// context budget; the policy leaves older turns out and asks again.
var errOverBudget = errors.New("over the context budget")

// completionFields are the fields of a /completion body: the policy's
// sampling and Extra fields, less max_tokens (each request sets n_predict),
// with the log-probs of the sampled tokens (n_probs 1: the fewest
// alternatives) and their ids.
func completionFields(cfg *Config) []byte {
	c := *cfg
	c.MaxTokens = nil
	return encodeFields(&c, []field{
		{"n_probs", json.RawMessage("1")}, {"return_tokens", json.RawMessage("true")}, {"cache_prompt", json.RawMessage("true")},
	})
}

// llamaCompletion is the part of a /completion answer troupe reads.
type llamaCompletion struct {
	Content         string      `json:"content"`
	Tokens          []int       `json:"tokens"`
	StopType        string      `json:"stop_type"`
	TokensEvaluated int         `json:"tokens_evaluated"`
	Truncated       bool        `json:"truncated"`
	Probs           []llamaProb `json:"completion_probabilities"`
}

// llamaProb is the part of a /completion log-prob entry troupe reads.
type llamaProb struct {
	ID      int     `json:"id"`
	LogProb float64 `json:"logprob"`
}

// tokenTurn asks for one answer token in, token out. It returns the
// completion (its tokens: the prompt ids sent, the sampled ids and their
// log-probs) and, when the prompt does not extend req.prev although asked
// to, why. It fails with errOverBudget (wrapped) when the prompt leaves
// less than the reserve in the budget.
func (c *Client) tokenTurn(ctx context.Context, req *tokenRequest) (*completion, string, error) {
	if remoteKind(c.cfg.Kind) {
		return c.remoteTurn(ctx, req)
	}
	jitter := seeds.Mix(c.cfg.Seed, uint64(req.seed))
	text, ids, why, retries, err := c.llamaTurnPrompt(ctx, req, jitter)
	if err != nil {
		return nil, "", err
	}
	nPredict, err := req.room(len(ids))
	if err != nil {
		return nil, why, err
	}
	cbody := make([]byte, 0, 64+11*len(ids)+len(req.schema)+len(req.fields))
	cbody = append(cbody, `{"prompt":`...)
	cbody = appendInts(cbody, ids)
	cbody = append(cbody, `,"seed":`...)
	cbody = strconv.AppendInt(cbody, int64(req.seed), 10)
	if nPredict > 0 {
		cbody = append(cbody, `,"n_predict":`...)
		cbody = strconv.AppendInt(cbody, int64(nPredict), 10)
	}
	if req.schema != nil {
		cbody = append(cbody, `,"json_schema":`...)
		cbody = append(cbody, req.schema...)
	}
	cbody = append(appendFields(cbody, req.fields), '}')
	var a llamaCompletion
	n, err := c.llamaPost(ctx, "/completion", cbody, jitter, func(b []byte) error {
		a = llamaCompletion{}
		if err := readLlamaCompletion(b, &a); err != nil {
			return fmt.Errorf("%w: /completion: %w", ErrMalformed, err)
		}
		return nil
	})
	retries += n
	if err != nil {
		return nil, why, err
	}
	out := &completion{content: a.Content, finish: "stop", retries: retries}
	if a.StopType == "limit" {
		out.finish = string(openai.FinishReasonLength)
	}
	out.usage = openai.Usage{PromptTokens: a.TokensEvaluated, CompletionTokens: len(a.Tokens), TotalTokens: a.TokensEvaluated + len(a.Tokens)}
	t := &out.ids
	t.prompt, t.completion = ids, a.Tokens
	t.lastNoText = a.StopType == "eos"
	switch {
	case a.Truncated:
		t.why = "llamacpp: /completion truncated the prompt (it does not fit the server's context)"
	case a.TokensEvaluated != len(ids):
		t.why = fmt.Sprintf("llamacpp: /completion evaluated %d prompt tokens where %d were sent", a.TokensEvaluated, len(ids))
	}
	present := len(a.Probs) > 0 || len(a.Tokens) == 0
	if present {
		t.logprobs = make([]float64, len(a.Probs))
		for i, p := range a.Probs {
			t.logprobs[i] = p.LogProb
			if i < len(a.Tokens) && p.ID != a.Tokens[i] && t.why == "" {
				t.why = fmt.Sprintf("llamacpp: /completion's tokens and log-probs name different ids at %d", i)
			}
		}
	}
	t.checkLogProbs(present)
	out.tokens, out.textOnly = t.assemble()
	if out.tokens != nil {
		rids := llamaResponseIDs(out.tokens.Response, out.finish, t.lastNoText)
		decoded, n, err := c.llamaDetokenize(ctx, rids, seeds.Mix(jitter, 2))
		out.retries += n
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, why, err
		case err != nil:
			out.decodeErr = "llamacpp: /detokenize: " + err.Error()
		default:
			out.decoded = &decoded
			// Kept for the next turn, whose chat extends this one.
			c.renders.keep(&rendering{model: req.model, fields: req.chatFields, chat: req.chat, text: text,
				response: out.tokens.Response, decoded: decoded, dropped: len(rids) < len(out.tokens.Response)})
		}
	}
	return out, why, nil
}

// llamaTurnPrompt returns the server's rendering of req's chat and its
// prompt ids (llamaPromptTokens), with why they do not extend req.prev's
// when asked to, and the retries taken.
func (c *Client) llamaTurnPrompt(ctx context.Context, req *tokenRequest, jitter uint64) (text string, ids []int, why string, retries int, err error) {
	text, n, err := c.llamaRender(ctx, req.model, req.chat, req.chatFields, seeds.Mix(jitter, 1))
	retries += n
	if err != nil {
		return "", nil, "", retries, err
	}
	var prevText string
	var kept *rendering // the previous turn's rendering, when the client kept it
	if req.prev != nil && req.prevChat != nil {
		if kept = c.renders.take(req.model, req.chatFields, req.prevChat); kept != nil {
			prevText = kept.text
		} else {
			prevText, n, err = c.llamaRender(ctx, req.model, req.prevChat, req.chatFields, seeds.Mix(jitter, 4))
			retries += n
			if err != nil {
				return "", nil, "", retries, err
			}
		}
	}
	ids, why, n, err = c.llamaPromptTokens(ctx, text, prevText, req.prevReply, req.prev, kept, seeds.Mix(jitter, 3))
	return text, ids, why, retries + n, err
}

// llamaPost posts body to the llama.cpp endpoint path (one call of the
// client: its bound, timeout and retries) and hands the 2xx answer to
// read. It returns the retries taken.
func (c *Client) llamaPost(ctx context.Context, path string, body []byte, jitter uint64, read func([]byte) error) (int, error) {
	url := c.root + path
	return c.do(ctx, "POST "+url, jitter, nil, func(ctx context.Context, st *callState) error {
		b, err := c.postJSON(ctx, st, url, body)
		if err != nil {
			if se, ok := errors.AsType[*statusError](err); ok && c.cfg.TokenIn && (se.code == http.StatusNotFound || se.code == http.StatusMethodNotAllowed) {
				// Token-in is sglang's default: say how to do without
				// it where a router does not forward the endpoint.
				return fmt.Errorf("%w (token in, token out needs %s; a server or router without it: --llm-token-in=false)", err, path)
			}
			return err
		}
		return read(b)
	})
}

// llamaPromptTokens returns the prompt ids of text, the server's rendering
// of a chat. When prev is set (the previous prompt and the answer to it,
// whose chat this one extends), prevText is the rendering of prev's chat
// and prevReply the answer's text, and text begins with them, the ids are
// prev's, exactly as they were sent and sampled, followed by the server's
// tokenization of the rest of text (the "delta": the template's end of the
// answer, unless the model sampled it, the new user message, the assistant
// header). When the model ended its answer on an end-of-generation token
// that the template does not write (Qwen's <|endoftext|> where its
// template writes <|im_end|>), that token stays, as sampled, and the
// template's end of turn follows it. Otherwise text is tokenized whole, and
// why says why the ids start afresh.
//
// kept, when set, is the previous turn's rendering as the client kept it
// (tokencache.go), which may know the text of the answer's ids.
func (c *Client) llamaPromptTokens(ctx context.Context, text, prevText, prevReply string, prev *agents.Tokens, kept *rendering, jitter uint64) (ids []int, why string, retries int, err error) {
	if prev != nil && prevText != "" {
		cut := -1
		if head := prevText + prevReply; strings.HasPrefix(text, head) {
			cut = len(head)
			// The answer's whole text, its end token's included: the
			// template's end of turn when the model sampled that.
			all, known := c.renders.allText(kept, prev.Response)
			if !known {
				var n int
				all, n, err = c.llamaDetokenize(ctx, prev.Response, seeds.Mix(jitter, 1))
				retries += n
				if err != nil {
					return nil, "", retries, err
				}
				c.renders.learn(kept, prev.Response, all)
			}
			if whole := prevText + all; len(all) > len(prevReply) && strings.HasPrefix(text, whole) {
				cut = len(whole)
			}
		}
		if cut >= 0 {
			delta, n, err := c.llamaTokenize(ctx, text[cut:], false, seeds.Mix(jitter, 4))
			retries += n
			if err != nil {
				return nil, "", retries, err
			}
			ids := make([]int, 0, len(prev.Prompt)+len(prev.Response)+len(delta))
			return append(append(append(ids, prev.Prompt...), prev.Response...), delta...), "", retries, nil
		}
		why = "the template's rendering of the chat does not begin with the previous prompt and answer"
	}
	ids, n, err := c.llamaTokenize(ctx, text, true, seeds.Mix(jitter, 5))
	return ids, why, retries + n, err
}

// llamaRender returns the server's rendering of chat (POST /apply-template
// of a chat body with the policy's fields, so that Extra's
// chat_template_kwargs reach the template).
func (c *Client) llamaRender(ctx context.Context, model string, chat []protocol.ChatMessage, fields []byte, jitter uint64) (string, int, error) {
	body := appendChatBody(make([]byte, 0, chatBodySize(model, chat, fields)), model, chat, fields)
	return c.llamaApplyTemplate(ctx, body, jitter)
}

// llamaCount returns the number of prompt tokens of chat, as the server
// renders and tokenizes it whole (remoteCount on vLLM and SGLang).
func (c *Client) llamaCount(ctx context.Context, model string, chat []protocol.ChatMessage, fields []byte, seed int) (int, error) {
	if remoteKind(c.cfg.Kind) {
		return c.remoteCount(ctx, model, chat, fields, seed)
	}
	jitter := seeds.Mix(c.cfg.Seed, uint64(seed), 7)
	text, _, err := c.llamaRender(ctx, model, chat, fields, jitter)
	if err != nil {
		return 0, err
	}
	ids, _, err := c.llamaTokenize(ctx, text, true, seeds.Mix(jitter, 1))
	return len(ids), err
}

// llamaApplyTemplate returns the server's rendering of a chat body:
// POST /apply-template, the chat endpoint's own parser and template.
func (c *Client) llamaApplyTemplate(ctx context.Context, chatBody []byte, jitter uint64) (string, int, error) {
	var prompt string
	n, err := c.llamaPost(ctx, "/apply-template", chatBody, jitter, func(b []byte) error {
		p, err := readStringKey(b, "prompt")
		if err != nil || p == nil {
			return fmt.Errorf("%w: the /apply-template answer has no prompt string", ErrMalformed)
		}
		prompt = *p
		return nil
	})
	return prompt, n, err
}

// llamaTokenize returns the server's token ids of text: POST /tokenize
// with parse_special (special tokens' text is read as those tokens, as
// the chat endpoint reads a rendered template), and add_special as asked
// (a whole prompt gets the BOS the chat endpoint adds; a continuation
// none).
func (c *Client) llamaTokenize(ctx context.Context, text string, addSpecial bool, jitter uint64) ([]int, int, error) {
	// {content, add_special, parse_special}, as json.Marshal writes it but
	// for the string's escapes (protocol.AppendString's).
	body := make([]byte, 0, len(text)+len(text)/16+64)
	body = append(body, `{"content":`...)
	body = protocol.AppendString(body, text)
	body = append(body, `,"add_special":`...)
	body = strconv.AppendBool(body, addSpecial)
	body = append(body, `,"parse_special":true}`...)
	return c.postTokens(ctx, c.root+"/tokenize", "/tokenize", body, jitter)
}

// extendsTokens reports whether prompt begins with prev's prompt and
// response ids: the check that a chat server's own prompt ids (vllm,
// sglang, llama.cpp's chat) continue the previous turn's.
func extendsTokens(prompt []int, prev *agents.Tokens) bool {
	n := len(prev.Prompt)
	return len(prompt) >= n+len(prev.Response) && slices.Equal(prompt[:n], prev.Prompt) && slices.Equal(prompt[n:n+len(prev.Response)], prev.Response)
}
