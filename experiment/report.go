package experiment

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// report renders the Markdown report: how the experiment was run, the
// results table and the plots (PNG embedded, SVG linked). It holds no
// timing, so the same experiment gives the same report.
func (p *plan) report(res *Result, figs []figure) []byte {
	var b strings.Builder
	title := p.cfg.Title
	if title == "" {
		title = "Experiment: " + p.name
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	if p.cfg.Command != "" {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", p.cfg.Command)
	}
	b.WriteString(p.setup(res))
	b.WriteString("\n## Results\n\n")
	b.WriteString(p.legend(res))
	b.WriteString("\n")
	b.WriteString(p.table(res))
	if len(res.Sweep) > 0 {
		b.WriteString("\n### Learner sweep\n\n")
		b.WriteString(p.sweepTable(res))
	}
	if t := p.comparisonTable(res); t != "" {
		b.WriteString("\n### Paired comparisons\n\n")
		b.WriteString(t)
	}
	if len(res.Costs) > 0 {
		b.WriteString("\n### At equal cost\n\n")
		fmt.Fprintf(&b, "What each cell spent, in logical environment steps (main lines, counterfactual re-simulations, tree candidates' continuations), and the metric each reached when it had spent the budget (the least any seed of any reward spent at that point): the mean of the cell's curve against cost over the last %s of the budget, each episode weighed by the cost it spent there.\n\n", shareText(float64(p.window)/float64(p.cfg.Episodes)))
		b.WriteString(p.costTable(res))
	}
	if t := p.evaluationTable(res); t != "" {
		b.WriteString("\n### The learnt policy on its own\n\n")
		b.WriteString(t)
	}
	if t := p.nashConvTable(res); t != "" {
		b.WriteString("\n### Exploitability (NashConv)\n\n")
		b.WriteString(t)
	}
	if t := p.diagnosticsTable(res); t != "" {
		b.WriteString("\n### Credit diagnostics\n\n")
		b.WriteString(t)
	}
	for _, f := range figs {
		if p.cfg.PNG {
			fmt.Fprintf(&b, "\n### %s\n\n![%s](%s.png)\n\n%s ([SVG](%s.svg))\n", f.caption, f.caption, f.base, f.note, f.base)
		} else {
			fmt.Fprintf(&b, "\n### %s\n\n![%s](%s.svg)\n\n%s\n", f.caption, f.caption, f.base, f.note)
		}
	}
	return []byte(b.String())
}

// setup lists the experiment's configuration as Markdown bullets.
func (p *plan) setup(res *Result) string {
	var b strings.Builder
	info := p.cfg.Scenario.Info()
	fmt.Fprintf(&b, "- scenario: `%s`", p.name)
	if len(p.cfg.Params) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p.cfg.Params)) {
			kv = append(kv, k+"="+p.cfg.Params[k])
		}
		fmt.Fprintf(&b, " with %s", strings.Join(kv, ", "))
	}
	b.WriteString("\n")
	for _, a := range p.cfg.Axes {
		fmt.Fprintf(&b, "- grid: %s ∈ {%s}\n", a.Param, strings.Join(a.Values, ", "))
	}
	quoted := make([]string, len(p.allocs))
	for i, a := range p.allocs {
		quoted[i] = "`" + a + "`"
	}
	if p.side >= 0 {
		fmt.Fprintf(&b, "- rewards (allocators) of side %s: %s; the other sides' fixed: %s\n", p.cfg.Side, strings.Join(quoted, ", "), p.fixedSides())
	} else {
		fmt.Fprintf(&b, "- rewards (allocators): %s\n", strings.Join(quoted, ", "))
	}
	if len(p.specs) == 1 {
		fmt.Fprintf(&b, "- learner: `%s`, played by every %s agent", p.specNames[0], strings.Join(p.learners, " and "))
	} else {
		fmt.Fprintf(&b, "- learners: a sweep of %d, each played by every %s agent in cells of its own (the tables name them by what differs):", len(p.specs), strings.Join(p.learners, " and "))
		for i, n := range p.specNames {
			fmt.Fprintf(&b, " `%s` (`%s`)", p.specLabels[i], n)
			if i < len(p.specNames)-1 {
				b.WriteString(",")
			}
		}
	}
	var fixed []string
	for _, r := range info.Roles {
		if name, ok := p.cfg.Policies[r.Name]; ok {
			fixed = append(fixed, fmt.Sprintf("%s plays `%s`", r.Name, name))
		}
	}
	if len(fixed) > 0 {
		fmt.Fprintf(&b, "; %s", strings.Join(fixed, ", "))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- %d seeds (root seed %d) × %d episodes per cell, in groups of %d episode(s) that share a scenario seed; each group is learned before the next is played. Seed s of every allocator plays the same scenario draws.\n", p.cfg.Seeds, p.cfg.Seed, p.cfg.Episodes, p.group())
	if p.side >= 0 {
		fmt.Fprintf(&b, "- metric: %s, side %s's own reward in an episode (not the sum of the sides')\n", res.Metric, p.cfg.Side)
	} else if res.Metric == "G/G*" {
		b.WriteString("- metric: G/G*, the team reward G of an episode over the exact optimum G* of its grid point (1 is optimal)\n")
	} else {
		b.WriteString("- metric: G, the team reward of an episode\n")
	}
	return b.String()
}

// legend says what every number of the tables is.
func (p *plan) legend(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "What the numbers are:\n\n")
	fmt.Fprintf(&b, "- **final**: a seed's %s averaged over its last %d episodes; the table gives the mean over the %d seeds with its percentile-bootstrap 95%% confidence interval (%d resamples), the median and the range of the seeds. `finals.csv` lists every seed.\n", res.Metric, p.window, p.cfg.Seeds, resamples)
	fmt.Fprintf(&b, "- **modes**: the seeds' final results clustered by the gaps between them that values spread at random would leave in fewer than %g of draws (and at least %g of their largest magnitude: `experiment.FindModes`), each cluster of at least %g of the seeds (and two) as its mean and the share of seeds in it; more than one mode means the seeds ended in distinct places, where the mean may be a value no seed reached, and the seeds in no mode ended apart. `modes.csv` lists them.\n", p.cfg.Modes.significance(), ModeResolution, p.cfg.Modes.minShare())
	fmt.Fprintf(&b, "- **overall**: a seed's %s averaged over all %d episodes (higher when learning is faster), mean over seeds [95%% CI].\n", res.Metric, p.cfg.Episodes)
	b.WriteString("- **locked in**: the share of the learner's (agent, state) rows whose greedy action never changed after their first update, mean over seeds (blank: the learner does not say). Near 1, the agents play what their first rewards made them play.\n")
	if len(res.Comparisons) > 0 {
		b.WriteString("- **paired comparisons**: for each two allocators at a point, d = final(A) − final(B) seed by seed (the same scenario draws); Δ is the mean d with its bootstrap 95% CI; wins counts seeds where A ended higher (ties apart); p(t) is the two-sided paired t-test; p(flip) the two-sided sign-flip permutation test of the mean d (exact up to 16 seeds, else 10,000 random flips), which assumes no normality; p(Holm) is p(flip) adjusted by Holm's method over every comparison of the table; d_z = mean(d)/sd(d), Cohen's paired effect size.\n")
	}
	return b.String()
}

// table renders the results as a Markdown table.
func (p *plan) table(res *Result) string {
	var b strings.Builder
	m := res.Metric
	head := append(p.pointHead(), "reward", fmt.Sprintf("final %s mean [95%% CI]", m), "modes (share of seeds)", "median", "min – max", fmt.Sprintf("overall %s [95%% CI]", m), "locked in")
	if m == "G/G*" {
		head = append(head[:len(p.cfg.Axes)], append([]string{"G*"}, head[len(p.cfg.Axes):]...)...)
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Rows {
		pi, li, _ := p.rowAt(i)
		cells := append([]string(nil), r.Point...)
		if m == "G/G*" {
			cells = append(cells, fmt.Sprintf("%.4f", p.points[pi].optimum))
		}
		if len(p.specs) > 1 {
			cells = append(cells, "`"+p.specLabels[li]+"`")
		}
		f, o := r.FinalStats, r.OverallStats
		lock := ""
		if r.LockedIn != nil {
			lock = fmt.Sprintf("%.2f", r.LockedInStats.Mean)
		}
		cells = append(cells, "`"+r.Allocator+"`",
			fmt.Sprintf("%.3f [%.3f, %.3f]", f.Mean, f.CILow, f.CIHigh),
			modesText(r.Modes),
			fmt.Sprintf("%.3f", f.Median),
			fmt.Sprintf("%.3f – %.3f", f.Min, f.Max),
			fmt.Sprintf("%.3f [%.3f, %.3f]", o.Mean, o.CILow, o.CIHigh),
			lock)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// diagnosticsTable renders the credit diagnostics, the learning signal and
// the scenario's final episode metrics.
func (p *plan) diagnosticsTable(res *Result) string {
	var b strings.Builder
	metrics := p.metricNames(res)
	diag := p.cfg.Diagnose.Episodes > 0
	if diag {
		d := p.cfg.Diagnose
		fmt.Fprintf(&b, "- **factoredness** and **learnability** (Agogino & Tumer), from sampled counterfactuals: at %d episodes of each seed, spread evenly, %d learning agents, each with %d changes of its own action (to another, uniformly) and %d redraws of every other learning agent's action (uniformly), scored by re-simulation with every other action as recorded. Factoredness is the share of own changes whose change of the agent's reward Δr_i has the sign of the team's ΔG (both 0 counting as agreeing; a change within %g of the magnitudes counts as 0); learnability is, at each (episode, agent), E|Δr_i| over own changes divided by E|Δr_i| over the others' redraws (the ratio of the sample means corrected for its bias, `experiment.Diagnose`; each seed's 95%% interval over the counterfactuals is in `results.json`), averaged over those states; a state where only the agent's own changes move its reward has no finite ratio, and its share is given beside the mean of the others. Mean over seeds [95%% CI].\n", d.Episodes, d.agents(), d.samples(), d.samples(), TieTolerance)
	}
	b.WriteString("- **signal std**: the standard deviation of the rewards of the final window's samples; **credit spread**: the standard deviation across agents of each agent's mean reward there (`credit.csv` has every agent's); means over seeds.\n")
	if len(metrics) > 0 {
		fmt.Fprintf(&b, "- **final %s**: the scenario's episode metrics (%s), averaged over the final window, mean over seeds.\n", p.name, strings.Join(metrics, ", "))
	}
	b.WriteString("\n")
	head := append(p.pointHead(), "reward")
	if diag {
		head = append(head, "factoredness [95% CI]", "learnability [95% CI]")
	}
	head = append(head, "signal std", "credit spread")
	if len(metrics) > 0 {
		head = append(head, "final "+strings.Join(metrics, " / "))
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Rows {
		cells := append(p.pointCells(i), "`"+r.Allocator+"`")
		if diag {
			if d := r.Diagnostics; d != nil && d.Factoredness.N > 0 {
				f, l := d.Factoredness, d.Learnability
				learn := fmt.Sprintf("%.3g [%.3g, %.3g]", l.Mean, l.CILow, l.CIHigh)
				if u := d.Unbounded.Mean; u > 0 {
					learn += fmt.Sprintf(" (%.0f%% of states unbounded)", 100*u)
				}
				cells = append(cells, fmt.Sprintf("%.3f [%.3f, %.3f]", f.Mean, f.CILow, f.CIHigh), learn)
			} else {
				cells = append(cells, "not measured", "not measured")
			}
		}
		cells = append(cells, fmt.Sprintf("%.3g", r.Signal.Mean), fmt.Sprintf("%.3g", r.Spread.Mean))
		if len(metrics) > 0 {
			vals := make([]string, len(r.FinalMetrics))
			for m, v := range r.FinalMetrics {
				vals[m] = fmt.Sprintf("%.1f", v)
			}
			cells = append(cells, strings.Join(vals, " / "))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// comparisonTable renders the paired comparisons.
func (p *plan) comparisonTable(res *Result) string {
	if len(res.Comparisons) == 0 {
		return ""
	}
	var b strings.Builder
	head := append(p.pointHead(), "A", "B", "Δ final (A − B) [95% CI]", "wins / seeds", "p(t)", "p(flip)", "p(Holm)", "d_z")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	per := max(1, len(p.allocs)*(len(p.allocs)-1)/2)
	for i, c := range res.Comparisons {
		cells := append(p.pointCells(p.row(i/per/len(p.specs), i/per%len(p.specs), 0)), "`"+c.A+"`", "`"+c.B+"`",
			fmt.Sprintf("%+.3f [%+.3f, %+.3f]", c.Diff, c.CILow, c.CIHigh),
			fmt.Sprintf("%d / %d", c.Wins, c.N),
			pvalue(c.PT), pvalue(c.PSign), pvalue(c.PHolm), fmt.Sprintf("%.2f", c.D))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// pvalue renders a p-value with two significant digits, or as a bound
// below 1e-4.
func pvalue(p float64) string {
	if p < 1e-4 {
		return "< 1e-4"
	}
	return fmt.Sprintf("%.2g", p)
}

// pointHead heads the columns that say which point (and learner, in a
// sweep) a row is.
func (p *plan) pointHead() []string {
	if len(p.specs) > 1 {
		return append(p.axisNames(), "learner")
	}
	return p.axisNames()
}

// pointCells are row i's cells under pointHead.
func (p *plan) pointCells(i int) []string {
	pi, li, _ := p.rowAt(i)
	cells := slices.Clone(p.points[pi].values)
	if len(p.specs) > 1 {
		cells = append(cells, "`"+p.specLabels[li]+"`")
	}
	return cells
}

// modesText renders modes as "0.81 (50%) · 0.97 (50%)"; one mode as its
// value alone would repeat the mean, so it reads "one".
func modesText(modes []Mode) string {
	if len(modes) < 2 {
		return "one"
	}
	parts := make([]string, len(modes))
	for i, m := range modes {
		parts[i] = fmt.Sprintf("%.3f (%.0f%%)", m.Center, 100*m.Share)
	}
	return strings.Join(parts, " · ")
}

// sweepTable renders the learner sweep: per point and reward, the best
// and the median over the learners, and the orderings of the rewards.
func (p *plan) sweepTable(res *Result) string {
	var b strings.Builder
	m := res.Metric
	fmt.Fprintf(&b, "Over the %d learners: **best** is the highest mean final %s, with its learner, its 95%% CI and its modes; **median** is the median over the learners of their mean final %s, the reward with a typical learner of the sweep; **worst** the lowest; **first at** counts the learners at which the reward has the highest mean of the rewards. `sweep.csv` has every learner's mean.\n\n", len(p.specs), m, m)
	head := append(p.axisNames(), "reward", "best [95% CI]", "best learner", "modes of the best", "median", "worst (learner)", "first at")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for _, s := range res.Sweep {
		cells := append(slices.Clone(s.Point), "`"+s.Allocator+"`",
			fmt.Sprintf("%.3f [%.3f, %.3f]", s.Best, s.BestCILow, s.BestCIHigh),
			"`"+p.labelOf(s.BestLearner)+"`",
			modesText(s.BestModes),
			fmt.Sprintf("%.3f", s.Median),
			fmt.Sprintf("%.3f (`%s`)", s.Worst, p.labelOf(s.WorstLearner)),
			fmt.Sprintf("%d / %d", s.Top, len(p.specs)))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\nThe orderings of the rewards by mean final result, and the learners that give each (`>`: the paired comparison of the neighbours is significant, p(Holm) < 0.05; `≈`: it is not; rewards none of which differs significantly from another are a tie, listed in the order of the allocators given):\n\n")
	head = append(p.axisNames(), "ordering", "learners", "which")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for _, o := range res.Orderings {
		quoted := make([]string, len(o.Learners))
		for i, l := range o.Learners {
			quoted[i] = "`" + l + "`"
		}
		cells := append(slices.Clone(o.Point), o.Order, fmt.Sprintf("%d / %d", len(o.Learners), len(p.specs)), strings.Join(quoted, ", "))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// labelOf is the label of the learner spec name.
func (p *plan) labelOf(name string) string {
	if i := slices.Index(p.specNames, name); i >= 0 {
		return p.specLabels[i]
	}
	return name
}
