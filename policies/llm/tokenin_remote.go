package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// Token in, token out on vLLM and SGLang (the package doc's "Memory"): the
// same rule as llama.cpp's (tokenin.go), on each server's own endpoints.
//
//   - the chat's prompt ids, as the server's chat endpoint would make
//     them: vLLM's POST /tokenize with the messages (TokenizeChatRequest,
//     add_generation_prompt), SGLang's chat endpoint asked for one token
//     with return_prompt_token_ids (SGLang has no endpoint that renders a
//     chat without generating);
//   - the text of ids: vLLM's POST /detokenize, SGLang's POST
//     /v1/detokenize with skip_special_tokens false (both keep special
//     tokens' text);
//   - the ids of text: vLLM's POST /tokenize with a prompt, SGLang's POST
//     /v1/tokenize, both without added special tokens (a continuation);
//   - generation from ids: vLLM's POST /v1/completions with the prompt as
//     a list of ids (return_token_ids, logprobs), SGLang's native POST
//     /generate with input_ids and return_logprob (its answer's
//     meta_info.output_token_logprobs holds [log-prob, id, text] per
//     sampled token, which is what slime reads).
//
// Turn k+1's ids are turn k's prompt and response ids, exactly as sent and
// sampled, then the server's tokenization of the rest of the new chat's
// text, when the text of the new chat's ids begins with the text of those
// ids (or of those ids less a last end-of-generation token the template
// does not write, which then stays, as sampled); otherwise the new chat's
// ids afresh, and the sample says why (llm_memory_rebuilt).

// The paths of the token endpoints, below the server's root URL (vLLM) or
// its /v1 base URL (SGLang).
const (
	vllmTokenize     = "/tokenize"   // vllm/entrypoints/serve/tokenize/api_router.py
	vllmDetokenize   = "/detokenize" // idem
	vllmCompletions  = "/completions"
	sglangTokenize   = "/tokenize"   // python/sglang/srt/entrypoints/openai/serving_tokenize.py: /v1/tokenize
	sglangDetokenize = "/detokenize" // idem: /v1/detokenize
	sglangGenerate   = "/generate"   // the native API, at the root
)

// chatOnlyFields are Extra's fields that reach the chat template (sent
// with the rendering of a chat), never the generation from ids, which
// has no chat.
var chatOnlyFields = []string{"chat_template", "chat_template_kwargs"}

// SGLangSamplingFields are the API fields of SGLang's SamplingParams
// (python/sglang/srt/sampling/sampling_params.py): /generate's
// sampling_params object takes these and refuses any other (the struct's
// constructor takes no other keyword). Extra's fields of these names go
// into sampling_params on the token-in path.
var SGLangSamplingFields = []string{
	"max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
	"frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
	"ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
	"custom_params", "stream_interval", "logit_bias", "sampling_seed",
}

// SGLangGenerateFields are the top-level fields of SGLang's
// GenerateReqInput (python/sglang/srt/managers/io_struct.py) that a
// text-only token-in request may send: Extra's fields of these names go
// to the top level of /generate's body. The rest of GenerateReqInput is
// for multimodal inputs, disaggregation and internals.
var SGLangGenerateFields = []string{
	"rid", "session_id", "text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
	"top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "stream", "log_metrics",
	"return_hidden_states", "return_routed_experts", "lora_path", "custom_logit_processor", "routed_dp_rank",
	"routing_key", "conversation_id", "priority", "extra_key", "no_logs", "custom_labels", "return_entropy",
	"return_prompt_token_ids", "require_reasoning", "max_thinking_tokens", "session_params", "cache_salt",
}

// remoteFields are a policy's token-in fields on vLLM or SGLang.
type remoteFields struct {
	render   []byte // with the rendering of a chat: Extra's chat-only fields
	generate []byte // vLLM: the /v1/completions body's; SGLang: /generate's top level (Extra's)
	sampling []byte // SGLang: sampling_params' fields
}

// remoteTokenFields returns the token-in fields of cfg (vLLM or SGLang):
// the policy's sampling and Extra fields, less max_tokens (each request
// sets the room the budget leaves) and Extra's chat-only fields, with the
// ids and log-probs of the sampled tokens asked for. An Extra field that
// SGLang's /generate does not take fails.
func remoteTokenFields(cfg *Config) (remoteFields, error) {
	var out remoteFields
	c := *cfg
	c.MaxTokens = nil
	c.Extra = maps.Clone(cfg.Extra)
	chat := map[string]json.RawMessage{}
	for _, k := range chatOnlyFields {
		if v, ok := c.Extra[k]; ok {
			chat[k] = v
			delete(c.Extra, k)
		}
	}
	out.render = encodeFields(&Config{Kind: c.Kind, Sampling: protocol.Sampling{Extra: chat}}, nil)
	switch c.Kind {
	case KindVLLM:
		// logprobs 1: the fewest alternatives; the sampled token's own
		// log-prob is always among them.
		out.generate = encodeFields(&c, []field{
			{"logprobs", json.RawMessage("1")}, {"return_token_ids", json.RawMessage("true")}, {"return_tokens_as_token_ids", json.RawMessage("true")},
		})
	case KindSGLang:
		top := map[string]json.RawMessage{}
		for _, k := range slices.Sorted(maps.Keys(c.Extra)) {
			switch {
			case slices.Contains(SGLangSamplingFields, k):
			case slices.Contains(SGLangGenerateFields, k):
				top[k] = c.Extra[k]
				delete(c.Extra, k)
			default:
				return out, fmt.Errorf("%w: extra field %q: SGLang's /generate takes neither a sampling parameter nor a request field of that name", ErrBadConfig, k)
			}
		}
		out.sampling = encodeFields(&c, sglangSampling(&c))
		out.generate = encodeFields(&Config{Kind: c.Kind, Sampling: protocol.Sampling{Extra: top}}, nil)
	}
	return out, nil
}

// sglangSampling renames, for SGLang's sampling_params, the fields whose
// native names differ from the chat endpoint's: encodeFields writes
// min_tokens (samplingFields) where SGLang's SamplingParams calls it
// min_new_tokens, and leaves spaces_between_special_tokens out, which the
// native API has. It returns them as vendor fields, which replace
// nothing: min_tokens is dropped by the caller's Config.
func sglangSampling(c *Config) []field {
	var fs []field
	if n := value(c.MinTokens); n > 0 {
		fs = append(fs, field{"min_new_tokens", strconv.AppendInt(nil, int64(n), 10)})
		c.MinTokens = nil
	}
	if b := c.SpacesBetweenSpecialTokens; b != nil {
		fs = append(fs, field{"spaces_between_special_tokens", strconv.AppendBool(nil, *b)})
	}
	return fs
}

// remoteTurn asks vLLM or SGLang for one answer token in, token out, as
// tokenTurn does llama.cpp.
func (c *Client) remoteTurn(ctx context.Context, req *tokenRequest) (*completion, string, error) {
	jitter := seeds.Mix(c.cfg.Seed, uint64(req.seed))
	ids, why, retries, err := c.remotePromptTokens(ctx, req, jitter)
	if err != nil {
		return nil, "", err
	}
	n, err := req.room(len(ids))
	if err != nil {
		return nil, why, err
	}
	var out *completion
	var r int
	if c.cfg.Kind == KindVLLM {
		out, r, err = c.vllmGenerate(ctx, req, ids, n, jitter)
	} else {
		out, r, err = c.sglangGenerate(ctx, req, ids, n, jitter)
	}
	retries += r
	if err != nil {
		return nil, why, err
	}
	out.retries = retries
	out.tokens, out.textOnly = out.ids.assemble()
	if out.tokens != nil {
		rids := out.tokens.Response
		if out.ids.lastNoText {
			rids = rids[:len(rids)-1]
		}
		text, r, err := c.remoteDetokenize(ctx, rids, seeds.Mix(jitter, 2))
		out.retries += r
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, why, err
		case err != nil:
			out.decodeErr = string(c.cfg.Kind) + ": detokenize: " + err.Error()
		default:
			out.decoded = &text
		}
	}
	return out, why, nil
}

// room returns the most tokens the answer to a prompt of n ids may take:
// Config.MaxTokens, within what the budget leaves (0: no bound). It fails
// with errOverBudget (wrapped) when the prompt leaves less than the
// reserve.
func (req *tokenRequest) room(n int) (int, error) {
	max := req.maxTokens
	if req.budget > 0 {
		left := req.budget - n
		if left < req.reserve {
			return 0, fmt.Errorf("%w: %d prompt tokens leave %d of the budget of %d, less than the %d kept for the answer", errOverBudget, n, left, req.budget, req.reserve)
		}
		if max <= 0 || max > left {
			max = left
		}
	}
	return max, nil
}

// remotePromptTokens returns the prompt ids of req's chat: prev's ids and
// the tokenization of the rest, or the chat's ids afresh and why.
func (c *Client) remotePromptTokens(ctx context.Context, req *tokenRequest, jitter uint64) (ids []int, why string, retries int, err error) {
	fresh, retries, err := c.remoteChatIDs(ctx, req.model, req.chat, req.chatFields, seeds.Mix(jitter, 1))
	if err != nil || req.prev == nil {
		return fresh, "", retries, err
	}
	prev := req.prev
	head := append(slices.Clip(prev.Prompt), prev.Response...)
	if len(fresh) > len(head) && slices.Equal(fresh[:len(head)], head) {
		// The server's ids of the new chat begin with the previous
		// prompt and response ids as sampled: they are those ids, then
		// its tokenization of the rest, in context. Most turns end here,
		// with no text compared.
		return fresh, "", retries, nil
	}
	text, n, err := c.remoteDetokenize(ctx, fresh, seeds.Mix(jitter, 3))
	retries += n
	if err != nil {
		return nil, "", retries, err
	}
	cut := -1
	for k, ids := range [][]int{head, head[:len(head)-1]} {
		if k == 1 && len(prev.Response) == 0 {
			break
		}
		whole, n, err := c.remoteDetokenize(ctx, ids, seeds.Mix(jitter, 4, uint64(k)))
		retries += n
		if err != nil {
			return nil, "", retries, err
		}
		// The second try: the answer's last token is an end of
		// generation the template does not write (Qwen's <|endoftext|>
		// where it writes <|im_end|>): it stays, as sampled, and the
		// template's end of turn follows it.
		if strings.HasPrefix(text, whole) {
			cut = len(whole)
			break
		}
	}
	if cut < 0 {
		return fresh, "the text of the chat's prompt ids does not begin with the text of the previous prompt and answer", retries, nil
	}
	delta, n, err := c.remoteTokenize(ctx, req.model, text[cut:], seeds.Mix(jitter, 5))
	retries += n
	if err != nil {
		return nil, "", retries, err
	}
	return append(head, delta...), "", retries, nil
}

// remoteCount returns the number of prompt tokens of chat, as the server
// renders and tokenizes it whole.
func (c *Client) remoteCount(ctx context.Context, model string, chat []protocol.ChatMessage, fields []byte, seed int) (int, error) {
	ids, _, err := c.remoteChatIDs(ctx, model, chat, fields, seeds.Mix(c.cfg.Seed, uint64(seed), 7))
	return len(ids), err
}

// remoteChatIDs returns the server's prompt ids of chat.
func (c *Client) remoteChatIDs(ctx context.Context, model string, chat []protocol.ChatMessage, fields []byte, jitter uint64) ([]int, int, error) {
	if c.cfg.Kind == KindVLLM {
		body, err := json.Marshal(struct {
			Model    string                         `json:"model"`
			Messages []openai.ChatCompletionMessage `json:"messages"`
			AddGen   bool                           `json:"add_generation_prompt"`
		}{model, toOpenAI(chat), true})
		if err != nil {
			return nil, 0, err
		}
		if body, err = spliceFields(body, fields); err != nil {
			return nil, 0, err
		}
		return c.postTokens(ctx, c.root+vllmTokenize, "tokenize", body, jitter)
	}
	// SGLang renders a chat only on its way to generating: one token,
	// greedy, whose answer carries the prompt's ids.
	body, err := json.Marshal(struct {
		Model       string                         `json:"model"`
		Messages    []openai.ChatCompletionMessage `json:"messages"`
		MaxTokens   int                            `json:"max_tokens"`
		Temperature float64                        `json:"temperature"`
		PromptIDs   bool                           `json:"return_prompt_token_ids"`
	}{model, toOpenAI(chat), 1, 0, true})
	if err != nil {
		return nil, 0, err
	}
	if body, err = spliceFields(body, fields); err != nil {
		return nil, 0, err
	}
	var ids []int
	n, err := c.llamaPost(ctx, strings.TrimPrefix(c.chatURL, c.root), body, jitter, func(b []byte) error {
		var a struct {
			Choices []struct {
				PromptTokenIDs []int `json:"prompt_token_ids"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) == 0 || len(a.Choices[0].PromptTokenIDs) == 0 {
			return fmt.Errorf("%w: the chat answer has no prompt_token_ids (is the server recent enough to know return_prompt_token_ids?)", ErrMalformed)
		}
		ids = a.Choices[0].PromptTokenIDs
		return nil
	})
	return ids, n, err
}

// appendFields appends fields to the JSON object being written in b,
// after a comma, when there are any.
func appendFields(b, fields []byte) []byte {
	if len(fields) > 0 {
		b = append(append(b, ','), fields...)
	}
	return b
}

// spliceFields splices fields, when there are any, into the JSON object
// body.
func spliceFields(body, fields []byte) ([]byte, error) {
	if len(fields) == 0 {
		return body, nil
	}
	return splice(body, fields)
}

// remoteTokenize returns the server's ids of text, no special tokens
// added (special tokens' text is read as those tokens, as both servers'
// tokenizers do).
func (c *Client) remoteTokenize(ctx context.Context, model, text string, jitter uint64) ([]int, int, error) {
	if text == "" {
		return nil, 0, nil
	}
	body, err := json.Marshal(struct {
		Model      string `json:"model"`
		Prompt     string `json:"prompt"`
		AddSpecial bool   `json:"add_special_tokens"`
	}{model, text, false})
	if err != nil {
		return nil, 0, err
	}
	url := c.root + vllmTokenize
	if c.cfg.Kind == KindSGLang {
		url = c.base() + sglangTokenize
	}
	return c.postTokens(ctx, url, "tokenize", body, jitter)
}

// postTokens posts a tokenize body and reads the answer's "tokens"; what
// names the endpoint in the error of an answer without them.
func (c *Client) postTokens(ctx context.Context, url, what string, body []byte, jitter uint64) ([]int, int, error) {
	var ids []int
	n, err := c.llamaPost(ctx, strings.TrimPrefix(url, c.root), body, jitter, func(b []byte) error {
		tokens, err := readTokensKey(b)
		if err != nil || tokens == nil {
			return fmt.Errorf("%w: the %s answer has no token list", ErrMalformed, what)
		}
		ids = tokens
		return nil
	})
	return ids, n, err
}

// remoteDetokenize returns the server's text of ids, special tokens
// written out.
func (c *Client) remoteDetokenize(ctx context.Context, ids []int, jitter uint64) (string, int, error) {
	if len(ids) == 0 {
		return "", 0, nil
	}
	// {model, tokens} (vLLM), and {model, tokens, skip_special_tokens:
	// false} (SGLang), as json.Marshal writes them but for the model
	// name's escapes (protocol.AppendString's).
	body := make([]byte, 0, 64+len(c.cfg.Model)+11*len(ids))
	body = append(body, `{"model":`...)
	body = protocol.AppendString(body, c.cfg.Model)
	body = append(body, `,"tokens":`...)
	body = appendInts(body, ids)
	if c.cfg.Kind == KindVLLM {
		return c.postText(ctx, vllmDetokenize, "prompt", append(body, '}'), jitter)
	}
	body = append(body, `,"skip_special_tokens":false}`...)
	return c.postText(ctx, strings.TrimPrefix(c.base(), c.root)+sglangDetokenize, "text", body, jitter)
}

// postText posts body to path and reads the answer's string key.
func (c *Client) postText(ctx context.Context, path, key string, body []byte, jitter uint64) (string, int, error) {
	var text string
	n, err := c.llamaPost(ctx, path, body, jitter, func(b []byte) error {
		v, present, err := readStringOrNull(b, key)
		if err != nil || !present {
			return fmt.Errorf("%w: the detokenize answer has no %s string", ErrMalformed, key)
		}
		text = v // null reads as "", as encoding/json reads it into a string
		return nil
	})
	return text, n, err
}

// base is the OpenAI base URL, without a trailing slash.
func (c *Client) base() string { return strings.TrimSuffix(c.chatURL, "/chat/completions") }

// vllmCompletion is the part of a vLLM /v1/completions answer troupe
// reads (CompletionResponse, vllm/entrypoints/openai/completion/protocol.py).
type vllmCompletion struct {
	Choices []struct {
		Text           string          `json:"text"`
		FinishReason   *string         `json:"finish_reason"`
		StopReason     json.RawMessage `json:"stop_reason"`
		TokenIDs       []int           `json:"token_ids"`
		PromptTokenIDs []int           `json:"prompt_token_ids"`
		Logprobs       *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// vllmGenerate asks vLLM's /v1/completions for an answer to the prompt
// ids, at most n tokens (0: as the context allows).
func (c *Client) vllmGenerate(ctx context.Context, req *tokenRequest, ids []int, n int, jitter uint64) (*completion, int, error) {
	b := []byte(`{"model":`)
	b = protocol.AppendString(b, req.model)
	b = append(b, `,"prompt":`...)
	b = appendInts(b, ids)
	b = append(b, `,"seed":`...)
	b = strconv.AppendInt(b, int64(req.seed), 10)
	// vLLM's default max_tokens is 16; null is the context's room.
	b = append(b, `,"max_tokens":`...)
	if n > 0 {
		b = strconv.AppendInt(b, int64(n), 10)
	} else {
		b = append(b, "null"...)
	}
	if req.schema != nil {
		b = append(b, `,"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":`...)
		b = append(b, req.schema...)
		b = append(b, `,"strict":true}}`...)
	}
	b = append(appendFields(b, req.fields), '}')
	var a vllmCompletion
	r, err := c.llamaPost(ctx, strings.TrimPrefix(c.base(), c.root)+vllmCompletions, b, jitter, func(body []byte) error {
		a = vllmCompletion{}
		if err := json.Unmarshal(body, &a); err != nil {
			return fmt.Errorf("%w: /v1/completions: %w", ErrMalformed, err)
		}
		if len(a.Choices) == 0 {
			return ErrEmptyChoices
		}
		return nil
	})
	if err != nil {
		return nil, r, err
	}
	ch := &a.Choices[0]
	out := &completion{content: ch.Text, finish: "stop"}
	if ch.FinishReason != nil {
		out.finish = *ch.FinishReason
	}
	out.usage = openai.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens, TotalTokens: a.Usage.PromptTokens + a.Usage.CompletionTokens}
	t := &out.ids
	t.prompt, t.completion = ids, ch.TokenIDs
	// vLLM ends on a token (an end of generation, stop_reason null, or
	// one of stop_token_ids, its id) or a stop string (its text): a
	// token's id is the last of token_ids, and its text is not the
	// answer's.
	stopStr := len(ch.StopReason) > 0 && ch.StopReason[0] == '"'
	t.lastNoText = out.finish == "stop" && !stopStr && len(ch.TokenIDs) > 0
	switch {
	case ch.PromptTokenIDs != nil && !slices.Equal(ch.PromptTokenIDs, ids):
		t.why = "vllm: /v1/completions answered prompt_token_ids other than the ids sent"
	case ch.TokenIDs == nil:
		t.why = "vllm: the /v1/completions answer has no token_ids (is the server recent enough to know return_token_ids?)"
	}
	present := ch.Logprobs != nil && len(ch.Logprobs.TokenLogprobs) > 0 || len(ch.TokenIDs) == 0
	if ch.Logprobs != nil {
		t.logprobs = make([]float64, len(ch.Logprobs.TokenLogprobs))
		for i, lp := range ch.Logprobs.TokenLogprobs {
			if lp == nil {
				present = false
				break
			}
			t.logprobs[i] = *lp
			if i < len(ch.Logprobs.Tokens) && i < len(ch.TokenIDs) && t.why == "" {
				id, ok := strings.CutPrefix(ch.Logprobs.Tokens[i], vllmTokenPrefix)
				if v, err := strconv.Atoi(id); !ok || err != nil || v != ch.TokenIDs[i] {
					t.why = fmt.Sprintf("vllm: /v1/completions' token_ids and log-prob tokens name different ids at %d", i)
				}
			}
		}
	}
	t.checkLogProbs(present)
	return out, r, nil
}

// sglangGenerateAnswer is the part of an SGLang /generate answer troupe
// reads: meta_info's finish_reason ({"type": "stop", "matched": id or
// text} or {"type": "length", ...}), its counts, and
// output_token_logprobs, one [log-prob, id, text] per sampled token.
type sglangGenerateAnswer struct {
	Text     string `json:"text"`
	MetaInfo struct {
		FinishReason *struct {
			Type    string          `json:"type"`
			Matched json.RawMessage `json:"matched"`
		} `json:"finish_reason"`
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// sglangGenerate asks SGLang's native /generate for an answer to the
// prompt ids, at most n tokens (0: as the context allows).
func (c *Client) sglangGenerate(ctx context.Context, req *tokenRequest, ids []int, n int, jitter uint64) (*completion, int, error) {
	b := []byte(`{"input_ids":`)
	b = appendInts(b, ids)
	b = append(b, `,"return_logprob":true,"sampling_params":{"sampling_seed":`...)
	b = strconv.AppendInt(b, int64(req.seed), 10)
	// SGLang's default max_new_tokens is 128; null is the context's room.
	b = append(b, `,"max_new_tokens":`...)
	if n > 0 {
		b = strconv.AppendInt(b, int64(n), 10)
	} else {
		b = append(b, "null"...)
	}
	if req.schema != nil {
		// SamplingParams.json_schema is the schema as a string.
		b = append(b, `,"json_schema":`...)
		b = protocol.AppendString(b, string(req.schema))
	}
	b = append(appendFields(b, req.sampling), '}')
	b = append(appendFields(b, req.fields), '}')
	var a sglangGenerateAnswer
	r, err := c.llamaPost(ctx, sglangGenerate, b, jitter, func(body []byte) error {
		a = sglangGenerateAnswer{}
		if err := json.Unmarshal(body, &a); err != nil {
			return fmt.Errorf("%w: /generate: %w", ErrMalformed, err)
		}
		return nil
	})
	if err != nil {
		return nil, r, err
	}
	m := &a.MetaInfo
	out := &completion{content: a.Text, finish: "stop"}
	out.usage = openai.Usage{PromptTokens: m.PromptTokens, CompletionTokens: m.CompletionTokens, TotalTokens: m.PromptTokens + m.CompletionTokens}
	t := &out.ids
	t.prompt = ids
	var matchedID int
	if fr := m.FinishReason; fr != nil {
		switch fr.Type {
		case "length":
			out.finish = string(openai.FinishReasonLength)
		case "stop":
			// A token (its id) ended the answer, not a stop string.
			t.lastNoText = string(fr.Matched) != "null" && json.Unmarshal(fr.Matched, &matchedID) == nil
		default:
			out.finish = fr.Type // "abort"
		}
	}
	present := m.OutputTokenLogprobs != nil
	t.completion = make([]int, 0, len(m.OutputTokenLogprobs))
	t.logprobs = make([]float64, 0, len(m.OutputTokenLogprobs))
	for i, e := range m.OutputTokenLogprobs {
		var lp *float64
		var id int
		if len(e) < 2 || json.Unmarshal(e[0], &lp) != nil || json.Unmarshal(e[1], &id) != nil {
			t.why = fmt.Sprintf("sglang: /generate's output_token_logprobs[%d] is not [log-prob, id, text]", i)
			break
		}
		t.completion = append(t.completion, id)
		if lp == nil {
			present = false
		} else {
			t.logprobs = append(t.logprobs, *lp)
		}
	}
	switch {
	case t.why != "":
	case m.OutputTokenLogprobs == nil:
		t.why = "sglang: the /generate answer has no meta_info.output_token_logprobs"
	case m.PromptTokens != len(ids):
		t.why = fmt.Sprintf("sglang: /generate counted %d prompt tokens where %d were sent", m.PromptTokens, len(ids))
	case t.lastNoText && (len(t.completion) == 0 || t.completion[len(t.completion)-1] != matchedID):
		t.lastNoText = false // the matched token is not among the answer's: nothing to leave out
	}
	t.checkLogProbs(present)
	return out, r, nil
}

// remoteKind reports whether kind generates token in, token out through
// remoteTurn.
func remoteKind(kind Kind) bool { return kind == KindVLLM || kind == KindSGLang }
