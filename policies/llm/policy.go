package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
)

// ToolName is the function the tool format makes the model call.
const ToolName = "act"

// Policy is an agents.Policy that asks an LLM: it renders the observation
// into a chat, asks for an answer of the role's Answer shape, parses it
// strictly, re-asks invalid answers up to Config.InvalidRetries times, and
// returns the action with the token ids and log-probs the server reported.
//
// A Policy holds no per-episode state: it is safe for concurrent use by any
// number of agents and episodes, and given the same observation it sends
// the same requests (the request seed derives from the turn's seed), so a
// replayed episode asks exactly what the original asked.
type Policy struct {
	client *Client
	fields []byte
	cfg    Config // the policy's configuration, read per turn and for fields made per request

	// Memory (see the package doc): Config.NoMemory and MaxContext.
	// tokenIn: llama.cpp, vLLM or SGLang, memory, tokenize, not tools:
	// generation from token ids (tokenin.go, tokenin_remote.go).
	tokenIn bool
	cfields []byte       // llama.cpp: completionFields, when tokenIn
	remote  remoteFields // vLLM, SGLang: remoteTokenFields, when tokenIn

	scenario *env.Info
	system   map[string]string // role -> fixed system prompt; "" for any role
	render   map[string]Renderer
	answers  map[string]Answer
	prefix   map[string]string // role -> scenario part of the default system prompt
}

// Option customises a Policy.
type Option func(*Policy)

// WithScenario makes the default system prompts describe the scenario:
// its name, summary and rules, and the role's own documentation.
func WithScenario(info *env.Info) Option { return func(p *Policy) { p.scenario = info } }

// WithSystemPrompt sets the system prompt of role; role "" sets it for
// every role without its own.
func WithSystemPrompt(role, prompt string) Option {
	return func(p *Policy) { p.system[role] = prompt }
}

// WithRenderer sets the renderer of role; role "" sets it for every role
// without its own. The default is Transcript.
func WithRenderer(role string, r Renderer) Option {
	return func(p *Policy) { p.render[role] = r }
}

// WithAnswer sets the answer shape of role; role "" sets it for every
// role without its own. The default is ActionAnswer.
func WithAnswer(role string, a Answer) Option {
	return func(p *Policy) { p.answers[role] = a }
}

// NewPolicy returns a policy that asks client. cfg supplies the model, the
// sampling parameters and the answer settings; its endpoint settings
// (BaseURL, APIKey, Kind, Tokenize, TokenIn, Endpoint, RoutingHeader, timeouts,
// retries, MaxInFlight, Seed) are the client's, and ignored here. Several
// policies (one model per role, say) may share a client, and so its bound
// on requests in flight.
func NewPolicy(client *Client, cfg Config, opts ...Option) (*Policy, error) {
	cfg.BaseURL, cfg.Kind, cfg.Endpoint, cfg.TokenIn = client.cfg.BaseURL, client.cfg.Kind, client.cfg.Endpoint, client.cfg.TokenIn
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{
		client: client, fields: bodyFields(&cfg), cfg: cfg,
		tokenIn: (cfg.Kind == KindLlamaCpp && cfg.Tokenize || remoteKind(cfg.Kind) && client.cfg.TokenIn) && !cfg.NoMemory && cfg.Format != FormatTool,
		system:  map[string]string{}, render: map[string]Renderer{"": Transcript()}, answers: map[string]Answer{"": ActionAnswer()},
	}
	for _, o := range opts {
		o(p)
	}
	switch {
	case p.tokenIn && remoteKind(cfg.Kind):
		var err error
		if p.remote, err = remoteTokenFields(&cfg); err != nil {
			return nil, err
		}
	case p.tokenIn:
		p.cfields = completionFields(&cfg)
	}
	for role, r := range p.render {
		if r == nil {
			return nil, fmt.Errorf("%w: nil renderer for role %q", ErrBadConfig, role)
		}
	}
	for role, a := range p.answers {
		if a == nil {
			return nil, fmt.Errorf("%w: nil answer for role %q", ErrBadConfig, role)
		}
	}
	if p.scenario != nil {
		p.prefix = make(map[string]string, len(p.scenario.Roles))
		for _, r := range p.scenario.Roles {
			p.prefix[r.Name] = scenarioPrompt(p.scenario, r.Name)
		}
	}
	return p, nil
}

// New returns a policy with a client of its own, for cfg's endpoint; close
// it with p.Client().Close() when done.
func New(cfg Config, opts ...Option) (*Policy, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	p, err := NewPolicy(c, cfg, opts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	return p, nil
}

// Client returns the policy's client.
func (p *Policy) Client() *Client { return p.client }

// Remembers implements agents.Remembering: the conversation of an agent's
// turn is rebuilt from its history (Observation.History), and a custom
// Renderer may read it too, so the engine keeps it even under NoMemory.
func (p *Policy) Remembers() bool { return true }

// Act implements agents.Policy. It fails only when the server cannot be
// reached or keeps failing (the error is a *CallError) or ctx ends; an
// answer that stays invalid after the re-asks is returned with
// Action.Invalid set, and the run's env.InvalidRule judges it. Action.Notes,
// which the engine writes into the sample's metadata, are all named
// "llm_...": the model, the attempts and the reasons answers were rejected,
// the finish reason, the server's token counts, HTTP retries, and, for a
// text-only sample, why the server's token ids could not be used.
func (p *Policy) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	ctx = withRoutingKey(ctx, obs.Session) // sent when the client has a routing header
	t := p.newTurn(obs)
	var last *completion // the last attempt's answer
	var lastText string
	var lastErr error
	for attempt := 0; ; attempt++ {
		seed := p.requestSeed(obs, attempt)
		var comp *completion
		var fits bool
		var err error
		if p.tokenIn {
			comp, fits, err = p.askTokenIn(ctx, &t, attempt, seed)
		} else {
			comp, fits, err = p.askChat(ctx, &t, attempt, seed)
		}
		if !fits {
			// A re-ask that no longer fits: the answer stays invalid.
			return p.action(&t, last, lastText, lastErr, attempt), nil
		}
		if err != nil {
			return agents.Action{}, err
		}
		t.retries += comp.retries
		text, reply, perr := p.parse(t.ans, obs, comp)
		if perr != nil {
			t.rejected = append(t.rejected, perr.Error())
		}
		if perr == nil || attempt >= p.cfg.InvalidRetries {
			return p.action(&t, comp, text, perr, attempt+1), nil
		}
		last, lastText, lastErr = comp, text, perr
		p.reask(&t, comp, reply, perr, attempt)
	}
}

// actTurn is what one Act call carries from one attempt to the next.
type actTurn struct {
	obs          *agents.Observation
	ans          Answer
	instructions string
	chat         []protocol.ChatMessage
	mem          memory
	// prev is the prompt and answer whose tokens this chat's extend: the
	// previous turn's, then a rejected attempt's; prevChat and prevReply
	// are that prompt's chat and the answer's text.
	prev      *agents.Tokens
	prevChat  []protocol.ChatMessage
	prevReply string
	req       chatRequest
	rejected  []string // why each rejected answer was
	rebuilt   string   // why the prompt's ids do not extend the previous turn's
	retries   int      // HTTP retries, all attempts together
}

// newTurn starts obs's turn: its chat, and the request asking for an
// answer in the policy's format.
func (p *Policy) newTurn(obs *agents.Observation) actTurn {
	t := actTurn{obs: obs, ans: p.lookupAnswer(obs.Role)}
	t.instructions = p.instructions(t.ans, obs)
	t.chat, t.mem = p.conversation(obs, t.ans, 0)
	if t.mem.extends {
		t.extendPreviousTurn()
	}
	t.req = chatRequest{model: p.cfg.Model, fields: p.fields}
	switch p.cfg.Format {
	case FormatJSON:
		t.req.schema = t.ans.Schema(obs)
	case FormatTool:
		t.req.schema, t.req.tool = t.ans.Schema(obs), ToolName
	}
	return t
}

// extendPreviousTurn makes the agent's previous turn the prompt and answer
// whose tokens the chat's extend.
func (t *actTurn) extendPreviousTurn() {
	last := &t.obs.History[len(t.obs.History)-1]
	t.prev, t.prevChat, t.prevReply = last.Action.Generation.Tokens, last.Action.Generation.Prompt.Messages, replyOf(last)
}

// fail names the agent and turn in an error of the turn's own (not a
// *CallError, which the client names).
func (t *actTurn) fail(err error) error {
	return fmt.Errorf("agent %q turn %d: %w", t.obs.Agent, t.obs.Turn, err)
}

// askTokenIn asks for attempt's answer token in, token out. A first
// attempt over the context budget drops the oldest turns of the agent's
// memory until it fits; a re-ask over it is not sent and fits is false.
func (p *Policy) askTokenIn(ctx context.Context, t *actTurn, attempt, seed int) (comp *completion, fits bool, err error) {
	comp, why, err := p.askTokens(ctx, t.req.schema, t.chat, t.prev, t.prevChat, t.prevReply, seed)
	if errors.Is(err, errOverBudget) {
		if attempt > 0 {
			return nil, false, nil
		}
		t.chat, t.mem, err = p.refit(t.obs, t.ans, func(c []protocol.ChatMessage) (int, error) {
			fields := p.fields
			if remoteKind(p.cfg.Kind) {
				fields = p.remote.render
			}
			return p.client.llamaCount(ctx, t.req.model, c, fields, seed)
		})
		if err != nil {
			return nil, true, t.fail(err)
		}
		t.prev = nil
		comp, why, err = p.askTokens(ctx, t.req.schema, t.chat, nil, nil, "", seed)
		if errors.Is(err, errOverBudget) {
			return nil, true, t.fail(fmt.Errorf("%w: %w", ErrContextFull, err))
		}
	}
	if err != nil {
		return nil, true, err
	}
	if why != "" && t.rebuilt == "" {
		t.rebuilt = why
	}
	return comp, true, nil
}

// askChat asks for attempt's answer through the chat endpoint, within the
// context budget as fitChat bounds it; a re-ask over the budget is not
// sent and fits is false.
func (p *Policy) askChat(ctx context.Context, t *actTurn, attempt, seed int) (comp *completion, fits bool, err error) {
	if p.cfg.MaxContext > 0 {
		if fits, err := p.fitChat(t, attempt); !fits || err != nil {
			return nil, fits, err
		}
	}
	t.req.messages, t.req.seed = toOpenAI(t.chat), seed
	if comp, err = p.client.chat(ctx, &t.req); err != nil {
		return nil, true, err
	}
	if t.prev != nil && comp.tokens != nil && !extendsTokens(comp.tokens.Prompt, t.prev) && t.rebuilt == "" {
		t.rebuilt = "the server's prompt ids do not begin with the previous prompt and answer (the chat was tokenized anew)"
	}
	return comp, true, nil
}

// fitChat bounds the tokens of attempt's prompt (the server tokenizes it)
// and sets the request's max_tokens to the room the budget leaves. A first
// attempt over the budget drops the oldest turns of the agent's memory
// until it fits, or fails without memory; a re-ask over it does not fit.
func (p *Policy) fitChat(t *actTurn, attempt int) (fits bool, err error) {
	n := 0
	if t.prev != nil && attempt == 0 {
		n = len(t.obs.History[len(t.obs.History)-1].Action.Generation.Prompt.Messages) + 1
	} else if t.prev != nil {
		n = len(t.chat) - 2
	}
	b := tokenBound(t.chat, t.prev, n)
	if b+p.reserve() > p.cfg.MaxContext {
		if attempt > 0 {
			return false, nil
		}
		if !t.mem.on {
			return true, t.fail(fmt.Errorf("%w: the prompt's bound of %d tokens leaves less than %d of the budget of %d", ErrContextFull, b, p.reserve(), p.cfg.MaxContext))
		}
		if t.chat, t.mem, err = p.refit(t.obs, t.ans, boundOf); err != nil {
			return true, t.fail(err)
		}
		t.prev, b = nil, tokenBound(t.chat, nil, 0)
	}
	t.req.fields = p.fieldsWithMaxTokens(p.cfg.MaxContext - b)
	return true, nil
}

// reask prepares the chat of the attempt after a rejected one. With
// feedback the rejected reply and why it was rejected follow the prompt,
// which the next prompt's tokens then extend; without, the same chat is
// asked again, extending the previous turn's tokens as the first attempt's
// did.
func (p *Policy) reask(t *actTurn, comp *completion, reply string, perr error, attempt int) {
	if !p.cfg.Feedback {
		t.prev = nil
		if t.mem.extends && attempt == 0 {
			t.extendPreviousTurn()
		}
		return
	}
	if comp.decoded != nil {
		// What the model wrote, as its tokens read: the next prompt
		// extends them.
		reply = *comp.decoded
	}
	if reply != "" {
		t.prevChat, t.prevReply = t.chat, reply
		t.chat = append(t.chat[:len(t.chat):len(t.chat)], protocol.ChatMessage{Role: RoleAssistant, Content: reply})
		t.prev = comp.tokens
	} else {
		t.prev = nil
	}
	t.chat = append(t.chat, protocol.ChatMessage{Role: RoleUser, Content: "Your answer was rejected: " + strings.TrimPrefix(perr.Error(), ErrInvalidAnswer.Error()+": ") + ". " + t.instructions})
}

// action is the turn's answer: comp's, read as text (perr: why it is
// invalid), after attempts attempts, with its notes.
func (p *Policy) action(t *actTurn, comp *completion, text string, perr error, attempts int) agents.Action {
	g := &agents.Generation{Tokens: comp.tokens, Prompt: &protocol.Prompt{Messages: t.chat}}
	a := agents.Action{Text: text, Generation: g, Notes: p.notes(comp, attempts, t.retries, t.rejected)}
	resp, source := p.response(comp)
	a.Notes["llm_response_source"] = source
	if t.mem.on {
		a.Notes["llm_memory_turns"] = t.mem.turns
		if t.mem.dropped > 0 {
			a.Notes["llm_memory_dropped"] = t.mem.dropped
		}
		if t.rebuilt != "" {
			a.Notes["llm_memory_rebuilt"] = t.rebuilt
		}
	}
	if resp != text {
		g.Completion = resp
	}
	if perr != nil {
		a.Invalid = perr.Error()
	}
	return a
}

// askTokens asks for one answer token in, token out.
func (p *Policy) askTokens(ctx context.Context, schema json.RawMessage, chat []protocol.ChatMessage, prev *agents.Tokens, prevChat []protocol.ChatMessage, prevReply string, seed int) (*completion, string, error) {
	treq := &tokenRequest{
		model: p.cfg.Model, chat: chat, prev: prev, prevChat: prevChat, prevReply: prevReply, seed: seed, schema: schema,
		chatFields: p.fields, fields: p.cfields, maxTokens: max(value(p.cfg.MaxTokens), 0),
		budget: p.cfg.MaxContext, reserve: p.reserve(),
	}
	if remoteKind(p.cfg.Kind) {
		treq.chatFields, treq.fields, treq.sampling = p.remote.render, p.remote.generate, p.remote.sampling
	}
	return p.client.tokenTurn(ctx, treq)
}

// fieldsWithMaxTokens returns the policy's body fields with max_tokens at
// most n: the room the context budget leaves.
func (p *Policy) fieldsWithMaxTokens(n int) []byte {
	if m := value(p.cfg.MaxTokens); m > 0 && m <= n {
		return p.fields
	}
	c := p.cfg
	c.MaxTokens = &n
	return bodyFields(&c)
}

func (p *Policy) notes(comp *completion, attempts, retries int, rejected []string) map[string]any {
	n := map[string]any{
		"llm_model":             p.cfg.Model,
		"llm_attempts":          attempts,
		"llm_finish_reason":     comp.finish,
		"llm_prompt_tokens":     comp.usage.PromptTokens,
		"llm_completion_tokens": comp.usage.CompletionTokens,
	}
	if p.cfg.Endpoint != "" {
		n["llm_endpoint"] = p.cfg.Endpoint
	}
	if retries > 0 {
		n["llm_retries"] = retries
	}
	if len(rejected) > 0 {
		n["llm_rejected"] = rejected
	}
	if comp.decodeErr != "" {
		n["llm_response_error"] = comp.decodeErr
	}
	switch {
	case comp.tokens == nil:
		n["llm_text_only"] = comp.textOnly
	case comp.tokens.LogProbs == nil:
		n["llm_no_logprobs"] = comp.ids.lpNote
	}
	return n
}

// parse reads the action from a completion in the policy's format. It
// returns the action text (on error: the best reading of it, or the raw
// reply), the model's reply as it should be shown back to it, and why the
// answer is invalid.
func (p *Policy) parse(ans Answer, obs *agents.Observation, comp *completion) (text, reply string, err error) {
	defer func() {
		if err != nil && comp.finish == string(openai.FinishReasonLength) {
			err = fmt.Errorf("%w (the answer was cut off at the token limit)", err)
		}
	}()
	switch p.cfg.Format {
	case FormatText:
		reply = comp.content
		text = strings.TrimSpace(reply)
		if text == "" {
			return text, reply, invalid("the answer is empty")
		}
		return text, reply, checkAction(obs, text)
	case FormatTool:
		reply = comp.content
		switch {
		case len(comp.toolCalls) == 0:
			return reply, reply, invalid("the answer calls no function; call %s", ToolName)
		case len(comp.toolCalls) > 1:
			return reply, reply, invalid("the answer makes %d function calls; make exactly one", len(comp.toolCalls))
		case comp.toolCalls[0].Function.Name != ToolName:
			return reply, comp.toolCalls[0].Function.Arguments, invalid("the answer calls %q; call %s", comp.toolCalls[0].Function.Name, ToolName)
		}
		reply = comp.toolCalls[0].Function.Arguments
	default:
		reply = comp.content
		if reply == "" && len(comp.toolCalls) > 0 {
			return "", "", invalid("the answer is a function call, not a JSON object")
		}
	}
	text, err = ans.Parse(obs, reply)
	if err != nil && text == "" {
		text = reply
	}
	return text, reply, err
}

// Where a sample's response came from (the note llm_response_source).
const (
	// ResponseDetokenized: the server's detokenization of the completion
	// token ids (llama.cpp's POST /detokenize; token in on vLLM and
	// SGLang, theirs), less a trailing end-of-generation token: exactly
	// the tokens the sample trains on, as text.
	ResponseDetokenized = "detokenize"
	// ResponseContent: the answer's message content, as the server
	// decoded it.
	ResponseContent = "content"
	// ResponseToolCall: the answer's content is empty and it calls a
	// function: the response is the call as JSON, {"name": ..,
	// "arguments": ..}, not the server's raw text of it, which it does not
	// return.
	ResponseToolCall = "tool_call"
)

// response returns what the model wrote, the sample's response, and where
// it came from.
func (p *Policy) response(comp *completion) (string, string) {
	switch {
	case comp.decoded != nil:
		return *comp.decoded, ResponseDetokenized
	case comp.content == "" && len(comp.toolCalls) > 0:
		return toolCallsJSON(comp.toolCalls), ResponseToolCall
	}
	return comp.content, ResponseContent
}

// instructions tells the model how to answer, in the policy's format.
func (p *Policy) instructions(ans Answer, obs *agents.Observation) string {
	switch p.cfg.Format {
	case FormatText:
		if obs.Legal != nil {
			return "Answer with exactly one of: " + listLegal(obs.Legal) + ", and nothing else."
		}
		return "Answer with your action only."
	case FormatTool:
		return "Answer by calling the function " + ToolName + " with arguments " + ans.Describe(obs) + "."
	}
	return "Answer with " + ans.Describe(obs) + ", and nothing else."
}

// systemPrompt returns the system prompt for obs's agent.
func (p *Policy) systemPrompt(obs *agents.Observation) string {
	if s, ok := p.system[obs.Role]; ok {
		return s
	}
	if s, ok := p.system[""]; ok {
		return s
	}
	if prefix, ok := p.prefix[obs.Role]; ok {
		return prefix + " You are the agent " + obs.Agent + "."
	}
	return "You are the agent " + obs.Agent + ", in the role " + obs.Role + "."
}

func (p *Policy) lookupRenderer(role string) Renderer {
	if r, ok := p.render[role]; ok {
		return r
	}
	return p.render[""]
}

func (p *Policy) lookupAnswer(role string) Answer {
	if a, ok := p.answers[role]; ok {
		return a
	}
	return p.answers[""]
}

// withInstructions appends the answer instructions to the chat's last
// user message, or as a new user message.
func withInstructions(chat []protocol.ChatMessage, instructions string) []protocol.ChatMessage {
	if n := len(chat); n > 0 && chat[n-1].Role == RoleUser {
		chat[n-1].Content += "\n\n" + instructions
		return chat
	}
	return append(chat, protocol.ChatMessage{Role: RoleUser, Content: instructions})
}

func toOpenAI(chat []protocol.ChatMessage) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, len(chat))
	for i, m := range chat {
		out[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

// seedStream separates the request seeds from every other use of a turn's
// seed.
const seedStream = 0x5eed11a

// requestSeed is the seed sent for attempt (from 0) of obs's turn: with a
// sampling seed, SampledRequestSeed of it, the agent and its turn number;
// without, requestSeed of the turn's seed.
func (p *Policy) requestSeed(obs *agents.Observation, attempt int) int {
	if p.cfg.SamplingSeed != nil {
		return SampledRequestSeed(*p.cfg.SamplingSeed, obs.Agent, obs.Turn, attempt)
	}
	return requestSeed(obs.Seed, attempt)
}

// requestSeed is the sampling seed sent for attempt of the turn whose seed
// is turnSeed: replaying the turn asks with the same seeds. It fits in 31
// bits, which every server accepts.
func requestSeed(turnSeed uint64, attempt int) int {
	return int(seeds.Mix(turnSeed, seedStream, uint64(attempt)) >> 33)
}

// SampledRequestSeed is the seed sent, under Config.SamplingSeed (slime's
// sampling_seed) s, for attempt (from 0) of turn (the agent's own turn
// number, from 0) of agent:
//
//	seeds.Mix(uint64(s), 0x5eed11a, fnv1a64(agent), uint64(turn), uint64(attempt)) >> 33
//
// It depends on nothing else (not the episode's policy seed, not the
// service's seed), so the same sampling seed sends the same seeds on any
// service, and a re-ask samples anew. It fits in 31 bits.
func SampledRequestSeed(s int64, agent string, turn, attempt int) int {
	return int(seeds.Mix(uint64(s), seedStream, fnv64([]byte(agent)), uint64(turn), uint64(attempt)) >> 33)
}
