package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/rollout"
)

// llmSettings are the settings of the "llm" policy in a run spec
// (runspec.Policy.Settings): what of the --llm-* flags, or of a rollout
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
	Model        string   `json:"model"`
	Temperature  float64  `json:"temperature"`
	TopP         *float64 `json:"top_p,omitempty"`
	TopK         *int     `json:"top_k,omitempty"`
	MaxTokens    *int     `json:"max_tokens,omitempty"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	// SamplingSeed is slime's sampling_seed (llm.Config.SamplingSeed).
	SamplingSeed               *int64                     `json:"sampling_seed,omitempty"`
	SkipSpecialTokens          *bool                      `json:"skip_special_tokens,omitempty"`
	NoStopTrim                 *bool                      `json:"no_stop_trim,omitempty"`
	SpacesBetweenSpecialTokens *bool                      `json:"spaces_between_special_tokens,omitempty"`
	RepetitionPenalty          *float64                   `json:"repetition_penalty,omitempty"`
	MinTokens                  *int                       `json:"min_tokens,omitempty"`
	Extra                      map[string]json.RawMessage `json:"extra,omitempty"`
}

// nonZero is v's address, or nil for the zero value.
func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// valueOf is *p, or the zero value for nil.
func valueOf[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// settingsOf are the settings of cfg's sampling.
func settingsOf(cfg *llm.Config) llmSettings {
	return llmSettings{
		Model: cfg.Model, Temperature: cfg.Temperature, TopP: nonZero(cfg.TopP), TopK: nonZero(cfg.TopK),
		MaxTokens: nonZero(cfg.MaxTokens), Stop: cfg.Stop, StopTokenIDs: cfg.StopTokenIDs, SamplingSeed: cfg.SamplingSeed,
		SkipSpecialTokens: cfg.SkipSpecialTokens, NoStopTrim: cfg.NoStopTrim, SpacesBetweenSpecialTokens: cfg.SpacesBetweenSpecialTokens,
		RepetitionPenalty: nonZero(cfg.RepetitionPenalty), MinTokens: nonZero(cfg.MinTokens), Extra: cfg.Extra,
	}
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

// applyLLMSettings sets cfg's sampling from a spec's settings: the fields
// they hold replace cfg's, the others keep cfg's. Unknown fields are
// refused by name.
func applyLLMSettings(cfg *llm.Config, settings json.RawMessage) error {
	if len(settings) == 0 {
		return nil
	}
	st := settingsOf(cfg)
	st.Extra = maps.Clone(st.Extra) // decoding adds to the map
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	cfg.Model, cfg.Temperature, cfg.TopP, cfg.TopK = st.Model, st.Temperature, valueOf(st.TopP), valueOf(st.TopK)
	cfg.MaxTokens, cfg.Stop, cfg.StopTokenIDs, cfg.SamplingSeed = valueOf(st.MaxTokens), st.Stop, st.StopTokenIDs, st.SamplingSeed
	cfg.SkipSpecialTokens, cfg.NoStopTrim, cfg.SpacesBetweenSpecialTokens = st.SkipSpecialTokens, st.NoStopTrim, st.SpacesBetweenSpecialTokens
	cfg.RepetitionPenalty, cfg.MinTokens, cfg.Extra = valueOf(st.RepetitionPenalty), valueOf(st.MinTokens), st.Extra
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
//   - seed (slime's sampling_seed) roots every call's seed
//     (llm.SampledRequestSeed), and so needs one episode per request;
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
			if s.Temperature != nil {
				st.Temperature = *s.Temperature
			}
			if s.TopP != nil {
				st.TopP = s.TopP
			}
			if s.TopK != nil {
				st.TopK = s.TopK
			}
			if m := s.MaxTokens; m != nil && (*m > 0 || *m < -1) {
				st.MaxTokens = m // below -1: Validate names it
			}
			if len(s.Stop) > 0 {
				st.Stop = s.Stop
			}
			if len(s.StopTokenIDs) > 0 {
				st.StopTokenIDs = s.StopTokenIDs
			}
			if s.Seed != nil {
				if n := req.N; n > 1 {
					return nil, fmt.Errorf("sampling seed with n %d: the episodes of one request would sample with the same seeds; send one request per sampling seed (slime: sampling_seed = rollout_seed + j, one request per copy)", n)
				}
				st.SamplingSeed = s.Seed
			}
			if s.SkipSpecialTokens != nil {
				st.SkipSpecialTokens = s.SkipSpecialTokens
			}
			if s.NoStopTrim != nil {
				st.NoStopTrim = s.NoStopTrim
			}
			if s.SpacesBetweenSpecialTokens != nil {
				st.SpacesBetweenSpecialTokens = s.SpacesBetweenSpecialTokens
			}
			if s.RepetitionPenalty != nil {
				st.RepetitionPenalty = s.RepetitionPenalty
			}
			if s.MinTokens != nil {
				st.MinTokens = s.MinTokens
			}
			if len(s.Extra) > 0 {
				st.Extra = maps.Clone(base.Extra)
				if st.Extra == nil {
					st.Extra = map[string]json.RawMessage{}
				}
				maps.Copy(st.Extra, s.Extra)
			}
		}
		return st.encode(), nil
	}
}
