// Package llm is troupe's LLM agent: an agents.Policy that plays a role by
// asking an OpenAI-compatible chat server (vLLM, SGLang or its router,
// llama.cpp's llama-server, or any other), built on
// github.com/sashabaranov/go-openai. It is the only package of troupe that
// imports go-openai.
//
// # Turns
//
// A Policy is stateless: the agent's memory is in its observation
// (agents.Observation.History, its own earlier turns), not in the policy.
// For each turn it renders the observation into a chat (see Memory below;
// a Renderer renders the first turn: by default the system prompt, then
// the messages the agent was delivered, then the scenario's view), asks for an answer in
// the configured Format (a JSON object under response_format json_schema,
// which vLLM, SGLang and llama.cpp enforce by constrained decoding; a
// forced call of the function "act"; or plain text), and parses it
// strictly with the role's Answer. An invalid answer is asked again up to
// Config.InvalidRetries times, shown its error when Config.Feedback is set;
// after that the action carries agents.Action.Invalid, and the run's
// env.InvalidRule decides (the game judges it, a forfeit, or SPIRAL's
// penalty). Play returns notes on the turn (attempts, rejected answers,
// finish reason, token counts, retries, why a sample is text-only).
//
// The request seed derives from the turn's seed (Observation.Seed) and the
// attempt, so a replayed episode sends exactly the requests the original
// sent, and a server that samples deterministically under a seed answers
// the same. With Config.SamplingSeed (slime's sampling_seed) it derives
// from that seed, the agent's id, the agent's turn number and the attempt
// instead, and from nothing else (SampledRequestSeed gives the formula):
// the same sampling seed sends the same seeds on any service, whatever
// troupe's own seeds. Temperature is always sent, 0 included: go-openai's
// struct drops a zero temperature under omitempty, so troupe writes
// sampling and vendor fields into the JSON body itself (a wrapping
// HTTPDoer splices them in).
//
// # Responses
//
// Action.Text is the move the scenario reads (a legal action's name, a
// JSON object); Action.Generation.Completion, set when it differs, is
// what the model wrote, which the engine makes the sample's response (and
// Text its metadata "action"). The note llm_response_source says where it
// comes from:
//
//	detokenize  llamacpp with token ids: POST /detokenize of the
//	            completion's ids, less a trailing end-of-generation token:
//	            the text of exactly the tokens the sample trains on
//	            (special tokens written out, white space kept)
//	content     the message content, as the server decoded it (vllm,
//	            sglang, openai; llamacpp without ids)
//	tool_call   the content is empty and the answer calls a function:
//	            {"name": ..., "arguments": ...} as JSON, since the server
//	            does not return its raw text of the call
//
// llama.cpp samples the end-of-generation token, returns it as the last
// completion id and counts it; it writes it as "" in the log-probs. It
// stops for one of two reasons, both finish_reason "stop" (or
// "tool_calls"): that token, or a stop string, which ends in text. So a
// stopped completion whose last token is written as "" ended on the end
// token: its id stays in the sample's tokens (it was sampled: trained,
// with its log-prob) and its text ("<|im_end|>") is left out of the
// response. A completion cut at max_tokens ("length") keeps all its text.
// A failed /detokenize falls back to the content, with the note
// llm_response_error.
//
// # Sampling: slime's fields per server kind
//
// Config takes slime's sampling parameters (protocol.Sampling, which a
// rollout request carries through troupe serve). Each is sent under the kind's own name where the
// server has it; where it has none, Validate accepts the value the server
// follows anyway and refuses any other with an error that names the field
// and the kind (troupe serve answers it as 400 bad_policy):
//
//	field                          vllm                        sglang                 llamacpp                         openai
//	top_k (-1: off, 0: default)    top_k when > 0              top_k when > 0         top_k when > 0; -1 sends 0 (its  > 0 refused
//	                                                                                  off; its default is 40)
//	max_tokens (-1, 0: default)    max_tokens when > 0         the same               the same (its n_predict)         the same
//	stop                           stop                        stop                   stop                             stop
//	stop_token_ids                 stop_token_ids              stop_token_ids         refused (no such field)          refused
//	skip_special_tokens            skip_special_tokens         skip_special_tokens    false only (/detokenize writes   true only
//	                                                                                  special tokens)
//	spaces_between_special_tokens  spaces_between_special_     not sent (the chat     false only (/detokenize joins    false only
//	                               tokens                      endpoint lacks it;     pieces)
//	                                                           see below)
//	no_stop_trim                   include_stop_str_in_output  no_stop_trim           true only (ids keep every        false only
//	                                                                                  sampled token)
//	repetition_penalty (0: unset)  repetition_penalty          repetition_penalty     repeat_penalty                   1 only
//	min_tokens (0: unset)          min_tokens                  min_tokens             refused (no such field)          refused
//	sampling_seed                  seed: SampledRequestSeed    the same               the same                         the same
//
// Sources: vLLM's ChatCompletionRequest (stop_token_ids,
// include_stop_str_in_output, min_tokens, skip_special_tokens,
// spaces_between_special_tokens, repetition_penalty) and SGLang's
// ChatCompletionRequest at the commit below (stop_token_ids, no_stop_trim,
// min_tokens, skip_special_tokens, repetition_penalty, but no
// spaces_between_special_tokens, which only its native /generate takes); llama.cpp's
// tools/server/server-schema.cpp (the fields the chat endpoint reads:
// top_k clamped to 0 and more, 0 = disabled, default 40; repeat_penalty;
// no stop_token_ids, min_tokens or detokenizer switches: unknown fields are
// ignored, hence the refusals) and server-context.cpp (POST /detokenize
// writes special tokens).
//
// One exception to "refused unless the server does it anyway": slime sends
// spaces_between_special_tokens false on every request, with no flag to
// change it, and SGLang's chat endpoint has no such field (it decodes with
// true). Refusing it would refuse slime itself, so sglang accepts both
// values and sends neither. The difference is only in the spacing around
// special tokens in the response text, when they are not skipped; the
// token ids and log-probs slime trains on are the same.
//
// With top_k -1 (slime's "off") llamacpp also sends min_p 0: slime samples
// with temperature, top-p and top-k alone, and llama.cpp's default min_p
// of 0.05 would truncate the distribution behind the log-probs the trainer
// compares with.
//
// # Tools on llama.cpp
//
// FormatTool sends the tool "act" with tool_choice naming it and
// parallel_tool_calls false; to llamacpp it sends tool_choice "required"
// instead, since llama.cpp reads tool_choice only as a string (the object
// form falls back to "auto", under which nothing is enforced). With
// "required" and one tool, llama-server (its jinja chat templates are on
// by default) renders the tool's schema into the prompt through the
// model's chat template and constrains the answer to one call by grammar.
// Both need a template that renders tools (Qwen2.5's and later do; Qwen2's
// does not: serve such a model with --chat-template-file). With
// <tool_call> tags llama.cpp's grammar allows free text before the call,
// which a trained model skips. The prompt ids stay exact: /apply-template
// gets the same body, tools included.
//
// # Tokens and log-probs
//
// A sample's tokens are the prompt's token ids, then the completion's, as
// the server reports them; its loss mask is 1 on every completion token and
// its rollout_log_probs are the server's. The prompt holds the whole
// rendered conversation, earlier turns and other agents' messages
// included, so they are observation tokens, never trained tokens. Nothing
// is re-tokenised: where the server gives no ids, or two of its fields
// disagree, the sample is text-only and the notes say why.
//
// Which fields each server kind needs, and where it answers (choice 0):
//
//	kind      request fields troupe adds     prompt ids                    completion ids
//	vllm      logprobs, return_token_ids,    prompt_token_ids (top level)  choices[].token_ids, checked against
//	          return_tokens_as_token_ids                                   the log-probs' "token_id:N" texts
//	sglang    logprobs, return_token_ids,    choices[].prompt_token_ids    choices[].token_ids
//	          return_prompt_token_ids
//	llamacpp  logprobs, top_logprobs: 1      POST /apply-template, then    choices[].logprobs.content[].id
//	                                         POST /tokenize (see below)
//	openai    none                           none: text-only               none
//
// Log-probs are choices[].logprobs.content[].logprob for vllm, sglang and
// llamacpp, one per completion token; they are not asked of openai.
//
// Sources, read for this table:
//   - vLLM: vllm/entrypoints/openai/chat_completion/protocol.py at commit
//     d5dba2d7 (ChatCompletionRequest.return_token_ids and
//     return_tokens_as_token_ids; ChatCompletionResponse.prompt_token_ids;
//     ChatCompletionResponseChoice.token_ids). vLLM also serves POST
//     /tokenize, which troupe does not use: a vLLM recent enough to know
//     return_token_ids returns the prompt's ids itself.
//   - SGLang: python/sglang/srt/entrypoints/openai/protocol.py at commit
//     004c82e0 (ChatCompletionRequest.return_token_ids,
//     return_prompt_token_ids and input_ids; the prompt_token_ids and
//     token_ids of ChatCompletionResponseChoice). Older SGLang versions
//     lack these fields, and their samples are text-only.
//   - llama.cpp: tools/server/README.md (POST /tokenize with add_special,
//     parse_special and with_pieces; POST /apply-template, which "uses the
//     server's prompt template formatting functionality ... but does not
//     perform inference"), and the server's chat request parser
//     (oaicompat_chat_params_parse: "logprobs" sets n_probs from
//     top_logprobs, default 20, at most 20) and log-prob writer
//     (completion_token_output::probs_vector_to_json writes "id" with each
//     token).
//
// llama.cpp's chat answer carries the completion's ids (in its log-probs)
// but not the prompt's. With Config.Tokenize, troupe sends the exact chat
// body to /apply-template, which runs the same request parser and chat
// template as the chat endpoint, then tokenizes the prompt text with
// /tokenize and add_special and parse_special set, as the chat endpoint
// does, and accepts the ids only when their count equals the chat answer's
// usage.prompt_tokens. Those are the server's own tokenization of the very
// prompt it saw, not a guess; any failure makes the sample text-only. The
// two calls share the client's bound and retries.
//
// Token ids are read from the raw answer in one pass by a small JSON
// scanner, without reflection (answers carry thousands of ids per turn);
// the fields read this way are then blanked before go-openai decodes the
// rest, which it ignores or troupe does not use.
//
// # Memory
//
// An agent remembers its own turns (Config.NoMemory turns it off). With a
// TurnRenderer (Transcript is one) the chat of its turn k is the chat it
// sent at turn k-1 (the Generation's Prompt, re-asks included), then what
// the model wrote as an assistant message (the Generation's Completion, or
// the action of a turn played without a model, a scripted move), then a
// user message of what it observed since: the messages delivered since its
// previous turn, the view, the answer instructions. Consecutive turns of
// one agent so extend one conversation, message by message. A plain
// Renderer is asked for the whole chat every turn, as before memory; it
// can read the history itself. The notes say llm_memory_turns (the
// earlier turns in the prompt).
//
// Token-exact continuation. On llamacpp (with Tokenize, in the json and
// text formats) every turn is generated token in, token out: the chat is
// rendered by POST /apply-template (the server's own template), and the
// prompt ids of turn k are the ids of turn k-1's prompt and response,
// exactly as they were sent and sampled, then the server's tokenization
// (POST /tokenize, no BOS, special tokens parsed) of the rest of the
// rendered text: the template's end of the answer (unless the model
// sampled it), the new user message, the assistant header. Which text is
// the rest: the rendering of the new chat must begin with the rendering of
// the previous turn's chat followed by the answer's text (POST
// /detokenize of its ids, less a trailing end-of-generation token), and the
// rest is what follows; when it begins with the text of the answer's end
// token, the model sampled the template's end of turn, and the rest starts
// after it. When the model ended its answer on an end-of-generation token
// that the template does not write (the tiny Qwen2's <|endoftext|>, where
// ChatML writes <|im_end|>), that token stays in the ids where it was
// sampled, and the template's end of turn follows it. The answer then comes
// from POST /completion with the ids as its prompt (n_probs 1 for the
// log-probs, return_tokens for the ids, json_schema for the json format),
// and its response text is /detokenize of its ids, as for chat answers. So
// every turn's prompt ids begin with the previous turn's prompt and
// response ids, and read back (/detokenize) as the template's rendering of
// the chat, save such sampled end tokens. When the rendering does not
// begin so (a template that rewrites earlier assistant messages, as
// Qwen3's drops old reasoning), the prompt is tokenized whole and the note
// llm_memory_rebuilt says why. The tests check this against the real
// llama-server (memory_real_test.go). The previous turn's rendering and
// the text of its answer's ids are what that turn itself got from the
// server, so the client keeps them for the next turn and asks again only
// when they are not kept (tokencache.go): a turn costs four calls
// (/apply-template, /tokenize of the rest, /completion, /detokenize), as
// the chat path's does, and the same ids either way.
//
// On vllm and sglang with Config.TokenIn (--llm-token-in; json and text
// formats) the same rule holds on each server's own endpoints
// (tokenin_remote.go): the new chat's prompt ids come from vLLM's POST
// /tokenize with the messages, or from SGLang's chat endpoint asked for one
// token with return_prompt_token_ids (SGLang has no endpoint that renders
// a chat without generating); their text (vLLM's POST /detokenize,
// SGLang's POST /v1/detokenize with skip_special_tokens false) must begin
// with the text of the previous turn's prompt and response ids (or of
// those less a last end-of-generation token the template does not write,
// which then stays, as sampled), and the rest is tokenized (POST /tokenize
// or /v1/tokenize with a prompt, no special tokens added) after those
// ids. The answer comes from vLLM's POST /v1/completions with the prompt
// as a list of ids (return_token_ids, return_tokens_as_token_ids,
// logprobs 1, max_tokens null for the context's room where vLLM's default
// is 16) or SGLang's native POST /generate with input_ids
// (sampling_params with sampling_seed, max_new_tokens, json_schema as a
// string, min_new_tokens; return_logprob: meta_info.output_token_logprobs,
// [log-prob, id, text] per token, as slime reads it); the response text is
// the detokenization of its ids less a last end-of-generation token (a
// stop string's text stays, as sampled). Extra's chat_template and
// chat_template_kwargs go with the rendering only; on SGLang, Extra's
// other fields go into sampling_params when SamplingParams has them, to
// /generate's top level when GenerateReqInput has them, and are refused
// otherwise. These paths are written from vLLM's and SGLang's source and
// tested against llmtest's fake of both (whose field lists are checked
// against the source, llmtest/testdata/fields): no real vLLM or SGLang
// runs in the tests (they need a GPU). TokenIn is off by default because
// it needs those endpoints reachable (a router must forward them) and
// costs three to five small calls a turn besides the generation.
//
// Other kinds, the tool format, and vllm and sglang without TokenIn ask
// the chat endpoint with the whole chat; the server tokenizes it anew each
// turn. vLLM and SGLang return the prompt ids they used: where they do not
// begin with the previous turn's prompt and response ids (a sampled
// tokenization that the re-tokenized text splits otherwise), the note
// llm_memory_rebuilt says so, and the merged layout starts a new sample
// there.
//
// Context budget. With Config.MaxContext (slime's
// --rollout-max-context-len), no request asks for more tokens than the
// budget, prompt and max_tokens together: max_tokens is lowered to what
// the prompt leaves, and a prompt must leave a reserve (Config.MaxTokens
// when set, else an eighth of the budget). A conversation that no longer
// leaves it is cut: its oldest turns are left out, the fewest that bring
// the prompt (with the reserve) to half the budget, so that the next turns extend the new conversation for a while
// before the next cut; the new conversation starts afresh with the first
// kept turn's observation, its first user message saying "[N earlier turns
// of yours are left out]", and the sample's note llm_memory_dropped is N.
// The current turn is always kept; when even it alone leaves no reserve,
// Act fails with ErrContextFull (the episode ends aborted). On llamacpp the
// checks and the cut count exact ids (the server's); elsewhere an upper
// bound of the prompt: its bytes plus 16 tokens a message and 64 once
// (byte-level BPE makes no more tokens than bytes), the previous turn's
// prompt and response counted by their ids.
//
// # Transport
//
// A Client owns an HTTP transport sized for Config.MaxInFlight connections
// to one host, and a FIFO semaphore that bounds the requests in flight over
// every policy and episode that shares the client: a slow or failing server
// makes callers queue, in arrival order, instead of piling up connections
// and goroutines. Each HTTP attempt runs under Config.Timeout and the
// episode's context. Failed attempts (429, 408, 5xx, timeouts, broken
// connections, truncated, malformed or empty answers) are retried up to
// Config.Retries times after a backoff with full jitter, drawn from a
// source seeded by Config.Seed and the request, or after the server's
// Retry-After (seconds or an HTTP date) plus a little jitter, unless it
// asks for longer than Config.MaxRetryWait. The backoff waits without
// holding a slot. A call that still fails returns a *CallError naming the
// request, the attempts and the last status; an episode whose policy fails
// so ends aborted, with the error in its samples' metadata, and one whose
// deadline passes ends truncated.
//
// # Configuration
//
// DefaultConfig, ConfigFromEnv (TROUPE_LLM_BASE_URL, TROUPE_LLM_API_KEY,
// TROUPE_LLM_MODEL, TROUPE_LLM_KIND, ...) and Config.BindFlags (--llm-*)
// build a Config. One Client per server; NewPolicy per model or role
// (several policies may share a client, and so its bound):
//
//	cfg, err := llm.ConfigFromEnv(os.LookupEnv)
//	cfg.BindFlags(flags)
//	// after parsing:
//	client, err := llm.NewClient(cfg)
//	defer client.Close()
//	policy, err := llm.NewPolicy(client, cfg, llm.WithScenario(scenario.Info()))
//
// Package llmtest provides an OpenAI-compatible test server that answers in
// each kind's shape and injects faults, for tests and benchmarks.
package llm
