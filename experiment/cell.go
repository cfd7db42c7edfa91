package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// cellVersion is the format of cell files; a file of another version is
// played again rather than read.
const cellVersion = 2

// CellConfig is everything a cell's result depends on. Two cells with
// equal configurations give equal results, so a cell file whose
// configuration matches is read back instead of played again.
type CellConfig struct {
	Version   int               `json:"version"`
	Scenario  string            `json:"scenario"`
	Params    map[string]string `json:"params"`
	Allocator string            `json:"allocator"`
	// Side and SideAllocators are Config.Side and the other teams' fixed
	// allocators (their names), when the experiment compares a side.
	Side           string            `json:"side,omitempty"`
	SideAllocators map[string]string `json:"side_allocators,omitempty"`
	Learner        string            `json:"learner"`
	Learn          []string          `json:"learn"`
	Policies       map[string]string `json:"policies,omitempty"`
	Seed           int               `json:"seed"`
	RunSeed        uint64            `json:"run_seed"`
	Episodes       int               `json:"episodes"`
	Group          int               `json:"group"`
	Window         int               `json:"window"`
	Diagnose       *diagnoseID       `json:"diagnose,omitempty"`
	Limits         limits            `json:"limits"`
	// Tree is Config.Tree, when the cell's episodes are tree-sampled.
	Tree *treeID `json:"tree,omitempty"`
	// Evaluate is Config.Evaluate, when the cell ends with evaluation
	// episodes.
	Evaluate int `json:"evaluate,omitempty"`
	// State marks a custom learn.Options.State: Go code a file cannot
	// describe, so a cell made with one is never taken for one made
	// without.
	State bool `json:"custom_state,omitempty"`
}

// diagnoseID is Diagnose as a cell file writes it, its defaults applied.
type diagnoseID struct {
	Episodes int `json:"episodes"`
	Agents   int `json:"agents"`
	Samples  int `json:"samples"`
	// Estimator is learnabilityEstimator: a cell measured with another
	// estimator of the learnability is measured again.
	Estimator int `json:"estimator"`
}

// treeID is Config.Tree as a cell file and the manifest write it.
type treeID struct {
	K     int      `json:"k"`
	Alpha float64  `json:"alpha"`
	Joint bool     `json:"joint,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

func (p *plan) treeID() *treeID {
	t := p.cfg.Tree
	if t == nil {
		return nil
	}
	return &treeID{K: t.K, Alpha: t.Alpha, Joint: t.Joint, Roles: t.Roles}
}

// learnabilityEstimator numbers the estimator of the learnability: 2 is
// the corrected ratio with its variance (Diagnostics.StateVar), which
// cells of the plain ratio of means (1, unnumbered) lack.
const learnabilityEstimator = 2

// limits are env.Limits as a cell file writes them.
type limits struct {
	MaxSteps    int `json:"max_steps,omitempty"`
	MaxTurns    int `json:"max_turns,omitempty"`
	MaxMessages int `json:"max_messages,omitempty"`
}

func limitsOf(l env.Limits) limits {
	return limits{MaxSteps: l.MaxSteps, MaxTurns: l.MaxTurns, MaxMessages: l.MaxMessages}
}

func (p *plan) diagnoseID() *diagnoseID {
	d := p.cfg.Diagnose
	if d.Episodes <= 0 {
		return nil
	}
	return &diagnoseID{Episodes: d.Episodes, Agents: d.agents(), Samples: d.samples(), Estimator: learnabilityEstimator}
}

func (p *plan) identity(c *cellPlan) CellConfig {
	return CellConfig{
		Version:        cellVersion,
		Scenario:       p.name,
		Params:         p.points[c.point].params.Map(),
		Allocator:      p.allocs[c.alloc],
		Side:           p.cfg.Side,
		SideAllocators: p.sideAllocatorsID(),
		Learner:        p.specNames[c.spec],
		Learn:          p.learners,
		Policies:       p.cfg.Policies,
		Seed:           c.seed,
		RunSeed:        c.runSeed,
		Episodes:       p.cfg.Episodes,
		Group:          p.group(),
		Window:         p.window,
		Diagnose:       p.diagnoseID(),
		Limits:         limitsOf(p.cfg.Limits),
		Tree:           p.treeID(),
		Evaluate:       p.cfg.Evaluate,
		State:          p.cfg.State != nil,
	}
}

func (id CellConfig) key() string {
	b, err := json.Marshal(id)
	if err != nil {
		panic(err) // plain strings and numbers always marshal
	}
	return string(b)
}

// fileName is a readable, unique name: the point, the learner (learner,
// empty when the experiment compares one), the allocator, the seed and a
// hash of the whole id.
func (id CellConfig) fileName(axes []Axis, values []string, learner string) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, id.key())
	var parts []string
	for i, a := range axes {
		parts = append(parts, slug(a.Param+"-"+values[i]))
	}
	if learner != "" {
		parts = append(parts, learner)
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
	// Updates is the number of turns learned: the learning agents'
	// turns.
	Updates int64 `json:"updates"`
	// Optimum is G* at the cell's point, when known.
	Optimum *float64 `json:"optimum,omitempty"`
	// Turns is the number of agent turns the run played.
	Turns int64 `json:"turns"`
	// Team is each episode's team reward G; Reward the mean of the
	// rewards the allocator gave its samples (0 for an episode without
	// samples). With a compared side (Side), Team is the side's reward
	// G_side, and Reward the mean of its samples' rewards.
	Team   []float64 `json:"team"`
	Reward []float64 `json:"reward"`
	// Cost is, per episode, the cumulative cost of the run through that
	// episode, in logical environment steps: every main line, every
	// counterfactual the allocator re-simulated, every tree candidate's
	// continuation (see EpisodeCost). Curves and final results are
	// compared against it as well as against episodes.
	Cost []int64 `json:"cost"`
	// Credit is what the allocator gave each agent over the final window
	// (the last Window episodes): the mean of its samples' rewards, and
	// the spread of all of them; the compared side's agents only, with a
	// compared side (Side).
	Credit *CreditStats `json:"credit,omitempty"`
	// MetricNames and Metrics are the scenario's episode metrics
	// (env.EpisodeMetricer): Metrics[m][e] is metric m of episode e.
	MetricNames []string    `json:"metric_names,omitempty"`
	Metrics     [][]float64 `json:"metrics,omitempty"`
	// Diagnostics are the credit diagnostics, when Config.Diagnose asks.
	Diagnostics *Diagnostics `json:"diagnostics,omitempty"`
	// Lock is the learner's lock-in at the end of the run (learn.Lock):
	// how many of its rows (agent and state) ever changed their greedy
	// action after their first update.
	Lock *learn.Lock `json:"lock,omitempty"`
	// NashConv is the learnt joint policy's exact NashConv at the end of
	// the run, when Config.NashConv asks (nashconv.go).
	NashConv *CellNashConv `json:"nashconv,omitempty"`
	// Evaluation is the learnt policy's result over evaluation episodes
	// played at the end of the run, when Config.Evaluate asks (evaluate.go).
	Evaluation *CellEvaluation `json:"evaluation,omitempty"`
}

// CreditStats describe the rewards of a cell's final window.
type CreditStats struct {
	// Agents are the learning agents, Mean the mean reward of each one's
	// samples, in the same order (sorted by agent id).
	Agents []string  `json:"agents"`
	Mean   []float64 `json:"mean"`
	// Samples counts the samples; Std is the standard deviation of their
	// rewards, the spread of the learning signal.
	Samples int     `json:"samples"`
	Std     float64 `json:"std"`
}

// creditTally accumulates CreditStats. The sums are per agent, kept by
// place (ids) rather than in maps by id: the seats of a cell's episodes
// are the same episode after episode, so each episode's seats are mapped
// to places once (slots), not a hash per turn.
type creditTally struct {
	ids        []string       // the agents, in order of their first sample
	sum, count []float64      // per agent, as ids
	index      map[string]int // id → place in ids
	seats      []episode.Seat // the latest episode's seats (a copy)
	slots      []int          // their places in ids, -1 until they have a sample
	n          int
	mean, m2   float64 // Welford's running mean and sum of squares
}

// add tallies the values of an episode's samples (its emitted turns, in
// order): those of team's seats only when team ≥ 0 (a compared side's), of
// every seat when team < 0.
func (t *creditTally) add(rec *episode.Record, values []float64, team int) {
	if !episode.SameSeats(rec.Seats, t.seats) {
		t.seats = slices.Clone(rec.Seats)
		t.slots = slices.Repeat([]int{-1}, len(rec.Seats))
	}
	if t.index == nil {
		t.index = map[string]int{}
	}
	s := 0
	for i := range rec.Turns {
		tr := &rec.Turns[i]
		if !tr.Emit || s >= len(values) {
			continue
		}
		v := values[s]
		s++
		if team >= 0 && rec.Seats[tr.Seat].Team != team {
			continue
		}
		k := t.slots[tr.Seat]
		if k < 0 {
			id := rec.Seats[tr.Seat].ID
			var ok bool
			if k, ok = t.index[id]; !ok {
				k = len(t.ids)
				t.index[id] = k
				t.ids = append(t.ids, id)
				t.sum, t.count = append(t.sum, 0), append(t.count, 0)
			}
			t.slots[tr.Seat] = k
		}
		t.sum[k] += v
		t.count[k]++
		t.n++
		d := v - t.mean
		t.mean += d / float64(t.n)
		t.m2 += d * (v - t.mean)
	}
}

func (t *creditTally) stats() *CreditStats {
	if t.n == 0 {
		return nil
	}
	cs := &CreditStats{Agents: slices.Sorted(maps.Keys(t.index)), Samples: t.n}
	for _, a := range cs.Agents {
		k := t.index[a]
		cs.Mean = append(cs.Mean, t.sum[k]/t.count[k])
	}
	if t.n > 1 {
		cs.Std = math.Sqrt(t.m2 / float64(t.n-1))
	}
	return cs
}

// Ratio returns episode e's G/G*, or G when the optimum is unknown.
func (c *Cell) Ratio(e int) float64 {
	if c.Optimum == nil {
		return c.Team[e]
	}
	return c.Team[e] / *c.Optimum
}

// progressEvery is how many episodes a cell plays between progress
// reports.
const progressEvery = 25

// run plays one cell: its episodes one after the other, each only after
// the learner has learned the previous one, so that the learner never acts
// on values that depend on timing. The cell is an play.Run like every
// run's, in Lockstep: each group is played by the run's executor (the
// engine and bus), then handed to a trajectories.Output (the allocators),
// whose ObserveCredit gives the learner the record and its credit, before
// the next group is played. The episodes are those a run with the cell's
// seed plays, and the first one that does not finish stops the cell
// (FailFast).
func (p *plan) run(ctx context.Context, c *cellPlan, prog *progress) (_ *Cell, err error) {
	cfg := p.cfg
	pt := p.points[c.point]
	learner, err := p.specs[c.spec].New(learn.Options{State: cfg.State})
	if err != nil {
		return nil, err
	}
	alloc, err := p.cellAllocator(c)
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
	diag, err := p.diagnoser(c)
	if err != nil {
		return nil, err
	}
	cell, metricer := p.newCell(c, &pt)
	obs := &cellObserver{p: p, pt: &pt, learner: learner, cell: cell, metricer: metricer, prog: prog}
	if metricer != nil {
		obs.metric = make([]float64, len(cell.MetricNames))
	}
	reuse := p.takeReuse(c.point)
	defer p.giveReuse(c.point, reuse)
	out := &trajectories.Output{Sink: trajectories.Discard, Allocators: []trajectories.Allocator{alloc}, ObserveCredit: obs.learned}
	run := play.Config{
		Play:     env.Play{Scenario: cfg.Scenario, Params: pt.params, Policy: policy, Limits: cfg.Limits, Emit: env.EmitRoles(p.learners...)},
		Drive:    env.Drive{Tree: cfg.Tree},
		Episodes: cfg.Episodes, GroupSize: p.group(), Seed: c.runSeed,
		Lockstep: true, FailFast: true, Reuse: reuse,
	}
	// The cost is counted between the run and the allocators, and the
	// diagnostics' replays after it, uncounted.
	counted := costOutput{RecyclingOutput: out}
	var o play.Output = counted
	if diag != nil {
		o = &afterGroups{RecyclingOutput: counted, after: diag.group}
	}
	if _, err = play.Run(ctx, run, o); err != nil {
		return nil, fmt.Errorf("cell %s: %w", p.describe(c), err)
	}
	cell.Credit = obs.tally.stats()
	if diag != nil {
		cell.Diagnostics = diag.result
	}
	if l, ok := learner.(learn.Locker); ok {
		lock := l.Lock()
		cell.Lock = &lock
	}
	if cfg.NashConv != nil {
		if cell.NashConv, err = p.nashConv(ctx, c, pt.params, policy, learner); err != nil {
			return nil, err
		}
	}
	if cfg.Evaluate > 0 {
		if cell.Evaluation, err = p.evaluate(ctx, c, cell, pt.params, policy); err != nil {
			return nil, err
		}
	}
	return cell, nil
}

// newCell starts c's Cell at point pt: its series, and a series per
// metric when the scenario has metrics (an env.EpisodeMetricer, which it
// returns). The series are carved from the cell's array (allocSeries),
// each of capacity Episodes: an append past it would not reach the next.
func (p *plan) newCell(c *cellPlan, pt *point) (*Cell, env.EpisodeMetricer) {
	episodes := p.cfg.Episodes
	series := c.series
	c.series = nil
	next := func() []float64 {
		if len(series) < episodes {
			return make([]float64, 0, episodes)
		}
		s := series[:0:episodes]
		series = series[episodes:]
		return s
	}
	cell := &Cell{CellConfig: c.id, Team: next(), Reward: next(), Cost: make([]int64, 0, episodes)}
	if pt.known {
		cell.Optimum = &pt.optimum
	}
	metricer, _ := p.cfg.Scenario.(env.EpisodeMetricer)
	if metricer != nil {
		cell.MetricNames = metricer.MetricNames(pt.params)
		cell.Metrics = make([][]float64, len(cell.MetricNames))
		for m := range cell.Metrics {
			cell.Metrics[m] = next()
		}
	}
	return cell, metricer
}

// cellObserver is a cell's trajectories.Output.ObserveCredit: it hands
// each episode and its credit to the learner, then records the episode in
// the cell and reports progress.
type cellObserver struct {
	p        *plan
	pt       *point
	learner  learn.Learner
	cell     *Cell
	metricer env.EpisodeMetricer // nil: the scenario has no metrics
	metric   []float64           // scratch for an episode's metrics
	tally    creditTally         // the credit of the last window's episodes
	// reported is the episodes reported to prog, turns those played
	// since.
	reported, turns int64
	prog            *progress
}

// learned implements ObserveCredit. A tree-sampled episode is learned,
// tallied and averaged by its samples, every candidate one
// (learn.Candidates); its team reward is its main line's.
func (o *cellObserver) learned(main *episode.Record, credit *trajectories.Credit) error {
	p, cell := o.p, o.cell
	spent := costOf(main).Total()
	if n := len(cell.Cost); n > 0 {
		spent += cell.Cost[n-1]
	}
	cell.Cost = append(cell.Cost, spent)
	rec := learn.Candidates(main)
	if err := o.learner.Learn(rec, credit); err != nil {
		return fmt.Errorf("learn: %w", err)
	}
	values := scalarCredit(credit)
	if len(cell.Team) >= p.cfg.Episodes-p.window {
		o.tally.add(rec, values, p.side)
	}
	if o.metricer != nil {
		// The main line's: the candidates are samples, not moves of the
		// game (Candidates would count every patron K times).
		o.metricer.EpisodeMetrics(o.pt.params, main, o.metric)
		if err := env.CheckMetrics(cell.MetricNames, o.metric); err != nil {
			return err
		}
		for m, v := range o.metric {
			cell.Metrics[m] = append(cell.Metrics[m], v)
		}
	}
	cell.Updates += int64(len(values))
	if p.side >= 0 {
		cell.Team = append(cell.Team, rec.Score.Of(p.side))
		cell.Reward = append(cell.Reward, meanOfTeam(rec, values, p.side))
	} else {
		cell.Team = append(cell.Team, rec.Score.Team)
		cell.Reward = append(cell.Reward, mean(values))
	}
	cell.Turns += int64(len(main.Turns))
	o.turns += int64(len(main.Turns))
	if n := int64(len(cell.Team)); n%progressEvery == 0 || n == int64(p.cfg.Episodes) {
		o.prog.episodes(n-o.reported, o.turns)
		o.reported, o.turns = n, 0
	}
	return nil
}

// afterGroups is an Output that hands each group, once its last episode
// is written, to after (a diagnoser's), before the run recycles its
// records: it recycles when the Output it wraps does, so that wrapping
// costs the run none of its reuse. A group with an episode that did not
// finish stops the run (FailFast) and is not handed on.
type afterGroups struct {
	play.RecyclingOutput
	after func(context.Context, []*episode.Record) error
}

// Finish implements play.Output.
func (a *afterGroups) Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	write, err := a.RecyclingOutput.Finish(ctx, group)
	if err != nil {
		return nil, err
	}
	last := len(group) - 1
	return func(k int) (int, error) {
		n, err := write(k)
		if err != nil || k < last {
			return n, err
		}
		for _, rec := range group {
			if !rec.Finished() {
				return n, nil
			}
		}
		return n, a.after(ctx, group)
	}, nil
}

// describe names a cell in errors.
func (p *plan) describe(c *cellPlan) string {
	if len(p.specs) > 1 {
		return fmt.Sprintf("%s learner=%s allocator=%s seed=%d", describePoint(p.cfg.Axes, p.points[c.point].values), p.specNames[c.spec], p.allocs[c.alloc], c.seed)
	}
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
	// The plan's allocator registry: the spec names none, and the default
	// one would be built again for every cell.
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: reg, Allocators: p.registry, Policies: func(req env.PolicyRequest) (agents.Policy, error) {
		if req.Name != learnerPolicy {
			return nil, env.ErrUnknownPolicy
		}
		if learner == nil {
			return agents.Random(), nil // checking the configuration: any policy will do
		}
		return learner, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return perRole(info, res.Config.Policy), nil
}

// perRole is pf, which decides by the seat's role alone (a run spec gives
// each role one policy: env.Info.AssignPolicies), as a list of the
// scenario's roles and their policies. The engine asks for every seat's
// policy at the start of every episode: comparing a few role names, which
// a game's seats usually share with its Info, costs less than hashing
// them. It is safe for concurrent use (counterfactual replays seat their
// agents concurrently).
func perRole(info *env.Info, pf env.PolicyFor) env.PolicyFor {
	roles := make([]string, len(info.Roles))
	policies := make([]agents.Policy, len(info.Roles))
	for i, r := range info.Roles {
		roles[i], policies[i] = r.Name, pf(env.Seat{Role: r.Name})
	}
	return func(s env.Seat) agents.Policy {
		for i, r := range roles {
			if r == s.Role {
				return policies[i]
			}
		}
		return pf(s) // a role the scenario does not declare: the engine refuses its seat
	}
}

// scalarCredit is the values of an episode's first allocator, its
// samples' scalar rewards: one per emitted turn (none without credit).
func scalarCredit(c *trajectories.Credit) []float64 {
	if c == nil || len(c.Values) == 0 {
		return nil
	}
	return c.Values[0]
}

// mean is the mean of values, 0 for none: summed in order, as the rewards
// of an episode's samples are.
func mean(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// meanOfTeam is the mean of the values of the samples (the emitted turns,
// in order) of team t's seats, 0 for none.
func meanOfTeam(rec *episode.Record, values []float64, t int) float64 {
	sum, n, s := 0.0, 0, 0
	for i := range rec.Turns {
		tr := &rec.Turns[i]
		if !tr.Emit || s >= len(values) {
			continue
		}
		if rec.Seats[tr.Seat].Team == t {
			sum += values[s]
			n++
		}
		s++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// cellsDir is where cell files go, under Out.
const cellsDir = "cells"

// resume reads back the cells already in Out whose files match.
func (p *plan) resume() error {
	dir := filepath.Join(p.cfg.Out, cellsDir)
	for _, c := range p.cells {
		path := filepath.Join(dir, c.file)
		cell, err := readCell(p.cfg.FS, path, p.cfg.Episodes)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errDamagedCell) {
			continue // a damaged file: play the cell again and replace it
		}
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if cell.key() != c.id.key() {
			continue // another configuration (a hash collision)
		}
		if err := cell.checkCost(path, p.cfg.Episodes); errors.Is(err, errDamagedCell) {
			continue
		} else if err != nil {
			return fmt.Errorf("resume: %w: use another output directory, or delete %s to play it again", err, path)
		}
		if pt := p.points[c.point]; pt.known {
			cell.Optimum = &pt.optimum
		}
		c.done = cell
	}
	return nil
}

// errDamagedCell marks a cell file that does not decode whole, or not to
// a finished cell: what an interrupted write can leave.
var errDamagedCell = errors.New("damaged cell file")

// readCell reads the cell file at path in fsys (nil: the operating
// system's), of a cell of the given episodes: an error wrapping
// errDamagedCell when it does not decode whole or its series are not that
// long.
func readCell(fsys vfs.FS, path string, episodes int) (*Cell, error) {
	data, err := vfs.ReadFile(vfs.Or(fsys), path)
	if err != nil {
		return nil, err
	}
	var cell Cell
	if err := json.Unmarshal(data, &cell); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errDamagedCell, path, err)
	}
	if len(cell.Team) != episodes || len(cell.Reward) != episodes {
		return nil, fmt.Errorf("%w %s: %d team and %d reward values, not %d", errDamagedCell, path, len(cell.Team), len(cell.Reward), episodes)
	}
	return &cell, nil
}

// checkCost checks that the cell read from path holds its cost per
// episode: an error wrapping ErrOldCell for a file written before the
// cost was counted, errDamagedCell for one whose cost is not that long.
func (c *Cell) checkCost(path string, episodes int) error {
	if c.Cost == nil {
		return fmt.Errorf("%w: cell %s was written by an older troupe, without its per-episode cost (\"cost\"), which the outputs now compare allocators by", ErrOldCell, path)
	}
	if len(c.Cost) != episodes {
		return fmt.Errorf("%w %s: %d cost values, not %d", errDamagedCell, path, len(c.Cost), episodes)
	}
	return nil
}

// writeCell writes a finished cell's file atomically, and returns its JSON
// (without the newline), which episodes.json splices in and episodes.csv
// takes numbers from.
func writeCell(fsys vfs.FS, out, name string, cell *Cell) (*cellJSON, error) {
	j, err := encodeCell(cell)
	if err != nil {
		return nil, fmt.Errorf("cell %s: %w", name, err)
	}
	// Not synced: a cell file is written once, and resume plays again a
	// cell whose file does not decode whole (what a power cut can leave of
	// an unsynced file), so a sync would buy nothing for what it costs (a
	// tenth of the outputs' CPU time, on a grid of small cells).
	if err := writeFile(fsys, filepath.Join(out, cellsDir, name), append(j.data, '\n'), false); err != nil {
		return nil, err
	}
	return j, nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory, synced and renamed into place, the directory synced: a
// reader (or a resumed run) sees the old file or the new one, never half
// of one, and a power loss after it returned keeps the new one.
func writeAtomic(fsys vfs.FS, path string, data []byte) error {
	return writeFile(fsys, path, data, true)
}

// writeFile is writeAtomic, with the syncs only when sync is set: without
// them, a reader still never sees half a file while the system runs, but
// a power cut may leave an empty or partial one, or none.
func writeFile(fsys vfs.FS, path string, data []byte, sync bool) error {
	fsys = vfs.Or(fsys)
	dir := filepath.Dir(path)
	mkdir := fsys.MkdirAll
	if sync {
		mkdir = func(dir string, perm fs.FileMode) error { return vfs.MkdirAllDurable(fsys, dir, perm) }
	}
	if err := mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	// Outputs are for everyone to read.
	if err := atomicfile.Write(fsys, path, data, 0o644, sync); err != nil {
		return fmt.Errorf("output %s: %w", path, err)
	}
	return nil
}
