package natsrun

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/distributed/wire"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
)

// Spec names what a worker needs, besides the episode requests, to play a
// run: the things a play.Config holds as Go values (policies, the emit
// filter), which cannot travel, described instead. Workers rebuild them
// from their own scenario registry, resolving a run spec (package runspec)
// as every runner does. SpecOf builds it from a resolved run spec, so that
// it agrees with the spec's play.Config by construction.
type Spec struct {
	// Policies maps a role to its policy: the name (one of the scenario's
	// Info.PolicyNames, or a name the workers' PolicyMaker knows) and the
	// settings the run spec gives it (an LLM's model and sampling). Roles
	// not named play the scenario's default policy, or random. They must
	// be what the submitter's play.Config.Policy plays: the submitter
	// replays episodes with it for counterfactual credit.
	Policies map[string]runspec.Policy `json:"policies,omitempty"`
	// Emit lists the roles whose turns become samples; empty means all.
	// It must agree with play.Config.Emit.
	Emit []string `json:"emit,omitempty"`
	// LLMEndpoint is where the run's LLM policies are served: the name of
	// an endpoint that workers declare (troupe worker --llm-endpoint
	// NAME), or the URL of the run's own server. A worker plays the run
	// only if it serves that endpoint; the others leave it. Empty when no
	// role plays an LLM.
	LLMEndpoint string `json:"llm_endpoint,omitempty"`
}

// SpecOf is the Spec of a resolved run spec (package runspec): its roles'
// policies with their settings and its emitted roles, so that it agrees
// with the resolved play.Config by construction. endpoint is the run's
// LLMEndpoint.
func SpecOf(r *runspec.Resolved, endpoint string) Spec {
	var emit []string
	if len(r.Spec.Emit) > 0 {
		emit = slices.Clone(r.Spec.Emit)
	}
	return Spec{Policies: maps.Clone(r.Spec.Policies), Emit: emit, LLMEndpoint: endpoint}
}

// ProtocolVersion is the version of the deployment's layout and of what
// submitters and workers say to each other through it (the run record,
// requests, done markers, leases). A worker plays a run only if the run
// was submitted under its own ProtocolVersion, wire.Version and
// runspec.TroupeVersion; it leaves the others to workers that do.
// Version 4 added the record's fingerprint of the scenario's behaviour.
const ProtocolVersion = 4

// record is a run as workers see it and as the runs bucket stores it: the
// spec and everything of the play.Config that shapes the episodes, and the
// versions it was submitted under. Two submitters with equal records are
// running the same run.
type record struct {
	Protocol int    `json:"protocol"`
	Wire     int    `json:"wire"`
	Troupe   string `json:"troupe"`
	Scenario string `json:"scenario"`
	// Fingerprint is the submitter's fingerprint of the scenario's
	// behaviour under the run's parameters and limits (see
	// fingerprintOf): a worker whose own differs refuses the run. Set by
	// Start, not by recordOf, so that RunID plays no episode.
	Fingerprint    string                    `json:"fingerprint"`
	Params         map[string]string         `json:"params"`
	Policies       map[string]runspec.Policy `json:"policies,omitempty"`
	LLMEndpoint    string                    `json:"llm_endpoint,omitempty"`
	Emit           []string                  `json:"emit,omitempty"`
	MaxSteps       int                       `json:"max_steps,omitempty"`
	MaxTurns       int                       `json:"max_turns,omitempty"`
	MaxMessages    int                       `json:"max_messages,omitempty"`
	Timeout        time.Duration             `json:"timeout,omitempty"`
	InvalidMode    env.InvalidMode           `json:"invalid_mode,omitempty"`
	InvalidPenalty float64                   `json:"invalid_penalty,omitempty"`
	InvalidBonus   float64                   `json:"invalid_bonus,omitempty"`
	Episodes       int                       `json:"episodes"`
	GroupSize      int                       `json:"group_size"`
	Seed           uint64                    `json:"seed"`
	RolloutIDBase  int64                     `json:"rollout_id_base,omitempty"`
	GroupIndexBase int64                     `json:"group_index_base,omitempty"`
	// Tree is the run's tree sampling, played by the worker as a local
	// run plays it; the candidates travel in the episodes' records.
	Tree *runspec.Tree `json:"tree,omitempty"`
}

// delivery is how a run's requests are handed out: the settings of its
// submitter's Config, fixed by the submitter that registered the run (a
// later one, re-attaching, adopts them). They are the run's own: other
// runs' workers and consumers do not see them.
type delivery struct {
	AckWait       time.Duration `json:"ack_wait"`
	MaxDeliver    int           `json:"max_deliver"`
	MaxAckPending int           `json:"max_ack_pending"`
}

// storedRun is the value of a run's spec key: its record, how its requests
// are delivered, and when it was registered.
type storedRun struct {
	Run      record    `json:"run"`
	Delivery delivery  `json:"delivery"`
	Created  time.Time `json:"created"`
}

func (s *storedRun) encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("natsrun: encoding a run record: %v", err))
	}
	return b
}

// decodeStoredRun reads a spec key's value strictly: a record of another
// protocol is ErrIncompatible, naming the versions, and a field this
// version does not know is refused by name rather than ignored.
func decodeStoredRun(data []byte, v versions) (storedRun, error) {
	var s storedRun
	var probe struct {
		Run struct {
			Protocol int    `json:"protocol"`
			Wire     int    `json:"wire"`
			Troupe   string `json:"troupe"`
		} `json:"run"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return s, fmt.Errorf("%w: the run record is not JSON: %w", ErrIncompatible, err)
	}
	if p := probe.Run; (versions{p.Protocol, p.Wire, p.Troupe}) != v {
		return s, fmt.Errorf("%w: the run was submitted under protocol %d, wire %d, troupe %s; this process speaks protocol %d, wire %d, troupe %s",
			ErrIncompatible, p.Protocol, p.Wire, p.Troupe, v.protocol, v.wire, v.troupe)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: the run record: %w", ErrIncompatible, err)
	}
	return s, nil
}

// versions are what a process speaks: the protocol, the episode encoding
// and troupe's run semantics.
type versions struct {
	protocol, wire int
	troupe         string
}

// ours are this build's versions.
var ours = versions{ProtocolVersion, wire.Version, runspec.TroupeVersion}

// ErrIncompatible is wrapped by the reasons a worker gives for leaving a
// run submitted by another version of troupe.
var ErrIncompatible = errors.New("natsrun: incompatible version")

func recordOf(cfg *play.Config, spec Spec) (record, error) {
	if cfg.Scenario == nil {
		return record{}, fmt.Errorf("%w: the run has no scenario", ErrBadConfig)
	}
	info := cfg.Scenario.Info()
	for _, role := range slices.Sorted(maps.Keys(spec.Policies)) {
		if info.Role(role) == nil {
			return record{}, fmt.Errorf("%w: spec names a policy for role %q, which scenario %s does not have", ErrBadConfig, role, info.Name)
		}
		if spec.Policies[role].Name == "" {
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
	var policies map[string]runspec.Policy
	if len(spec.Policies) > 0 {
		policies = map[string]runspec.Policy{}
		for role, p := range spec.Policies {
			// The settings' canonical form, as the run spec's hash sees it.
			n := (&runspec.Spec{Policies: map[string]runspec.Policy{role: p}}).Normalized()
			policies[role] = n.Policies[role]
		}
	}
	return record{
		Protocol:       ProtocolVersion,
		Wire:           wire.Version,
		Troupe:         runspec.TroupeVersion,
		Scenario:       info.Name,
		Params:         cfg.Params.Map(),
		Policies:       policies,
		LLMEndpoint:    spec.LLMEndpoint,
		Emit:           slices.Compact(emit),
		MaxSteps:       cfg.Limits.MaxSteps,
		MaxTurns:       cfg.Limits.MaxTurns,
		MaxMessages:    cfg.Limits.MaxMessages,
		Timeout:        cfg.Timeout,
		InvalidMode:    cfg.Invalid.Mode,
		InvalidPenalty: cfg.Invalid.Penalty,
		InvalidBonus:   cfg.Invalid.Bonus,
		Episodes:       cfg.Episodes,
		GroupSize:      max(cfg.GroupSize, 1),
		Seed:           cfg.Seed,
		RolloutIDBase:  cfg.RolloutIDBase,
		GroupIndexBase: cfg.GroupIndexBase,
		Tree:           treeOf(cfg.Tree),
	}, nil
}

// treeOf is a run's tree sampling as its record states it: roles sorted,
// as a run spec's are.
func treeOf(t *episode.Tree) *runspec.Tree {
	if t == nil {
		return nil
	}
	roles := slices.Clone(t.Roles)
	slices.Sort(roles)
	return &runspec.Tree{K: t.K, Alpha: t.Alpha, Joint: t.Joint, Roles: slices.Compact(roles)}
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
func RunID(cfg play.Config, spec Spec) (string, error) {
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
