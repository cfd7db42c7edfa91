package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/learn"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// cellVersion is the format of cell files; a file of another version is
// played again rather than read.
const cellVersion = 1

// CellConfig is everything a cell's result depends on. Two cells with
// equal configurations give equal results, so a cell file whose
// configuration matches is read back instead of played again.
type CellConfig struct {
	Version   int               `json:"version"`
	Scenario  string            `json:"scenario"`
	Params    map[string]string `json:"params"`
	Allocator string            `json:"allocator"`
	Learner   string            `json:"learner"`
	Learn     []string          `json:"learn"`
	Policies  map[string]string `json:"policies,omitempty"`
	Seed      int               `json:"seed"`
	RunSeed   uint64            `json:"run_seed"`
	Episodes  int               `json:"episodes"`
	Limits    env.Limits        `json:"limits"`
	// State marks a custom learn.Options.State: Go code a file cannot
	// describe, so a cell made with one is never taken for one made
	// without.
	State bool `json:"custom_state,omitempty"`
}

func (p *plan) identity(c *cellPlan) CellConfig {
	return CellConfig{
		Version:   cellVersion,
		Scenario:  p.name,
		Params:    p.points[c.point].params.Map(),
		Allocator: p.allocs[c.alloc],
		Learner:   p.cfg.Learner.String(),
		Learn:     p.learners,
		Policies:  p.cfg.Policies,
		Seed:      c.seed,
		RunSeed:   c.runSeed,
		Episodes:  p.cfg.Episodes,
		Limits:    p.cfg.Limits,
		State:     p.cfg.State != nil,
	}
}

func (id CellConfig) key() string {
	b, err := json.Marshal(id)
	if err != nil {
		panic(err) // plain strings and numbers always marshal
	}
	return string(b)
}

// fileName is a readable, unique name: the point, the allocator, the seed
// and a hash of the whole id.
func (id CellConfig) fileName(axes []Axis, values []string) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, id.key())
	var parts []string
	for i, a := range axes {
		parts = append(parts, slug(a.Param+"-"+values[i]))
	}
	parts = append(parts, slug(id.Allocator), fmt.Sprintf("seed%d", id.Seed), fmt.Sprintf("%016x", h.Sum64()))
	return strings.Join(parts, "_") + ".json"
}

// slug keeps letters, digits, '.' and '-', and turns runs of anything else
// into one '-'.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
			dash = r == '-'
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// Cell is the result of one learning run: its configuration and, per
// episode, the team reward G and the mean reward its samples received.
type Cell struct {
	CellConfig
	// Updates is the number of samples learned: one per learning agent's
	// turn.
	Updates int64 `json:"updates"`
	// Optimum is G* at the cell's point, when known.
	Optimum *float64 `json:"optimum,omitempty"`
	// Turns is the number of agent turns the run played.
	Turns int64 `json:"turns"`
	// Team is each episode's team reward G; Reward the mean of the
	// rewards the allocator gave its samples (0 for an episode without
	// samples).
	Team   []float64 `json:"team"`
	Reward []float64 `json:"reward"`
}

// Ratio returns episode e's G/G*, or G when the optimum is unknown.
func (c *Cell) Ratio(e int) float64 {
	if c.Optimum == nil {
		return c.Team[e]
	}
	return c.Team[e] / *c.Optimum
}

// lockstep plays a cell's episodes one at a time, each only after the
// previous one was learned. env.Run's worker would otherwise play ahead of
// the goroutine that observes episodes, and the learner would act on
// values that depend on timing. It plays through env.LocalExecutor: the
// engine and bus of every other run. It needs groups of one episode (the
// runner observes a group once all of it was played) and one worker.
type lockstep struct {
	env.LocalExecutor
	learned chan struct{} // one token per episode learned
}

// Execute implements env.Executor.
func (l *lockstep) Execute(ctx context.Context, req env.Request) *episode.Record {
	if req.Index > 0 {
		select {
		case <-l.learned:
		case <-ctx.Done():
			// Played with a cancelled context, the episode ends at once,
			// interrupted, and is not written.
		}
	}
	return l.LocalExecutor.Execute(ctx, req)
}

// progressEvery is how many episodes a cell plays between progress
// reports.
const progressEvery = 25

// run plays one cell.
func (p *plan) run(ctx context.Context, c *cellPlan, prog *progress) (_ *Cell, err error) {
	cfg := p.cfg
	pt := p.points[c.point]
	learner, err := cfg.Learner.New(learn.Options{State: cfg.State})
	if err != nil {
		return nil, err
	}
	alloc, err := p.allocator(c)
	if err != nil {
		return nil, err
	}
	if closer, ok := alloc.(io.Closer); ok {
		// A stateful allocator saves its state when closed (rae:state=).
		defer func() {
			if cerr := closer.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cell %s: close allocator: %w", p.describe(c), cerr)
			}
		}()
	}
	policy, err := p.policies(pt.params, learner)
	if err != nil {
		return nil, err
	}
	cell := &Cell{
		CellConfig: c.id,
		Team:       make([]float64, 0, cfg.Episodes),
		Reward:     make([]float64, 0, cfg.Episodes),
	}
	if pt.known {
		cell.Optimum = &pt.optimum
	}
	gate := &lockstep{
		LocalExecutor: env.LocalExecutor{Scenario: cfg.Scenario, Params: pt.params, Policy: policy, Limits: cfg.Limits, Emit: env.EmitRoles(p.learners...)},
		learned:       make(chan struct{}, 1),
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var reported, turns int64
	observe := func(ep *trajectories.Episode) {
		if err := learner.Learn(ep); err != nil {
			cancel(fmt.Errorf("cell %s: learn: %w", p.describe(c), err))
			return
		}
		cell.Team = append(cell.Team, ep.Score.Team)
		cell.Updates += int64(len(ep.Samples))
		cell.Reward = append(cell.Reward, meanReward(ep))
		turns += int64(len(ep.Turns))
		if n := int64(len(cell.Team)); n%progressEvery == 0 || n == int64(cfg.Episodes) {
			prog.episodes(n-reported, turns)
			reported, turns = n, 0
		}
		select {
		case gate.learned <- struct{}{}:
		default: // cannot happen: one token per episode, taken before the next
		}
	}
	sum, err := env.Run(ctx, env.RunConfig{
		Scenario:    cfg.Scenario,
		Params:      pt.params,
		Policy:      policy,
		Emit:        gate.Emit,
		Limits:      cfg.Limits,
		Episodes:    cfg.Episodes,
		Concurrency: 1,
		Seed:        c.runSeed,
		FailFast:    true,
		Executor:    gate,
	}, &trajectories.Output{Sink: trajectories.Discard, Allocators: []trajectories.Allocator{alloc}, Observe: observe})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return nil, cause // a learning error, or the parent's cause
	}
	if err != nil {
		return nil, fmt.Errorf("cell %s: %w", p.describe(c), err)
	}
	if len(cell.Team) != cfg.Episodes {
		return nil, fmt.Errorf("cell %s: %d of %d episodes played", p.describe(c), len(cell.Team), cfg.Episodes)
	}
	cell.Turns = sum.Turns
	return cell, nil
}

// describe names a cell in errors.
func (p *plan) describe(c *cellPlan) string {
	return fmt.Sprintf("%s allocator=%s seed=%d", describePoint(p.cfg.Axes, p.points[c.point].values), p.allocs[c.alloc], c.seed)
}

// learnerPolicy names the learner in the run spec a cell's policies are
// resolved from.
const learnerPolicy = "experiment.learner"

// policies gives the learning roles the learner and the others their
// configured policy (else the scenario's default, else random), resolved
// from a run spec as every run's are.
func (p *plan) policies(params env.Params, learner learn.Learner) (env.PolicyFor, error) {
	info := p.cfg.Scenario.Info()
	reg, err := env.NewRegistry(p.cfg.Scenario)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	spec := runspec.Spec{Scenario: info.Name, Params: params.Map(), Policies: runspec.Named(p.cfg.Policies), Episodes: 1}
	for _, role := range p.learners {
		spec.Policies[role] = runspec.Policy{Name: learnerPolicy}
	}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: reg, Policies: func(req runspec.PolicyRequest) (agents.Policy, bool, error) {
		if req.Policy.Name != learnerPolicy {
			return nil, false, nil
		}
		if learner == nil {
			return agents.Random(), true, nil // checking the configuration: any policy will do
		}
		return learner, true, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return res.Config.Policy, nil
}

// meanReward is the mean scalar reward of an episode's samples.
func meanReward(ep *trajectories.Episode) float64 {
	if len(ep.Samples) == 0 {
		return 0
	}
	sum := 0.0
	for i := range ep.Samples {
		sum += ep.Samples[i].Reward.Value
	}
	return sum / float64(len(ep.Samples))
}

// cellsDir is where cell files go, under Out.
const cellsDir = "cells"

// resume reads back the cells already in Out whose files match.
func (p *plan) resume() error {
	dir := filepath.Join(p.cfg.Out, cellsDir)
	for _, c := range p.cells {
		data, err := os.ReadFile(filepath.Join(dir, c.file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		var cell Cell
		if err := json.Unmarshal(data, &cell); err != nil {
			continue // a damaged file: play the cell again and replace it
		}
		if cell.key() != c.id.key() || len(cell.Team) != p.cfg.Episodes || len(cell.Reward) != p.cfg.Episodes {
			continue // another configuration (a hash collision) or a damaged file
		}
		if pt := p.points[c.point]; pt.known {
			cell.Optimum = &pt.optimum
		}
		c.done = &cell
	}
	return nil
}

// writeCell writes a finished cell's file atomically.
func writeCell(out, name string, cell *Cell) error {
	data, err := json.Marshal(cell)
	if err != nil {
		return fmt.Errorf("cell %s: %w", name, err)
	}
	return writeAtomic(filepath.Join(out, cellsDir, name), append(data, '\n'))
}

// writeAtomic writes data to path through a temporary file in the same
// directory, synced and renamed into place: a reader (or a resumed run)
// sees the old file or the new one, never half of one.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	tmp := f.Name()
	// CreateTemp makes the file private; outputs are for everyone to read.
	werr := f.Chmod(0o644)
	if werr == nil {
		_, werr = f.Write(data)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("output %s: %w", path, werr)
	}
	return nil
}
