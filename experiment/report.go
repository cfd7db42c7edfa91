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
	b.WriteString(p.table(res))
	for _, f := range figs {
		fmt.Fprintf(&b, "\n### %s\n\n![%s](%s.png)\n\n%s ([SVG](%s.svg))\n", f.caption, f.caption, f.base, f.note, f.base)
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
	fmt.Fprintf(&b, "- rewards (allocators): %s\n", strings.Join(quoted, ", "))
	fmt.Fprintf(&b, "- learner: `%s`, played by every %s agent", p.cfg.Learner.String(), strings.Join(p.learners, " and "))
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
	fmt.Fprintf(&b, "- %d seeds (root seed %d) × %d episodes per cell, each episode learned before the next is played\n", p.cfg.Seeds, p.cfg.Seed, p.cfg.Episodes)
	if res.Metric == "G/G*" {
		b.WriteString("- metric: G/G*, the team reward over the exact optimum of the grid point\n")
	} else {
		b.WriteString("- metric: G, the team reward\n")
	}
	fmt.Fprintf(&b, "- final: the mean over the last %d episodes of each seed; overall: the mean over all %d episodes (higher when learning is faster)\n", p.window, p.cfg.Episodes)
	return b.String()
}

// table renders the results as a Markdown table.
func (p *plan) table(res *Result) string {
	var b strings.Builder
	head := append(p.axisNames(), "reward",
		fmt.Sprintf("final %s (mean ± std)", res.Metric), "min – max", fmt.Sprintf("overall %s", res.Metric))
	if res.Metric == "G/G*" {
		head = append(head[:len(p.cfg.Axes)], append([]string{"G*"}, head[len(p.cfg.Axes):]...)...)
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Rows {
		pi := i / len(p.allocs)
		cells := append([]string(nil), r.Point...)
		if res.Metric == "G/G*" {
			cells = append(cells, fmt.Sprintf("%.4f", p.points[pi].optimum))
		}
		f, o := r.FinalStats, r.OverallStats
		cells = append(cells, "`"+r.Allocator+"`",
			fmt.Sprintf("%.3f ± %.3f", f.Mean, f.Std),
			fmt.Sprintf("%.3f – %.3f", f.Min, f.Max),
			fmt.Sprintf("%.3f ± %.3f", o.Mean, o.Std))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}
