package protocol

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/troupe-rl/troupe/internal/finite"
)

// Status is a Sample's lifecycle state, written in lower case exactly as
// slime's Sample.Status enum values.
type Status string

// The statuses slime knows. troupe emits completed (the episode terminated by
// its rules), truncated (a turn, message or wall-time limit ended it), aborted
// (it was cancelled or an agent's policy failed) and failed (the scenario
// itself broke: a rule error, an impossible transition, a panic).
const (
	StatusPending   Status = "pending"
	StatusCompleted Status = "completed"
	StatusTruncated Status = "truncated"
	StatusAborted   Status = "aborted"
	StatusFailed    Status = "failed"
)

// Valid reports whether s is one of slime's statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusCompleted, StatusTruncated, StatusAborted, StatusFailed:
		return true
	}
	return false
}

// ChatMessage is one entry of a chat-style prompt.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Prompt is what the agent observed. slime accepts a plain string or a list
// of chat messages; Messages, when non-nil, wins over Text.
type Prompt struct {
	Text     string
	Messages []ChatMessage
}

// TextPrompt returns a plain-string prompt.
func TextPrompt(s string) Prompt { return Prompt{Text: s} }

// String renders the prompt as text, chat messages one per line.
func (p Prompt) String() string {
	if p.Messages == nil {
		return p.Text
	}
	var b []byte
	for i, m := range p.Messages {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, m.Role...)
		b = append(b, ": "...)
		b = append(b, m.Content...)
	}
	return string(b)
}

// RewardKind says which of slime's reward shapes a Reward holds.
type RewardKind uint8

// The reward shapes: null (slime then calls its reward model), a scalar, or a
// dict read at training time with slime's --reward-key.
const (
	RewardNull RewardKind = iota
	RewardScalar
	RewardDict
)

// Reward is a sample's reward: null, a scalar, or a dict of named values.
// The zero value is null.
type Reward struct {
	Kind  RewardKind
	Value float64
	Dict  map[string]float64
}

// Scalar returns a scalar reward.
func Scalar(v float64) Reward { return Reward{Kind: RewardScalar, Value: v} }

// DictReward returns a dict reward holding a copy of d.
func DictReward(d map[string]float64) Reward {
	return Reward{Kind: RewardDict, Dict: maps.Clone(d)}
}

// Get returns the scalar value, or the dict's value under key. The boolean is
// false for a null reward or a missing key.
func (r Reward) Get(key string) (float64, bool) {
	switch r.Kind {
	case RewardScalar:
		return r.Value, true
	case RewardDict:
		v, ok := r.Dict[key]
		return v, ok
	}
	return 0, false
}

// Metadata is troupe's own data about a sample, written under slime's free-form
// "metadata" key. The typed fields are troupe's; Extra holds anything else
// (a scenario's own per-turn facts, or keys written by another tool), and is
// merged into the same JSON object. Extra keys that collide with a typed
// field's key are rejected by Validate.
type Metadata struct {
	Scenario string // scenario name
	Seed     uint64 // the episode's scenario seed
	Episode  int64  // episode number within its run
	Agent    string // agent id
	Role     string // the agent's role
	Turn     int    // the agent's own turn number, from 0
	Step     int    // the episode's logical time when the turn was taken
	State    string // the agent's FSM state when it acted

	// Team is the agent's side, in a scenario that declares teams (sides):
	// its name; empty, and not written, in a scenario with one team.
	Team       string
	TeamReward float64  // the scenario's raw team reward for the episode: the agent's team's, in a scenario with teams
	AgentScore *float64 // the scenario's per-agent score, when it has one
	Allocator  string   // the allocator that set Reward
	TextOnly   bool     // true when the policy gave no token ids
	End        string   // why the episode ended: see env.EndReason
	Error      string   // what went wrong, for aborted and failed episodes
	// Action is the move the game read from the turn, when the response is
	// a model's completion that says more than the move (the Completion of
	// agents.Action's Generation); empty, and not written, when the response
	// is the move.
	Action string

	Extra map[string]any
}

// Sample is one agent turn as a training sample, field for field the slime
// Sample. Fields slime has but troupe never sets (multimodal inputs, teacher
// log-probs, speculative-decoding info, ...) are not written and take slime's
// defaults on load.
type Sample struct {
	GroupIndex      int64     // group_index: the GRPO group of the episode
	Index           int64     // index: unique per sample within a run
	RolloutID       int64     // rollout_id: shared by every sample of an episode
	Prompt          Prompt    // prompt
	Tokens          []int     // tokens: prompt tokens then response tokens; empty for text-only samples
	Response        string    // response: readable text of the action
	ResponseLength  int       // response_length: the trailing response region of Tokens
	Label           Label     // label: ground truth, any JSON value; the zero Label is null
	Reward          Reward    // reward
	LossMask        []int     // loss_mask: nil (null) for text-only samples
	RolloutLogProbs []float64 // rollout_log_probs: nil (null) when the policy gave none
	RemoveSample    bool      // remove_sample
	Status          Status    // status: always written
	Metadata        Metadata  // metadata: always an object, never null
}

// Errors Validate wraps, so callers can test the condition with errors.Is.
var (
	ErrInvalidSample  = errors.New("invalid sample")
	ErrRolloutMixed   = errors.New("samples of one rollout disagree on rollout_id")
	ErrDuplicateIndex = errors.New("duplicate sample index")
)

// metadataKeys are the JSON keys of Metadata's typed fields, in the order
// they are written. raw_reward is slime's key for the reward a sample is
// trained on (see rawReward); it is derived from the reward when written
// and ignored when read.
var metadataKeys = []string{
	"scenario", "seed", "episode", "agent", "role", "turn", "step", "state",
	"team", "team_reward", "raw_reward", "agent_score", "allocator", "text_only", "end", "error",
	"action",
}

// Validate checks the invariants slime relies on:
//   - status is one of slime's lower-case values;
//   - a sample with tokens has at least one prompt token and at least one
//     response token, and loss_mask and rollout_log_probs (when present) have
//     response_length entries, with 0/1 masks and 0.0 log-probs at masked
//     positions;
//   - a text-only sample (no tokens) has response_length 0, no loss mask and
//     no log-probs, and says so in its metadata;
//   - rewards and log-probs are finite numbers;
//   - metadata's extra keys do not shadow troupe's own keys.
func (s *Sample) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: rollout %d index %d: %s", ErrInvalidSample, s.RolloutID, s.Index, fmt.Sprintf(format, args...))
	}
	if !s.Status.Valid() {
		return bad("status %q is not one of slime's lower-case statuses", s.Status)
	}
	if len(s.Tokens) == 0 {
		if s.ResponseLength != 0 {
			return bad("response_length %d without tokens", s.ResponseLength)
		}
		if s.LossMask != nil || s.RolloutLogProbs != nil {
			return bad("loss_mask or rollout_log_probs without tokens")
		}
		if !s.Metadata.TextOnly {
			return bad("a sample without tokens must be marked text_only in metadata")
		}
	} else {
		if s.Metadata.TextOnly {
			return bad("a sample with tokens is marked text_only")
		}
		if s.ResponseLength < 1 {
			return bad("response_length %d: a response needs at least one token", s.ResponseLength)
		}
		if len(s.Tokens) < s.ResponseLength+1 {
			return bad("%d tokens cannot hold a prompt token and %d response tokens", len(s.Tokens), s.ResponseLength)
		}
		if s.LossMask != nil && len(s.LossMask) != s.ResponseLength {
			return bad("loss_mask has %d entries, response_length is %d", len(s.LossMask), s.ResponseLength)
		}
		for i, m := range s.LossMask {
			if m != 0 && m != 1 {
				return bad("loss_mask[%d] = %d, want 0 or 1", i, m)
			}
		}
		if s.RolloutLogProbs != nil && len(s.RolloutLogProbs) != s.ResponseLength {
			return bad("rollout_log_probs has %d entries, response_length is %d", len(s.RolloutLogProbs), s.ResponseLength)
		}
		for i, lp := range s.RolloutLogProbs {
			if !finite.Is(lp) || lp > 0 {
				return bad("rollout_log_probs[%d] = %v is not a log-probability", i, lp)
			}
			if s.LossMask != nil && s.LossMask[i] == 0 && lp != 0 {
				return bad("rollout_log_probs[%d] = %v at a masked position, want 0.0", i, lp)
			}
		}
	}
	switch s.Reward.Kind {
	case RewardScalar:
		if !finite.Is(s.Reward.Value) {
			return bad("reward %v is not finite", s.Reward.Value)
		}
	case RewardDict:
		for _, k := range slices.Sorted(maps.Keys(s.Reward.Dict)) {
			if !finite.Is(s.Reward.Dict[k]) {
				return bad("reward[%q] = %v is not finite", k, s.Reward.Dict[k])
			}
		}
	}
	if !finite.Is(s.Metadata.TeamReward) {
		return bad("metadata team_reward %v is not finite", s.Metadata.TeamReward)
	}
	for k := range s.Metadata.Extra {
		if slices.Contains(metadataKeys, k) {
			return bad("metadata extra key %q shadows troupe's own key", k)
		}
	}
	return nil
}

// ValidateRollout validates every sample and checks that siblings share one
// rollout_id and have distinct indexes, as slime requires of a fan-out list.
func ValidateRollout(samples []Sample) error {
	seen := make(map[int64]struct{}, len(samples))
	for i := range samples {
		s := &samples[i]
		if err := s.Validate(); err != nil {
			return err
		}
		if s.RolloutID != samples[0].RolloutID {
			return fmt.Errorf("%w: sample %d has rollout_id %d, sample 0 has %d", ErrRolloutMixed, i, s.RolloutID, samples[0].RolloutID)
		}
		if _, dup := seen[s.Index]; dup {
			return fmt.Errorf("%w: index %d appears twice in rollout %d", ErrDuplicateIndex, s.Index, s.RolloutID)
		}
		seen[s.Index] = struct{}{}
	}
	return nil
}
