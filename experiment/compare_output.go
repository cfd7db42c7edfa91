package experiment

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// write writes the comparison's files to cfg.Out.
func (res *CompareResult) write(cfg CompareConfig) error {
	write := func(name string, data []byte) error {
		if err := writeAtomic(nil, filepath.Join(cfg.Out, name), data); err != nil {
			return err
		}
		res.Files = append(res.Files, name)
		return nil
	}
	for _, o := range []struct {
		name string
		make func() ([]byte, error)
	}{{CompareCSV, res.rowsCSV}, {CompareTestsCSV, res.testsCSV}} {
		data, err := o.make()
		if err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
		if err := write(o.name, data); err != nil {
			return err
		}
	}
	var figs []figure
	for pi := range res.Points {
		for _, byCost := range []bool{false, true} {
			f, err := res.curves(pi, byCost)
			if err != nil {
				return err
			}
			for _, d := range f.files {
				if err := write(d.name, d.data); err != nil {
					return err
				}
			}
			figs = append(figs, f)
		}
	}
	return write(ReportMD, res.report(cfg, figs))
}

// armOf returns the arm labelled label.
func (res *CompareResult) armOf(label string) Arm {
	for _, a := range res.Arms {
		if a.Label == label {
			return a
		}
	}
	return Arm{}
}

// rowsCSV has one line per point, arm and view: the arm's values across
// seeds and their modes.
func (res *CompareResult) rowsCSV() ([]byte, error) {
	header := append(append([]string{}, res.Axes...), "arm", "dir", "learner", "allocator", "group", "tree", "episodes",
		"view", "metric", "budget", "seeds", "mean", "ci_low", "ci_high", "std", "median", "min", "max", "modes", "mode_centers", "mode_shares")
	return writeCSV(header, func(emit func([]string) error) error {
		for _, r := range res.Rows {
			a := res.armOf(r.Arm)
			s := r.Stats
			centers, shares := make([]string, len(r.Modes)), make([]string, len(r.Modes))
			for i, m := range r.Modes {
				centers[i], shares[i] = ftoa(m.Center), ftoa(m.Share)
			}
			rec := append(append([]string{}, r.Point...), a.Label, a.Dir, a.Learner, a.Allocator, strconv.Itoa(a.Group), strconv.Itoa(a.Tree), strconv.Itoa(a.Episodes),
				r.View, res.viewMetric(r.View), budgetText(r.View, r.Budget), strconv.Itoa(s.N), ftoa(s.Mean), ftoa(s.CILow), ftoa(s.CIHigh), ftoa(s.Std), ftoa(s.Median), ftoa(s.Min), ftoa(s.Max),
				strconv.Itoa(len(r.Modes)), strings.Join(centers, ";"), strings.Join(shares, ";"))
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// budgetText is a view's budget in CSV: none for a cell's final value.
func budgetText(view string, budget float64) string {
	if view == ViewCost || view == ViewEpisodes {
		return ftoa(budget)
	}
	return ""
}

// viewMetric names what a view measures.
func (res *CompareResult) viewMetric(view string) string {
	if view == ViewCost || view == ViewEpisodes {
		return res.Metric
	}
	return view
}

// testsCSV has one line per point, view and arm other than the reference.
func (res *CompareResult) testsCSV() ([]byte, error) {
	header := append(append([]string{}, res.Axes...), "view", "metric", "budget", "arm", "reference", "seeds",
		"diff", "ci_low", "ci_high", "wins", "ties", "p_t", "p_sign_flip", "p_holm", "cohen_dz")
	return writeCSV(header, func(emit func([]string) error) error {
		for _, t := range res.Tests {
			rec := append(append([]string{}, t.Point...), t.View, res.viewMetric(t.View), budgetText(t.View, t.Budget), t.A, t.B, strconv.Itoa(t.N),
				ftoa(t.Diff), ftoa(t.CILow), ftoa(t.CIHigh), strconv.Itoa(t.Wins), strconv.Itoa(t.Ties),
				ftoa(t.PT), ftoa(t.PSign), ftoa(t.PHolm), ftoa(float64(t.D)))
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// curves draws every arm's learning curve at point pi, against episodes
// or, byCost, against cost.
func (res *CompareResult) curves(pi int, byCost bool) (figure, error) {
	desc := describePoint(res.axes(), res.Points[pi])
	kind, xLabel, base, caption := "learning curves", "episode", "curves", "Learning curves, "+desc
	if byCost {
		kind, xLabel, base, caption = "learning curves against cost", "cost (environment steps)", "cost_curves", "Learning curves against cost, "+desc
	}
	title := fmt.Sprintf("%s: %s, %s", res.Scenario, kind, desc)
	if len(res.Axes) == 0 {
		title, caption = res.Scenario+": "+kind, strings.TrimSuffix(caption, ", "+desc)
	} else {
		base += "_" + slug(strings.ReplaceAll(desc, " ", "_"))
	}
	c := newChart(res.Metric, title, xLabel, res.Metric)
	c.pl.X.Tick.Marker = roundTicks{}
	labels := make([]string, len(res.Arms))
	xs, ys := make([][][]float64, len(res.Arms)), make([][][]float64, len(res.Arms))
	xmax := 0.0
	for ai, a := range res.Arms {
		labels[ai] = a.Label
		if !byCost {
			xmax = max(xmax, float64(a.Episodes))
		}
		for _, cell := range a.cells[pi] {
			x, y := curveOf(cell)
			if byCost {
				x, y = costCurveOf(cell)
			}
			xs[ai], ys[ai] = append(xs[ai], x), append(ys[ai], y)
		}
	}
	far, err := c.addCurves(labels, xs, ys, byCost)
	if err != nil {
		return figure{}, err
	}
	xmax = max(xmax, far, 1)
	c.pl.X.Min, c.pl.X.Max = 0, xmax
	if err := c.finish(0, xmax); err != nil {
		return figure{}, err
	}
	f, err := c.render(base, caption, false)
	f.note = fmt.Sprintf("%s per episode, averaged in bins of a hundredth of the arm's episodes (one at least): the line is the mean over %d seeds, the band its 95%% confidence interval (Student's t, within the seeds' range).", res.Metric, res.Seeds)
	if byCost {
		f.note += " Each bin is placed at the run's cumulative cost at its end, in logical environment steps, and each seed's curve is read at common costs, up to the least any seed of the arm spent."
	}
	return f, err
}

func (res *CompareResult) axes() []Axis {
	axes := make([]Axis, len(res.Axes))
	for i, a := range res.Axes {
		axes[i] = Axis{Param: a}
	}
	return axes
}

// report renders the comparison as Markdown.
func (res *CompareResult) report(cfg CompareConfig, figs []figure) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Comparison: %s\n\n", res.Scenario)
	if cfg.Command != "" {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", cfg.Command)
	}
	fmt.Fprintf(&b, "%d arms over %d seeds, paired: seed s of every arm ran from the same seed. The reference arm is %s; the metric %s.\n\n",
		len(res.Arms), res.Seeds, res.Reference, res.Metric)
	b.WriteString("| arm | directory | learner | reward | group | tree | episodes |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, a := range res.Arms {
		tree := "–"
		if a.Tree > 0 {
			tree = strconv.Itoa(a.Tree)
		}
		fmt.Fprintf(&b, "| %s | `%s` | `%s` | `%s` | %d | %s | %d |\n", a.Label, a.Dir, a.Learner, a.Allocator, a.Group, tree, a.Episodes)
	}
	b.WriteString("\n**At equal cost**: B is the least total cost (logical environment steps: main lines, counterfactual re-simulations, tree candidates' continuations) any seed of any arm spent at the point; each arm's value is the mean of its curve against cost over the final share of B (the window's share of E), each episode weighed by the cost it spent there (`Cell.AtCost`). **At equal episodes**: E is the fewest episodes any arm played; the value is the mean over the final window of E's episodes. Other views are values each cell holds for its end. Each difference is the arm's less the reference's, seed by seed, with its bootstrap 95% CI; p (t) is the paired t-test's, p (sign-flip) the sign-flip permutation test's, Holm adjusts the latter over every test at the point.\n")
	for pi, pt := range res.Points {
		if len(res.Axes) > 0 {
			fmt.Fprintf(&b, "\n## %s\n", describePoint(res.axes(), pt))
		}
		b.WriteString("\n| view | budget | arm | mean [95% CI] | std | median | min – max | modes | − reference [95% CI] | p (t) | p (sign-flip) | p Holm |\n")
		b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, r := range res.Rows {
			if !slices.Equal(r.Point, pt) {
				continue
			}
			s := r.Stats
			budget := "–"
			switch r.View {
			case ViewCost:
				budget = fmt.Sprintf("B = %.0f steps", r.Budget)
			case ViewEpisodes:
				budget = fmt.Sprintf("E = %.0f episodes", r.Budget)
			}
			diff, pt1, ps, ph := "reference", "", "", ""
			for _, t := range res.Tests {
				if t.View == r.View && t.A == r.Arm && slices.Equal(t.Point, pt) {
					diff = fmt.Sprintf("%+.3f [%+.3f, %+.3f]", t.Diff, t.CILow, t.CIHigh)
					pt1, ps, ph = pvalue(t.PT), pvalue(t.PSign), pvalue(t.PHolm)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.3f [%.3f, %.3f] | %.3f | %.3f | %.3f – %.3f | %s | %s | %s | %s | %s |\n",
				res.viewMetric(r.View), budget, r.Arm, s.Mean, s.CILow, s.CIHigh, s.Std, s.Median, s.Min, s.Max, modesText(r.Modes), diff, pt1, ps, ph)
		}
		for _, f := range figs[2*pi : 2*pi+2] {
			fmt.Fprintf(&b, "\n### %s\n\n![%s](%s.svg)\n\n%s\n", f.caption, f.caption, f.base, f.note)
		}
	}
	return []byte(b.String())
}
