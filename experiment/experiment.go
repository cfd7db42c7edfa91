// Package experiment runs credit-assignment experiments: a grid of learning
// runs (scenario parameters × reward allocators × seeds), each a sequence of
// episodes in which in-process learners (policies/learn) are trained on the
// reward one allocator gives them, and the outputs a researcher needs to
// compare the allocators: per-episode metrics (JSON and CSV), final results
// per configuration with their spread across seeds, learning-curve and
// final-result plots (PNG and SVG), and a Markdown report.
//
// # Cells
//
// One cell is one learning run: a grid point, an allocator and a seed. Its
// episodes are those play.Run would play with the cell's seed, and go
// through the same engine, bus, allocators and output stage as any run's,
// one at a time, on the cell's goroutine: each episode is played only
// after the learner has learned the previous one from its record and
// credit (trajectories.Output.ObserveCredit), so a cell is a deterministic
// function of its configuration. No samples are projected: the learners
// read the record. The seed index, not the allocator, sets the episodes'
// seeds, so the allocators of one grid point are compared on the same
// scenario draws. Cells run in parallel, up to Config.Parallel at once.
//
// # Resuming
//
// Run first writes OUT/experiment.json (ManifestJSON), which says which
// experiment OUT holds. Each finished cell is written to OUT/cells/ as one
// JSON file, atomically (a temporary file renamed into place), and named
// after a hash of its configuration. A later Run with Resume and the same
// OUT checks the manifest (another experiment is refused, every
// difference named) and reads back every cell whose file matches its
// configuration instead of playing it again, so an interrupted grid
// resumes where it stopped, and the outputs are the same bytes as those of
// an uninterrupted run.
package experiment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// ErrBadConfig is wrapped by Run's errors about its configuration.
var ErrBadConfig = errors.New("bad experiment configuration")

// ErrOldCell is wrapped by the error of a Run with Resume into a
// directory whose cell files an older troupe wrote in a format without
// what the outputs now need (the per-episode cost): the error names the
// file.
var ErrOldCell = errors.New("the cell file has an older format")

// ErrInterrupted is wrapped by Run's error when its context was cancelled:
// the cells that finished were written and will not be played again.
var ErrInterrupted = errors.New("experiment interrupted")

// Axis is one dimension of the grid: a scenario parameter and the values
// it takes, as the command line gives them.
type Axis struct {
	Param  string
	Values []string
}

// ParseAxis reads an axis written "param=v1,v2,...".
func ParseAxis(s string) (Axis, error) {
	name, list, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(list) == "" {
		return Axis{}, fmt.Errorf("%w: grid axis %q: want param=v1[,v2...]", ErrBadConfig, s)
	}
	a := Axis{Param: name}
	for v := range strings.SplitSeq(list, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return Axis{}, fmt.Errorf("%w: grid axis %q: an empty value", ErrBadConfig, s)
		}
		if slices.Contains(a.Values, v) {
			return Axis{}, fmt.Errorf("%w: grid axis %q: %s given twice", ErrBadConfig, s, v)
		}
		a.Values = append(a.Values, v)
	}
	return a, nil
}

// Config is an experiment.
type Config struct {
	// Scenario is played by every cell.
	Scenario env.Scenario
	// Params are the scenario parameters every cell shares; the axes set
	// the others.
	Params map[string]string
	// Axes make the grid: every combination of their values is a point,
	// the first axis varying slowest. No axis means a single point.
	Axes []Axis
	// Allocators are the reward allocators compared, as specs of Registry
	// ("team", "difference:c=null", ...). Each cell parses its own, so
	// stateful allocators start afresh in every cell. A counterfactual
	// allocator that does not choose its mode (sim=) takes the scenario's:
	// sim=resimulate where the scenario declares Resimulate. The outputs
	// name allocators as the registry does, with that mode.
	Allocators []string
	// Registry resolves the allocator specs; nil means credit.Builtin().
	Registry *credit.Registry
	// Side, in a scenario with teams (env.Info.Teams), names the team
	// whose reward is compared: the learners of its seats learn from
	// Allocators, one per cell as always, those of the other teams from
	// SideAllocators, the same in every cell; and the metric is the side's
	// own reward, Score.Teams[side] ("G_red"), rather than the sum of the
	// teams' (which a zero-sum game holds constant). Empty: every seat
	// learns from the cell's allocator, and the metric is the team reward.
	// Not with Diagnose or Optimum, which measure the team reward.
	Side string
	// SideAllocators maps each other team to the allocator spec its
	// learners get in every cell (team to spec, "blue": "difference");
	// a team missing here gets "team". Only with Side.
	SideAllocators map[string]string

	// Learners are the learning policies compared: a dimension of the grid
	// like the allocators, every learner playing every point, allocator
	// and seed, each cell with a fresh learner (learn.Parse; ParseLearners
	// reads a sweep of hyper-parameters). At least one. With several, the
	// outputs say, per reward, the best and the median over the sweep and
	// how often each ordering of the rewards holds (Result.Sweep), since
	// the learner decides as much of the result as the reward does.
	Learners []learn.Spec
	// State maps a prompt to the learner's state (learn.Options.State);
	// nil keys states by the whole prompt.
	State func(prompt string) string
	// Learn lists the roles that learn and emit samples; empty means every
	// role.
	Learn []string
	// Policies names the scenario policy each other role plays (role to
	// name); a role missing here plays the scenario's default policy, or
	// random.
	Policies map[string]string

	// Seeds is the number of seeds per point and allocator, at least 1.
	// Seed is the root they derive from.
	Seeds int
	Seed  uint64
	// Episodes is the length of each learning run.
	Episodes int
	// Group is the number of episodes per group, as a training run's
	// --group: a group's episodes share the scenario seed, are played
	// with the same learned values, are allocated together (what GRPO-
	// style allocators compare) and are learned once the whole group has
	// been played. 0 means 1. An allocator that compares the episodes of
	// a group (credit.Needs.Group) is refused with groups of one, where
	// it would give every sample 0.
	Group int
	// Window is the number of final episodes averaged into a cell's final
	// result; 0 means a tenth of Episodes.
	Window int
	// Diagnose sets the credit diagnostics (factoredness, learnability);
	// the zero value measures none. They cost counterfactual
	// re-simulations and do not change what the cells learn.
	Diagnose Diagnose
	// Modes is the rule by which the seeds' final results are clustered
	// into modes (FindModes); the zero value is the default rule.
	Modes ModeRule
	// NashConv, when set, measures each cell's learnt joint policy
	// exactly at the cell's end (each side's best-response gain, and
	// their sum): for two-sided games small enough to search. A cell
	// whose game cannot be measured keeps the reason (CellNashConv).
	NashConv *NashConv
	// Evaluate, when positive, plays each cell's learnt policy for that
	// many episodes at the cell's end, on seeds of their own, without tree
	// sampling, learning nothing and counting no cost (Cell.Evaluation):
	// the learner's own result, comparable across allocators, groups and
	// trees. A tree-sampled cell's series measure its main lines, which
	// keep the best of K candidates at every turn: a search's outcome.
	Evaluate int
	// Limits bound every episode.
	Limits env.Limits
	// Tree, when set, plays every episode with tree sampling
	// (env.PlayTree), as AT-GRPO and MAGRPO train: at each turn of a
	// learning seat (of Tree.Roles, when it names any), the learner is
	// asked K times from the same history, each candidate is valued by its
	// own continuation, and the learner learns from every candidate with
	// the credit its allocator gives it (at-grpo and magrpo: the
	// advantage within the turn's candidates, with groups of one episode;
	// others: from the candidate's continuation, trajectories.TreeCredit).
	// The metric is the main line's, which keeps the best candidate of
	// each turn; the continuations are counted in the cells' cost. Not
	// with Side or Diagnose.
	Tree *episode.Tree
	// Optimum computes G* at a grid point, so that results are reported as
	// G/G*; nil uses KnownOptimum, and reports G itself when there is none.
	Optimum Optimum

	// Parallel is the number of cells run at once; 0 means GOMAXPROCS.
	Parallel int
	// Out is the output directory: cell files, metrics, plots and report.
	// Empty writes nothing (and resumes nothing).
	Out string
	// Resume continues the experiment Out holds: its finished cells are
	// read back, the others played, and the outputs are the bytes an
	// uninterrupted run writes. Out must hold this very experiment (its
	// ManifestJSON), else Run names every difference (*MismatchError).
	// Without Resume, an Out that already holds an experiment is refused
	// (ErrExists), so that no output of one experiment mixes with
	// another's.
	Resume bool
	// FS is the file system Out is on (nil: the operating system's).
	FS vfs.FS
	// PNG renders every plot as a 1600 × 1000 PNG beside its SVG, and has
	// the report show the PNGs. Without it the plots are SVG only: a
	// PNG's rasterising and compression cost more CPU than the whole El
	// Farol grid they plot. Not part of the experiment's identity: a
	// resumed experiment may set it or not.
	PNG bool
	// Title and Command head the report: the command that ran the
	// experiment, so that a reader can reproduce it.
	Title, Command string
	// Progress, when set, is called as episodes finish, one call at a
	// time, from the goroutines that run cells.
	Progress func(Progress)
}

// Progress is an experiment's state as it runs.
type Progress struct {
	Cells, CellsDone int // cells in the grid, and finished (resumed ones too)
	Resumed          int // cells read back from Out rather than played
	// Episodes and EpisodesDone count every cell's episodes.
	Episodes, EpisodesDone int64
	Turns                  int64 // agent turns played by this Run
	Elapsed                time.Duration
}

// Result is what an experiment measured.
type Result struct {
	// Metric is what the results measure: "G/G*" when the optimum is
	// known, else "G"; "G_red" when Config.Side is red.
	Metric string
	Cells  []*Cell // in grid order: points, then learners, then allocators, then seeds
	Rows   []Row   // one per point, learner and allocator, in grid order
	// Comparisons are the paired comparisons of every two allocators at
	// every point and learner, over the seeds' final results.
	Comparisons []Comparison
	// Costs compare the allocators at equal cost, one row per point,
	// learner and allocator, as Rows: each cell's total cost in
	// environment steps, and its metric at the least total cost of its
	// point and learner (CostRow).
	Costs []CostRow
	// Sweep summarises each point and allocator over the learners, in
	// grid order (points, then allocators); nil with a single learner.
	Sweep []SweepRow
	// Orderings are, per point, the orderings of the allocators the
	// learners give, the most frequent first; nil with a single learner.
	Orderings []Ordering
	// Resumed counts the cells read back from Out.
	Resumed int
	// Turns, Updates and Elapsed are what this Run played (agent turns,
	// and turns learned: the learning agents' turns), and how long it
	// took (the grid alone, without writing the outputs).
	Turns, Updates int64
	Elapsed        time.Duration
	// Files are the outputs written, relative to Out.
	Files []string
}

// point is one combination of axis values, with its parsed parameters.
type point struct {
	values  []string // per axis
	params  env.Params
	seats   int     // agents in an episode: the cost of the point's cells, roughly
	optimum float64 // 0 when unknown
	known   bool
}

// plan is a checked Config with its grid expanded.
type plan struct {
	cfg      Config
	name     string
	registry *credit.Registry
	points   []point
	learners []string // roles that learn
	// specs are the learners compared (Config.Learners), names their
	// specs in full and labels the short names the tables and plots give
	// them (learnerLabels).
	specs      []learn.Spec
	specNames  []string
	specLabels []string
	// allocs are the allocator specs, as the registry names them, with the
	// scenario's counterfactual mode applied (see effective).
	allocs []string
	// side is the index of the compared team (Config.Side), -1 without
	// one; sideAllocs are then the other teams' fixed allocators, as the
	// registry names them, by team index ("" for the side itself).
	side       int
	sideAllocs []string
	// resimulate is the scenario's counterfactual mode: the allocators'
	// names are read back with it (ParseDefaultingSim), as they were made.
	resimulate bool
	window     int
	cells      []*cellPlan
	// reuse holds, per point, the env.Reuse of that point's cells that
	// are not playing: a cell takes one, or makes one, and gives it back
	// when done. The cells are played largest point first, one after
	// another on each worker, and each finds the engines and records the
	// one before it warmed, rather than making garbage of its own. left
	// counts the cells of each point still to play (countCells): once a
	// point's last is done its Reuse values go, with the engines, records
	// and the last cell's policies they hold, so that the run holds the
	// engines of the points playing only, as when each cell made its own.
	reuseMu sync.Mutex
	reuse   map[int][]*env.Reuse
	left    map[int]int
}

// countCells notes the cells to play, whose points' Reuse values are
// released after their last cell (giveReuse).
func (p *plan) countCells(cells []*cellPlan) {
	p.reuseMu.Lock()
	defer p.reuseMu.Unlock()
	p.reuse, p.left = map[int][]*env.Reuse{}, map[int]int{}
	for _, c := range cells {
		p.left[c.point]++
	}
}

// takeReuse returns an idle Reuse of point, or a new one.
func (p *plan) takeReuse(point int) *env.Reuse {
	p.reuseMu.Lock()
	defer p.reuseMu.Unlock()
	free := p.reuse[point]
	if len(free) == 0 {
		return &env.Reuse{}
	}
	r := free[len(free)-1]
	p.reuse[point] = free[:len(free)-1]
	return r
}

// giveReuse gives back a Reuse taken by a cell of point, which is done:
// kept for the point's next cell, or dropped after its last.
func (p *plan) giveReuse(point int, r *env.Reuse) {
	p.reuseMu.Lock()
	defer p.reuseMu.Unlock()
	if p.left == nil {
		p.left = map[int]int{} // no count: each cell's Reuse goes with it
	}
	if p.left[point]--; p.left[point] <= 0 {
		delete(p.reuse, point)
		return
	}
	p.reuse[point] = append(p.reuse[point], r) // countCells made the map
}

type cellPlan struct {
	index              int
	point, spec, alloc int
	seed               int
	runSeed            uint64
	id                 CellConfig
	file               string // name in Out/cells
	done               *Cell  // read back from Out
	// json is the cell's encoding, when it was played and written by this
	// Run: episodes.json splices it rather than encode the cell again, and
	// episodes.csv copies numbers from it.
	json *cellJSON
	// series is the array the cell's per-episode series are carved from
	// (allocSeries), nil until it is to be played.
	series []float64
}

// allocSeries gives the cells to play the array their per-episode series
// take (Team, Reward and one per episode metric), one array for them all,
// allocated before any is played. Every cell keeps its series to the end of
// the run, which reads them for its rows and report, so one array takes no
// more memory than one per cell, at the run's peak; and the collector,
// which paces itself by the live heap, sees the results' memory from the
// start, rather than collecting more often while it grows.
func (p *plan) allocSeries(cells []*cellPlan) {
	metricer, _ := p.cfg.Scenario.(env.EpisodeMetricer)
	sizes := make([]int, len(p.points)) // per point: its cells' series
	for k := range p.points {
		n := 2
		if metricer != nil {
			n += len(metricer.MetricNames(p.points[k].params))
		}
		sizes[k] = n * p.cfg.Episodes
	}
	total := 0
	for _, c := range cells {
		total += sizes[c.point]
	}
	all := make([]float64, total)
	for _, c := range cells {
		n := sizes[c.point]
		c.series, all = all[:n:n], all[n:]
	}
}

// newPlan checks cfg and plans its grid: the learners, the allocators
// under their effective names, the roles that learn, the points and cells.
// Its errors about cfg wrap ErrBadConfig.
func newPlan(cfg Config) (*plan, error) {
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	info := cfg.Scenario.Info()
	p := &plan{cfg: cfg, name: info.Name, registry: cfg.Registry, window: cfg.Window, side: -1}
	if p.registry == nil {
		p.registry = credit.Builtin()
	}
	if p.window == 0 {
		p.window = max(1, cfg.Episodes/10)
	}
	if err := p.addLearners(info); err != nil {
		return nil, err
	}
	for _, spec := range cfg.Allocators {
		name, a, err := p.effective(info, spec)
		if err != nil {
			return nil, badConfig("allocator %q: %v", spec, err)
		}
		if slices.Contains(p.allocs, name) {
			return nil, badConfig("allocator %q given twice (as %s)", spec, name)
		}
		if err := p.serves(info, a); err != nil {
			return nil, badConfig("allocator %q: %v", spec, err)
		}
		p.allocs = append(p.allocs, name)
	}
	if err := p.sides(info); err != nil {
		return nil, err
	}
	if p.side >= 0 && cfg.Diagnose.Episodes > 0 {
		return nil, badConfig("diagnostics with side %q: they measure the team reward, the sum of the sides'", cfg.Side)
	}
	if err := p.checkTree(info); err != nil {
		return nil, err
	}
	for role := range cfg.Policies {
		if info.Role(role) == nil {
			return nil, badConfig("policy for role %q: scenario %s has %s", role, info.Name, info.RoleNames())
		}
		if slices.Contains(p.learners, role) {
			return nil, badConfig("role %q both learns and plays policy %q", role, cfg.Policies[role])
		}
	}
	if err := checkAxes(&cfg); err != nil {
		return nil, err
	}
	optimum := cfg.Optimum
	if optimum == nil && p.side < 0 {
		optimum, _ = KnownOptimum(info.Name)
	}
	if err := p.expand(optimum); err != nil {
		return nil, err
	}
	return p, nil
}

// badConfig is an error about a Config, wrapping ErrBadConfig.
func badConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

// checkConfig checks cfg's fields that need no scenario to judge.
func checkConfig(cfg *Config) error {
	switch {
	case cfg.Scenario == nil:
		return badConfig("no scenario")
	case len(cfg.Allocators) == 0:
		return badConfig("no allocator to compare")
	case cfg.Seeds < 1:
		return badConfig("seeds %d: want at least 1", cfg.Seeds)
	case cfg.Episodes < 1:
		return badConfig("episodes %d: want at least 1", cfg.Episodes)
	case cfg.Window < 0 || cfg.Window > cfg.Episodes:
		return badConfig("window %d: want 0 (a tenth) to episodes (%d)", cfg.Window, cfg.Episodes)
	case len(cfg.Learners) == 0:
		return badConfig("no learner (use learn.Parse or ParseLearners)")
	case cfg.Parallel < 0:
		return badConfig("parallel %d < 0", cfg.Parallel)
	case cfg.Group < 0 || cfg.Group > cfg.Episodes:
		return badConfig("group %d: want 0 (1) to episodes (%d)", cfg.Group, cfg.Episodes)
	case cfg.Evaluate < 0:
		return badConfig("evaluate %d < 0", cfg.Evaluate)
	}
	for _, err := range []error{cfg.Diagnose.check(), cfg.Modes.check()} {
		if err != nil {
			return badConfig("%v", err)
		}
	}
	return nil
}

// addLearners checks the learning roles and the learners, once each, and
// sets the plan's: the learners with their labels, and the roles that
// learn (every role when cfg.Learn names none).
func (p *plan) addLearners(info *env.Info) error {
	cfg := &p.cfg
	for _, role := range cfg.Learn {
		if info.Role(role) == nil {
			return badConfig("learning role %q: scenario %s has %s", role, info.Name, info.RoleNames())
		}
	}
	for i, l := range cfg.Learners {
		if l.Name() == "" {
			return badConfig("learner %d: not parsed (use learn.Parse or ParseLearners)", i+1)
		}
		if slices.Contains(p.specNames, l.String()) {
			return badConfig("learner %s given twice", l.String())
		}
		p.specs = append(p.specs, l)
		p.specNames = append(p.specNames, l.String())
	}
	p.specLabels = learnerLabels(p.specNames)
	p.learners = slices.Clone(cfg.Learn)
	if len(p.learners) == 0 {
		for _, r := range info.Roles {
			p.learners = append(p.learners, r.Name)
		}
	}
	return nil
}

// checkAxes refuses a grid axis without values, given twice, or of a
// parameter cfg fixes.
func checkAxes(cfg *Config) error {
	seen := map[string]bool{}
	for _, a := range cfg.Axes {
		if len(a.Values) == 0 {
			return badConfig("grid axis %s has no values", a.Param)
		}
		if seen[a.Param] {
			return badConfig("grid axis %s given twice", a.Param)
		}
		if _, fixed := cfg.Params[a.Param]; fixed {
			return badConfig("parameter %s is both fixed (%s) and a grid axis", a.Param, cfg.Params[a.Param])
		}
		seen[a.Param] = true
	}
	return nil
}

// effective parses spec and returns the allocator and its name (a spec the
// registry reads back), defaulting counterfactual allocators to the
// scenario's declared re-simulation mode.
func (p *plan) effective(info *env.Info, spec string) (string, trajectories.Allocator, error) {
	p.resimulate = info.Counterfactual != nil && info.Counterfactual.Resimulate
	a, err := p.registry.ParseDefaultingSim(spec, p.resimulate)
	if err != nil {
		return "", nil, fmt.Errorf("scenario %s: %w", info.Name, err)
	}
	return a.Name(), a, nil
}

// serves checks that the scenario declares what allocator a needs to
// reward the learning roles, so that a grid fails before its first cell
// rather than in it.
func (p *plan) serves(info *env.Info, a trajectories.Allocator) error {
	needs := credit.NeedsOf(a)
	cf := info.Counterfactual
	if needs.Absent && (cf == nil || !cf.AbsentOK) {
		return fmt.Errorf("scenario %s does not declare what an absent agent means", info.Name)
	}
	tree := trajectories.TreeCreditOf(a)
	if p.cfg.Tree != nil && tree == trajectories.TreeRefused {
		return fmt.Errorf("%w: with tree sampling, its values depend on other episodes than a candidate's own continuation (use at-grpo or magrpo, which compare a turn's candidates)", trajectories.ErrTreeCredit)
	}
	// With tree sampling at-grpo and magrpo compare a turn's candidates,
	// within one episode.
	if needs.Group && p.group() < 2 && (p.cfg.Tree == nil || tree != trajectories.TreeOwn) {
		return fmt.Errorf("%s compares the episodes of a group, and with groups of one episode it gives every sample 0: play groups of 2 or more episodes (Group, troupe experiment --group)", a.Name())
	}
	if needs.Null {
		for _, role := range p.learners {
			if !cf.HasNullAction(role) {
				return fmt.Errorf("scenario %s declares no null action for role %q", info.Name, role)
			}
		}
	}
	return nil
}

// checkTree checks Config.Tree against the scenario and the rest of the
// configuration: the seats of a compared side and the diagnostics do not
// take tree-sampled episodes, and a tree-sampled role must learn (its
// candidates are the learner's samples).
func (p *plan) checkTree(info *env.Info) error {
	t := p.cfg.Tree
	if t == nil {
		return nil
	}
	if err := env.ValidateTree(t, info); err != nil {
		return badConfig("tree: %v", err)
	}
	if p.side >= 0 {
		return badConfig("tree sampling with side %q: the per-side allocators do not take tree-sampled episodes", p.cfg.Side)
	}
	if p.cfg.Diagnose.Episodes > 0 {
		return badConfig("tree sampling with diagnostics: the diagnostics measure the main line's re-simulations, not the candidates'")
	}
	for _, r := range t.Roles {
		if !slices.Contains(p.learners, r) {
			return badConfig("tree role %q does not learn (the learning roles: %s): its candidates would be no samples", r, strings.Join(p.learners, ", "))
		}
	}
	return nil
}

// expand builds the grid's points and cells.
func (p *plan) expand(optimum Optimum) error {
	info := p.cfg.Scenario.Info()
	combos := [][]string{{}}
	for _, a := range p.cfg.Axes {
		var next [][]string
		for _, c := range combos {
			for _, v := range a.Values {
				next = append(next, append(slices.Clone(c), v))
			}
		}
		combos = next
	}
	for _, values := range combos {
		given := make(map[string]string, len(p.cfg.Params)+len(values))
		for k, v := range p.cfg.Params {
			given[k] = v
		}
		for i, a := range p.cfg.Axes {
			given[a.Param] = values[i]
		}
		params, err := info.ParseParams(given)
		if err != nil {
			return fmt.Errorf("%w: grid point %s: %w", ErrBadConfig, describePoint(p.cfg.Axes, values), err)
		}
		pt := point{values: values, params: params}
		if _, err := p.policies(params, nil); err != nil {
			return fmt.Errorf("grid point %s: %w", describePoint(p.cfg.Axes, values), err)
		}
		// A scenario that cannot build a game fails in the cell, with the
		// cell's name in the error.
		if g, err := p.cfg.Scenario.New(params, p.cfg.Seed); err == nil {
			pt.seats = len(g.Seats())
		}
		if optimum != nil {
			g, err := optimum(params)
			if err != nil {
				return fmt.Errorf("%w: grid point %s: optimum: %w", ErrBadConfig, describePoint(p.cfg.Axes, values), err)
			}
			if !(g > 0) {
				return fmt.Errorf("%w: grid point %s: optimum %v: G/G* needs a positive G*", ErrBadConfig, describePoint(p.cfg.Axes, values), g)
			}
			pt.optimum, pt.known = g, true
		}
		p.points = append(p.points, pt)
	}
	for pi := range p.points {
		for li := range p.specs {
			for ai := range p.allocs {
				for s := range p.cfg.Seeds {
					c := &cellPlan{index: len(p.cells), point: pi, spec: li, alloc: ai, seed: s, runSeed: seeds.Mix(p.cfg.Seed, uint64(s))}
					c.id = p.identity(c)
					// In a sweep, the learner's spec in full names its cells:
					// their names must not change with the labels (learnerLabels),
					// or a resumed sweep would not find them.
					learner := ""
					if len(p.specs) > 1 {
						learner = slug(p.specNames[li])
					}
					c.file = c.id.fileName(p.cfg.Axes, p.points[pi].values, learner)
					p.cells = append(p.cells, c)
				}
			}
		}
	}
	return nil
}

// describePoint renders a point as "agents=20 nights=7".
func describePoint(axes []Axis, values []string) string {
	if len(axes) == 0 {
		return "(the only point)"
	}
	parts := make([]string, len(axes))
	for i, a := range axes {
		parts[i] = a.Param + "=" + values[i]
	}
	return strings.Join(parts, " ")
}

// group is the number of episodes per group.
func (p *plan) group() int { return max(1, p.cfg.Group) }

// metric names what the results measure: "G_red" with a compared side.
func (p *plan) metric() string {
	if p.side >= 0 {
		return "G_" + p.cfg.Side
	}
	if len(p.points) > 0 && p.points[0].known {
		return "G/G*"
	}
	return "G"
}

// Run runs the experiment: every cell not already in cfg.Out, in parallel,
// then the outputs. On cancellation it stops the cells in flight, keeps
// the finished ones on disk, and returns an error wrapping ErrInterrupted
// and the context's cause.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	p, err := newPlan(cfg)
	if err != nil {
		return nil, err
	}
	res := &Result{Metric: p.metric(), Cells: make([]*Cell, len(p.cells))}
	if cfg.Out != "" {
		if err := p.claim(); err != nil {
			return nil, err
		}
		if err := p.resume(); err != nil {
			return nil, err
		}
	}
	prog := &progress{fn: cfg.Progress, start: time.Now(), p: Progress{Cells: len(p.cells), Episodes: int64(len(p.cells)) * int64(cfg.Episodes)}}
	var todo []*cellPlan
	for _, c := range p.cells {
		if c.done != nil {
			res.Cells[c.index] = c.done
			res.Resumed++
			prog.resumed(int64(cfg.Episodes))
			continue
		}
		todo = append(todo, c)
	}
	// Largest cells first: a big cell started last would run alone at the
	// end while the other cores idle. Each cell's result does not depend
	// on when it runs.
	slices.SortStableFunc(todo, func(a, b *cellPlan) int { return cmp.Compare(p.points[b.point].seats, p.points[a.point].seats) })

	p.allocSeries(todo)
	p.countCells(todo)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, cmp.Or(cfg.Parallel, runtime.GOMAXPROCS(0))))
	for _, c := range todo {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			cell, err := p.run(gctx, c, prog)
			if err != nil {
				return err
			}
			if cfg.Out != "" {
				if c.json, err = writeCell(cfg.FS, cfg.Out, c.file, cell); err != nil {
					return err
				}
			}
			res.Cells[c.index] = cell
			prog.cellDone(cell.Updates)
			return nil
		})
	}
	err = g.Wait()
	res.Elapsed = time.Since(start)
	res.Turns, res.Updates = prog.totals()
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w after %d of %d cells: %w", ErrInterrupted, prog.cellsDone(), len(p.cells), context.Cause(ctx))
		}
		return res, err
	}
	res.Rows = p.aggregate(res.Cells)
	res.Comparisons = p.compare(res.Rows)
	res.Costs = p.costRows(res.Cells)
	res.Sweep = p.sweep(res.Rows)
	res.Orderings = p.orderings(res.Rows, res.Comparisons)
	if cfg.Out != "" {
		files, err := p.writeOutputs(res)
		res.Files = files
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// progress serialises Progress calls from the cells' goroutines.
type progress struct {
	mu      sync.Mutex
	fn      func(Progress)
	start   time.Time
	p       Progress
	updates int64 // turns learned by the finished cells
}

func (pr *progress) resumed(episodes int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.p.CellsDone++
	pr.p.Resumed++
	pr.p.EpisodesDone += episodes
	pr.report()
}

// episodes reports n more episodes and turns more turns of a cell.
func (pr *progress) episodes(n, turns int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.p.EpisodesDone += n
	pr.p.Turns += turns
	pr.report()
}

func (pr *progress) cellDone(updates int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.p.CellsDone++
	pr.updates += updates
	pr.report()
}

func (pr *progress) report() {
	if pr.fn != nil {
		pr.p.Elapsed = time.Since(pr.start)
		pr.fn(pr.p)
	}
}

func (pr *progress) totals() (turns, updates int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.p.Turns, pr.updates
}

func (pr *progress) cellsDone() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.p.CellsDone
}

// allocator parses the cell's allocator afresh, in the scenario's
// counterfactual mode.
func (p *plan) allocator(c *cellPlan) (trajectories.Allocator, error) {
	return p.registry.ParseDefaultingSim(p.allocs[c.alloc], p.resimulate)
}
