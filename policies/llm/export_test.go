package llm

// UseChatPath makes p ask llama.cpp's chat endpoint (with the prompt ids
// fetched by /apply-template and /tokenize) where it would generate token
// in, token out: the chat path that BenchmarkLlamaTurn weighs the token
// path against, on the same conversation.
func UseChatPath(p *Policy) { p.tokenIn = false }
