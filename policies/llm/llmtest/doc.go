// Package llmtest is an OpenAI-compatible chat completion server for tests
// and benchmarks of LLM agents, in the spirit of net/http/httptest. It
// needs no model: a Brain decides the answers (by default, a valid choice
// under the request's JSON schema, picked by the request's seed), and a
// deterministic fake tokenizer supplies the token ids and log-probs.
//
// The server answers in the shape of the Kind it is given, and only when a
// request asks in that kind's own fields:
//
//   - VLLM: with return_token_ids, the prompt's ids at the top level
//     (prompt_token_ids) and the completion's per choice (token_ids); with
//     return_tokens_as_token_ids, log-prob tokens named "token_id:N".
//   - SGLang: with return_token_ids and return_prompt_token_ids, both per
//     choice; matched_stop and metadata as SGLang writes them.
//   - LlamaCpp: each log-prob entry carries its token's "id", and a
//     control token's (the end token's) text is "", as llama-server writes
//     it; top_logprobs (default 20) sets the alternatives; POST /tokenize,
//     POST /apply-template, POST /detokenize (special tokens written
//     out) and POST /completion with a token-id prompt (the brain is shown
//     the chat the ids render, ReadTemplate) answer as llama-server does.
//   - OpenAI: no token ids at all.
//
// Every answer has usage, a finish reason ("stop", "length" past
// max_tokens, "tool_calls" for a forced function call) and, on request,
// log-probs. Requests are validated as a server would (a model, messages,
// known roles, no streaming, top_logprobs only with logprobs) and refused
// with 400.
//
// A Script injects faults per request: error statuses with or without
// Retry-After (seconds or an HTTP date), hangs, malformed JSON, empty
// choices, bodies cut off half way, off-schema content, missing token ids.
// FailFirst and Sometimes choose requests by their content, so the same
// requests fail whatever the concurrency; FailCalls chooses by arrival.
// The server never streams: troupe asks for whole answers, and a truncated
// body is the whole-answer form of a truncated stream.
//
// Use Start for a real listener on 127.0.0.1, or Server.Transport for an
// in-process RoundTripper that runs inside a testing/synctest bubble, where
// latency, hangs and client backoff take virtual time.
package llmtest
