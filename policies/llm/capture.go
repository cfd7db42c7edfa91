package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// ErrBadRequest marks a chat request, sent to a capture proxy by an agent
// harness, that cannot be forwarded: not a JSON object, no messages, a
// streamed or multi-choice request, a field of the wrong type. A proxy
// answers it with 400 and the error's text.
var ErrBadRequest = errors.New("bad chat request")

// Capture is one chat completion that an agent harness asked for, as
// Client.Forward forwarded it to the model server, and what was captured
// of it: the server's own token ids and log-probs, validated on ingest.
//
// A capture is trainable when Tokens is set: its prompt ids are the
// server's (vllm and sglang return them; for llamacpp they are its
// /apply-template then /tokenize of the very body forwarded, as for the
// Policy), its response ids and log-probs are the server's, and their
// counts agree with the answer's usage. Otherwise EvalOnly says why, and the
// capture is fit for evaluation only: its text is known, its tokens are
// not, and nothing is re-tokenised to make up for them.
type Capture struct {
	// Status is the server's HTTP status; Answer its body, unchanged: what
	// the harness gets back. A non-2xx answer that was not worth retrying
	// (a 400 for a request the server refused) is relayed as it came,
	// with nothing captured.
	Status int
	Answer []byte
	// Sent is the body forwarded: the harness's, with the fields the
	// client sets (Forward's doc lists them).
	Sent []byte
	// Messages is the request's chat as text, the sample's prompt:
	// content parts joined, an assistant's tool calls written as JSON
	// after its content, a tool result's content as given.
	Messages []protocol.ChatMessage
	// Content, ToolCalls, Finish and Usage are choice 0's message, its
	// finish reason and the answer's token counts.
	Content   string
	ToolCalls []openai.ToolCall
	Finish    string
	Usage     openai.Usage
	// Tokens are the prompt ids, response ids and log-probs, one per
	// response token; nil for an evaluation-only capture.
	Tokens   *agents.Tokens
	EvalOnly string
	// Response is what the model wrote, the sample's response: for
	// llamacpp with ids, the server's /detokenize of the response ids less
	// a trailing end-of-generation token (EndToken); otherwise the
	// content, or the tool calls as JSON when the content is empty.
	// ResponseSource is ResponseDetokenized, ResponseContent or
	// ResponseToolCall; ResponseError says why a detokenisation failed.
	Response       string
	ResponseSource string
	ResponseError  string
	// EndToken: the last response id is an end-of-generation token that
	// the server writes as no text, left out of Response.
	EndToken bool
	// Retries counts the HTTP retries of the call and its follow-ups.
	Retries int
}

// Trainable reports whether the capture has the server's token ids.
func (c *Capture) Trainable() bool { return c.Tokens != nil }

// ForwardOptions are a capture proxy's say in a forwarded request.
type ForwardOptions struct {
	// Seed is sent as the request's seed when the harness sent none, so
	// that a replayed episode asks the same; nil sends none.
	Seed *int
	// Config, when set, is the model and sampling the request is sent
	// with in place of the client's (its Model, sampling fields and
	// Extra): a capture proxy that serves several roles from one server,
	// each with its own model, shares the client's connections and bound
	// on requests in flight. Make it from the client's Config; its Kind
	// must be the client's, or Forward refuses it with ErrBadConfig.
	Config *Config
}

// Forward forwards a chat completion request body of an agent harness to
// the client's server, as a capture proxy does (OpenEnv RFC 006), and
// captures the server's token ids and log-probs. The body must be a JSON
// chat completion request with at least one message, not streamed and with
// one choice (n absent or 1); anything else is refused with ErrBadRequest,
// before the server is asked.
//
// The forwarded body is the harness's, with these fields set by the
// client: the kind's fields that make the server return token ids and
// log-probs (the Policy's: see the package doc), the configured sampling
// fields and Config.Extra (a seat's sampling settings win over the
// harness's, so that what the trainer asked for is what was sampled),
// Config.Model in place of the harness's model, and opts.Seed when the
// harness sent no seed; opts.Config's model and sampling replace the
// client's when given. Keys are written in sorted order.
//
// The call has the client's bound, timeout and retries. A 2xx answer that
// is not a completion with a choice is retried, as for a Policy; a non-2xx
// answer that is not worth retrying, or the last of those that were
// retried in vain, is returned in Capture.Status and Answer for the proxy
// to relay, with a nil error. The error is
// ErrBadRequest's, or a *CallError for a server that could not be reached
// or kept failing, or the context's.
//
// What is captured is validated on ingest, never trusted for being well
// formed: the prompt and response ids must be present, their counts must
// equal the answer's usage.prompt_tokens and usage.completion_tokens, and
// there must be one finite, non-positive log-prob per response token. A
// capture that fails any of these is evaluation-only, and EvalOnly says
// which.
func (c *Client) Forward(ctx context.Context, body []byte, opts ForwardOptions) (*Capture, error) {
	req, err := c.forwardBody(body, opts)
	if err != nil {
		return nil, err
	}
	out := &Capture{Sent: req.body, Messages: req.messages}
	jitter := seeds.Mix(c.cfg.Seed, req.hash)
	var raw []byte
	var ans forwardAnswer
	var failed *statusError // the last error answer
	retries, err := c.do(ctx, "POST "+c.chatURL, jitter, nil, func(ctx context.Context, st *callState) error {
		b, err := c.postJSON(ctx, st, c.chatURL, req.body)
		var se *statusError
		if errors.As(err, &se) && !retryable(se.code) {
			out.Status, out.Answer = se.code, []byte(se.body)
			return nil
		}
		failed = se
		if err != nil {
			return err
		}
		ans = forwardAnswer{}
		if err := json.Unmarshal(b, &ans); err != nil {
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if len(ans.Choices) == 0 {
			return ErrEmptyChoices
		}
		out.Status, raw = st.status, b
		return nil
	})
	out.Retries = retries
	if failed != nil && errors.Is(err, ErrGaveUp) {
		// The server kept answering with an error: relay its last answer,
		// which says more to the harness than that the proxy gave up.
		out.Status, out.Answer = failed.code, []byte(failed.body)
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return out, nil // a refusal, relayed
	}
	out.Answer = slices.Clone(raw)
	ch := &ans.Choices[0]
	out.Content, out.ToolCalls, out.Finish, out.Usage = ch.Message.Content, ch.Message.ToolCalls, ch.FinishReason, ans.Usage
	scanned := scanAnswer(raw)
	ids := readTokens(c.cfg.Kind, &scanned)
	n, err := c.llamaPrompt(ctx, &ids, req.body, jitter, out.Usage.PromptTokens)
	out.Retries += n
	if err != nil {
		return nil, err
	}
	out.Tokens, out.EvalOnly = ids.ingest(out.Usage, ans.usageSeen)
	out.Response, out.ResponseSource = out.Content, ResponseContent
	if out.Content == "" && len(out.ToolCalls) > 0 {
		out.Response, out.ResponseSource = toolCallsJSON(out.ToolCalls), ResponseToolCall
	}
	if c.cfg.Kind == KindLlamaCpp && out.Tokens != nil {
		text, why, n, err := c.llamaResponse(ctx, out.Tokens, out.Finish, ids.lastNoText, jitter)
		out.Retries += n
		switch {
		case err != nil:
			return nil, err
		case why != "":
			out.ResponseError = why
		default:
			out.Response, out.ResponseSource = text, ResponseDetokenized
		}
		out.EndToken = len(llamaResponseIDs(out.Tokens.Response, out.Finish, ids.lastNoText)) < len(out.Tokens.Response)
	}
	return out, nil
}

// llamaPrompt completes the token ids of a llama.cpp answer with its
// prompt's: the chat answer has the completion's ids (in its log-probs) but
// not the prompt's, so the server is asked to render the very body sent
// (/apply-template) and tokenize it (/tokenize). When that fails, ids.why
// says why; the error is the context's only. It does nothing for other
// kinds, or ids that are unusable already. jitter is the chat call's.
func (c *Client) llamaPrompt(ctx context.Context, ids *serverTokens, sent []byte, jitter uint64, want int) (int, error) {
	if c.cfg.Kind != KindLlamaCpp || ids.why != "" || len(ids.completion) == 0 || ids.prompt != nil {
		return 0, nil
	}
	if !c.cfg.Tokenize {
		ids.why = "llamacpp: tokenize is off, so the prompt token ids are unknown"
		return 0, nil
	}
	prompt, n, err := c.llamaPromptIDs(ctx, sent, seeds.Mix(jitter, 1), want)
	switch {
	case err != nil && ctx.Err() != nil:
		return n, err
	case err != nil:
		ids.why = "llamacpp: prompt token ids: " + err.Error()
	default:
		ids.prompt = prompt
	}
	return n, nil
}

// llamaResponse returns a llama.cpp completion's response text: the
// server's /detokenize of the response ids, less a trailing
// end-of-generation token (llamaResponseIDs). When that fails, why says
// so; the error is the context's only. jitter is the chat call's.
func (c *Client) llamaResponse(ctx context.Context, tk *agents.Tokens, finish string, lastNoText bool, jitter uint64) (text, why string, retries int, err error) {
	text, retries, err = c.llamaDetokenize(ctx, llamaResponseIDs(tk.Response, finish, lastNoText), seeds.Mix(jitter, 2))
	switch {
	case err != nil && ctx.Err() != nil:
		return "", "", retries, err
	case err != nil:
		return "", "llamacpp: /detokenize: " + err.Error(), retries, nil
	}
	return text, "", retries, nil
}

// Detokenize returns the server's text of ids: llama.cpp's POST
// /detokenize, which writes every token's text, special tokens included.
// Only a llamacpp client can; other kinds return ErrBadConfig.
func (c *Client) Detokenize(ctx context.Context, ids []int) (string, error) {
	if c.cfg.Kind != KindLlamaCpp {
		return "", fmt.Errorf("%w: kind %s has no /detokenize", ErrBadConfig, c.cfg.Kind)
	}
	text, _, err := c.llamaDetokenize(ctx, ids, seeds.Mix(c.cfg.Seed, uint64(len(ids))))
	return text, err
}

// ingest returns the capture's tokens after checking them against the
// answer's usage and the log-probs (RFC 006's lesson: a well-formed
// payload proves nothing), or nil and why they cannot be trained on.
func (t *serverTokens) ingest(u openai.Usage, usageSeen bool) (*agents.Tokens, string) {
	tk, why := t.assemble()
	switch {
	case tk == nil:
		return nil, why
	case !usageSeen:
		return nil, "the answer has no usage, so the token counts cannot be checked"
	case len(tk.Prompt) != u.PromptTokens:
		return nil, fmt.Sprintf("%d prompt token ids where usage.prompt_tokens is %d", len(tk.Prompt), u.PromptTokens)
	case len(tk.Response) != u.CompletionTokens:
		return nil, fmt.Sprintf("%d response token ids where usage.completion_tokens is %d", len(tk.Response), u.CompletionTokens)
	case tk.LogProbs == nil:
		return nil, "log-probs: " + t.lpNote
	}
	return tk, ""
}

// forwardAnswer is what Forward reads of a chat answer besides its token
// fields.
type forwardAnswer struct {
	Choices []struct {
		Message struct {
			Content   string            `json:"content"`
			ToolCalls []openai.ToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage     openai.Usage `json:"usage"`
	usageSeen bool
}

func (a *forwardAnswer) UnmarshalJSON(b []byte) error {
	type plain forwardAnswer
	var w struct {
		plain
		Usage *openai.Usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*a = forwardAnswer(w.plain)
	if w.Usage != nil {
		a.Usage, a.usageSeen = *w.Usage, true
	}
	return nil
}

// toolCallsJSON writes tool calls as the Policy writes its response of
// one: {"name": ..., "arguments": ...}, a list for several.
func toolCallsJSON(calls []openai.ToolCall) string {
	out := make([]json.RawMessage, len(calls))
	for i, c := range calls {
		args := json.RawMessage(c.Function.Arguments)
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Function.Arguments)
		}
		out[i], _ = json.Marshal(struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}{c.Function.Name, args})
	}
	if len(out) == 1 {
		return string(out[0])
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// forwardRequest is a harness's request, ready to forward.
type forwardRequest struct {
	body     []byte
	messages []protocol.ChatMessage
	hash     uint64
}

// forwardBody checks a harness's chat request and returns the body to
// forward, with the client's fields set.
func (c *Client) forwardBody(body []byte, opts ForwardOptions) (*forwardRequest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	cfg := &c.cfg
	if opts.Config != nil {
		if opts.Config.Kind != c.cfg.Kind {
			return nil, fmt.Errorf("%w: a forwarded request's config is of kind %s, its client's of kind %s", ErrBadConfig, opts.Config.Kind, c.cfg.Kind)
		}
		cfg = opts.Config
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("null")
		}
		return nil, bad("the body is not a JSON object: %v", err)
	}
	if v, ok := fields["stream"]; ok {
		var s bool
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, bad("stream: want a boolean, got %s", v)
		}
		if s {
			return nil, bad("stream true: Forward captures whole completions; send stream false (a seat streams the whole answer to its harness itself)")
		}
	}
	delete(fields, "stream_options") // meaningless without stream
	if v, ok := fields["n"]; ok && string(v) != "null" {
		var n int
		if err := json.Unmarshal(v, &n); err != nil || n != 1 {
			return nil, bad("n %s: a seat's endpoint asks for one choice; leave n out or send 1", v)
		}
	}
	msgs, err := chatMessages(fields["messages"])
	if err != nil {
		return nil, bad("%v", err)
	}
	if _, ok := fields["seed"]; (!ok || string(fields["seed"]) == "null") && opts.Seed != nil {
		fields["seed"] = strconv.AppendInt(nil, int64(*opts.Seed), 10)
	}
	// The server's model is the seat's to name: a harness names its own
	// (gpt-4o, say), which means nothing to the server troupe trains.
	fields["model"], _ = json.Marshal(cfg.Model)
	// The client's fields: sampling, the kind's token fields, Extra.
	var own map[string]json.RawMessage
	if err := json.Unmarshal(append(append([]byte{'{'}, bodyFields(cfg)...), '}'), &own); err != nil {
		return nil, fmt.Errorf("%w: the client's own body fields: %w", ErrBadConfig, err)
	}
	maps.Copy(fields, own)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(fields)) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(fields[k])
	}
	b.WriteByte('}')
	return &forwardRequest{body: b.Bytes(), messages: msgs, hash: fnv64(b.Bytes())}, nil
}

// fnv64 is the FNV-1a hash of b: the request's share of its retries'
// jitter seed.
func fnv64(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// chatMessages reads a request's messages as text: a content that is a
// string, or a list of parts whose text parts are joined; an assistant's
// tool calls are written after its content, one JSON object a line.
func chatMessages(raw json.RawMessage) ([]protocol.ChatMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("messages is required")
	}
	var wire []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, fmt.Errorf("messages: %v", err)
	}
	if len(wire) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	out := make([]protocol.ChatMessage, len(wire))
	for i, m := range wire {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d] has no role", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %v", i, err)
		}
		var b strings.Builder
		b.WriteString(text)
		for _, tc := range m.ToolCalls {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(toolCallsJSON([]openai.ToolCall{{Function: openai.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}}}))
		}
		out[i] = protocol.ChatMessage{Role: m.Role, Content: b.String()}
	}
	return out, nil
}

// contentText reads a message content: a string, null, or a list of parts
// ({"type": "text", "text": ...}; other parts are refused, since a seat's
// samples are text).
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or a list of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d is of type %q: only text parts are forwarded", i, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}
