package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/troupe-rl/troupe/protocol"
)

// Kind is the kind of OpenAI-compatible server: it decides which request
// fields ask for token ids and log-probs, and where the answer carries
// them (see the package doc).
type Kind string

// The server kinds troupe knows.
const (
	KindVLLM     Kind = "vllm"
	KindSGLang   Kind = "sglang"
	KindLlamaCpp Kind = "llamacpp"
	// KindOpenAI is any other OpenAI-compatible server (OpenAI itself, a
	// router, a proxy): no vendor fields are sent, and samples are
	// text-only.
	KindOpenAI Kind = "openai"
)

// kinds lists the server kinds, in the order the flags document them.
var kinds = []Kind{KindVLLM, KindSGLang, KindLlamaCpp, KindOpenAI}

// Format is how the model is asked to answer.
type Format string

// The answer formats.
const (
	// FormatJSON asks for a JSON object through response_format
	// json_schema: vLLM, SGLang and llama.cpp enforce the schema by
	// constrained decoding.
	FormatJSON Format = "json"
	// FormatTool asks for a call of the function "act" whose arguments
	// follow the schema (tool_choice forces the call).
	FormatTool Format = "tool"
	// FormatText asks for plain text: the trimmed reply is the action.
	FormatText Format = "text"
)

// formats lists the answer formats.
var formats = []Format{FormatJSON, FormatTool, FormatText}

// ErrBadConfig is wrapped by every configuration error.
var ErrBadConfig = errors.New("llm: bad configuration")

// Config configures an LLM endpoint (a Client) and the policies that use
// it. DefaultConfig gives sensible values; ConfigFromEnv and BindFlags
// fill it from the environment and the command line.
type Config struct {
	// The endpoint.
	BaseURL string // the OpenAI base URL, e.g. http://127.0.0.1:8000/v1
	APIKey  string // sent as a bearer token when not empty
	Kind    Kind
	// Endpoint is the endpoint's name (troupe's --llm-endpoint NAME=URL),
	// which the samples of policies on it carry as metadata llm_endpoint;
	// "" for the default endpoint, whose samples carry none. It names the
	// server, never its address or key.
	Endpoint string
	// RoutingHeader is the HTTP header that carries each agent's session
	// key (agents.Observation.Session, as 16 hex digits), so that a
	// router that hashes it sends one agent's turns to one worker, whose
	// prefix cache holds the agent's conversation. The default is
	// SGLang's router's, X-SMG-Routing-Key (slime's adapters send it too);
	// "" sends none. Servers that do not route ignore it.
	RoutingHeader string
	// Tokenize lets a llama.cpp client fetch prompt token ids from the
	// server's own /apply-template and /tokenize endpoints, which render
	// and tokenize exactly as its chat endpoint does; the count is
	// checked against the answer's usage.prompt_tokens. Without it
	// llama.cpp samples are text-only. Ignored by other kinds.
	Tokenize bool
	// TokenIn makes a vLLM or SGLang client generate token in, token out
	// for policies with memory (not the tool format), as llama.cpp's does
	// under Tokenize: each turn's prompt ids extend the previous turn's
	// exactly (the package doc's "Memory"). It needs the server's own
	// endpoints, not only its chat completions: vLLM's /tokenize,
	// /detokenize and /v1/completions; SGLang's /v1/tokenize,
	// /v1/detokenize and /generate (a router must forward them). Off, the
	// chat endpoint is asked and a turn whose ids the server tokenized
	// anew is flagged llm_memory_rebuilt. Refused for other kinds.
	// DefaultConfig leaves it off (its kind is vllm); troupe's commands
	// default it per kind, DefaultTokenIn, unless --llm-token-in or
	// TROUPE_LLM_TOKEN_IN says otherwise.
	TokenIn bool

	// Model is the model name sent to the server.
	Model string
	// Sampling are the sampling settings (protocol.Sampling), each sent
	// only when given, and otherwise left to the server's default; the
	// package doc's table says under which name each kind gets it.
	// Temperature, when given, is sent, 0 included (greedy decoding);
	// DefaultConfig gives 1. TopP, RepetitionPenalty (1 is no penalty)
	// and MinTokens are sent when > 0; MaxTokens when > 0 (-1 or 0: the
	// server's default); TopK when > 0 (vllm, sglang, llamacpp), 0 leaves
	// the server's default and -1 is slime's "no top-k": not sent to
	// vllm, sglang and openai, which do no top-k by default, and sent as
	// top_k 0 (off) to llamacpp, whose default is 40. StopTokenIDs
	// (vllm, sglang: stop_token_ids) and the detokenizer switches are
	// slime's: each is sent under the kind's own name where the server
	// has it, and otherwise accepted only when it asks for what the
	// server does anyway; Validate refuses the others by name.
	// SamplingSeed, when set, roots every request seed instead of the
	// turn's seed (slime's sampling_seed): a call's seed then depends only
	// on it, the agent, the agent's turn number and the attempt (see
	// SampledRequestSeed). Extra's fields win over troupe's own of the
	// same name, except the ones go-openai writes itself (model,
	// messages, seed, ...), which are rejected. Fields are replaced,
	// never written through: configs copied by value share them.
	protocol.Sampling

	// Answers.
	Format Format
	// InvalidRetries is how many times an invalid answer (unparseable,
	// off-schema, an illegal action) is asked again before the turn's
	// action is marked invalid (agents.Action.Invalid), which the run's
	// env.InvalidRule then judges.
	InvalidRetries int
	// Feedback re-asks with the rejected answer and the reason shown to
	// the model; without it the same prompt is sampled again with another
	// seed.
	Feedback bool

	// Transport.
	Timeout time.Duration // per HTTP attempt
	// Retries is how many times a failed HTTP attempt (429, 5xx, a
	// timeout, a broken connection, a malformed or empty answer) is tried
	// again, after a backoff with full jitter between BackoffBase and
	// BackoffMax, or after the server's Retry-After.
	Retries     int
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxRetryWait is the longest Retry-After honoured: a server that asks
	// for a longer wait makes the call fail at once.
	MaxRetryWait time.Duration
	// MaxInFlight bounds the HTTP requests in flight to the server, over
	// every episode and policy that shares the client; callers beyond it
	// queue in FIFO order.
	MaxInFlight int
	// Seed roots the retry jitter, so that backoff is reproducible.
	Seed uint64

	// Memory (issue 33, item 1; see the package doc's "Memory").
	//
	// NoMemory makes the policy stateless as it was before memory: each
	// prompt is rendered from the observation alone, and the agent never
	// sees its own earlier moves. By default an agent's prompt carries its
	// conversation so far, its own answers as assistant messages.
	NoMemory bool
	// MaxContext is the context budget in tokens (slime's
	// --rollout-max-context-len): no request asks for more than
	// MaxContext tokens, prompt and answer together, and when the
	// conversation no longer fits, its oldest turns are left out (the
	// rule is in the package doc). 0: no budget.
	MaxContext int
}

// DefaultTokenIn is whether a client of kind generates token in, token
// out (Config.TokenIn) when nothing says otherwise, the rule troupe's
// commands apply: on for sglang, off for the others.
//
// SGLang is slime's rollout backend, and slime's own agents generate
// token in, token out on SGLang's /generate: its router forwards it (and
// /v1/tokenize, /v1/detokenize, which the SGLang Model Gateway serves),
// and without it the chat endpoint re-tokenizes every turn's whole
// conversation, whose ids need not extend the last turn's (against
// llmtest's fake, 20 of 20 turn pairs were rebuilt), so memory is not
// exact and merged samples split. vLLM stays off: its chat endpoint
// returns the prompt ids it used, and a vLLM deployment behind an
// OpenAI-only router (the usual way to serve it) does not reach
// /tokenize and /detokenize. llamacpp's exact path follows
// Config.Tokenize; openai has no token ids.
func DefaultTokenIn(kind Kind) bool { return kind == KindSGLang }

// DefaultRoutingHeader is the header SGLang's router (sgl-model-gateway)
// reads for consistent-hash routing: requests with the same key reach the
// same worker.
const DefaultRoutingHeader = "X-SMG-Routing-Key"

// DefaultConfig returns the defaults: a vLLM server on localhost, greedy
// decoding off (temperature 1), JSON answers with two re-asks shown the
// error, 60 s per attempt, 4 retries with backoff from 250 ms to 10 s,
// Retry-After honoured up to 2 minutes, 256 requests in flight.
func DefaultConfig() Config {
	return Config{
		BaseURL:        "http://127.0.0.1:8000/v1",
		Kind:           KindVLLM,
		Tokenize:       true,
		RoutingHeader:  DefaultRoutingHeader,
		Model:          "default",
		Sampling:       protocol.Sampling{Temperature: ptr(1.0)},
		Format:         FormatJSON,
		InvalidRetries: 2,
		Feedback:       true,
		Timeout:        60 * time.Second,
		Retries:        4,
		BackoffBase:    250 * time.Millisecond,
		BackoffMax:     10 * time.Second,
		MaxRetryWait:   2 * time.Minute,
		MaxInFlight:    256,
	}
}

// reservedFields are the body fields go-openai writes from troupe's typed
// request; Extra may not set them.
var reservedFields = []string{"model", "messages", "seed", "stream", "response_format", "tools", "tool_choice"}

// Validate checks the configuration and names the first bad field.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	temperature, topP, topK, maxTokens := value(c.Temperature), value(c.TopP), value(c.TopK), value(c.MaxTokens)
	penalty, minTokens := value(c.RepetitionPenalty), value(c.MinTokens)
	u, err := url.Parse(c.BaseURL)
	switch {
	case c.BaseURL == "":
		return bad("base URL is empty (set TROUPE_LLM_BASE_URL or --llm-base-url)")
	case err != nil:
		return bad("base URL %q: %v", c.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("base URL %q: the scheme must be http or https", c.BaseURL)
	case u.Host == "":
		return bad("base URL %q has no host", c.BaseURL)
	case !slices.Contains(kinds, c.Kind):
		return bad("kind %q: want one of %s", c.Kind, joinKinds())
	case c.TokenIn && !remoteKind(c.Kind):
		return bad("token-in: kind %s has no token-in generation of this kind (vllm and sglang do; llamacpp's follows --llm-tokenize)", c.Kind)
	case c.RoutingHeader != "" && !validHeaderName(c.RoutingHeader):
		return bad("routing header %q is not an HTTP header name", c.RoutingHeader)
	case c.Model == "":
		return bad("model is empty (set TROUPE_LLM_MODEL or --llm-model)")
	case math.IsNaN(temperature) || temperature < 0 || temperature > 2:
		return bad("temperature %v: want 0 to 2", temperature)
	case math.IsNaN(topP) || topP < 0 || topP > 1:
		return bad("top_p %v: want 0 (unset) to 1", topP)
	case topK < -1:
		return bad("top_k %d: want -1 or 0 (unset), or more", topK)
	case topK > 0 && c.Kind == KindOpenAI:
		return bad("top_k: kind openai has no top_k")
	case maxTokens < -1:
		return bad("max tokens %d: want -1 or 0 (server default), or more", maxTokens)
	case math.IsNaN(penalty) || math.IsInf(penalty, 0) || penalty < 0:
		return bad("repetition_penalty %v: want 0 (unset) or more (1: no penalty)", penalty)
	case minTokens < 0:
		return bad("min_tokens %d: want 0 (unset) or more", minTokens)
	case minTokens > 0 && maxTokens > 0 && minTokens > maxTokens:
		return bad("min_tokens %d is more than max tokens %d", minTokens, maxTokens)
	case !slices.Contains(formats, c.Format):
		return bad("format %q: want json, tool or text", c.Format)
	case c.InvalidRetries < 0:
		return bad("invalid retries %d: want 0 or more", c.InvalidRetries)
	case c.Timeout <= 0:
		return bad("timeout %v: want a positive duration", c.Timeout)
	case c.Retries < 0:
		return bad("retries %d: want 0 or more", c.Retries)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return bad("backoff %v to %v: want 0 < base <= max", c.BackoffBase, c.BackoffMax)
	case c.MaxRetryWait < 0:
		return bad("max retry wait %v: want 0 or more", c.MaxRetryWait)
	case c.MaxInFlight < 1:
		return bad("max in flight %d: want 1 or more", c.MaxInFlight)
	case c.MaxContext < 0:
		return bad("max context %d: want 0 (no budget) or more", c.MaxContext)
	case c.MaxContext > 0 && maxTokens >= c.MaxContext:
		return bad("max tokens %d leaves no room for a prompt in the context budget of %d", maxTokens, c.MaxContext)
	}
	if err := c.checkKindFields(); err != nil {
		return bad("%v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Extra)) {
		if slices.Contains(reservedFields, k) {
			return bad("extra field %q is written by troupe itself", k)
		}
		if !json.Valid(c.Extra[k]) {
			return bad("extra field %q: %q is not JSON", k, c.Extra[k])
		}
	}
	return nil
}

// checkKindFields refuses, by name, the slime sampling fields the server
// kind cannot honour: a field it lacks is accepted only when its value is
// what the server does anyway. The doc's table says why each is so.
func (c *Config) checkKindFields() error {
	for _, id := range c.StopTokenIDs {
		if id < 0 {
			return fmt.Errorf("stop_token_ids: %d is not a token id", id)
		}
	}
	is := func(b *bool, v bool) bool { return b != nil && *b == v }
	switch c.Kind {
	case KindSGLang:
		// spaces_between_special_tokens: SGLang's native /generate has it,
		// its chat endpoint does not (ChatCompletionRequest at 004c82e0)
		// and decodes with its default, true. slime sends false on every
		// request, with no flag to change it, so refusing it would refuse
		// slime; it is accepted and not sent. It changes nothing but the
		// spacing around special tokens in the response text, and only
		// when they are not skipped: token ids and log-probs, what slime
		// trains on, are the same. The package doc's table says so.
	case KindLlamaCpp:
		switch {
		case len(c.StopTokenIDs) > 0:
			return errors.New("stop_token_ids: kind llamacpp has no stop_token_ids (llama-server ignores the field; it stops at the model's end-of-generation tokens and at stop strings)")
		case is(c.SkipSpecialTokens, true):
			return errors.New("skip_special_tokens true: kind llamacpp cannot skip special tokens (the response is llama-server's /detokenize of the completion ids, which writes special tokens out); send false or leave it unset")
		case is(c.SpacesBetweenSpecialTokens, true):
			return errors.New("spaces_between_special_tokens true: kind llamacpp cannot add spaces between special tokens (/detokenize joins the tokens' texts); send false or leave it unset")
		case is(c.NoStopTrim, false):
			return errors.New("no_stop_trim false: kind llamacpp cannot trim a stop string from its completion ids (they keep every sampled token); send true or leave it unset")
		case value(c.MinTokens) > 0:
			return errors.New("min_tokens: kind llamacpp has no min_tokens; leave it unset or 0")
		}
	case KindOpenAI:
		switch {
		case len(c.StopTokenIDs) > 0:
			return errors.New("stop_token_ids: kind openai has no stop_token_ids")
		case is(c.SkipSpecialTokens, false):
			return errors.New("skip_special_tokens false: kind openai writes no special tokens into its answers; send true or leave it unset")
		case is(c.SpacesBetweenSpecialTokens, true):
			return errors.New("spaces_between_special_tokens true: kind openai has no spaces_between_special_tokens; send false or leave it unset")
		case is(c.NoStopTrim, true):
			return errors.New("no_stop_trim true: kind openai trims stop sequences from its answers; send false or leave it unset")
		case value(c.RepetitionPenalty) > 0 && *c.RepetitionPenalty != 1:
			return errors.New("repetition_penalty: kind openai has no repetition_penalty; leave it unset or 1")
		case value(c.MinTokens) > 0:
			return errors.New("min_tokens: kind openai has no min_tokens; leave it unset or 0")
		}
	}
	return nil
}

func joinKinds() string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Environment variables read by ApplyEnv.
const (
	EnvBaseURL     = "TROUPE_LLM_BASE_URL"
	EnvAPIKey      = "TROUPE_LLM_API_KEY"
	EnvModel       = "TROUPE_LLM_MODEL"
	EnvKind        = "TROUPE_LLM_KIND"
	EnvTemperature = "TROUPE_LLM_TEMPERATURE"
	EnvTopP        = "TROUPE_LLM_TOP_P"
	EnvTopK        = "TROUPE_LLM_TOP_K"
	EnvMaxTokens   = "TROUPE_LLM_MAX_TOKENS"
	EnvFormat      = "TROUPE_LLM_FORMAT"
	EnvTimeout     = "TROUPE_LLM_TIMEOUT"
	EnvRetries     = "TROUPE_LLM_RETRIES"
	EnvMaxInFlight = "TROUPE_LLM_MAX_IN_FLIGHT"
	EnvExtra       = "TROUPE_LLM_EXTRA" // a JSON object of extra body fields
	EnvMaxContext  = "TROUPE_LLM_MAX_CONTEXT"
	EnvTokenIn     = "TROUPE_LLM_TOKEN_IN"
)

// ConfigFromEnv returns DefaultConfig with the TROUPE_LLM_* variables
// applied; lookup is usually os.LookupEnv.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	err := c.ApplyEnv(lookup)
	return c, err
}

// ApplyEnv overrides c's fields with the TROUPE_LLM_* variables that are
// set; an unparseable value is an error naming the variable.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	var errs []error
	parse := func(name string, set func(string) error) {
		if v, ok := lookup(name); ok {
			if err := set(strings.TrimSpace(v)); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s=%q: %v", ErrBadConfig, name, v, err))
			}
		}
	}
	str(EnvBaseURL, &c.BaseURL)
	str(EnvAPIKey, &c.APIKey)
	str(EnvModel, &c.Model)
	parse(EnvKind, func(v string) error { return (*kindValue)(&c.Kind).Set(v) })
	parse(EnvFormat, func(v string) error { return (*formatValue)(&c.Format).Set(v) })
	parse(EnvTemperature, optFloat{&c.Temperature}.Set)
	parse(EnvTopP, optFloat{&c.TopP}.Set)
	parse(EnvTopK, optInt{&c.TopK}.Set)
	parse(EnvMaxTokens, optInt{&c.MaxTokens}.Set)
	parse(EnvRetries, func(v string) (err error) { c.Retries, err = strconv.Atoi(v); return })
	parse(EnvMaxInFlight, func(v string) (err error) { c.MaxInFlight, err = strconv.Atoi(v); return })
	parse(EnvTimeout, func(v string) (err error) { c.Timeout, err = time.ParseDuration(v); return })
	parse(EnvMaxContext, func(v string) (err error) { c.MaxContext, err = strconv.Atoi(v); return })
	parse(EnvTokenIn, func(v string) (err error) { c.TokenIn, err = strconv.ParseBool(v); return })
	parse(EnvExtra, func(v string) error {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf("want a JSON object: %w", err)
		}
		if c.Extra == nil {
			c.Extra = map[string]json.RawMessage{}
		}
		maps.Copy(c.Extra, m)
		return nil
	})
	return errors.Join(errs...)
}

// BindFlags defines the --llm-* flags on fs, with c's current values as
// defaults, and parses them into c. Bind after ApplyEnv so that flags
// override the environment. The API key has no flag, since command lines
// are visible to every user of the machine: use TROUPE_LLM_API_KEY.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.BaseURL, "llm-base-url", c.BaseURL, "OpenAI-compatible base URL of the LLM server (env "+EnvBaseURL+")")
	fs.StringVar(&c.Model, "llm-model", c.Model, "model name sent to the server (env "+EnvModel+")")
	fs.Var((*kindValue)(&c.Kind), "llm-kind", "server kind, which decides how token ids and log-probs are requested: "+joinKinds()+" (env "+EnvKind+")")
	fs.StringVar(&c.RoutingHeader, "llm-routing-header", c.RoutingHeader, "HTTP header carrying each agent's session key, for routers that keep one agent's turns on one worker (SGLang's router: X-SMG-Routing-Key); empty sends none")
	fs.BoolVar(&c.Tokenize, "llm-tokenize", c.Tokenize, "llamacpp: fetch prompt token ids from the server's /apply-template and /tokenize")
	fs.BoolVar(&c.TokenIn, "llm-token-in", c.TokenIn, "vllm, sglang: agents with memory generate token in, token out (vllm: /tokenize, /detokenize, /v1/completions; sglang: /v1/tokenize, /v1/detokenize, /generate), each turn's prompt ids extending the last exactly; default: on for sglang, off for vllm (a router must forward those endpoints) (env "+EnvTokenIn+")")
	fs.Var(optFloat{&c.Temperature}, "llm-temperature", "sampling temperature, always sent (0: greedy) (env "+EnvTemperature+")")
	fs.Var(optFloat{&c.TopP}, "llm-top-p", "nucleus sampling top_p; 0 leaves the server's default (env "+EnvTopP+")")
	fs.Var(optInt{&c.TopK}, "llm-top-k", "top_k sampling; 0 leaves the server's default, -1 turns top-k off (slime's -1; sent to llamacpp as 0) (env "+EnvTopK+")")
	fs.Var(optInt{&c.MaxTokens}, "llm-max-tokens", "most tokens per answer; 0 or -1 leaves the server's default (troupe serve: also the bound of requests that leave max_tokens unset) (env "+EnvMaxTokens+")")
	fs.StringArrayVar(&c.Stop, "llm-stop", c.Stop, "stop sequence (repeatable)")
	fs.IntSliceVar(&c.StopTokenIDs, "llm-stop-token-id", c.StopTokenIDs, "token id that ends an answer (repeatable; vllm and sglang: stop_token_ids; refused for llamacpp and openai)")
	fs.Var(optFloat{&c.RepetitionPenalty}, "llm-repetition-penalty", "repetition penalty, 1 = none; 0 leaves the server's default (vllm, sglang: repetition_penalty; llamacpp: repeat_penalty)")
	fs.Var(optInt{&c.MinTokens}, "llm-min-tokens", "fewest tokens before the answer may end; 0 = unset (vllm, sglang: min_tokens; refused for llamacpp and openai)")
	fs.Var((*extraValue)(&c.Extra), "llm-extra", "extra request body field `key=json` (repeatable), e.g. chat_template_kwargs={\"enable_thinking\":false} (env "+EnvExtra+")")
	fs.Var((*formatValue)(&c.Format), "llm-format", "answer format: json (response_format json_schema), tool (a forced call of the function act; llamacpp: the model's chat template must render tools, as Qwen2.5's and later do) or text (env "+EnvFormat+")")
	fs.IntVar(&c.InvalidRetries, "llm-invalid-retries", c.InvalidRetries, "times an invalid answer is asked again before it counts as invalid")
	fs.BoolVar(&c.Feedback, "llm-feedback", c.Feedback, "re-ask an invalid answer with the error shown to the model (else resample the same prompt)")
	fs.DurationVar(&c.Timeout, "llm-timeout", c.Timeout, "time limit of one HTTP attempt (env "+EnvTimeout+")")
	fs.IntVar(&c.Retries, "llm-retries", c.Retries, "retries of a failed HTTP attempt (429, 5xx, timeouts, broken answers) (env "+EnvRetries+")")
	fs.DurationVar(&c.BackoffBase, "llm-backoff", c.BackoffBase, "first retry backoff; it doubles per retry, with full jitter")
	fs.DurationVar(&c.BackoffMax, "llm-backoff-max", c.BackoffMax, "largest retry backoff")
	fs.DurationVar(&c.MaxRetryWait, "llm-max-retry-wait", c.MaxRetryWait, "longest Retry-After honoured; a longer one fails the call")
	fs.IntVar(&c.MaxInFlight, "llm-max-in-flight", c.MaxInFlight, "most requests in flight to the server, over all episodes (env "+EnvMaxInFlight+")")
	fs.BoolVar(&c.NoMemory, "llm-no-memory", c.NoMemory, "stateless prompts: an agent does not see its own earlier turns")
	fs.IntVar(&c.MaxContext, "llm-max-context", c.MaxContext, "context budget in tokens, prompt and answer (slime's --rollout-max-context-len); the oldest turns are left out when the conversation outgrows it; 0: none (env "+EnvMaxContext+")")
}

// ptr is v's address.
func ptr[T any](v T) *T { return &v }

// value is *p, or the zero value (unset) when p is nil.
func value[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// optFloat is an optional number of protocol.Sampling as a pflag.Value,
// which reads and writes like a float64 flag: nil is 0, the unset value.
// Set points the field at a new value, never writing through the old one.
type optFloat struct{ p **float64 }

func (o optFloat) String() string { return strconv.FormatFloat(value(*o.p), 'g', -1, 64) }
func (o optFloat) Type() string   { return "float64" }
func (o optFloat) Set(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	*o.p = &f
	return nil
}

// optInt is optFloat for an int.
type optInt struct{ p **int }

func (o optInt) String() string { return strconv.Itoa(value(*o.p)) }
func (o optInt) Type() string   { return "int" }
func (o optInt) Set(v string) error {
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		return err
	}
	i := int(n)
	*o.p = &i
	return nil
}

// kindValue is Kind as a pflag.Value.
type kindValue Kind

func (k *kindValue) String() string { return string(*k) }
func (k *kindValue) Type() string   { return "kind" }
func (k *kindValue) Set(v string) error {
	kind := Kind(strings.ToLower(strings.TrimSpace(v)))
	if !slices.Contains(kinds, kind) {
		return fmt.Errorf("unknown server kind %q: want one of %s", v, joinKinds())
	}
	*k = kindValue(kind)
	return nil
}

// formatValue is Format as a pflag.Value.
type formatValue Format

func (f *formatValue) String() string { return string(*f) }
func (f *formatValue) Type() string   { return "format" }
func (f *formatValue) Set(v string) error {
	format := Format(strings.ToLower(strings.TrimSpace(v)))
	if !slices.Contains(formats, format) {
		return fmt.Errorf("unknown answer format %q: want json, tool or text", v)
	}
	*f = formatValue(format)
	return nil
}

// extraValue is Config.Extra as a repeatable key=json pflag.Value.
type extraValue map[string]json.RawMessage

func (e *extraValue) String() string {
	if len(*e) == 0 {
		return ""
	}
	parts := make([]string, 0, len(*e))
	for _, k := range slices.Sorted(maps.Keys(*e)) {
		parts = append(parts, k+"="+string((*e)[k]))
	}
	return strings.Join(parts, ",")
}

func (e *extraValue) Type() string { return "key=json" }

func (e *extraValue) Set(v string) error {
	k, raw, ok := strings.Cut(v, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=json", v)
	}
	if !json.Valid([]byte(raw)) {
		return fmt.Errorf("%q: the value %q is not JSON (quote strings: key=\"text\")", v, raw)
	}
	if *e == nil {
		*e = extraValue{}
	}
	(*e)[k] = json.RawMessage(raw)
	return nil
}

// validHeaderName reports whether s is an HTTP header field name: one or
// more token characters (RFC 9110, section 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}
