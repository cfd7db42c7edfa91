package llm

import (
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Chat message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Renderer turns an observation into the chat sent to the model, system
// prompt first. The policy appends its answer instructions to the last
// message when it is the user's (or adds a user message). With memory, a
// TurnRenderer renders only an agent's first turn, and the policy extends
// that conversation turn by turn (see TurnRenderer); a plain Renderer
// rebuilds the whole chat from the observation every turn, the agent's
// earlier turns included (Observation.History). A Renderer must be a
// deterministic function of its arguments and safe for concurrent use, and
// return a new slice each time: the policy owns it and may change it.
type Renderer interface {
	Render(obs *agents.Observation, system string) []protocol.ChatMessage
}

// RendererFunc adapts a function to Renderer.
type RendererFunc func(obs *agents.Observation, system string) []protocol.ChatMessage

// Render calls f.
func (f RendererFunc) Render(obs *agents.Observation, system string) []protocol.ChatMessage {
	return f(obs, system)
}

// Transcript returns the default renderer. After the system prompt, the
// messages the agent was delivered this episode (Seen) become the
// conversation: the agent's own messages are assistant turns, and everyone
// else's (the environment's, other agents') are gathered into user turns,
// one line each, "[t=TIME] FROM -> TO (KIND): PAYLOAD". The last user turn
// ends with the scenario's view of the current state.
//
// In a trained sample, all of this is prompt (observation) tokens; only the
// new answer is response tokens.
//
// It is a TurnRenderer: with memory, a later turn's user message holds the
// messages delivered since the agent's previous turn and the view, after
// the agent's earlier answers (see TurnRenderer).
func Transcript() Renderer { return transcriptRenderer{} }

func transcript(obs *agents.Observation, system string) []protocol.ChatMessage {
	msgs := make([]protocol.ChatMessage, 1, 2+len(obs.Seen)/2)
	msgs[0] = protocol.ChatMessage{Role: RoleSystem, Content: system}
	var user strings.Builder
	flush := func() {
		if user.Len() > 0 {
			msgs = append(msgs, protocol.ChatMessage{Role: RoleUser, Content: user.String()})
			user.Reset()
		}
	}
	for _, m := range obs.Seen {
		if m.From == obs.Agent {
			flush()
			msgs = append(msgs, protocol.ChatMessage{Role: RoleAssistant, Content: m.Payload})
			continue
		}
		if user.Len() > 0 {
			user.WriteByte('\n')
		}
		episode.WriteMessage(&user, &m)
	}
	if obs.View != "" {
		if user.Len() > 0 {
			user.WriteString("\n\n")
		}
		user.WriteString(obs.View)
	}
	flush()
	return msgs
}

// scenarioPrompt returns the role-specific part of the default system
// prompt for a scenario: what is played, its rules and the role.
func scenarioPrompt(info *env.Info, role string) string {
	var b strings.Builder
	b.WriteString("You are playing ")
	b.WriteString(info.Name)
	if info.Summary != "" {
		b.WriteString(": ")
		b.WriteString(info.Summary)
	}
	b.WriteString(".")
	if info.Doc != "" {
		b.WriteString("\n\nRules: ")
		b.WriteString(info.Doc)
	}
	b.WriteString("\n\nYour role is ")
	b.WriteString(role)
	if r := info.Role(role); r != nil && r.Doc != "" {
		b.WriteString(": it ")
		b.WriteString(r.Doc)
	}
	b.WriteString(".")
	return b.String()
}
