package llmtest

import (
	"encoding/json"
	"hash/fnv"
)

// Reply is what the fake model answers: the text it generates. When the
// request forces a tool, Text is the call's arguments; otherwise it is the
// message content.
type Reply struct {
	Text string
	// Finish is the finish reason to report; empty means the model stopped
	// by itself ("stop", or "tool_calls" for a tool call). A Text longer
	// than the request's max_tokens is cut there and reported as "length"
	// whatever Finish says.
	Finish string
	// Bytewise makes the token-in endpoints (vLLM's /v1/completions,
	// SGLang's /generate) sample Text one byte a token, where Tokenize
	// packs up to three: a tokenization of the same text other than the
	// tokenizer's own, as a real model may sample, so that the chat's ids
	// tokenized anew do not begin with the sampled ones.
	Bytewise bool
}

// Brain decides the fake model's answer to a request. It must be a
// deterministic function of the request, so that the same requests get the
// same answers whatever order they arrive in, and safe for concurrent use.
type Brain func(r *Request) Reply

// DefaultBrain answers the way a model under a grammar would: when the
// request's schema (response_format or forced tool) has an "action"
// property that is a string enum, it picks one of the values, chosen by the
// request's seed; a free string "action" gets "ok"; any other schema gets
// "{}"; a request with no schema gets the text "ok".
func DefaultBrain(r *Request) Reply {
	var seed uint64
	if r.Seed != nil {
		seed = uint64(*r.Seed)
	}
	return choose(r, seed)
}

// First answers like DefaultBrain but always picks the first value of an
// action enum, whatever the seed: every tic-tac-toe game then lasts
// exactly seven turns (x wins on the a3-c1 diagonal), which gives
// benchmarks episodes of equal length.
func First(r *Request) Reply { return choose(r, 0) }

// choose answers r, picking enum value seed mod n.
func choose(r *Request, seed uint64) Reply {
	if r.Schema == nil {
		return Reply{Text: "ok"}
	}
	var s struct {
		Properties map[string]struct {
			Type string   `json:"type"`
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if json.Unmarshal(r.Schema, &s) != nil {
		return Reply{Text: "{}"}
	}
	action, ok := s.Properties["action"]
	switch {
	case !ok:
		return Reply{Text: "{}"}
	case len(action.Enum) > 0:
		return Reply{Text: actionJSON(action.Enum[seed%uint64(len(action.Enum))])}
	}
	return Reply{Text: actionJSON("ok")}
}

// actionJSON returns {"action": a} as a grammar-constrained model writes it.
func actionJSON(a string) string {
	b, _ := json.Marshal(struct {
		Action string `json:"action"`
	}{a})
	return string(b)
}

// Fixed returns a brain that always answers text.
func Fixed(text string) Brain { return func(*Request) Reply { return Reply{Text: text} } }

// hashBody identifies a request body for the per-body fault scripts.
func hashBody(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}
