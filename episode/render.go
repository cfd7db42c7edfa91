package episode

import (
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/protocol"
)

// RenderObservation is the text prompt of a turn: the scenario's view,
// followed by the messages delivered since the agent's previous turn, one
// per line as "[t=TIME] FROM -> TO (KIND): PAYLOAD".
func RenderObservation(view string, inbox []protocol.Message) string {
	if len(inbox) == 0 {
		return view
	}
	var b strings.Builder
	startMessages(&b, view)
	for i := range inbox {
		appendMessage(&b, &inbox[i])
	}
	return b.String()
}

// TextPrompt is RenderObservation of turn t of r: its view and the messages
// of its inbox, read from r's message log.
func (r *Record) TextPrompt(t *Turn) string {
	if len(t.Inbox) == 0 {
		return t.View
	}
	var b strings.Builder
	startMessages(&b, t.View)
	for _, k := range t.Inbox {
		if k >= 0 && k < len(r.Messages) {
			appendMessage(&b, &r.Messages[k].Message)
		}
	}
	return b.String()
}

func startMessages(b *strings.Builder, view string) {
	b.WriteString(view)
	if view != "" {
		b.WriteString("\n")
	}
	b.WriteString("Messages:")
}

func appendMessage(b *strings.Builder, m *protocol.Message) {
	b.WriteByte('\n')
	WriteMessage(b, m)
}

// WriteMessage writes m as one prompt line, "[t=TIME] FROM -> TO (KIND):
// PAYLOAD", the form every troupe prompt shows messages in (text prompts
// here, an LLM policy's chat in agents/llm).
func WriteMessage(b *strings.Builder, m *protocol.Message) {
	b.WriteString("[t=")
	b.WriteString(strconv.Itoa(m.Time))
	b.WriteString("] ")
	b.WriteString(m.From)
	b.WriteString(" -> ")
	b.WriteString(string(m.To))
	b.WriteString(" (")
	b.WriteString(m.Kind)
	b.WriteString("): ")
	b.WriteString(m.Payload)
}
