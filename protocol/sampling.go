package protocol

import (
	"encoding/json"
	"maps"
)

// Sampling are an LLM policy's sampling settings: the one declaration of
// them, which every layer shares. llm.Config embeds it; so do the settings
// of the "llm" policy in a run spec (troupe run, serve and worker), a
// rollout request's sampling field (rollout.Request.Sampling) and a
// league's llm players (league.LLMSettings). In JSON its fields are
// written inline, under the names OpenAI-compatible servers give them,
// with slime's meanings (slime/rollout/sglang_rollout.py builds them from
// its --rollout-* flags).
//
// Every field is optional: nil (a nil slice or map) is "not given". Laid
// over other settings (Over: a rollout request's over troupe serve's
// --llm-* flags, a run spec's over a worker's flags, a league player's
// over the llm package's defaults) a field not given keeps theirs; in an
// llm.Config it leaves the server's default. Pointers keep an explicit 0
// (temperature 0 is greedy decoding; top_p 0 and top_k 0 unset what they
// are laid over) apart from "not given".
//
// TopK and MaxTokens take -1 as "unset", as SGLang and vLLM do (slime's
// default --rollout-top-k is -1: no top-k); 0 means unset too.
// SamplingSeed is slime's sampling_seed: each model call's seed derives
// from it, the agent, its turn and the attempt, so the j-th copy of a
// prompt samples reproducibly and differently from the others. The bool
// fields are SGLang's detokenizer switches, which slime always sends;
// RepetitionPenalty and MinTokens are what slime's evaluation adds
// (repetition_penalty, min_new_tokens). Whoever sends them to a server
// (package llm) honours each or refuses it by name.
type Sampling struct {
	Temperature  *float64 `json:"temperature,omitempty"`
	TopP         *float64 `json:"top_p,omitempty"`
	TopK         *int     `json:"top_k,omitempty"`
	MaxTokens    *int     `json:"max_tokens,omitempty"`
	Stop         []string `json:"stop,omitempty"`
	StopTokenIDs []int    `json:"stop_token_ids,omitempty"`
	SamplingSeed *int64   `json:"sampling_seed,omitempty"`

	SkipSpecialTokens          *bool `json:"skip_special_tokens,omitempty"`
	NoStopTrim                 *bool `json:"no_stop_trim,omitempty"`
	SpacesBetweenSpecialTokens *bool `json:"spaces_between_special_tokens,omitempty"`

	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
	MinTokens         *int     `json:"min_tokens,omitempty"`
	// Extra holds vendor fields passed through untouched to the model
	// server's request body (chat_template_kwargs, min_p, ...).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Over is s laid over base: every field s gives replaces base's, the
// others keep base's; Extra is base's with s's keys added (a new map when
// s has any). Neither s nor base is written to, and the result shares
// their pointers: callers replace a field, never write through it.
func (s Sampling) Over(base Sampling) Sampling {
	out := base
	over(&out.Temperature, s.Temperature)
	over(&out.TopP, s.TopP)
	over(&out.TopK, s.TopK)
	over(&out.MaxTokens, s.MaxTokens)
	if s.Stop != nil {
		out.Stop = s.Stop
	}
	if s.StopTokenIDs != nil {
		out.StopTokenIDs = s.StopTokenIDs
	}
	over(&out.SamplingSeed, s.SamplingSeed)
	over(&out.SkipSpecialTokens, s.SkipSpecialTokens)
	over(&out.NoStopTrim, s.NoStopTrim)
	over(&out.SpacesBetweenSpecialTokens, s.SpacesBetweenSpecialTokens)
	over(&out.RepetitionPenalty, s.RepetitionPenalty)
	over(&out.MinTokens, s.MinTokens)
	if len(s.Extra) > 0 {
		out.Extra = maps.Clone(base.Extra)
		if out.Extra == nil {
			out.Extra = make(map[string]json.RawMessage, len(s.Extra))
		}
		maps.Copy(out.Extra, s.Extra)
	}
	return out
}

// over sets *dst to v when v is given.
func over[T any](dst **T, v *T) {
	if v != nil {
		*dst = v
	}
}
