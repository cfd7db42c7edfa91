package llm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// TurnRenderer is a Renderer that also renders the user message of each of
// an agent's turns after its first: what it observed since its previous
// turn. A policy with memory (the default; Config.NoMemory turns it off)
// builds an agent's chat from the renderer's first turn, then for each
// later turn the model's answer as an assistant message and RenderTurn's
// text (with the answer instructions) as a user message, so that the chats
// of consecutive turns extend one conversation. A plain Renderer is asked
// for the whole chat every turn, as before memory: it may read the agent's
// history itself (Observation.History).
type TurnRenderer interface {
	Renderer
	// RenderTurn returns the user message of a turn after the agent's
	// first, from obs.Inbox and obs.View; it must not read obs.Seen.
	RenderTurn(obs *agents.Observation) string
}

// ErrContextFull: the context budget (Config.MaxContext) cannot hold the
// turn's prompt even with every earlier turn left out.
var ErrContextFull = errors.New("llm: the prompt does not fit the context budget")

// transcriptRenderer is Transcript's renderer.
type transcriptRenderer struct{}

func (transcriptRenderer) Render(obs *agents.Observation, system string) []protocol.ChatMessage {
	return transcript(obs, system)
}

// RenderTurn writes the messages delivered since the previous turn, one
// line each, then the view after a blank line.
func (transcriptRenderer) RenderTurn(obs *agents.Observation) string {
	var b strings.Builder
	for m := range obs.Inbox {
		if m > 0 {
			b.WriteByte('\n')
		}
		episode.WriteMessage(&b, &obs.Inbox[m])
	}
	if obs.View != "" {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(obs.View)
	}
	return b.String()
}

// memory is what a turn's chat holds of the agent's history.
type memory struct {
	on      bool // the chat was built from the history
	turns   int  // earlier turns of the agent in the chat
	dropped int  // its oldest turns left out for the context budget
	// extends: the chat is the previous turn's chat, its answer and the
	// new user message, so its prompt may extend that turn's tokens.
	extends bool
}

// replyOf is what the model wrote at turn t, as the conversation shows it
// back: the completion (the text of its tokens, less a trailing end of
// generation), or the action of a turn without one (a scripted move).
func replyOf(t *agents.Turn) string {
	if g := t.Action.Generation; g != nil && g.Completion != "" {
		return g.Completion
	}
	return t.Action.Text
}

// omitted starts the first user message of a conversation whose oldest
// turns were left out for the context budget.
func omitted(n int) string {
	return "[" + strconv.Itoa(n) + " earlier turns of yours are left out]\n\n"
}

// conversation returns obs's chat, with the answer instructions, and what
// it holds of the agent's history. With memory and a TurnRenderer, the
// chat of turn k is the chat turn k-1 sent (its Generation's Prompt: re-asks
// included), that turn's answer, and turn k's user message; a turn without
// a recorded chat (a scripted move) is rendered from its observation. from
// > 0 leaves out the agent's turns before it, starting afresh at turn from.
func (p *Policy) conversation(obs *agents.Observation, ans Answer, from int) ([]protocol.ChatMessage, memory) {
	r := p.lookupRenderer(obs.Role)
	tr, ok := r.(TurnRenderer)
	h := obs.History
	if p.cfg.NoMemory || !ok || len(h) == 0 {
		return withInstructions(r.Render(obs, p.systemPrompt(obs)), p.instructions(ans, obs)), memory{}
	}
	k := len(h)
	start, based := -1, false // based: the chat extends turn start's recorded chat
	var chat []protocol.ChatMessage
	if from == 0 {
		for i := k - 1; i >= 0; i-- {
			if g := h[i].Action.Generation; g != nil && g.Prompt != nil && len(g.Prompt.Messages) > 0 {
				start, based = i, true
				msgs := g.Prompt.Messages
				chat = make([]protocol.ChatMessage, len(msgs), len(msgs)+2*(k-i))
				copy(chat, msgs)
				break
			}
		}
	}
	if start < 0 {
		start = from
		var o agents.Observation
		if from < k {
			o = h[from].Observation(obs.Agent, obs.Role, from, h)
		} else {
			o = *obs
		}
		o.Seen = o.Inbox // a fresh start: what came before is left out
		chat = withInstructions(r.Render(&o, p.systemPrompt(obs)), p.instructions(ans, &o))
		if from > 0 {
			for m := range chat {
				if chat[m].Role == RoleUser {
					chat[m].Content = omitted(from) + chat[m].Content
					break
				}
			}
		}
	}
	for i := start; i < k; i++ {
		chat = append(chat, protocol.ChatMessage{Role: RoleAssistant, Content: replyOf(&h[i])})
		o := obs
		if i+1 < k {
			t := h[i+1].Observation(obs.Agent, obs.Role, i+1, h)
			o = &t
		}
		user, instr := tr.RenderTurn(o), p.instructions(ans, o)
		if user != "" {
			user += "\n\n" + instr
		} else {
			user = instr
		}
		chat = append(chat, protocol.ChatMessage{Role: RoleUser, Content: user})
	}
	// The earlier turns the chat holds: those of the chat it extends (a
	// cut conversation holds fewer than its turn number), and the ones
	// added since.
	prior := 0 // a fresh start at from
	if based {
		prior = start
		if n, ok := h[start].Action.Notes["llm_memory_turns"].(int); ok {
			prior = n
		}
	}
	return chat, memory{on: true, turns: prior + k - start, dropped: from, extends: from == 0 && start == k-1}
}

// Bounds of the tokens a chat template adds: around each message, and
// once (a date line, a default system prompt). ChatML adds 5 per message,
// Llama 3 about 5 and 25 once.
const (
	templatePerMessage = 16
	templateOnce       = 64
)

// tokenBound is an upper bound of chat's prompt tokens: byte-level BPE
// (and SentencePiece with byte fallback) never makes more tokens than
// bytes, so a message costs at most its bytes and the template's share.
// prev, when the chat extends the previous turn's (its chat having the
// first n messages), counts those messages and the answer by their exact
// token ids.
func tokenBound(chat []protocol.ChatMessage, prev *agents.Tokens, n int) int {
	b, rest := templateOnce, chat
	if prev != nil && n <= len(chat) {
		b = len(prev.Prompt) + len(prev.Response) + templatePerMessage
		rest = chat[n:]
	}
	for _, m := range rest {
		b += len(m.Content) + len(m.Role) + templatePerMessage
	}
	return b
}

// reserve is the room a prompt must leave in the context budget for the
// answer: max_tokens when set, else an eighth of the budget.
func (p *Policy) reserve() int {
	if n := value(p.cfg.MaxTokens); n > 0 {
		return n
	}
	return max(p.cfg.MaxContext/8, 1)
}

// refit returns obs's chat with its oldest turns left out so that it fits
// the context budget: the fewest turns left out that bring the prompt's
// size (measure: exact ids on llamacpp, tokenBound elsewhere) to at most
// half the budget, less the answer's reserve, so that the next turns
// extend the new conversation for a while before it is cut again; or,
// when no such cut exists, the chat of the current turn alone if it fits
// the whole budget. It fails with ErrContextFull when even that does not
// fit.
func (p *Policy) refit(obs *agents.Observation, ans Answer, measure func([]protocol.ChatMessage) (int, error)) ([]protocol.ChatMessage, memory, error) {
	k := len(obs.History)
	for from := 1; from <= k; from++ {
		chat, mem := p.conversation(obs, ans, from)
		n, err := measure(chat)
		if err != nil {
			return nil, memory{}, err
		}
		if b := n + p.reserve(); b <= p.cfg.MaxContext/2 || from == k && b <= p.cfg.MaxContext {
			return chat, mem, nil
		}
	}
	return nil, memory{}, fmt.Errorf("%w: even the current turn alone leaves less than %d of the budget of %d", ErrContextFull, p.reserve(), p.cfg.MaxContext)
}

// boundOf is refit's measure off llamacpp: tokenBound.
func boundOf(chat []protocol.ChatMessage) (int, error) { return tokenBound(chat, nil, 0), nil }
