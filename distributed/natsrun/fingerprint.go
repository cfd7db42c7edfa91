package natsrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// A run's fingerprint is a digest of how its scenario behaves: its Info
// (name, prose, schedule, roles and their state machines, parameters,
// default policy, counterfactual declarations; not the names of its other
// policies, which workers may add to: a run's policies are checked by
// name when the worker sets the run up) and the episodes it plays,
// with the run's parameters and limits, for a few fixed seeds, every role
// playing the scenario's default policy (else random). The submitter
// stores its own in the run record; a worker computes its own for the run
// and, when the two differ, its scenario of the same name plays
// differently (another build, a local change): it refuses the run by name
// and leaves it to the others, rather than mixing its episodes into the
// output.
//
// The run's own policies are left out on purpose: an LLM cannot be played
// for a fingerprint, and the scenario's behaviour is what is checked. A
// scenario's non-default policy that differs between builds is therefore
// not caught (nor anything that only shows in episodes other than the
// fixed seeds'): Config.AuditRate's re-plays catch those, with the
// probability the operator sets.
const (
	// fingerprintEpisodes is how many episodes a fingerprint plays.
	fingerprintEpisodes = 3
	// fingerprintSeed roots the fingerprint episodes' seeds ("fingerpr").
	fingerprintSeed uint64 = 0x66696e6765727072
	// fingerprintTimeout bounds the fingerprint episodes together: a
	// scenario whose default policy cannot play three episodes in this
	// long is not fingerprinted (the run is refused, saying so).
	fingerprintTimeout = time.Minute
)

// fingerprintInput is what of a run a fingerprint depends on, besides the
// scenario itself.
type fingerprintInput struct {
	Scenario       string            `json:"scenario"`
	Params         map[string]string `json:"params"`
	MaxSteps       int               `json:"max_steps,omitempty"`
	MaxTurns       int               `json:"max_turns,omitempty"`
	MaxMessages    int               `json:"max_messages,omitempty"`
	InvalidMode    env.InvalidMode   `json:"invalid_mode,omitempty"`
	InvalidPenalty float64           `json:"invalid_penalty,omitempty"`
	InvalidBonus   float64           `json:"invalid_bonus,omitempty"`
}

func fingerprintInputOf(rec *record) fingerprintInput {
	return fingerprintInput{
		Scenario: rec.Scenario, Params: rec.Params,
		MaxSteps: rec.MaxSteps, MaxTurns: rec.MaxTurns, MaxMessages: rec.MaxMessages,
		InvalidMode: rec.InvalidMode, InvalidPenalty: rec.InvalidPenalty, InvalidBonus: rec.InvalidBonus,
	}
}

// Fingerprint is the fingerprint of scenario sc's behaviour under params
// and limits: the digest a run of it carries to its workers (see
// ProtocolVersion). It plays a few episodes of fixed seeds with the
// scenario's default policy, and takes a few milliseconds for the
// built-in scenarios.
func Fingerprint(sc env.Scenario, params map[string]string, limits env.Limits, invalid env.InvalidRule) (string, error) {
	return fingerprintOf(context.Background(), sc, fingerprintInput{
		Scenario: sc.Info().Name, Params: params,
		MaxSteps: limits.MaxSteps, MaxTurns: limits.MaxTurns, MaxMessages: limits.MaxMessages,
		InvalidMode: invalid.Mode, InvalidPenalty: invalid.Penalty, InvalidBonus: invalid.Bonus,
	})
}

// fingerprintOf computes the fingerprint; ctx ending stops it (an error:
// only a finished fingerprint is one).
func fingerprintOf(ctx context.Context, sc env.Scenario, in fingerprintInput) (string, error) {
	info := sc.Info()
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("natsrun: fingerprinting scenario %s: %w", info.Name, err)
	}
	if info.Name != in.Scenario {
		return fail(fmt.Errorf("the run is of scenario %q", in.Scenario))
	}
	reg, err := env.NewRegistry(sc)
	if err != nil {
		return fail(err)
	}
	spec := runspec.Spec{
		Scenario:  in.Scenario,
		Params:    in.Params,
		Limits:    runspec.LimitsOf(env.Limits{MaxSteps: in.MaxSteps, MaxTurns: in.MaxTurns, MaxMessages: in.MaxMessages}, 0),
		OnInvalid: runspec.InvalidOf(env.InvalidRule{Mode: in.InvalidMode, Penalty: in.InvalidPenalty, Bonus: in.InvalidBonus}),
		Episodes:  fingerprintEpisodes,
		GroupSize: 1,
		Seed:      fingerprintSeed,
	}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: reg})
	if err != nil {
		return fail(err)
	}
	h := sha256.New()
	h.Write(infoDigest(info))
	h.Write([]byte{'\n'})
	exec := res.Executor()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	var line []byte
	for _, req := range res.Requests() {
		ep := exec.Execute(ctx, req)
		if ep.End == env.EndInterrupted {
			if err := parent.Err(); err != nil {
				return fail(fmt.Errorf("stopped before its %d episodes were played: %w", fingerprintEpisodes, err))
			}
			return fail(fmt.Errorf("its default policy did not play %d episodes in %v", fingerprintEpisodes, fingerprintTimeout))
		}
		if line, err = trajectories.AppendEpisodeJSON(line[:0], ep, nil); err != nil {
			return fail(err)
		}
		h.Write(line)
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// infoDigest is the canonical JSON of what of a scenario's Info can be
// written down (its functions cannot: they show in the episodes).
func infoDigest(info *env.Info) []byte {
	type role struct {
		Name     string         `json:"name"`
		Doc      string         `json:"doc"`
		Initial  agents.State   `json:"initial"`
		Events   fsm.Events     `json:"events"`
		Terminal []agents.State `json:"terminal"`
		Acting   []agents.State `json:"acting"`
	}
	type counterfactual struct {
		NullAction   map[string]string                  `json:"null_action"`
		NullActionIn map[string]map[agents.State]string `json:"null_action_in"`
		AbsentOK     bool                               `json:"absent_ok"`
		Doc          string                             `json:"doc"`
		Resimulate   bool                               `json:"resimulate"`
	}
	d := struct {
		Name           string          `json:"name"`
		Summary        string          `json:"summary"`
		Doc            string          `json:"doc"`
		Schedule       string          `json:"schedule"`
		Roles          []role          `json:"roles"`
		Params         []env.ParamSpec `json:"params"`
		DefaultPolicy  string          `json:"default_policy"`
		PublicView     bool            `json:"public_view"`
		StepLimit      int             `json:"step_limit"`
		Counterfactual *counterfactual `json:"counterfactual"`
		CheckParams    bool            `json:"check_params"`
	}{
		Name: info.Name, Summary: info.Summary, Doc: info.Doc, Schedule: info.Schedule.String(),
		Params: info.Params, DefaultPolicy: info.DefaultPolicyName(),
		PublicView: info.PublicView, StepLimit: info.StepLimit, CheckParams: info.CheckParams != nil,
	}
	for _, r := range info.Roles {
		d.Roles = append(d.Roles, role{r.Name, r.Doc, r.Initial, r.Events, r.Terminal, r.Acting})
	}
	if cf := info.Counterfactual; cf != nil {
		d.Counterfactual = &counterfactual{cf.NullAction, cf.NullActionIn, cf.AbsentOK, cf.Doc, cf.Resimulate}
	}
	b, err := json.Marshal(d)
	if err != nil {
		// Strings, numbers, bools and string maps and slices always encode.
		panic(fmt.Sprintf("natsrun: encoding a scenario's info: %v", err))
	}
	return b
}

// fingerprints caches fingerprints by scenario definition and run input:
// a worker computes a run's once, however often it sees the run.
type fingerprints struct {
	mu sync.Mutex
	m  map[fingerprintKey]string
}

type fingerprintKey struct {
	info *env.Info // the scenario's definition: Info returns the same value every time
	in   string    // fingerprintInput's JSON
}

// maxFingerprints bounds the cache; past it, it starts again empty.
const maxFingerprints = 256

func (f *fingerprints) of(ctx context.Context, sc env.Scenario, in fingerprintInput) (string, error) {
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("natsrun: encoding a fingerprint's input: %v", err))
	}
	key := fingerprintKey{sc.Info(), string(b)}
	f.mu.Lock()
	fp, ok := f.m[key]
	f.mu.Unlock()
	if ok {
		return fp, nil
	}
	// Computed outside the lock: two computations of one key agree.
	fp, err = fingerprintOf(ctx, sc, in)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= maxFingerprints {
		f.m = map[fingerprintKey]string{}
	}
	f.m[key] = fp
	return fp, nil
}
