package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/learn"
)

// experimentFlags are the raw values of troupe experiment's flags.
type experimentFlags struct {
	grid, params, allocators, policies, learn                []string
	learners, sideAllocators                                 []string
	seeds, episodes, window, parallel, group                 int
	diagnose, diagnoseSamples, tree, nashConvNodes, evaluate int
	treeAlpha, modeMinShare                                  float64
	treeRoles                                                []string
	nashConv                                                 string
	seed                                                     uint64
	out, title, cpuProfile, side                             string
	quiet, resume, png, treeJoint                            bool
}

func (a *App) experimentCommand() *cobra.Command {
	f := &experimentFlags{}
	cmd := &cobra.Command{
		Use:   "experiment SCENARIO",
		Short: "Train learning agents under several reward allocators and compare them",
		Long: `Run a grid of learning runs: every combination of the --grid values, every
--allocator and every seed is one cell, a run of --episodes episodes in which
in-process learners (--learner) play the learning roles and learn from the
reward that allocator gives them, one episode after the other. Cells run in
parallel, on every CPU.

The output directory gets per-episode metrics (episodes.csv, episodes.json),
the final result of each grid point and allocator with bootstrap 95%
confidence intervals across seeds (results.csv, results.json), every seed's
final result (finals.csv), paired comparisons of the allocators over the
same seeds (comparisons.csv: difference, CI, paired t and sign-flip tests,
Holm-adjusted p, Cohen's d_z), each agent's mean credit (credit.csv),
learning curves, final-result and per-seed plots (SVG; --png adds PNGs) and a
Markdown report (report.md) that embeds them and says what every number
is. Results are G/G* when troupe knows the scenario's optimum G* (elfarol,
committee), the team reward G otherwise; beside each mean, the modes of the
seeds' finals (modes.csv), where they ended in distinct places. Several
--learner values, or one that sweeps (egreedy:alpha=0.05/0.1/0.3), make the
learner a dimension of the grid: the report then gives, per reward, the
best and the median over the learners and how many learners give each
ordering of the rewards (sweep.csv). --diagnose N adds Agogino &
Tumer's factoredness and learnability of each reward, from sampled
counterfactuals of N episodes per cell.

Each finished cell is saved at once under OUT/cells/, and OUT/experiment.json
says which experiment OUT holds. After an interruption (Ctrl-C, kill -9),
run the same command with --resume: it plays only the cells that are
missing, and the outputs are the same bytes as an uninterrupted run's. A
--resume with other settings is refused, naming every difference; without
--resume, an OUT that holds an experiment is refused.`,
		Example: `  troupe experiment elfarol --grid agents=20,60,100,200 --param nights=7 --param capacity=6 \
      --allocator team,individual,difference --episodes 1000 --out out/elfarol
  troupe experiment committee --grid uninformed=1,3,5 --param informed=2 --learn adviser \
      --policy decider=scripted --allocator team,difference,shapley --episodes 2000`,
		Args: a.oneScenario("experiment", nil),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("out") {
				f.out = "troupe-experiment-" + args[0]
			}
			cfg, err := a.experimentConfig(args[0], f)
			if err != nil {
				return err
			}
			if f.cpuProfile != "" {
				stop, err := startCPUProfile(f.cpuProfile)
				if err != nil {
					return usagef("--cpuprofile: %w", err)
				}
				defer stop()
			}
			return a.experiment(cmd.Context(), cfg, f.quiet)
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringArrayVarP(&f.grid, "grid", "G", nil, "grid axis `param=v1,v2,...`: a scenario parameter and its values (repeatable: the grid is every combination)")
	fl.StringArrayVarP(&f.params, "param", "p", nil, "fixed scenario parameter `key=value` (repeatable)")
	fl.StringArrayVarP(&f.allocators, "allocator", "a", []string{"team"}, "reward allocator `spec` to compare (repeatable or comma-separated; see troupe allocators)")
	fl.StringVar(&f.side, "side", "", "`TEAM` whose reward is compared, in a scenario with teams: --allocator rewards its learners, the metric is its own reward (not the sum of the teams')")
	fl.StringArrayVar(&f.sideAllocators, "side-allocator", nil, "`TEAM=SPEC`: the fixed allocator of another team's learners, with --side (repeatable; default team)")
	fl.StringArrayVarP(&f.learners, "learner", "l", []string{"egreedy"}, "learning policy `spec`: egreedy, boltzmann, reinforce, pg-table, pg-linear or pg-mlp, with :key=value,... (see the learners below); a value may sweep, key=v1/v2/..., and the flag repeats: every learner is a dimension of the grid")
	fl.StringArrayVar(&f.learn, "learn", nil, "`ROLES` that learn (comma-separated, repeatable; default every role)")
	fl.StringArrayVarP(&f.policies, "policy", "P", nil, "`ROLE=NAME`: the scenario policy a role that does not learn plays (repeatable; default the scenario's default, or random)")
	fl.IntVar(&f.seeds, "seeds", 20, "seeds per grid point and allocator (the confidence intervals and paired tests are over seeds)")
	fl.Uint64VarP(&f.seed, "seed", "s", 1, "root seed: every cell's seeds derive from it and the seed index")
	fl.IntVarP(&f.episodes, "episodes", "n", 1000, "episodes per cell")
	fl.IntVarP(&f.group, "group", "g", 1, "episodes per group: they share the scenario seed and are allocated together (what grpo, rloo, magrpo and at-grpo compare; they refuse groups of 1)")
	fl.IntVar(&f.window, "window", 0, "final episodes averaged into a cell's final result (0: a tenth of --episodes)")
	fl.IntVarP(&f.parallel, "parallel", "j", 0, "cells run at once; 0 means one per CPU (does not change the results)")
	fl.IntVar(&f.tree, "tree", 0, "tree sampling (AT-GRPO, MAGRPO): at each learning seat's turn, ask the learner `K` times from the same history, value each candidate by its own continuation, and learn from every one (use at-grpo or magrpo; 0: off; see docs/experiments.md)")
	fl.Float64Var(&f.treeAlpha, "tree-alpha", 1, "with --tree: a candidate's reward is alpha·team + its seat's own score (AT-GRPO's mix)")
	fl.BoolVar(&f.treeJoint, "tree-joint", false, "with --tree: candidate c of a step is the joint action of every sampled seat's c-th answer (MAGRPO)")
	fl.StringArrayVar(&f.treeRoles, "tree-roles", nil, "with --tree: the learning `ROLES` tree-sampled (comma-separated, repeatable; default: every learning role)")
	fl.StringVar(&f.nashConv, "nashconv", "", "measure each cell's learnt joint policy exactly at its end, in a small two-sided game: `SEARCH` full (every history) or markov (every position, for games of perfect information; tic-tac-toe)")
	fl.IntVar(&f.evaluate, "evaluate", 0, "play each cell's learnt policy for `N` episodes at its end, on seeds of their own, without tree sampling, learning nothing and counting no cost: the learner's own result, the same measure for every allocator, group and tree (a tree-sampled cell's curves measure its main lines, a search's outcome)")
	fl.IntVar(&f.nashConvNodes, "nashconv-max-nodes", 0, "histories (or positions) a --nashconv search may visit per side; 0: league.DefaultMaxNodes")
	fl.IntVar(&f.diagnose, "diagnose", 0, "episodes per cell whose credit is diagnosed (factoredness, learnability) from sampled counterfactuals; 0: none")
	fl.IntVar(&f.diagnoseSamples, "diagnose-samples", experiment.DefaultDiagnoseSamples, "counterfactuals per diagnosed agent and kind (its own action, the others'), at least 2: the learnability's bias falls as 1/samples², its interval as 1/√samples")
	fl.Float64Var(&f.modeMinShare, "mode-min-share", experiment.DefaultModeMinShare, "least share of the seeds in a mode of the final results (modes.csv); a mode holds two seeds at least")
	fl.StringVarP(&f.out, "out", "o", "", "output directory (default troupe-experiment-SCENARIO)")
	fl.BoolVar(&f.resume, "resume", false, "continue the experiment in --out (after an interruption): refused if it was run with other settings")
	fl.StringVar(&f.title, "title", "", "the report's title")
	fl.BoolVar(&f.png, "png", false, "render the plots as PNG too (1600×1000), and show those in the report; SVG only without it (the PNGs cost more CPU than the grid)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print no progress and no summary, only errors")
	// What the grid and its outputs cost, for those who make them cheaper
	// (docs/experiments.md); hidden: no result depends on it.
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the experiment to `FILE` (go tool pprof)")
	_ = fl.MarkHidden("cpuprofile")
	var learners strings.Builder
	_ = learn.Usage(&learners)
	compare := a.experimentCompareCommand()
	compare.SetUsageTemplate(cmd.UsageTemplate()) // without the learners'
	cmd.SetUsageTemplate(cmd.UsageTemplate() + "\n" + learners.String())
	cmd.AddCommand(compare)
	return cmd
}

// experimentConfig checks the flags and builds the experiment. Every error
// is a *UsageError naming the flag.
func (a *App) experimentConfig(name string, f *experimentFlags) (experiment.Config, error) {
	sc, err := a.Scenarios.Lookup(name)
	if err != nil {
		return experiment.Config{}, &UsageError{Err: err}
	}
	info := sc.Info()
	params, err := env.ParseAssignments(f.params)
	if err != nil {
		return experiment.Config{}, usagef("--param: %w", err)
	}
	var axes []experiment.Axis
	for _, g := range f.grid {
		axis, err := experiment.ParseAxis(g)
		if err != nil {
			return experiment.Config{}, usagef("--grid: %w", err)
		}
		axes = append(axes, axis)
	}
	allocators, err := buildAllocators(a.Allocators, f.allocators, false) // experiment.Run applies the scenario's mode
	if err != nil {
		return experiment.Config{}, err
	}
	specs := allocatorNames(allocators) // canonical: specs the registry reads back
	var sideAllocators map[string]string
	for _, v := range f.sideAllocators {
		team, spec, err := experiment.ParseSideAllocator(v)
		if err != nil {
			return experiment.Config{}, usagef("--side-allocator: %w", err)
		}
		if _, dup := sideAllocators[team]; dup {
			return experiment.Config{}, usagef("--side-allocator %q: team %s was already given an allocator", v, team)
		}
		if sideAllocators == nil {
			sideAllocators = map[string]string{}
		}
		sideAllocators[team] = spec
	}
	var learners []learn.Spec
	for _, l := range f.learners {
		more, err := experiment.ParseLearners(l)
		if err != nil {
			return experiment.Config{}, usagef("--learner: %w", err)
		}
		for _, m := range more {
			if slices.ContainsFunc(learners, func(s learn.Spec) bool { return s.String() == m.String() }) {
				return experiment.Config{}, usagef("--learner %s: learner %s given twice", l, m.String())
			}
			learners = append(learners, m)
		}
	}
	var roles []string
	for _, v := range f.learn {
		for r := range strings.SplitSeq(v, ",") {
			if r = strings.TrimSpace(r); r != "" && !slices.Contains(roles, r) {
				roles = append(roles, r)
			}
		}
	}
	policies := map[string]string{}
	for _, p := range f.policies {
		role, pol, ok := strings.Cut(p, "=")
		if !ok || role == "" || pol == "" {
			return experiment.Config{}, usagef("--policy %q: want ROLE=NAME (roles of %s: %s)", p, info.Name, info.RoleNames())
		}
		if _, dup := policies[role]; dup {
			return experiment.Config{}, usagef("--policy %q: role %s was already given a policy", p, role)
		}
		policies[role] = pol
	}
	var tree *episode.Tree
	switch {
	case f.tree == 1 || f.tree < 0:
		return experiment.Config{}, usagef("--tree %d: want at least 2 candidates per turn (0: no tree sampling)", f.tree)
	case f.tree >= 2:
		troles, err := splitRoles(info, "--tree-roles", f.treeRoles)
		if err != nil {
			return experiment.Config{}, err
		}
		tree = &episode.Tree{K: f.tree, Alpha: f.treeAlpha, Joint: f.treeJoint, Roles: troles}
	case f.treeJoint || len(f.treeRoles) > 0:
		return experiment.Config{}, usagef("--tree-joint and --tree-roles need --tree K")
	}
	search, err := nashConvSearch(f.nashConv, f.nashConvNodes)
	if err != nil {
		return experiment.Config{}, err
	}
	var nashConv *experiment.NashConv
	if search != nil {
		nashConv = &experiment.NashConv{Markov: search.Markov, MaxNodes: search.MaxNodes}
	}
	cfg := experiment.Config{
		Tree:           tree,
		Scenario:       sc,
		Params:         params,
		Axes:           axes,
		Allocators:     specs,
		Registry:       a.Allocators,
		Side:           f.side,
		SideAllocators: sideAllocators,
		Learners:       learners,
		Learn:          roles,
		Policies:       policies,
		Seeds:          f.seeds,
		Seed:           f.seed,
		Episodes:       f.episodes,
		Group:          f.group,
		Window:         f.window,
		Diagnose:       experiment.Diagnose{Episodes: f.diagnose, Samples: f.diagnoseSamples},
		Modes:          experiment.ModeRule{MinShare: f.modeMinShare},
		NashConv:       nashConv,
		Evaluate:       f.evaluate,
		Resume:         f.resume,
		Parallel:       f.parallel,
		Out:            f.out,
		FS:             a.fs,
		Title:          f.title,
		PNG:            f.png,
	}
	cfg.Command = experimentCommandLine(name, cfg)
	return cfg, nil
}

// experimentCommandLine renders the experiment as the troupe command that
// reproduces it, every setting explicit, for the report.
func experimentCommandLine(name string, cfg experiment.Config) string {
	args := []string{"troupe", "experiment", name}
	for _, k := range slices.Sorted(maps.Keys(cfg.Params)) {
		args = append(args, "--param", k+"="+cfg.Params[k])
	}
	for _, ax := range cfg.Axes {
		args = append(args, "--grid", ax.Param+"="+strings.Join(ax.Values, ","))
	}
	for _, s := range cfg.Allocators {
		args = append(args, "--allocator", s)
	}
	if cfg.Side != "" {
		args = append(args, "--side", cfg.Side)
	}
	for _, team := range slices.Sorted(maps.Keys(cfg.SideAllocators)) {
		args = append(args, "--side-allocator", team+"="+cfg.SideAllocators[team])
	}
	for _, l := range cfg.Learners {
		args = append(args, "--learner", l.String())
	}
	if len(cfg.Learn) > 0 {
		args = append(args, "--learn", strings.Join(cfg.Learn, ","))
	}
	for _, r := range slices.Sorted(maps.Keys(cfg.Policies)) {
		args = append(args, "--policy", r+"="+cfg.Policies[r])
	}
	args = append(args, "--seeds", strconv.Itoa(cfg.Seeds), "--seed", strconv.FormatUint(cfg.Seed, 10), "--episodes", strconv.Itoa(cfg.Episodes))
	if cfg.Group > 1 {
		args = append(args, "--group", strconv.Itoa(cfg.Group))
	}
	if cfg.Window > 0 {
		args = append(args, "--window", strconv.Itoa(cfg.Window))
	}
	if cfg.Diagnose.Episodes > 0 {
		args = append(args, "--diagnose", strconv.Itoa(cfg.Diagnose.Episodes))
		if cfg.Diagnose.Samples > 0 {
			args = append(args, "--diagnose-samples", strconv.Itoa(cfg.Diagnose.Samples))
		}
	}
	if cfg.Modes.MinShare > 0 && cfg.Modes.MinShare != experiment.DefaultModeMinShare {
		args = append(args, "--mode-min-share", strconv.FormatFloat(cfg.Modes.MinShare, 'g', -1, 64))
	}
	if t := cfg.Tree; t != nil {
		args = append(args, "--tree", strconv.Itoa(t.K), "--tree-alpha", strconv.FormatFloat(t.Alpha, 'g', -1, 64))
		if t.Joint {
			args = append(args, "--tree-joint")
		}
		if len(t.Roles) > 0 {
			args = append(args, "--tree-roles", strings.Join(t.Roles, ","))
		}
	}
	if nc := cfg.NashConv; nc != nil {
		args = append(args, "--nashconv", map[bool]string{false: "full", true: "markov"}[nc.Markov])
		if nc.MaxNodes > 0 {
			args = append(args, "--nashconv-max-nodes", strconv.Itoa(nc.MaxNodes))
		}
	}
	if cfg.Evaluate > 0 {
		args = append(args, "--evaluate", strconv.Itoa(cfg.Evaluate))
	}
	args = append(args, "--out", cfg.Out)
	if cfg.Title != "" {
		args = append(args, "--title", cfg.Title)
	}
	if cfg.PNG {
		args = append(args, "--png")
	}
	return commandLine(args)
}

// commandLine joins args as a shell reads them back: each one with
// spaces or shell metacharacters quoted.
func commandLine(args []string) string {
	for i, s := range args {
		if strings.ContainsAny(s, " \t\"'*?$;&|()<>") {
			args[i] = strconv.Quote(s)
		}
	}
	return strings.Join(args, " ")
}

// experimentFlagOf names the flag behind each field of experiment.json.
var experimentFlagOf = map[string]string{
	"scenario": "SCENARIO", "params": "--param", "grid": "--grid", "allocators": "--allocator", "learners": "--learner",
	"side": "--side", "side_allocators": "--side-allocator",
	"learn": "--learn", "policies": "--policy", "seeds": "--seeds", "seed": "--seed", "episodes": "--episodes",
	"group": "--group", "window": "--window", "diagnose": "--diagnose", "diagnose.samples": "--diagnose-samples",
	"tree": "--tree*", "nashconv": "--nashconv", "evaluate": "--evaluate",
}

// mismatchWithFlags is e with each difference followed by the flag that
// sets it.
func mismatchWithFlags(e *experiment.MismatchError) error {
	out := &experiment.MismatchError{Dir: e.Dir}
	for _, d := range e.Diffs {
		top, _, _ := strings.Cut(d.Path, ".")
		flag, ok := experimentFlagOf[d.Path]
		if !ok {
			flag, ok = experimentFlagOf[top]
		}
		if ok {
			d.Now += " (" + flag + ")"
		}
		out.Diffs = append(out.Diffs, d)
	}
	return out
}

// experiment runs cfg and reports on Stderr. It returns nil, or an
// *exitError whose message it has already printed.
func (a *App) experiment(ctx context.Context, cfg experiment.Config, quiet bool) error {
	// A grid allocates an episode's samples over and over and keeps little:
	// the collector's default pace (GOGC=100 of a few MB) would run it
	// hundreds of times a second. A user's own GOGC still wins.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	rep := newReporter(a.Stderr, a.Terminal != nil && a.Terminal(a.Stderr), quiet, 0)
	cfg.Progress = func(p experiment.Progress) {
		rep.update(play.Progress{Done: int(p.EpisodesDone), Total: int(p.Episodes), Turns: p.Turns, Elapsed: p.Elapsed})
	}
	res, err := experiment.Run(ctx, cfg)
	rep.finish()
	var mismatch *experiment.MismatchError
	switch {
	case errors.As(err, &mismatch):
		return &UsageError{Err: fmt.Errorf("--resume: %w", mismatchWithFlags(mismatch))}
	case errors.Is(err, experiment.ErrExists):
		return &UsageError{Err: fmt.Errorf("--out %s: %w", cfg.Out, err)}
	case errors.Is(err, experiment.ErrDamagedManifest):
		return &UsageError{Err: fmt.Errorf("--out %s: %w", cfg.Out, err)}
	case errors.Is(err, experiment.ErrNothingToResume):
		return &UsageError{Err: fmt.Errorf("--resume: %w", err)}
	case errors.Is(err, experiment.ErrBadConfig):
		return &UsageError{Err: err}
	case ctx.Err() != nil:
		cause := context.Cause(ctx)
		rep.printf("troupe: interrupted (%v): the finished cells are saved in %s/cells; run the same command with --resume to finish the grid\n", cause, cfg.Out)
		return interruptError(cause, fmt.Errorf("%w: %w", ErrInterrupted, cause))
	case err != nil:
		rep.printf("troupe: experiment failed: %v\n", err)
		return &exitError{code: ExitFailure, err: err}
	}
	if !quiet {
		var b strings.Builder
		fmt.Fprintf(&b, "troupe: %s: %d cells (%d read back from %s/cells), %d agent-turns played in %s",
			cfg.Scenario.Info().Name, len(res.Cells), res.Resumed, cfg.Out, res.Turns, roundDuration(res.Elapsed))
		if res.Elapsed > 0 && res.Updates > 0 {
			fmt.Fprintf(&b, " (%s agent-updates/s on %d CPUs)", compact(rate(float64(res.Updates), res.Elapsed)), runtime.GOMAXPROCS(0))
		}
		fmt.Fprintf(&b, "\n  final %s (mean ± std over %d seeds):\n", res.Metric, cfg.Seeds)
		points := make([]string, len(res.Rows))
		wp, wa := 24, 32 // the columns' widths: at least these, or the widest
		for k, r := range res.Rows {
			point := make([]string, len(cfg.Axes))
			for i, ax := range cfg.Axes {
				point[i] = ax.Param + "=" + r.Point[i]
			}
			if len(cfg.Learners) > 1 {
				point = append(point, "learner="+r.LearnerLabel)
			}
			points[k] = strings.Join(point, " ")
			wp, wa = max(wp, len(points[k])), max(wa, len(r.Allocator))
		}
		for k, r := range res.Rows {
			fmt.Fprintf(&b, "    %-*s %-*s %.3f ± %.3f", wp, points[k], wa, r.Allocator, r.FinalStats.Mean, r.FinalStats.Std)
			if len(r.Modes) > 1 {
				modes := make([]string, len(r.Modes))
				for i, m := range r.Modes {
					modes[i] = fmt.Sprintf("%.3f (%d)", m.Center, m.Seeds)
				}
				fmt.Fprintf(&b, "   modes %s", strings.Join(modes, ", "))
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  report: %s/%s\n", cfg.Out, experiment.ReportMD)
		rep.printf("%s", b.String())
	}
	return nil
}

// startCPUProfile profiles the process's CPU into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
