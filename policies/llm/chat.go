package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	openai "github.com/sashabaranov/go-openai"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/seeds"
)

// field is one request body field troupe adds to go-openai's JSON.
type field struct {
	name  string
	value json.RawMessage
}

// vendorFields returns the body fields that make a server of kind return
// token ids and per-token log-probs (see the package doc for the sources).
func vendorFields(kind Kind) []field {
	t := json.RawMessage("true")
	switch kind {
	case KindVLLM:
		return []field{{"logprobs", t}, {"return_token_ids", t}, {"return_tokens_as_token_ids", t}}
	case KindSGLang:
		return []field{{"logprobs", t}, {"return_token_ids", t}, {"return_prompt_token_ids", t}}
	case KindLlamaCpp:
		// n_probs, and so the log-probs, follow top_logprobs in llama.cpp's
		// chat endpoint (default 20): ask for the fewest alternatives.
		return []field{{"logprobs", t}, {"top_logprobs", json.RawMessage("1")}}
	}
	return nil
}

// samplingFields returns slime's sampling fields under the names the
// server kind knows them by. Config.Validate has refused the values a kind
// cannot honour, so a field left out here is one whose value the server
// follows anyway.
func samplingFields(cfg *Config) []field {
	var fs []field
	boolean := func(b bool) json.RawMessage { return strconv.AppendBool(nil, b) }
	vllm, sglang := cfg.Kind == KindVLLM, cfg.Kind == KindSGLang
	if len(cfg.StopTokenIDs) > 0 && (vllm || sglang) {
		b, _ := json.Marshal(cfg.StopTokenIDs)
		fs = append(fs, field{"stop_token_ids", b})
	}
	if b := cfg.SkipSpecialTokens; b != nil && (vllm || sglang) {
		fs = append(fs, field{"skip_special_tokens", boolean(*b)})
	}
	if b := cfg.SpacesBetweenSpecialTokens; b != nil && vllm {
		fs = append(fs, field{"spaces_between_special_tokens", boolean(*b)})
	}
	if b := cfg.NoStopTrim; b != nil {
		switch cfg.Kind {
		case KindSGLang:
			fs = append(fs, field{"no_stop_trim", boolean(*b)})
		case KindVLLM:
			// vLLM's name for it: keep the stop string (or the end token's
			// text) in the output.
			fs = append(fs, field{"include_stop_str_in_output", boolean(*b)})
		}
	}
	if p := value(cfg.RepetitionPenalty); p > 0 {
		v := strconv.AppendFloat(nil, p, 'g', -1, 64)
		switch cfg.Kind {
		case KindVLLM, KindSGLang:
			fs = append(fs, field{"repetition_penalty", v})
		case KindLlamaCpp:
			fs = append(fs, field{"repeat_penalty", v})
		}
	}
	if n := value(cfg.MinTokens); n > 0 && (vllm || sglang) {
		fs = append(fs, field{"min_tokens", strconv.AppendInt(nil, int64(n), 10)})
	}
	return fs
}

// bodyFields pre-encodes the fields troupe adds to every chat request of a
// policy: sampling, then the kind's vendor fields, then cfg.Extra, a later
// field replacing an earlier one of the same name. The result is spliced
// into go-openai's JSON, which never sets these names itself.
func bodyFields(cfg *Config) []byte { return encodeFields(cfg, vendorFields(cfg.Kind)) }

// encodeFields is bodyFields with the given vendor fields.
func encodeFields(cfg *Config, vendor []field) []byte {
	num := func(v float64) json.RawMessage { return strconv.AppendFloat(nil, v, 'g', -1, 64) }
	var fs []field
	if cfg.Temperature != nil {
		fs = append(fs, field{"temperature", num(*cfg.Temperature)})
	}
	if p := value(cfg.TopP); p > 0 {
		fs = append(fs, field{"top_p", num(p)})
	}
	switch k := value(cfg.TopK); {
	case k > 0:
		fs = append(fs, field{"top_k", strconv.AppendInt(nil, int64(k), 10)})
	case k == -1 && cfg.Kind == KindLlamaCpp:
		// -1 is slime's "no top-k", which vLLM and SGLang do by default;
		// llama.cpp's default is 40, and 0 turns it off. slime's sampling
		// has no min-p either, and llama.cpp's default min_p of 0.05
		// would truncate the distribution the trainer assumes the tokens
		// were drawn from: turn it off too (Extra may set it again).
		fs = append(fs, field{"top_k", json.RawMessage("0")}, field{"min_p", json.RawMessage("0")})
	}
	if n := value(cfg.MaxTokens); n > 0 {
		fs = append(fs, field{"max_tokens", strconv.AppendInt(nil, int64(n), 10)})
	}
	if len(cfg.Stop) > 0 {
		b, _ := json.Marshal(cfg.Stop)
		fs = append(fs, field{"stop", b})
	}
	fs = append(fs, samplingFields(cfg)...)
	fs = append(fs, vendor...)
	for _, k := range slices.Sorted(maps.Keys(cfg.Extra)) {
		fs = slices.DeleteFunc(fs, func(f field) bool { return f.name == k })
		fs = append(fs, field{k, cfg.Extra[k]})
	}
	var b []byte
	for i, f := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, f.name)
		b = append(b, ':')
		b = append(b, f.value...)
	}
	return b
}

// chatRequest is one chat completion to ask for.
type chatRequest struct {
	model    string
	messages []openai.ChatCompletionMessage
	seed     int
	schema   json.RawMessage // the answer's JSON schema; nil for free text
	tool     string          // FormatTool: the function the model must call
	fields   []byte          // bodyFields
}

// completion is what troupe reads from a chat answer.
type completion struct {
	content   string
	toolCalls []openai.ToolCall
	finish    string
	usage     openai.Usage
	ids       serverTokens
	// tokens is nil when the server gave no usable token ids; textOnly
	// then says why.
	tokens   *agents.Tokens
	textOnly string
	retries  int // HTTP retries, the follow-up calls' included
	// decoded is the text of the response's token ids, when the server
	// decoded them for troupe (llama.cpp's /detokenize); nil otherwise.
	decoded *string
	// decodeErr says why a llama.cpp completion with token ids has no
	// decoded text.
	decodeErr string
}

// chat asks for one completion, retrying failed attempts, and reads the
// server's token ids and log-probs.
func (c *Client) chat(ctx context.Context, req *chatRequest) (*completion, error) {
	seed := req.seed
	oreq := openai.ChatCompletionRequest{Model: req.model, Messages: req.messages, Seed: &seed}
	switch {
	case req.tool != "":
		oreq.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: req.tool, Description: "Take your action.", Strict: true, Parameters: req.schema,
		}}}
		oreq.ToolChoice = openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: req.tool}}
		// One call, the move: llama.cpp's grammar then allows exactly one.
		oreq.ParallelToolCalls = false
		if c.cfg.Kind == KindLlamaCpp {
			// llama.cpp reads tool_choice only as a string: the
			// function-forcing object falls back to "auto", under which
			// the tool-call grammar is lazy and the model may answer in
			// prose. "required", with the one tool, forces the call.
			oreq.ToolChoice = "required"
		}
	case req.schema != nil:
		oreq.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "answer", Schema: req.schema, Strict: true},
		}
	}
	jitter := seeds.Mix(c.cfg.Seed, uint64(req.seed))
	var out *completion
	var sent []byte
	retries, err := c.do(ctx, "POST "+c.chatURL, jitter, req, func(ctx context.Context, st *callState) error {
		resp, err := c.oa.CreateChatCompletion(ctx, oreq)
		if err != nil {
			if st.raw != nil {
				return fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			return err
		}
		if len(resp.Choices) == 0 {
			return ErrEmptyChoices
		}
		ch := resp.Choices[0]
		out = &completion{
			content: ch.Message.Content, toolCalls: ch.Message.ToolCalls, finish: string(ch.FinishReason), usage: resp.Usage,
			ids: readTokens(c.cfg.Kind, &st.tokens),
		}
		sent = st.sent
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.retries = retries
	n, err := c.llamaPrompt(ctx, &out.ids, sent, jitter, out.usage.PromptTokens)
	out.retries += n
	if err != nil {
		return nil, err
	}
	out.tokens, out.textOnly = out.ids.assemble()
	if c.cfg.Kind == KindLlamaCpp && out.tokens != nil {
		// The response is the text of the trained tokens, as the server
		// decodes them, not the chat parser's content.
		var text string
		text, out.decodeErr, n, err = c.llamaResponse(ctx, out.tokens, out.finish, out.ids.lastNoText, jitter)
		out.retries += n
		switch {
		case err != nil:
			return nil, err
		case out.decodeErr == "":
			out.decoded = &text
		}
	}
	return out, nil
}
