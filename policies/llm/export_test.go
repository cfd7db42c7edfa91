package llm

import (
	"context"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/protocol"
)

// UseChatPath makes p ask llama.cpp's chat endpoint (with the prompt ids
// fetched by /apply-template and /tokenize) where it would generate token
// in, token out: the chat path that BenchmarkLlamaTurn weighs the token
// path against, on the same conversation.
func UseChatPath(p *Policy) { p.tokenIn = false }

// ForgetRenderings makes c keep no renderings for the token path's next
// turn (tokencache.go): every turn asks the server again, as before it
// kept them.
func ForgetRenderings(c *Client) { c.renders = nil }

// TurnPromptIDs returns the prompt ids p's token path on llama.cpp sends
// for chat, extending prev (the answer, whose text is prevReply, to
// prevChat) when it can, and why not.
func TurnPromptIDs(ctx context.Context, p *Policy, chat, prevChat []protocol.ChatMessage, prevReply string, prev *agents.Tokens) ([]int, string, error) {
	req := &tokenRequest{model: p.cfg.Model, chat: chat, prev: prev, prevChat: prevChat, prevReply: prevReply, chatFields: p.fields}
	_, ids, why, _, err := p.client.llamaTurnPrompt(ctx, req, 0)
	return ids, why, err
}
