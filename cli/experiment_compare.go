package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/experiment"
)

func (a *App) experimentCompareCommand() *cobra.Command {
	var (
		out, reference string
		window         int
		modeMinShare   float64
		quiet          bool
	)
	cmd := &cobra.Command{
		Use:   "compare DIR[=LABEL]... --out OUT",
		Short: "Compare the arms of several experiments at equal cost and at equal episodes",
		Long: `Compare experiments that differ in what is experiment-wide (--group, --tree,
--episodes): a difference reward without groups, grpo in groups of 8, at-grpo
with --tree 4. Every learner and allocator of every DIR is an arm, named by
its allocator, group and tree ("grpo (group 8)"), or by LABEL (DIR=LABEL).
The directories must pair their seeds: the same scenario, fixed parameters,
learning roles and policies, seeds and root seed (else they are refused,
naming what differs); their grids are compared at the points they share.

At each point, every arm is compared with the reference arm (--reference;
the first by default), seed by seed, in two views: at the common cost budget
B, the least total cost (environment steps, counterfactual re-simulations and
tree candidates included) any seed of any arm spent, and at the common
episode count E, the fewest episodes any arm played; and on each value the
cells hold for their end (locked_in, factoredness, nashconv) where every
cell holds it. OUT gets compare.csv (each arm's mean, bootstrap 95% CI, spread and modes
per view), compare_tests.csv (the paired differences, t and sign-flip
p-values, Holm-adjusted at each point), the learning curves of every arm
against episodes and cost, and report.md. See docs/experiments.md.`,
		Example: `  troupe experiment compare out/difference out/grpo8 out/at-grpo4=AT-GRPO --out out/compare`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("--out: give the directory the comparison is written to")
			}
			cfg := experiment.CompareConfig{Out: out, Reference: reference, Window: window, Modes: experiment.ModeRule{MinShare: modeMinShare}}
			for _, arg := range args {
				src, err := experiment.ParseCompareSource(arg)
				if err != nil {
					return usagef("DIR: %w", err)
				}
				cfg.Sources = append(cfg.Sources, src)
			}
			line := append([]string{"troupe", "experiment", "compare"}, args...)
			line = append(line, "--out", out)
			if reference != "" {
				line = append(line, "--reference", reference)
			}
			if window > 0 {
				line = append(line, "--window", strconv.Itoa(window))
			}
			if modeMinShare != experiment.DefaultModeMinShare {
				line = append(line, "--mode-min-share", strconv.FormatFloat(modeMinShare, 'g', -1, 64))
			}
			cfg.Command = commandLine(line)
			res, err := experiment.Compare(cmd.Context(), cfg)
			switch {
			case errors.Is(err, experiment.ErrBadConfig), errors.Is(err, experiment.ErrIncomparable):
				return &UsageError{Err: err}
			case err != nil:
				return &exitError{code: ExitFailure, err: err}
			}
			if !quiet {
				a.compareSummary(res, out)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVarP(&out, "out", "o", "", "output `directory` of the comparison (required; not one of the compared)")
	fl.StringVar(&reference, "reference", "", "`LABEL` of the arm every other is compared with (default: the first arm)")
	fl.IntVar(&window, "window", 0, "final episodes averaged at the common episode count E (0: a tenth of E); the view at equal cost averages the same share of the budget")
	fl.Float64Var(&modeMinShare, "mode-min-share", experiment.DefaultModeMinShare, "least share of the seeds in a mode of an arm's values")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print no summary, only errors")
	return cmd
}

// compareSummary prints each arm's mean at the common budget and episode
// count, point by point.
func (a *App) compareSummary(res *experiment.CompareResult, out string) {
	var b strings.Builder
	fmt.Fprintf(&b, "troupe: compared %d arms over %d seeds at %d points (%s, mean ± std; reference %s)\n", len(res.Arms), res.Seeds, len(res.Points), res.Metric, res.Reference)
	width := 0
	for _, arm := range res.Arms {
		width = max(width, len(arm.Label))
	}
	for _, r := range res.Rows {
		if r.View != experiment.ViewCost && r.View != experiment.ViewEpisodes {
			continue
		}
		point := make([]string, len(res.Axes))
		for i, ax := range res.Axes {
			point[i] = ax + "=" + r.Point[i]
		}
		at := fmt.Sprintf("at %.0f steps", r.Budget)
		if r.View == experiment.ViewEpisodes {
			at = fmt.Sprintf("at %.0f episodes", r.Budget)
		}
		fmt.Fprintf(&b, "  %s%-*s %-18s %.3f ± %.3f\n", strings.Join(append(point, ""), " "), width, r.Arm, at, r.Stats.Mean, r.Stats.Std)
	}
	fmt.Fprintf(&b, "  report: %s/%s\n", out, experiment.ReportMD)
	fmt.Fprint(a.Stderr, b.String())
}
