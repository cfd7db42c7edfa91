// Package rollout is the wire contract of troupe's HTTP rollout service: the
// request that asks for episodes, the response that carries their samples,
// the scenario listing and the error body. The service lives in
// rollout/server, the Go client in rollout/client; a Python caller (slime's
// custom-generate adapter in examples/slime) speaks the same JSON.
//
// The endpoints:
//
//	POST /v1/rollouts    Request -> Response (422 too_many_samples or
//	                     answer_too_large past the service's answer limits)
//	GET  /v1/scenarios   -> ScenarioList
//	GET  /v1/allocators  -> AllocatorList
//	GET  /healthz        -> Health (200 serving, 503 draining)
//	GET  /metrics        -> Prometheus text format
//
// Every error is answered with a 4xx or 5xx status and an ErrorBody naming
// the problem (the field, or the limit and the flag that sets it). Samples
// are slime Samples, encoded exactly as protocol.Sample.AppendJSON writes
// them.
//
// Failed samples. Every sample of an aborted or failed episode (a policy
// or model-server error, a timeout, a broken game) carries remove_sample:
// true, so slime keeps it in the batch but zeroes its loss mask; a request
// with keep_failed: true gets them trainable (remove_sample false), as
// completed and truncated episodes' samples always are.
//
// Answer limits. The service bounds what one answer may hold: at most
// --max-samples-per-answer samples (default 65,536) and
// --max-answer-bytes encoded bytes (default 64 MiB). A request known to
// pass the samples limit before playing (the scenario tells its turns per
// episode) is refused at once; otherwise its episodes are stopped as soon
// as they pass it. An answer that grows past the bytes limit is not sent:
// the request is answered 422 answer_too_large instead. Neither is ever a
// truncated 200.
//
// Stateful allocators. An allocator whose values depend on the groups it
// saw before (rae: a baseline per scenario and role) exists once per
// allocator spec for the life of the service: every request naming the
// allocator spec shares it, "rae" and "rae:alpha=0.95" being one (the
// canonical form the resolved run spec lists it under, the allocator's
// Name). It is not keyed by the request's run spec: that differs with
// every request's ids and seeds, and a baseline only one request saw
// would be no baseline. With --allocator-state DIR its state is kept in
// DIR, one file per allocator spec,
// loaded at start-up and saved (atomically) after every request that
// changed it and at shutdown. Requests update it one at a time: a request
// takes the locks of its stateful allocators once its episodes are
// played, and holds them while it allocates and saves; within a request
// the episodes are allocated in episode order, each episode's samples
// with the baseline taken before that episode's update. The state after
// any set of requests is therefore that of applying them sequentially in
// the order they took the locks, which each answer reports in its
// Troupe-Allocation-Seq header (ascending from 1 per service process); a
// single client sending its requests one after another gets a fully
// deterministic state. A request refused after allocating (422
// answer_too_large) or whose allocation fails leaves the state as it was;
// an answered request's update is saved before its answer is written, so
// it stays even if the caller goes away before reading the answer.
// Requests may not name state files (state=).
//
// Draining. From SIGTERM on, every rollout request, kept-alive connections
// included, is answered 503 shutting_down with "Connection: close" (a whole
// answer, never a reset connection), while the requests in flight finish.
package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/protocol"
)

// Paths of the service's endpoints.
const (
	PathRollouts   = "/v1/rollouts"
	PathScenarios  = "/v1/scenarios"
	PathAllocators = "/v1/allocators"
	PathHealth     = "/healthz"
	PathMetrics    = "/metrics"
)

// HeaderServerTiming carries the time a rollout request spent inside its
// episodes, as "episodes;dur=MS" (W3C Server-Timing, milliseconds). It is a
// header rather than a body field so that the body stays a pure function of
// the request: the same request with the same ids answers the same bytes.
const HeaderServerTiming = "Server-Timing"

// HeaderAllocationSeq orders the answers of requests that updated a
// stateful allocator (rae's baselines): each such answer carries the
// service's allocation sequence number, taken while the request held the
// locks of its stateful allocators. Applying the requests to fresh
// allocators in ascending order reproduces the service's state exactly.
// The numbers start at 1 in every service process; answers of requests
// without a stateful allocator carry none.
const HeaderAllocationSeq = "Troupe-Allocation-Seq"

// Request asks the service for the episodes of one group: N episodes of one
// scenario that share a scenario seed and a group_index, each with its own
// rollout_id and policy seed.
//
// Optional numbers are pointers so that 0 (a valid rollout_id, index or
// seed) can be told from "not given".
type Request struct {
	// Scenario names the scenario (GET /v1/scenarios lists them).
	Scenario string `json:"scenario"`
	// Params are the scenario's parameters. Values may be JSON strings,
	// numbers or booleans; the scenario's declarations check them.
	Params Params `json:"params,omitempty"`
	// Prompt and Label come from the dataset row (slime's sample.prompt and
	// sample.label). A scenario that declares a parameter called "prompt"
	// or "label" receives them there, unless Params sets it; a text prompt
	// is passed as is, a chat prompt as its JSON text. Label is any JSON
	// value (slime datasets carry strings, numbers and objects): a string
	// reaches a "label" parameter as its text, any other value as its JSON
	// text. A non-null Label also becomes every returned sample's label,
	// as sent: the same JSON value with its numbers, key order and escapes
	// unchanged, only insignificant whitespace dropped (the game's own
	// label, if it has a different one, moves to metadata "game_label").
	// A label that is not JSON is refused naming the field.
	Prompt *Prompt         `json:"prompt,omitempty"`
	Label  json.RawMessage `json:"label,omitempty"`
	Seed   *uint64         `json:"seed,omitempty"` // scenario seed; default: derived from the service seed and group_index
	// PolicySeed roots the episodes' policy seeds: episode i draws from
	// seeds.Mix(PolicySeed, i). Default: derived from the scenario seed and
	// each episode's rollout_id, so that slime's n copies of a prompt (one
	// request each, same group_index, different rollout_id) play differently.
	PolicySeed *uint64 `json:"policy_seed,omitempty"`
	// N is the number of episodes; 0 means 1.
	N int `json:"n,omitempty"`
	// GroupIndex is the episodes' group_index (slime's sample.group_index);
	// default: a fresh one from the service's counter.
	GroupIndex *int64 `json:"group_index,omitempty"`
	// Index is the index of the first sample of the response; the others
	// follow in order. Default: a block from the service's counter.
	Index *int64 `json:"index,omitempty"`
	// RolloutID is the first episode's rollout_id; episode i gets
	// RolloutID+i. Default: a block of N ids from the service's counter,
	// unique for the life of the service.
	RolloutID *int64 `json:"rollout_id,omitempty"`
	// Policy names the policy of every role; Policies names it per role
	// (and wins over Policy). Roles named by neither play the scenario's
	// default policy, or "random".
	Policy   string            `json:"policy,omitempty"`
	Policies map[string]string `json:"policies,omitempty"`
	// Sampling becomes the settings, in the request's run spec, of the
	// roles that play one of the service's own policies (an LLM's sampling
	// over the service's --llm-* flags); the scenarios' own policies and
	// random ignore it. MaxTokens unset (-1 or 0) is bounded by the
	// service's own --llm-max-tokens, else by the model's context; a
	// SamplingSeed needs a request of one episode. SessionID is slime's
	// routing key for consistent-hashing routers.
	Sampling  *protocol.Sampling `json:"sampling,omitempty"`
	SessionID string             `json:"session_id,omitempty"`
	// Roles gives roles settings of their own: the endpoint, model,
	// sampling and context budget their policy (the service's own, llm)
	// plays with, over Sampling, MaxContext and the service's flags, and
	// whether the role is frozen.
	// A role it names must be one of the scenario's; settings other than
	// frozen need a role that plays one of the service's policies.
	Roles map[string]RoleSettings `json:"roles,omitempty"`
	// Allocators are reward allocator specs ("team", "rloo(key=role)",
	// "rae:alpha=0.9"); default ["team"]. They see the request's episodes
	// as one group. Stateless ones are built for the request; a stateful
	// one (rae) is the service's single instance of its spec, whose state
	// carries over from request to request (see the package doc for the
	// order of updates). A spec may not name a state file (state=).
	Allocators []string `json:"allocators,omitempty"`
	// RewardFormat is "scalar" (the first allocator's value, the default)
	// or "dict" (every allocator's value by name, for slime's --reward-key).
	RewardFormat string `json:"reward_format,omitempty"`
	// Emit lists the roles whose turns become samples; empty means all.
	Emit   []string `json:"emit,omitempty"`
	Limits *Limits  `json:"limits,omitempty"`
	// Invalid is the rule for invalid answers: "pass" (the game judges
	// them, the default), "forfeit" or "spiral" (see env.InvalidRule).
	Invalid string `json:"invalid,omitempty"`
	// KeepFailed keeps aborted and failed samples trainable. By default
	// every sample of an aborted or failed episode carries remove_sample:
	// true, which makes slime zero its loss mask: a turn cut by a server
	// error or a broken game is not a training signal. Their rewards are
	// set all the same, and the rollout keeps its status and error.
	KeepFailed bool `json:"keep_failed,omitempty"`
	// MergeTurns answers with the merged layout (troupe run
	// --merge-turns): one sample per agent per episode, its whole
	// conversation, loss_mask 1 on the model's own tokens only, its
	// reward made of the turns' rewards as MergeReward says
	// (trajectories.MergeTurnsBy). The answer's
	// samples limit counts the merged samples, and their indexes are
	// contiguous from Index (or the block reserved for them); episodes
	// are then bounded by the request's limits and the episode timeout,
	// not by a turn cap from the samples limit.
	MergeTurns bool `json:"merge_turns,omitempty"`
	// MergeReward is a merged sample's reward of its turns' rewards:
	// "mean" (the default, trajectories.DefaultMergeReward: under team or
	// individual credit, the episode's reward whatever its length, so
	// that a group compares episodes, not their lengths), "sum" (the
	// return of per-turn credit; what merge_turns gave before the field)
	// or "last" (the last turn's). Each merged sample's metadata
	// merged_reward names it. Only with MergeTurns.
	MergeReward string `json:"merge_reward,omitempty"`
	// MaxContext is the context budget in tokens, prompt and answer
	// together, of every role that plays one of the service's LLM
	// policies (slime's --rollout-max-context-len; troupe run
	// --llm-max-context): the oldest turns of a conversation that
	// outgrows it are left out. 0 leaves the service's --llm-max-context;
	// a role's own (Roles[role].MaxContext) wins.
	MaxContext int `json:"max_context,omitempty"`
	// Tree plays every episode with tree sampling (AT-GRPO, MAGRPO; troupe
	// run --tree, docs/credit.md): at each turn of a tree-sampled role the
	// seat's policy is asked K times from the same history, each candidate
	// is scored by playing the episode on from it, the best is kept, and
	// all K become samples. The samples limit counts every candidate, and
	// is checked before playing as K times the scenario's minimum turns and
	// once the episodes are played; no turn cap stands for it. It cannot
	// be merged (merge_turns).
	Tree *Tree `json:"tree,omitempty"`
}

// Tree is a request's tree sampling.
type Tree struct {
	K int `json:"k"` // candidates per turn, at least 2
	// Alpha weighs the team reward in a candidate's reward, Alpha·team +
	// the seat's own score (AT-GRPO's mix); default 1.
	Alpha *float64 `json:"alpha,omitempty"`
	// Joint draws candidate c of a step as every sampled seat's c-th
	// answer (MAGRPO) rather than one seat at a time (AT-GRPO).
	Joint bool     `json:"joint,omitempty"`
	Roles []string `json:"roles,omitempty"` // the roles tree-sampled; default every emitted role
}

// RoleSettings are one role's settings in a rollout request.
type RoleSettings struct {
	// Endpoint names one of the service's LLM endpoints (troupe serve
	// --llm-endpoint NAME=URL); empty: the default one.
	Endpoint string `json:"endpoint,omitempty"`
	// Model is the model name (or LoRA adapter) sent; empty: the
	// service's.
	Model string `json:"model,omitempty"`
	// Sampling is laid over the request's Sampling, field by field.
	Sampling *protocol.Sampling `json:"sampling,omitempty"`
	// MaxContext is the role's context budget in tokens (the request's
	// MaxContext for this role alone); 0: the request's.
	MaxContext int `json:"max_context,omitempty"`
	// Frozen roles are played and recorded but return no samples (the
	// opponents a learner is not trained against itself as): their turns
	// are left out as Emit leaves roles out, and the credit of the others
	// is theirs all the same. A role both frozen and in Emit is refused.
	Frozen bool `json:"frozen,omitempty"`
}

// Limits bound each episode of a request; zero fields take the service's
// defaults (no step, turn or message limit; its episode timeout). A
// timeout longer than the service's episode timeout is cut to it.
type Limits struct {
	MaxSteps       int     `json:"max_steps,omitempty"`
	MaxTurns       int     `json:"max_turns,omitempty"`
	MaxMessages    int     `json:"max_messages,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Response is the answer to a Request: one Rollout per episode, in episode
// order.
type Response struct {
	Rollouts []Rollout `json:"rollouts"`
}

// Samples returns every sample of the response, rollout after rollout.
func (r *Response) Samples() []protocol.Sample {
	var out []protocol.Sample
	for i := range r.Rollouts {
		out = append(out, r.Rollouts[i].Samples...)
	}
	return out
}

// Rollout is one episode: its identity, how it ended, its score, and its
// samples (the turns of the emitted roles, in order of play). A failed or
// aborted episode is a Rollout too, with that status and the error; its
// samples, if any, carry the same status.
type Rollout struct {
	RolloutID  int64           `json:"rollout_id"`
	GroupIndex int64           `json:"group_index"`
	Episode    int             `json:"episode"` // position in the request, from 0
	Seed       uint64          `json:"seed"`
	PolicySeed uint64          `json:"policy_seed"`
	Status     protocol.Status `json:"status"`
	End        string          `json:"end"`   // why it ended: see env.EndReason constants
	Error      string          `json:"error"` // empty unless aborted or failed
	// TeamReward is the scenario's team reward G; in a scenario with
	// teams, the sum of Teams' rewards (each sample's metadata carries its
	// own side's).
	TeamReward  float64           `json:"team_reward"`
	Teams       []TeamReward      `json:"teams"`        // each side's reward; null when the scenario declares no teams
	AgentScores []float64         `json:"agent_scores"` // null when the scenario has none
	Seats       []Seat            `json:"seats"`
	Steps       int               `json:"steps"`
	Turns       int               `json:"turns"`
	Samples     []protocol.Sample `json:"samples"`
}

// Seat is one agent of an episode.
type Seat struct {
	ID   string `json:"id"`
	Role string `json:"role"`
	Team string `json:"team,omitempty"` // its side, in a scenario with teams
}

// TeamReward is one side's reward in an episode of a scenario with teams,
// in the order the scenario declares its teams.
type TeamReward struct {
	Team   string  `json:"team"`
	Reward float64 `json:"reward"`
}

// ScenarioList answers GET /v1/scenarios.
type ScenarioList struct {
	Scenarios []Scenario `json:"scenarios"`
}

// Scenario describes one scenario the service can play.
type Scenario struct {
	Name          string   `json:"name"`
	Summary       string   `json:"summary"`
	Doc           string   `json:"doc"`
	Schedule      string   `json:"schedule"`
	Roles         []Role   `json:"roles"`
	Params        []Param  `json:"params"`
	Policies      []string `json:"policies"`
	DefaultPolicy string   `json:"default_policy"`
}

// Role is one role of a scenario.
type Role struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
}

// Param is one declared parameter of a scenario.
type Param struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"` // int, float, string or bool
	Default string   `json:"default"`
	Doc     string   `json:"doc"`
	Min     *float64 `json:"min,omitempty"`
	Max     *float64 `json:"max,omitempty"`
	Choices []string `json:"choices,omitempty"`
}

// AllocatorList answers GET /v1/allocators.
type AllocatorList struct {
	Allocators []Allocator `json:"allocators"`
}

// Allocator describes one reward allocator.
type Allocator struct {
	Name   string           `json:"name"`
	Doc    string           `json:"doc"`
	Params []AllocatorParam `json:"params"`
}

// AllocatorParam is one parameter of an allocator.
type AllocatorParam struct {
	Name    string `json:"name"`
	Default string `json:"default"`
	Doc     string `json:"doc"`
}

// Health answers GET /healthz: "serving", or "draining" once the service
// stopped taking work.
type Health struct {
	Status string `json:"status"`
}

// Health statuses.
const (
	HealthServing  = "serving"
	HealthDraining = "draining"
)

// Code names the kind of an error. Codes are stable: callers branch on them
// (errors.Is(err, rollout.CodeUnknownScenario) holds for an *Error with
// that code).
type Code string

// Error returns the code itself, so that a Code can be an errors.Is target.
func (c Code) Error() string { return string(c) }

// The error codes.
const (
	CodeBadJSON          Code = "bad_json"           // 400: not one well-formed JSON object
	CodeUnknownField     Code = "unknown_field"      // 400: a key the request does not have
	CodeBadRequest       Code = "bad_request"        // 400: a field out of range or inconsistent
	CodeUnknownScenario  Code = "unknown_scenario"   // 400
	CodeBadParams        Code = "bad_params"         // 400: a scenario parameter unknown, of the wrong kind or out of range
	CodeBadPolicy        Code = "bad_policy"         // 400: an unknown policy or role, or the policy factory refused
	CodeBadAllocator     Code = "bad_allocator"      // 400
	CodeUnauthorized     Code = "unauthorized"       // 401: missing or wrong bearer token
	CodeNotFound         Code = "not_found"          // 404: no such endpoint
	CodeMethodNotAllowed Code = "method_not_allowed" // 405
	CodeBodyTooLarge     Code = "body_too_large"     // 413
	CodeUnsupportedMedia Code = "unsupported_media"  // 415: a Content-Type other than JSON
	// 422: the answer would hold more samples than the service's
	// --max-samples-per-answer; refused before playing when the scenario
	// tells its turns, else as soon as the episodes pass the limit.
	CodeTooManySamples Code = "too_many_samples"
	// 422: the encoded answer passed the service's --max-answer-bytes;
	// encoding stopped there and no partial answer is sent.
	CodeAnswerTooLarge Code = "answer_too_large"
	CodeShuttingDown   Code = "shutting_down" // 503: the service is draining
	CodeInternal       Code = "internal"      // 500
)

// Error is an error answered by the service: its HTTP status, code and
// message. The message names the problem (the unknown scenario and the
// known ones, the parameter and its allowed range, ...).
type Error struct {
	Status  int    `json:"-"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("troupe service: %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap returns the code, so that errors.Is(err, rollout.CodeX) works.
func (e *Error) Unwrap() error { return e.Code }

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Params are scenario parameters by name, as text. They decode from a JSON
// object whose values are strings, numbers or booleans: {"agents": 30,
// "vocab": "symbols", "noisy": true}. Numbers keep their JSON text.
type Params map[string]string

// ErrBadParamValue is wrapped by Params' decoding errors.
var ErrBadParamValue = errors.New("a parameter value must be a string, number or boolean")

// UnmarshalJSON implements json.Unmarshaler.
func (p *Params) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		*p = nil
		return nil
	}
	out := make(Params, len(raw))
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys) // so that the first bad key named is always the same
	for _, k := range keys {
		v := bytes.TrimSpace(raw[k])
		switch {
		case len(v) == 0:
			return fmt.Errorf("params.%s: %w", k, ErrBadParamValue)
		case v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("params.%s: %w", k, err)
			}
			out[k] = s
		case string(v) == "true" || string(v) == "false":
			out[k] = string(v)
		case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
			var n json.Number
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("params.%s: %w", k, err)
			}
			out[k] = n.String()
		default:
			return fmt.Errorf("params.%s = %s: %w", k, v, ErrBadParamValue)
		}
	}
	*p = out
	return nil
}

// Prompt is a dataset row's prompt as slime holds it: a string, or a list
// of chat messages.
type Prompt struct {
	Text     string
	Messages []protocol.ChatMessage // non-nil for a chat prompt
}

// MarshalJSON implements json.Marshaler.
func (p Prompt) MarshalJSON() ([]byte, error) {
	if p.Messages != nil {
		return json.Marshal(p.Messages)
	}
	return json.Marshal(p.Text)
}

// ErrBadPrompt is returned when a prompt is neither a string nor a list of
// {role, content} messages.
var ErrBadPrompt = errors.New("prompt must be a string or a list of {role, content} messages")

// UnmarshalJSON implements json.Unmarshaler.
func (p *Prompt) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return ErrBadPrompt
	}
	switch data[0] {
	case '"':
		*p = Prompt{}
		return json.Unmarshal(data, &p.Text)
	case '[':
		msgs := []protocol.ChatMessage{}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&msgs); err != nil {
			return fmt.Errorf("%w: %w", ErrBadPrompt, err)
		}
		*p = Prompt{Messages: msgs}
		return nil
	}
	return ErrBadPrompt
}

// ParamText is the prompt as a scenario parameter's value: the text of a
// text prompt, the JSON of a chat prompt.
func (p *Prompt) ParamText() string {
	if p.Messages == nil {
		return p.Text
	}
	b, _ := json.Marshal(p.Messages) // a []ChatMessage always encodes
	return string(b)
}

// FormatServerTiming writes the Server-Timing value of a request that spent
// d inside its episodes.
func FormatServerTiming(d time.Duration) string {
	return "episodes;dur=" + strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 6, 64)
}

// ParseServerTiming reads the episode time from a Server-Timing value
// written by FormatServerTiming (other metrics in the value are skipped).
func ParseServerTiming(v string) (time.Duration, bool) {
	for metric := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(metric), ";")
		if strings.TrimSpace(name) != "episodes" {
			continue
		}
		for param := range strings.SplitSeq(params, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(param), "=")
			if !ok || strings.TrimSpace(k) != "dur" {
				continue
			}
			ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil || !(ms >= 0 && ms < float64(math.MaxInt64)/float64(time.Millisecond)) {
				return 0, false
			}
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	return 0, false
}
