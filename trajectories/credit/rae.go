package credit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/trajectories"
)

// DefaultAlpha is RAE's default EMA decay α.
const DefaultAlpha = 0.95

// RAEConfig configures an RAE.
type RAEConfig struct {
	// Alpha is the baseline's decay α in [0, 1): b ← α b + (1-α) R.
	Alpha float64
	// Base is the role's reward R: SourceAuto (the agent's own score when
	// the scenario has one, else the team reward), SourceTeam or
	// SourceIndividual.
	Base Source
	// StatePath, when set, is the JSON file the baselines are loaded from
	// by NewRAE (a missing file means fresh baselines) and saved to by
	// Close.
	StatePath string
}

// RAE is the role-conditioned advantage estimation of SPIRAL (Liu et al.
// 2025, arXiv 2506.24119): one baseline b per (scenario, role), an
// exponential moving average of the role's reward, that persists across
// groups and runs.
//
// The groups an RAE sees are handled in the order they come (the runner's
// output order: it implements trajectories.Sequential), and within a group
// the episodes in slice order (episode index). For each finished episode
// and each role present in it, every seat p of the role gets
//
//	A_p = R_p - b          (b taken before this episode's update)
//
// on every one of its samples; then b ← α b + (1-α) mean_p R_p, the mean over
// the role's seats in the episode. Seats of one role in one episode are
// exchangeable, so they share the baseline and make one update, as the one
// seat of a role does in SPIRAL's two-player games. Baselines start at 0.
// Unfinished episodes get 0 and leave the baselines alone.
//
// An RAE is safe for concurrent use, but its values depend on the order of
// the groups it sees. A long-lived service keeps one RAE per spec and
// saves it between requests with MarshalState and UnmarshalState (troupe
// serve --allocator-state); `troupe run` uses state=PATH.
type RAE struct {
	alpha float64
	base  Source
	path  string

	mu        sync.Mutex
	baselines map[raeKey]*raeBaseline
}

type raeKey struct{ scenario, role string }

type raeBaseline struct {
	value   float64
	updates int64
}

// raeState is the JSON state file.
type raeState struct {
	Version   int           `json:"version"`
	Baselines []raeStateRow `json:"baselines"`
}

type raeStateRow struct {
	Scenario string  `json:"scenario"`
	Role     string  `json:"role"`
	Baseline float64 `json:"baseline"`
	Updates  int64   `json:"updates"`
}

const raeStateVersion = 1

// ErrBadState is wrapped by errors reading an RAE state file.
var ErrBadState = errors.New("bad RAE state")

// NewRAE returns an RAE, loading its baselines from cfg.StatePath when the
// file exists.
func NewRAE(cfg RAEConfig) (*RAE, error) {
	if math.IsNaN(cfg.Alpha) || cfg.Alpha < 0 || cfg.Alpha >= 1 {
		return nil, fmt.Errorf("%w: rae: alpha %g is not in [0, 1)", ErrBadAllocatorParam, cfg.Alpha)
	}
	if cfg.Base < SourceTeam || cfg.Base > SourceAuto {
		return nil, fmt.Errorf("%w: rae: unknown base %v", ErrBadAllocatorParam, cfg.Base)
	}
	r := &RAE{alpha: cfg.Alpha, base: cfg.Base, path: cfg.StatePath, baselines: map[raeKey]*raeBaseline{}}
	if r.path == "" {
		return r, nil
	}
	data, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rae: load state: %w", err)
	}
	if err := r.load(data); err != nil {
		return nil, fmt.Errorf("rae: load state %s: %w", r.path, err)
	}
	return r, nil
}

func (r *RAE) load(data []byte) error {
	baselines, err := parseRAEState(data)
	if err != nil {
		return err
	}
	r.baselines = baselines
	return nil
}

// UnmarshalState replaces the baselines with those of data, the JSON that
// MarshalState (and a state file) holds. data is checked whole first: an
// error leaves the baselines as they were. With MarshalState it lets a
// long-lived service (troupe serve --allocator-state) keep an RAE's
// baselines across restarts in a file of its own.
func (r *RAE) UnmarshalState(data []byte) error {
	baselines, err := parseRAEState(data)
	if err != nil {
		return fmt.Errorf("rae: %w", err)
	}
	r.mu.Lock()
	r.baselines = baselines
	r.mu.Unlock()
	return nil
}

func parseRAEState(data []byte) (map[raeKey]*raeBaseline, error) {
	baselines := map[raeKey]*raeBaseline{}
	var st raeState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrBadState)
	}
	if st.Version != raeStateVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrBadState, st.Version, raeStateVersion)
	}
	for _, row := range st.Baselines {
		k := raeKey{row.Scenario, row.Role}
		switch {
		case row.Scenario == "" || row.Role == "":
			return nil, fmt.Errorf("%w: a baseline without scenario or role", ErrBadState)
		case baselines[k] != nil:
			return nil, fmt.Errorf("%w: two baselines for scenario %q role %q", ErrBadState, row.Scenario, row.Role)
		case row.Updates < 0:
			return nil, fmt.Errorf("%w: scenario %q role %q: negative update count", ErrBadState, row.Scenario, row.Role)
		case math.IsNaN(row.Baseline) || math.IsInf(row.Baseline, 0):
			return nil, fmt.Errorf("%w: scenario %q role %q: baseline is not a finite number", ErrBadState, row.Scenario, row.Role)
		}
		baselines[k] = &raeBaseline{value: row.Baseline, updates: row.Updates}
	}
	return baselines, nil
}

// Name implements trajectories.Allocator. The state file is not part of
// the name.
func (r *RAE) Name() string {
	return specName("rae", kv{"alpha", ftoa(r.alpha), ftoa(DefaultAlpha)}, kv{"base", r.base.String(), SourceAuto.String()})
}

// Sequential implements trajectories.Sequential.
func (r *RAE) Sequential() bool { return true }

// Needs implements Needer.
func (r *RAE) Needs() Needs { return Needs{AgentScores: r.base == SourceIndividual} }

// Baseline returns the baseline of a scenario's role and how many updates
// made it; ok is false when it has none yet.
func (r *RAE) Baseline(scenario, role string) (value float64, updates int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.baselines[raeKey{scenario, role}]
	if b == nil {
		return 0, 0, false
	}
	return b.value, b.updates, true
}

// Allocate implements trajectories.Allocator.
func (r *RAE) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	// Read every reward first, so that an error leaves the baselines as
	// they were.
	seatsOf := make([][]int, len(group))
	rewards := make([][]float64, len(group))
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		reward := make([]float64, len(ep.Seats))
		for i := range ep.Seats {
			if reward[i], err = r.base.value(ep, i); err != nil {
				return err
			}
		}
		seatsOf[e], rewards[e] = seats, reward
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, reward := seatsOf[e], rewards[e]
		// Roles in order of their first seat; every advantage of the
		// episode is taken before any of its updates.
		var roles []string
		baseline := map[string]*raeBaseline{}
		for _, s := range ep.Seats {
			if baseline[s.Role] == nil {
				k := raeKey{ep.Scenario, s.Role}
				if r.baselines[k] == nil {
					r.baselines[k] = &raeBaseline{}
				}
				baseline[s.Role] = r.baselines[k]
				roles = append(roles, s.Role)
			}
		}
		for s, i := range seats {
			dst[e][s] = reward[i] - baseline[ep.Seats[i].Role].value
		}
		for _, role := range roles {
			sum, n := 0.0, 0
			for i, s := range ep.Seats {
				if s.Role == role {
					sum += reward[i]
					n++
				}
			}
			b := baseline[role]
			b.value = r.alpha*b.value + (1-r.alpha)*(sum/float64(n))
			b.updates++
		}
	}
	return nil
}

// MarshalState returns the baselines as the JSON of the state file, sorted
// by scenario and role.
func (r *RAE) MarshalState() ([]byte, error) {
	r.mu.Lock()
	st := raeState{Version: raeStateVersion, Baselines: make([]raeStateRow, 0, len(r.baselines))}
	for k, b := range r.baselines {
		st.Baselines = append(st.Baselines, raeStateRow{Scenario: k.scenario, Role: k.role, Baseline: b.value, Updates: b.updates})
	}
	r.mu.Unlock()
	slices.SortFunc(st.Baselines, func(a, b raeStateRow) int {
		return cmp.Or(cmp.Compare(a.Scenario, b.Scenario), cmp.Compare(a.Role, b.Role))
	})
	out, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rae: %w", err)
	}
	return append(out, '\n'), nil
}

// Save writes the baselines to path atomically: to a temporary file in the
// same directory, synced, then renamed over path, so a crash leaves either
// the old state or the new one, never half of one.
func (r *RAE) Save(path string) error {
	data, err := r.MarshalState()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(nil, path, data, 0o600, true); err != nil {
		return fmt.Errorf("rae: save state: %w", err)
	}
	return nil
}

// Close saves the baselines to the configured state file, if any. The CLI
// calls it when a run ends, interrupted or not: the baselines then reflect
// exactly the groups that were written. It may be called more than once.
func (r *RAE) Close() error {
	if r.path == "" {
		return nil
	}
	return r.Save(r.path)
}

// Stateful is implemented by allocators whose state outlives a group (RAE's
// baselines) and can be saved and restored: MarshalState returns it as JSON;
// UnmarshalState replaces it, leaving it as it was on error. A resumed run
// and a restarted service restore it, so the values continue as if never
// stopped.
type Stateful interface {
	MarshalState() ([]byte, error)
	UnmarshalState(data []byte) error
}

// StateOf returns the state a possibly wrapped (Discount) allocator keeps,
// or nil when it keeps none.
func StateOf(a trajectories.Allocator) Stateful {
	switch a := a.(type) {
	case Stateful:
		return a
	case Discount:
		if a.Of != nil {
			return StateOf(a.Of)
		}
	case *Discount:
		if a != nil && a.Of != nil {
			return StateOf(a.Of)
		}
	}
	return nil
}
