package runspec

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/trajectories"
)

// Format is the version of the spec's encoding; a spec of another format
// is refused.
const Format = "troupe.runspec/v1"

// TroupeVersion is the version of troupe's run semantics: the same spec
// played by the same TroupeVersion writes the same bytes. It is bumped when
// a change makes a spec play differently, so that a stored spec (and its
// hash) is never taken for a run of another version.
const TroupeVersion = "0.2.0"

// Spec is one run described as data: everything that decides the episodes
// a run plays and the samples it writes, and nothing of how it is played
// (concurrency, where the output goes, which machines play it).
type Spec struct {
	// Format is the spec's encoding, Format.
	Format string `json:"format"`
	// TroupeVersion is the troupe that wrote the spec, TroupeVersion.
	TroupeVersion string `json:"troupe_version"`
	// Scenario is the scenario's registered name.
	Scenario string `json:"scenario"`
	// Params are the scenario's parameters, as strings; a resolved spec
	// holds every one, defaults included.
	Params map[string]string `json:"params"`
	// Policies maps a role to its policy. A role left out plays the
	// scenario's default policy, else random; a resolved spec names every
	// role's.
	Policies map[string]Policy `json:"policies"`
	// Emit lists the roles whose turns become samples, sorted; empty: all.
	Emit []string `json:"emit"`
	// Limits truncate episodes.
	Limits Limits `json:"limits"`
	// OnInvalid is what an invalid answer does.
	OnInvalid Invalid `json:"on_invalid"`
	// Allocators are the reward allocators' specs (credit.Registry.Parse);
	// the first gives the scalar reward. Default: ["team"].
	Allocators []string `json:"allocators"`
	// RewardFormat is "scalar" (the first allocator's value) or "dict"
	// (every allocator's value by name). Default: "scalar".
	RewardFormat string `json:"reward_format"`
	// Episodes is how many episodes the run plays, at least 1.
	Episodes int `json:"episodes"`
	// GroupSize is the episodes per group (one scenario seed, one
	// group_index), at least 1. Default: 1.
	GroupSize int `json:"group_size"`
	// Seed is the run seed: every episode's seeds derive from it.
	Seed uint64 `json:"seed"`
	// RolloutIDBase is episode 0's rollout_id; GroupIndexBase group 0's
	// group_index.
	RolloutIDBase  int64 `json:"rollout_id_base"`
	GroupIndexBase int64 `json:"group_index_base"`
	// Seeds, when set, fixes the episodes' seeds instead of deriving them
	// from Seed: a run of one group whose seeds its caller chose (a
	// rollout request's). Seed then roots only what the policy makers
	// derive from it (an LLM client's retry jitter). Absent from the
	// canonical form when nil, so specs without it keep their hash.
	Seeds *Seeds `json:"seeds,omitempty"`
	// Tree, when set, plays every episode with tree sampling
	// (env.PlayTree): K candidates per turn of the tree-sampled roles,
	// each scored by its continuation, the best kept, all of them samples.
	// Absent from the canonical form when nil, so specs without it keep
	// their hash.
	Tree *Tree `json:"tree,omitempty"`
	// MergeTurns writes the merged layout: one sample per agent per
	// episode, its whole conversation (trajectories.Output.Merge), where
	// each turn is otherwise a sample. Absent from the canonical form when
	// false, so specs without it keep their hash.
	MergeTurns bool `json:"merge_turns,omitempty"`
	// MergeReward is how a merged sample's reward is made of its turns'
	// (trajectories.MergeReward): "mean", "last", or "sum", which
	// Normalized writes as absent, what specs before the field meant (they
	// keep their hash). troupe run and troupe serve write the default,
	// mean (trajectories.DefaultMergeReward). Only with MergeTurns.
	MergeReward string `json:"merge_reward,omitempty"`
}

// Tree is a run's tree sampling (episode.Tree): K candidates per turn,
// mixed with reward Alpha·team + local, drawn jointly per step (MAGRPO)
// or seat by seat (AT-GRPO), for Roles (sorted; empty: every emitted role).
type Tree struct {
	K     int      `json:"k"`
	Alpha float64  `json:"alpha"`
	Joint bool     `json:"joint"`
	Roles []string `json:"roles"`
}

// Seeds are the seeds of a run of one group (group_size = episodes) that
// its caller chose: every episode plays the scenario seed Scenario, and
// episode i the policy seed seeds.Mix(Policy, i) when Policy is set, else
// seeds.Mix(Scenario, 2, rollout_id of episode i). These are the rollout
// service's rules (package rollout: seed and policy_seed); a run without
// Seeds plays group g's scenario seed seeds.Mix(Seed, 1, g) and episode
// i's policy seed seeds.Mix(Seed, 2, i) (play.Config.Requests).
// Resolved.Requests applies them.
type Seeds struct {
	Scenario uint64  `json:"scenario"`
	Policy   *uint64 `json:"policy,omitempty"`
}

func (sd *Seeds) clone() *Seeds {
	if sd == nil {
		return nil
	}
	c := *sd
	if c.Policy != nil {
		p := *c.Policy
		c.Policy = &p
	}
	return &c
}

// Policy is a role's policy: a name (one of the scenario's policies,
// "random", or one a Resolvers.Policies maker knows, like "llm") and its
// settings, a JSON object the maker reads (an LLM's model and sampling).
// The scenario's own policies and random take no settings.
type Policy struct {
	Name     string          `json:"name"`
	Settings json.RawMessage `json:"settings,omitempty"`
}

// Limits truncate an episode; zero means no limit.
type Limits struct {
	MaxSteps    int      `json:"max_steps"`
	MaxTurns    int      `json:"max_turns"`
	MaxMessages int      `json:"max_messages"`
	Timeout     Duration `json:"timeout"`
}

// Duration is a time.Duration written as Go writes it ("1m30s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler: a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Invalid is the invalid-answer rule: Mode "pass" hands the answer to the
// game, whose rules judge it; "end" ends the episode, the offender scoring
// Penalty and every other agent Bonus. Forfeit is {end, -1, 1}, SPIRAL's
// penalty {end, -1.5, 0.5}.
type Invalid struct {
	Mode    string  `json:"mode"`
	Penalty float64 `json:"penalty"`
	Bonus   float64 `json:"bonus"`
}

// Invalid modes.
const (
	InvalidPass = "pass"
	InvalidEnd  = "end"
)

// Reward formats.
const (
	FormatScalar = "scalar"
	FormatDict   = "dict"
)

// ErrBadSpec is wrapped by every error of Validate, Decode and Resolve
// about the spec itself.
var ErrBadSpec = errors.New("bad run spec")

// FieldError is an error about one field of a spec, named as its JSON
// path ("policies.x.name", "allocators[1]").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("run spec: %s: %v", e.Field, e.Err) }

// Unwrap returns ErrBadSpec and the cause.
func (e *FieldError) Unwrap() []error { return []error{ErrBadSpec, e.Err} }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Normalized returns a copy of s with its defaults made explicit: the
// format and troupe version when empty, group size 1, allocators
// ["team"], reward format "scalar", invalid mode "pass", empty rather than
// nil maps and lists, emitted roles sorted and deduplicated, settings in
// canonical JSON (keys sorted; numbers as written, so a policy setting of
// 1 and one of 1.0 are different specs). Two specs that differ only in the
// defaults spelled out normalize alike; the
// scenario's own defaults (its parameters', its default policy) are made
// explicit by Resolve, which knows the scenario.
func (s *Spec) Normalized() Spec {
	n := *s
	n.Format = cmp.Or(n.Format, Format)
	n.TroupeVersion = cmp.Or(n.TroupeVersion, TroupeVersion)
	n.Params = maps.Clone(n.Params)
	if n.Params == nil {
		n.Params = map[string]string{}
	}
	n.Policies = maps.Clone(n.Policies)
	if n.Policies == nil {
		n.Policies = map[string]Policy{}
	}
	for role, p := range n.Policies {
		if c, err := canonicalJSON(p.Settings); err == nil {
			p.Settings = c
		}
		if string(p.Settings) == "{}" || string(p.Settings) == "null" {
			p.Settings = nil
		}
		n.Policies[role] = p
	}
	n.Emit = slices.Compact(slices.Sorted(slices.Values(n.Emit)))
	if n.Emit == nil {
		n.Emit = []string{}
	}
	n.Allocators = slices.Clone(n.Allocators)
	if len(n.Allocators) == 0 {
		n.Allocators = []string{"team"}
	}
	n.RewardFormat = cmp.Or(n.RewardFormat, FormatScalar)
	n.OnInvalid.Mode = cmp.Or(n.OnInvalid.Mode, InvalidPass)
	n.GroupSize = cmp.Or(n.GroupSize, 1)
	n.Seeds = n.Seeds.clone() // the copy shares nothing with s
	if n.MergeReward == string(trajectories.MergeSum) {
		n.MergeReward = "" // sum, as a spec without the field means
	}
	if n.Tree != nil {
		t := *n.Tree
		t.Roles = slices.Compact(slices.Sorted(slices.Values(t.Roles)))
		if t.Roles == nil {
			t.Roles = []string{}
		}
		n.Tree = &t
	}
	return n
}

// Validate checks what can be checked without the scenario: the format,
// counts and limits in range, names not empty, settings JSON objects. Its
// errors are *FieldError naming the bad field. Resolve checks the rest
// (that the scenario has those roles, parameters and policies).
func (s *Spec) Validate() error {
	n := s.Normalized()
	switch {
	case n.Format != Format:
		return fieldErr("format", "%q: want %q", n.Format, Format)
	case n.Scenario == "":
		return fieldErr("scenario", "empty")
	case n.Episodes < 1:
		return fieldErr("episodes", "%d: must be at least 1", n.Episodes)
	case n.GroupSize < 1:
		return fieldErr("group_size", "%d: must be at least 1", n.GroupSize)
	case n.Limits.MaxSteps < 0:
		return fieldErr("limits.max_steps", "%d: must not be negative", n.Limits.MaxSteps)
	case n.Limits.MaxTurns < 0:
		return fieldErr("limits.max_turns", "%d: must not be negative", n.Limits.MaxTurns)
	case n.Limits.MaxMessages < 0:
		return fieldErr("limits.max_messages", "%d: must not be negative", n.Limits.MaxMessages)
	case n.Limits.Timeout < 0:
		return fieldErr("limits.timeout", "%v: must not be negative", time.Duration(n.Limits.Timeout))
	case n.RewardFormat != FormatScalar && n.RewardFormat != FormatDict:
		return fieldErr("reward_format", "%q: want scalar or dict", n.RewardFormat)
	}
	if err := n.validatePlace(); err != nil {
		return err
	}
	if n.MergeReward != "" {
		if _, err := trajectories.ParseMergeReward(n.MergeReward); err != nil {
			return fieldErr("merge_reward", "%q: want sum, mean or last", n.MergeReward)
		}
		if !n.MergeTurns {
			return fieldErr("merge_reward", "%q without merge_turns: only merged samples have a merged reward", n.MergeReward)
		}
	}
	if t := n.Tree; t != nil {
		switch {
		case t.K < 2:
			return fieldErr("tree.k", "%d: want at least 2 candidates per turn", t.K)
		case math.IsNaN(t.Alpha) || math.IsInf(t.Alpha, 0):
			return fieldErr("tree.alpha", "%v: want a finite number", t.Alpha)
		case n.MergeTurns:
			// A turn's K candidates are the group its allocators compare;
			// merging an agent's turns would fold the chosen candidate
			// into one conversation and leave the others apart.
			return fieldErr("merge_turns", "a tree-sampled run writes a sample per candidate, the groups AT-GRPO and MAGRPO compare: it cannot be merged")
		}
	}
	switch n.OnInvalid.Mode {
	case InvalidPass:
		if n.OnInvalid.Penalty != 0 || n.OnInvalid.Bonus != 0 {
			return fieldErr("on_invalid", "mode pass takes no penalty or bonus")
		}
	case InvalidEnd:
	default:
		return fieldErr("on_invalid.mode", "%q: want pass or end", n.OnInvalid.Mode)
	}
	for _, k := range slices.Sorted(maps.Keys(n.Params)) {
		if k == "" {
			return fieldErr("params", "an empty parameter name")
		}
	}
	for _, role := range slices.Sorted(maps.Keys(n.Policies)) {
		p := n.Policies[role]
		if role == "" {
			return fieldErr("policies", "an empty role name")
		}
		if strings.TrimSpace(p.Name) == "" || strings.TrimSpace(p.Name) != p.Name {
			return fieldErr("policies."+role+".name", "%q: want a policy name", p.Name)
		}
		if len(p.Settings) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(p.Settings, &obj); err != nil || obj == nil {
				return fieldErr("policies."+role+".settings", "want a JSON object")
			}
		}
	}
	for i, r := range n.Emit {
		if r == "" {
			return fieldErr(fmt.Sprintf("emit[%d]", i), "empty role name")
		}
	}
	seen := map[string]bool{}
	for i, a := range n.Allocators {
		if strings.TrimSpace(a) == "" {
			return fieldErr(fmt.Sprintf("allocators[%d]", i), "empty allocator spec")
		}
		if seen[a] {
			return fieldErr(fmt.Sprintf("allocators[%d]", i), "allocator %s given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// validatePlace checks the fields that place a run (Resolved.At): its
// ids and seeds. The spec is normalized.
func (n *Spec) validatePlace() error {
	switch {
	case n.RolloutIDBase < 0:
		return fieldErr("rollout_id_base", "%d: must not be negative", n.RolloutIDBase)
	case n.RolloutIDBase > math.MaxInt64-int64(n.Episodes-1):
		return fieldErr("rollout_id_base", "%d: the %d episodes' rollout_ids would overflow", n.RolloutIDBase, n.Episodes)
	case n.GroupIndexBase < 0:
		return fieldErr("group_index_base", "%d: must not be negative", n.GroupIndexBase)
	case n.Seeds != nil && n.GroupSize != n.Episodes:
		return fieldErr("seeds", "fixed seeds are one group's: group_size %d must be episodes %d", n.GroupSize, n.Episodes)
	}
	return nil
}

// Canonical is the spec's canonical JSON: its normalized form with object
// keys sorted, no insignificant whitespace and no trailing newline. Two
// specs that differ only in defaults left out or spelled out have the same
// canonical form once resolved; numbers inside policy settings are kept as
// written (1 and 1.0 differ).
func (s *Spec) Canonical() []byte {
	n := s.Normalized()
	b, err := json.Marshal(&n)
	if err != nil {
		// Strings, numbers, maps of them and settings that are JSON
		// objects always encode; settings that are not fail Validate.
		panic(fmt.Sprintf("runspec: encoding a spec: %v", err))
	}
	c, err := canonicalJSON(b)
	if err != nil {
		panic(fmt.Sprintf("runspec: canonical encoding: %v", err))
	}
	return c
}

// Hash is the hex SHA-256 of Canonical: the run's identity. It changes
// with every field, the troupe version included.
func (s *Spec) Hash() string {
	sum := sha256.Sum256(s.Canonical())
	return hex.EncodeToString(sum[:])
}

// Indent is the canonical form, indented for people (a --print-spec);
// Decode reads it back.
func (s *Spec) Indent() []byte {
	var b bytes.Buffer
	_ = json.Indent(&b, s.Canonical(), "", "  ")
	b.WriteByte('\n')
	return b.Bytes()
}

// canonicalJSON re-encodes one JSON value with sorted keys, numbers as
// written, no HTML escaping and no whitespace.
func canonicalJSON(b []byte) ([]byte, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Decode reads one spec strictly: unknown fields are refused by name, as
// is anything after the spec. It validates the spec and returns it
// normalized.
func Decode(r io.Reader) (*Spec, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the spec", ErrBadSpec)
	}
	if s.Format == "" {
		return nil, fieldErr("format", "missing: want %q", Format)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	n := s.Normalized()
	return &n, nil
}

// DecodeBytes is Decode of b.
func DecodeBytes(b []byte) (*Spec, error) { return Decode(bytes.NewReader(b)) }
