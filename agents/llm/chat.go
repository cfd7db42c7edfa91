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

// bodyFields pre-encodes the fields troupe adds to every chat request of a
// policy: sampling, then the kind's vendor fields, then cfg.Extra, a later
// field replacing an earlier one of the same name. The result is spliced
// into go-openai's JSON, which never sets these names itself.
func bodyFields(cfg *Config) []byte {
	num := func(v float64) json.RawMessage { return strconv.AppendFloat(nil, v, 'g', -1, 64) }
	fs := []field{{"temperature", num(cfg.Temperature)}}
	if cfg.TopP > 0 {
		fs = append(fs, field{"top_p", num(cfg.TopP)})
	}
	if cfg.TopK > 0 {
		fs = append(fs, field{"top_k", strconv.AppendInt(nil, int64(cfg.TopK), 10)})
	}
	if cfg.MaxTokens > 0 {
		fs = append(fs, field{"max_tokens", strconv.AppendInt(nil, int64(cfg.MaxTokens), 10)})
	}
	if len(cfg.Stop) > 0 {
		b, _ := json.Marshal(cfg.Stop)
		fs = append(fs, field{"stop", b})
	}
	fs = append(fs, vendorFields(cfg.Kind)...)
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
	if ids := &out.ids; c.cfg.Kind == KindLlamaCpp && ids.why == "" && len(ids.completion) > 0 && ids.prompt == nil {
		// llama.cpp's chat answer has the completion's ids (in its
		// log-probs) but not the prompt's: ask the server to render and
		// tokenize the same request.
		if !c.cfg.Tokenize {
			ids.why = "llamacpp: tokenize is off, so the prompt token ids are unknown"
		} else {
			prompt, n, err := c.llamaPromptIDs(ctx, sent, seeds.Mix(jitter, 1), out.usage.PromptTokens)
			out.retries += n
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, err
			case err != nil:
				ids.why = "llamacpp: prompt token ids: " + err.Error()
			default:
				ids.prompt = prompt
			}
		}
	}
	out.tokens, out.textOnly = out.ids.assemble()
	return out, nil
}
