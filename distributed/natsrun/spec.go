package natsrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/runspec"
)

// Spec names what a worker needs, besides the episode requests, to play a
// run: the things a RunConfig holds as Go values (policies, the emit
// filter), which cannot travel, named instead. Workers rebuild them from
// their own scenario registry, resolving a run spec (package runspec) as
// every runner does. SpecOf builds it from a resolved run spec, so that it
// agrees with the spec's RunConfig by construction.
type Spec struct {
	// Policies maps a role to the name of the policy it plays (one of the
	// scenario's Info.PolicyNames, or a name the workers' PolicyMaker
	// knows). Roles not named play the scenario's default policy, or
	// random. They must name what the submitter's RunConfig.Policy plays:
	// the submitter replays episodes with it for counterfactual credit.
	Policies map[string]string `json:"policies,omitempty"`
	// Emit lists the roles whose turns become samples; empty means all.
	// It must agree with RunConfig.Emit.
	Emit []string `json:"emit,omitempty"`
}

// SpecOf is the Spec of a resolved run spec (package runspec): its roles'
// policy names and its emitted roles, so that it agrees with the
// resolved RunConfig by construction.
func SpecOf(r *runspec.Resolved) Spec {
	var emit []string
	if len(r.Spec.Emit) > 0 {
		emit = slices.Clone(r.Spec.Emit)
	}
	return Spec{Policies: maps.Clone(r.PolicyNames), Emit: emit}
}

// record is a run as workers see it and as the runs bucket stores it: the
// spec and everything of the RunConfig that shapes the episodes. Two
// submitters with equal records are running the same run.
type record struct {
	Scenario         string            `json:"scenario"`
	Params           map[string]string `json:"params"`
	Policies         map[string]string `json:"policies,omitempty"`
	Emit             []string          `json:"emit,omitempty"`
	MaxSteps         int               `json:"max_steps,omitempty"`
	MaxTurns         int               `json:"max_turns,omitempty"`
	MaxMessages      int               `json:"max_messages,omitempty"`
	Timeout          time.Duration     `json:"timeout,omitempty"`
	InvalidMode      env.InvalidMode   `json:"invalid_mode,omitempty"`
	InvalidPenalty   float64           `json:"invalid_penalty,omitempty"`
	InvalidBonus     float64           `json:"invalid_bonus,omitempty"`
	ParallelPolicies bool              `json:"parallel_policies,omitempty"`
	Episodes         int               `json:"episodes"`
	GroupSize        int               `json:"group_size"`
	Seed             uint64            `json:"seed"`
	RolloutIDBase    int64             `json:"rollout_id_base,omitempty"`
	GroupIndexBase   int64             `json:"group_index_base,omitempty"`
}

func recordOf(cfg *env.RunConfig, spec Spec) (record, error) {
	if cfg.Scenario == nil {
		return record{}, fmt.Errorf("%w: the run has no scenario", ErrBadConfig)
	}
	info := cfg.Scenario.Info()
	for _, role := range slices.Sorted(maps.Keys(spec.Policies)) {
		if info.Role(role) == nil {
			return record{}, fmt.Errorf("%w: spec names a policy for role %q, which scenario %s does not have", ErrBadConfig, role, info.Name)
		}
		if spec.Policies[role] == "" {
			return record{}, fmt.Errorf("%w: spec names no policy for role %q", ErrBadConfig, role)
		}
	}
	for _, role := range spec.Emit {
		if info.Role(role) == nil {
			return record{}, fmt.Errorf("%w: spec emits role %q, which scenario %s does not have", ErrBadConfig, role, info.Name)
		}
	}
	emit := slices.Clone(spec.Emit)
	slices.Sort(emit)
	return record{
		Scenario:         info.Name,
		Params:           cfg.Params.Map(),
		Policies:         spec.Policies,
		Emit:             slices.Compact(emit),
		MaxSteps:         cfg.Limits.MaxSteps,
		MaxTurns:         cfg.Limits.MaxTurns,
		MaxMessages:      cfg.Limits.MaxMessages,
		Timeout:          cfg.Limits.Timeout,
		InvalidMode:      cfg.Invalid.Mode,
		InvalidPenalty:   cfg.Invalid.Penalty,
		InvalidBonus:     cfg.Invalid.Bonus,
		ParallelPolicies: cfg.ParallelPolicies,
		Episodes:         cfg.Episodes,
		GroupSize:        max(cfg.GroupSize, 1),
		Seed:             cfg.Seed,
		RolloutIDBase:    cfg.RolloutIDBase,
		GroupIndexBase:   cfg.GroupIndexBase,
	}, nil
}

// encode is the record's canonical JSON: encoding/json sorts map keys.
func (r *record) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		// Strings, numbers and string maps always encode.
		panic(fmt.Sprintf("natsrun: encoding a run record: %v", err))
	}
	return b
}

// ErrRunMismatch is returned when a run id is already taken by a run with a
// different configuration.
var ErrRunMismatch = errors.New("natsrun: the run id belongs to a different run")

// mismatch names the fields in which two records differ.
func (r *record) mismatch(other *record) error {
	var a, b map[string]any
	if json.Unmarshal(r.encode(), &a) != nil || json.Unmarshal(other.encode(), &b) != nil {
		return ErrRunMismatch
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			diff = append(diff, fmt.Sprintf("%s %v (stored: %v)", k, a[k], b[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s unset (stored: %v)", k, b[k]))
		}
	}
	return fmt.Errorf("%w: %s", ErrRunMismatch, strings.Join(diff, "; "))
}

// SpecRunID is the id of the run whose run spec (package runspec) is of
// scenario and has hash: the readable scenario name and the hash's first
// 80 bits.
func SpecRunID(scenario, hash string) string {
	name := strings.Map(func(r rune) rune {
		if r < 128 && runIDRE.MatchString(string(r)) {
			return r
		}
		return -1
	}, scenario)
	return name[:min(len(name), 20)] + "-" + hash[:min(len(hash), 20)]
}

// RunID returns the default id of the run cfg and spec describe: a digest
// of everything that shapes its episodes. Running the same command again
// after a crash therefore re-attaches to the same run.
func RunID(cfg env.RunConfig, spec Spec) (string, error) {
	rec, err := recordOf(&cfg, spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(rec.encode())
	// The scenario's name makes the id readable; only the characters a run
	// id allows are kept.
	name := strings.Map(func(r rune) rune {
		if r < 128 && runIDRE.MatchString(string(r)) {
			return r
		}
		return -1
	}, rec.Scenario)
	return name[:min(len(name), 20)] + "-" + hex.EncodeToString(sum[:10]), nil
}
