package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// llmSettings are the settings of the "llm" policy of a role in a run spec
// (runspec.Policy.Settings): the endpoint's name, the model and its
// sampling settings (protocol.Sampling, inline), and every other setting
// that changes a prompt or the samples' ids (llmShape, inline): what of
// the --llm-* and --role-llm flags, or of a rollout request's sampling
// and roles, shapes the episodes. troupe run writes them from its flags
// (settingsOf, and a role's --role-llm over them), troupe serve from each
// request's sampling and roles over its flags (servedLLMSettings), and
// every command makes the policies from them (llmPool). The server's
// address and key do not belong: they stay flags (or TROUPE_LLM_*
// variables), and a role names the endpoint that has them.
//
// Model and temperature are always written; every other field only when
// it is set (non-zero in the flags, or given by the request), so a spec
// of the flags' defaults holds {"model", "temperature"} alone, as specs
// did before the llmShape fields, which keep their hash. A sampling field
// left out of a spec read back keeps the flags' value; an llmShape field
// left out is its default (llmShape), whatever the flags say.
type llmSettings struct {
	// Endpoint names the role's endpoint (--llm-endpoint NAME=URL); ""
	// (left out of the spec) is the default endpoint, the --llm-* flags'.
	Endpoint string `json:"endpoint,omitempty"`
	Model    string `json:"model"`
	protocol.Sampling
	llmShape
}

// llmShape are the settings besides the model and sampling that change a
// prompt or the samples' ids. Each is written only when it is not its
// default, the value a spec that leaves it out means (those written before
// the fields existed included, which so keep their hash):
//
//	no_memory        true: each prompt from the observation alone (--llm-no-memory); default false
//	max_context      the context budget in tokens (--llm-max-context); default 0, none
//	format           tool or text (--llm-format); default json
//	invalid_retries  re-asks of an invalid answer (--llm-invalid-retries); default 2
//	feedback         false: re-asks resample without the error (--llm-feedback); default true
//	kind             the endpoint's server kind (--llm-kind): sglang, llamacpp or openai; default vllm
//	token_in         true: the endpoint generates token in, token out (--llm-token-in); default false
//	tokenize         false: a llamacpp endpoint fetches no prompt ids (--llm-tokenize); default true
//
// The first five are the policy's: a spec's apply, whatever the flags of
// the command that plays it (a resumed run, a NATS worker). The last three
// are the endpoint's, which the command's flags define: a spec's are
// checked against them, and a role whose endpoint differs is refused,
// naming the setting and its flag.
type llmShape struct {
	NoMemory       bool   `json:"no_memory,omitempty"`
	MaxContext     int    `json:"max_context,omitempty"`
	Format         string `json:"format,omitempty"`
	InvalidRetries *int   `json:"invalid_retries,omitempty"`
	Feedback       *bool  `json:"feedback,omitempty"`
	Kind           string `json:"kind,omitempty"`
	TokenIn        bool   `json:"token_in,omitempty"`
	Tokenize       *bool  `json:"tokenize,omitempty"`
}

// shapeDefaults is the config whose llmShape fields are the defaults a
// spec that leaves them out means.
var shapeDefaults = llm.DefaultConfig()

// shapeOf is cfg's llmShape: its fields that differ from their defaults.
func shapeOf(cfg *llm.Config) llmShape {
	d := &shapeDefaults
	var sh llmShape
	sh.NoMemory, sh.MaxContext = cfg.NoMemory, cfg.MaxContext
	if cfg.Format != d.Format {
		sh.Format = string(cfg.Format)
	}
	if cfg.InvalidRetries != d.InvalidRetries {
		sh.InvalidRetries = new(cfg.InvalidRetries)
	}
	if cfg.Feedback != d.Feedback {
		sh.Feedback = new(cfg.Feedback)
	}
	sh.endpointOf(cfg)
	return sh
}

// endpointOf sets sh's endpoint fields to cfg's, the endpoint a role plays
// on.
func (sh *llmShape) endpointOf(cfg *llm.Config) {
	sh.Kind, sh.TokenIn, sh.Tokenize = "", cfg.TokenIn, nil
	if cfg.Kind != shapeDefaults.Kind {
		sh.Kind = string(cfg.Kind)
	}
	if cfg.Kind == llm.KindLlamaCpp && !cfg.Tokenize {
		sh.Tokenize = new(false)
	}
}

// applyTo sets cfg's policy settings (no_memory, max_context, format,
// invalid_retries, feedback) to sh's, their defaults where sh leaves them
// out.
func (sh *llmShape) applyTo(cfg *llm.Config) {
	d := &shapeDefaults
	cfg.NoMemory, cfg.MaxContext = sh.NoMemory, sh.MaxContext
	cfg.Format = cmp.Or(llm.Format(sh.Format), d.Format)
	cfg.InvalidRetries, cfg.Feedback = d.InvalidRetries, d.Feedback
	if sh.InvalidRetries != nil {
		cfg.InvalidRetries = *sh.InvalidRetries
	}
	if sh.Feedback != nil {
		cfg.Feedback = *sh.Feedback
	}
}

// checkEndpoint refuses an endpoint (cfg, its client's) that is not the
// one sh records: another server kind, token-in or tokenization than the
// run was made with would change its prompts' ids. The error names the
// setting and the flag that sets it.
func (sh *llmShape) checkEndpoint(cfg *llm.Config) error {
	var want llmShape
	want.endpointOf(cfg)
	kind := func(k string) string { return cmp.Or(k, string(shapeDefaults.Kind)) }
	switch {
	case kind(sh.Kind) != kind(want.Kind):
		return fmt.Errorf("kind: the run's is %s, the endpoint's %s (--llm-kind, or kind= of --llm-endpoint)", kind(sh.Kind), kind(want.Kind))
	case sh.TokenIn != want.TokenIn:
		return fmt.Errorf("token_in: the run's is %t, the endpoint's %t (--llm-token-in, or token_in= of --llm-endpoint)", sh.TokenIn, want.TokenIn)
	case (sh.Tokenize == nil) != (want.Tokenize == nil):
		return fmt.Errorf("tokenize: the run's is %t, the endpoint's %t (--llm-tokenize, or tokenize= of --llm-endpoint)", sh.Tokenize == nil, want.Tokenize == nil)
	}
	return nil
}

// over is sh laid over base: sh's policy settings where it gives them
// (not their defaults), base's elsewhere. The endpoint fields are
// base's: the caller sets them from the role's endpoint (endpointOf).
func (sh llmShape) over(base llmShape) llmShape {
	out := base
	out.NoMemory = sh.NoMemory || base.NoMemory
	out.MaxContext = cmp.Or(sh.MaxContext, base.MaxContext)
	out.Format = cmp.Or(sh.Format, base.Format)
	if sh.InvalidRetries != nil {
		out.InvalidRetries = sh.InvalidRetries
	}
	if sh.Feedback != nil {
		out.Feedback = sh.Feedback
	}
	return out.normal()
}

// normal is sh with its fields at their defaults left out, so that a
// setting given as its default writes the spec that leaving it out does.
func (sh llmShape) normal() llmShape {
	d := &shapeDefaults
	if sh.Format == string(d.Format) {
		sh.Format = ""
	}
	if sh.InvalidRetries != nil && *sh.InvalidRetries == d.InvalidRetries {
		sh.InvalidRetries = nil
	}
	if sh.Feedback != nil && *sh.Feedback == d.Feedback {
		sh.Feedback = nil
	}
	if sh.Kind == string(d.Kind) {
		sh.Kind = ""
	}
	if sh.Tokenize != nil && *sh.Tokenize {
		sh.Tokenize = nil
	}
	return sh
}

// nonZero is p, or nil when p is nil or points at the zero value (a
// flag's unset value).
func nonZero[T comparable](p *T) *T {
	var zero T
	if p == nil || *p == zero {
		return nil
	}
	return p
}

// settingsOf are the settings of cfg's sampling and shape.
func settingsOf(cfg *llm.Config) llmSettings {
	s := cfg.Sampling
	s.TopP, s.TopK, s.MaxTokens = nonZero(s.TopP), nonZero(s.TopK), nonZero(s.MaxTokens)
	s.RepetitionPenalty, s.MinTokens = nonZero(s.RepetitionPenalty), nonZero(s.MinTokens)
	return llmSettings{Model: cfg.Model, Sampling: s, llmShape: shapeOf(cfg)}
}

func (st *llmSettings) encode() json.RawMessage {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err) // strings, numbers and JSON values always encode
	}
	return b
}

// decodeLLMSettings reads a spec's llm settings strictly: unknown fields
// are refused by name. A field not given is the zero value (model "",
// endpoint "": the default endpoint), which applyTo and over leave to
// what the settings are laid over.
func decodeLLMSettings(settings json.RawMessage) (llmSettings, error) {
	var st llmSettings
	if len(settings) == 0 {
		return st, nil
	}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("settings: %w", err)
	}
	return st, nil
}

// applyTo sets cfg's model, sampling and policy settings from st: the
// model and sampling fields st gives replace cfg's, the others keep cfg's
// (protocol.Sampling.Over), extra adds to cfg's; the policy settings are
// st's, defaults included (llmShape.applyTo). The endpoint is the
// caller's to choose, and to check (llmPool).
func (st *llmSettings) applyTo(cfg *llm.Config) {
	if st.Model != "" {
		cfg.Model = st.Model
	}
	cfg.Sampling = st.Sampling.Over(cfg.Sampling)
	st.llmShape.applyTo(cfg)
}

// over is st laid over base: st's endpoint, model, sampling and policy
// settings where it gives them, base's elsewhere; the endpoint fields
// are base's (the caller sets them for the endpoint st names).
func (st llmSettings) over(base llmSettings) llmSettings {
	out := base
	out.Endpoint = cmp.Or(st.Endpoint, base.Endpoint)
	out.Model = cmp.Or(st.Model, base.Model)
	out.Sampling = st.Sampling.Over(base.Sampling)
	out.llmShape = st.llmShape.over(base.llmShape)
	return out
}

// servedLLMSettings is troupe serve's server.PolicySettings: the settings
// of the "llm" policy of a role in a rollout request's run spec, the
// role's own settings (roles[role]: endpoint, model, sampling,
// max_context) over the request's sampling and max_context over the
// service's --llm-* flags, with slime's meanings:
//
//   - top_k -1 or 0 is unset (-1: no top-k), sent as given;
//   - max_tokens -1 or 0 is unset, which leaves the service's
//     --llm-max-tokens, else the server's default;
//   - stop and stop_token_ids replace the flags' when not empty;
//   - sampling_seed roots every call's seed (llm.SampledRequestSeed),
//     and so needs one episode per request;
//   - extra adds to the flags' --llm-extra;
//   - max_context 0 is unset, which leaves the flags' --llm-max-context
//     (slime's --rollout-max-context-len, which its adapter sends).
//
// The settings record the role's endpoint's kind, token-in and
// tokenization (llmShape). An endpoint the service does not define is
// refused naming the role; a field the endpoint's server kind cannot
// honour (or a max_tokens that leaves no room in max_context) is refused
// by name when the policy is made (llm.Config.Validate). The service
// answers both 400 bad_policy.
func servedLLMSettings(eps *llmEndpoints) func(name, role string, req *rollout.Request) (json.RawMessage, error) {
	return func(name, role string, req *rollout.Request) (json.RawMessage, error) {
		if name != llmPolicyName {
			return nil, nil
		}
		st := settingsOf(&eps.base)
		rs := req.Roles[role]
		for _, s := range []*protocol.Sampling{req.Sampling, rs.Sampling} {
			if s == nil {
				continue
			}
			given := *s
			if m := given.MaxTokens; m != nil && *m >= -1 && *m <= 0 {
				given.MaxTokens = nil // unset: the flags' (below -1: Validate names it)
			}
			if len(given.Stop) == 0 {
				given.Stop = nil
			}
			if len(given.StopTokenIDs) == 0 {
				given.StopTokenIDs = nil
			}
			st.Sampling = given.Over(st.Sampling)
		}
		if n := req.N; st.SamplingSeed != nil && n > 1 && (req.Sampling != nil && req.Sampling.SamplingSeed != nil || rs.Sampling != nil && rs.Sampling.SamplingSeed != nil) {
			return nil, fmt.Errorf("sampling seed with n %d: the episodes of one request would sample with the same seeds; send one request per sampling seed (slime: sampling_seed = rollout_seed + j, one request per copy)", n)
		}
		cfg, err := eps.config(rs.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("roles.%s.endpoint: %w", role, err)
		}
		st = llmSettings{Endpoint: rs.Endpoint, Model: rs.Model, llmShape: llmShape{MaxContext: cmp.Or(rs.MaxContext, req.MaxContext)}}.over(st)
		st.endpointOf(&cfg)
		return st.encode(), nil
	}
}
