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
// sampling settings (protocol.Sampling, inline), what of the --llm-* and
// --role-llm flags, or of a rollout request's sampling and roles, shapes
// the episodes. troupe run writes them from its flags (settingsOf, and a
// role's --role-llm over them), troupe serve from each request's
// sampling over its flags (servedLLMSettings), and every command makes
// the policies from them (llmPool). The server's address, key and kind do
// not belong: they stay flags (or TROUPE_LLM_* variables), and a role
// names the endpoint that has them.
//
// Model and temperature are always written; every other field only when
// it is set (non-zero in the flags, or given by the request), so a spec
// of the flags' defaults holds {"model", "temperature"} alone. A field
// left out of a spec read back keeps the flags' value.
type llmSettings struct {
	// Endpoint names the role's endpoint (--llm-endpoint NAME=URL); ""
	// (left out of the spec) is the default endpoint, the --llm-* flags'.
	Endpoint string `json:"endpoint,omitempty"`
	Model    string `json:"model"`
	protocol.Sampling
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

// settingsOf are the settings of cfg's sampling.
func settingsOf(cfg *llm.Config) llmSettings {
	s := cfg.Sampling
	s.TopP, s.TopK, s.MaxTokens = nonZero(s.TopP), nonZero(s.TopK), nonZero(s.MaxTokens)
	s.RepetitionPenalty, s.MinTokens = nonZero(s.RepetitionPenalty), nonZero(s.MinTokens)
	return llmSettings{Model: cfg.Model, Sampling: s}
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

// applyTo sets cfg's model and sampling from st: the fields st gives
// replace cfg's, the others keep cfg's (protocol.Sampling.Over); extra
// adds to cfg's. The endpoint is the caller's to choose (llmPool).
func (st *llmSettings) applyTo(cfg *llm.Config) {
	if st.Model != "" {
		cfg.Model = st.Model
	}
	cfg.Sampling = st.Sampling.Over(cfg.Sampling)
}

// over is st laid over base: st's endpoint, model and sampling fields
// where it gives them, base's elsewhere.
func (st llmSettings) over(base llmSettings) llmSettings {
	out := base
	out.Endpoint = cmp.Or(st.Endpoint, base.Endpoint)
	out.Model = cmp.Or(st.Model, base.Model)
	out.Sampling = st.Sampling.Over(base.Sampling)
	return out
}

// servedLLMSettings is troupe serve's server.PolicySettings: the settings
// of the "llm" policy of a role in a rollout request's run spec, the
// role's own settings (roles[role]: endpoint, model, sampling) over the
// request's sampling over the service's --llm-* flags, with slime's
// meanings:
//
//   - top_k -1 or 0 is unset (-1: no top-k), sent as given;
//   - max_tokens -1 or 0 is unset, which leaves the service's
//     --llm-max-tokens, else the server's default;
//   - stop and stop_token_ids replace the flags' when not empty;
//   - sampling_seed roots every call's seed (llm.SampledRequestSeed),
//     and so needs one episode per request;
//   - extra adds to the flags' --llm-extra.
//
// An endpoint the service does not define is refused naming the role; a
// field the endpoint's server kind cannot honour is refused by name when
// the policy is made (llm.Config.Validate). The service answers both 400
// bad_policy.
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
		if rs.Endpoint != "" {
			if _, err := eps.config(rs.Endpoint); err != nil {
				return nil, fmt.Errorf("roles.%s.endpoint: %w", role, err)
			}
		}
		st = llmSettings{Endpoint: rs.Endpoint, Model: rs.Model}.over(st)
		return st.encode(), nil
	}
}
