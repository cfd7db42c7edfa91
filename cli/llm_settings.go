package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// llmSettings are the settings of the "llm" policy in a run spec
// (runspec.Policy.Settings): the model and its sampling settings
// (protocol.Sampling, inline), what of the --llm-* flags, or of a rollout
// request's sampling, shapes the episodes. troupe run writes them from its
// flags (llmSettingsOf), troupe serve from each request's sampling over
// its flags (servedLLMSettings), and both make the policy from them
// (applyLLMSettings). The server's address, key and kind do not belong:
// they stay flags (or TROUPE_LLM_* variables).
//
// Model and temperature are always written; every other field only when
// it is set (non-zero in the flags, or given by the request), so a spec
// of the flags' defaults holds {"model", "temperature"} alone. A field
// left out of a spec read back keeps the flags' value.
type llmSettings struct {
	Model string `json:"model"`
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

// llmSettingsOf is the spec settings of cfg (troupe run's flags).
func llmSettingsOf(cfg *llm.Config) json.RawMessage {
	st := settingsOf(cfg)
	return st.encode()
}

// applyLLMSettings sets cfg's model and sampling from a spec's settings:
// the fields they hold replace cfg's, the others keep cfg's
// (protocol.Sampling.Over); extra adds to cfg's. Unknown fields are
// refused by name.
func applyLLMSettings(cfg *llm.Config, settings json.RawMessage) error {
	if len(settings) == 0 {
		return nil
	}
	st := llmSettings{Model: cfg.Model}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	cfg.Model, cfg.Sampling = st.Model, st.Sampling.Over(cfg.Sampling)
	return nil
}

// servedLLMSettings is troupe serve's server.PolicySettings: the settings
// of the "llm" policy in a rollout request's run spec, the request's
// sampling parameters over the service's --llm-* flags, with slime's
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
// A field the server kind cannot honour is refused by name when the
// policy is made (llm.Config.Validate): the service answers 400
// bad_policy.
func servedLLMSettings(base llm.Config) func(name string, req *rollout.Request) (json.RawMessage, error) {
	return func(name string, req *rollout.Request) (json.RawMessage, error) {
		if name != llmPolicyName {
			return nil, nil
		}
		st := settingsOf(&base)
		if s := req.Sampling; s != nil {
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
			if n := req.N; given.SamplingSeed != nil && n > 1 {
				return nil, fmt.Errorf("sampling seed with n %d: the episodes of one request would sample with the same seeds; send one request per sampling seed (slime: sampling_seed = rollout_seed + j, one request per copy)", n)
			}
			st.Sampling = given.Over(st.Sampling)
		}
		return st.encode(), nil
	}
}
