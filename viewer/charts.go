package viewer

import (
	"fmt"
	"iter"
	"math"
	"slices"
)

// Chart is an SVG drawn by the templates: every mark's geometry is
// computed here, so that the pages need no script to draw and the tests
// can read each mark's value from its attributes.
type Chart struct {
	W, H  int
	Bars  []Bar
	Lines []Line
	Texts []Text
}

// Bar is one rectangle of a chart.
type Bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
	// Data attributes the tests and the script read.
	Agent, Alloc, Value string
	Fill                string
}

// Line is an axis or a rule.
type Line struct {
	X1, Y1, X2, Y2 float64
	Class          string
}

// Text is a label.
type Text struct {
	X, Y   float64
	Anchor string // start, middle, end
	Class  string
	S      string
}

// bins is how many bars a histogram has.
const bins = 30

// histogram draws the distribution of values over [lo, hi].
func histogram(values []float64, lo, hi float64, class, what string) Chart {
	return histogramOf(len(values), slices.Values(values), lo, hi, class, what)
}

// histogramOf is histogram of n values given one by one: a run's million
// values are read from the index's columns, not copied out.
func histogramOf(n int, values iter.Seq[float64], lo, hi float64, class, what string) Chart {
	const w, h, bottom = 560, 180, 30
	c := Chart{W: w, H: h}
	if n == 0 {
		c.Texts = append(c.Texts, Text{X: w / 2, Y: h / 2, Anchor: "middle", Class: "muted", S: "no scored episodes"})
		return c
	}
	if hi <= lo {
		lo, hi = lo-0.5, hi+0.5
	}
	counts := make([]int, bins)
	for v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		k := int(float64(bins) * (v - lo) / (hi - lo))
		counts[min(max(k, 0), bins-1)]++
	}
	peak := 1
	for _, n := range counts {
		peak = max(peak, n)
	}
	left := max(40, 8+math.Ceil(textWidth(fmt.Sprint(peak), 10)))
	plotW, plotH := float64(w-left-10), float64(h-bottom-10)
	bw := plotW / bins
	for k, n := range counts {
		bh := plotH * float64(n) / float64(peak)
		from := lo + (hi-lo)*float64(k)/bins
		to := lo + (hi-lo)*float64(k+1)/bins
		c.Bars = append(c.Bars, Bar{
			X: left + float64(k)*bw + 0.5, Y: 10 + plotH - bh, W: max(bw-1, 1), H: bh, Class: class,
			Title: fmt.Sprintf("%s in [%s, %s): %d episodes", what, num(from), num(to), n), Value: fmt.Sprint(n),
		})
	}
	c.Lines = append(c.Lines, Line{X1: left, Y1: 10 + plotH, X2: w - 10, Y2: 10 + plotH, Class: "axis"})
	c.Texts = append(c.Texts,
		Text{X: left, Y: h - 10, Anchor: "start", Class: "tick", S: num(lo)},
		Text{X: w - 10, Y: h - 10, Anchor: "end", Class: "tick", S: num(hi)},
		Text{X: left - 4, Y: 18, Anchor: "end", Class: "tick", S: fmt.Sprint(peak)},
		Text{X: left + plotW/2, Y: h - 10, Anchor: "middle", Class: "tick", S: what},
	)
	return c
}

// allocHistograms draws each allocator's distribution of episode means,
// stacked, on one scale.
func allocHistograms(x *File, allocs []AllocStat) Chart {
	if len(allocs) == 0 {
		return Chart{}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, a := range allocs {
		if a.Episodes.N > 0 {
			lo, hi = math.Min(lo, a.Episodes.Min), math.Max(hi, a.Episodes.Max)
		}
	}
	if math.IsInf(lo, 0) {
		return Chart{}
	}
	var out Chart
	for i, a := range allocs {
		c := x.allocColumn(a.Name)
		vs := func(yield func(float64) bool) {
			for k := range x.n {
				if v, ok := x.allocValue(k, c); ok && !yield(v) {
					return
				}
			}
		}
		h := histogramOf(a.Episodes.N, vs, lo, hi, fmt.Sprintf("alloc-hist alloc-%d", i%8), a.Name+" (mean per sample)")
		dy := float64(i * h.H)
		for _, b := range h.Bars {
			b.Y += dy
			b.Alloc = a.Name
			out.Bars = append(out.Bars, b)
		}
		for _, l := range h.Lines {
			l.Y1, l.Y2 = l.Y1+dy, l.Y2+dy
			out.Lines = append(out.Lines, l)
		}
		for _, t := range h.Texts {
			t.Y += dy
			out.Texts = append(out.Texts, t)
		}
		out.W, out.H = h.W, out.H+h.H
	}
	return out
}

// groupChart draws each group's team rewards: its range and its mean.
func groupChart(groups []GroupStat) Chart {
	scored := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, g := range groups {
		if g.Team.N > 0 {
			scored++
			lo, hi = math.Min(lo, g.Team.Min), math.Max(hi, g.Team.Max)
		}
	}
	if scored == 0 || len(groups) < 2 {
		return Chart{}
	}
	if hi <= lo {
		lo, hi = lo-0.5, hi+0.5
	}
	const h = 180
	// The y labels are right-aligned left of the axis: leave them room
	// (a fixed 40 px cut 14.3295 to "4.3295").
	left := 8 + math.Ceil(max(textWidth(num(hi), 10), textWidth(num(lo), 10)))
	step := math.Max(3, math.Min(24, 560/float64(len(groups))))
	w := int(math.Ceil(left + step*float64(len(groups)) + 10))
	c := Chart{W: w, H: h}
	y := func(v float64) float64 { return 10 + (h-40)*(hi-v)/(hi-lo) }
	for i, g := range groups {
		if g.Team.N == 0 {
			continue
		}
		x := left + step*float64(i)
		c.Bars = append(c.Bars,
			Bar{X: x + step*0.3, Y: y(g.Team.Max), W: math.Max(step*0.4, 1), H: math.Max(y(g.Team.Min)-y(g.Team.Max), 1), Class: "group-range",
				Title: fmt.Sprintf("group %d: %d episodes, team reward %s to %s, mean %s, std %s", g.Group, g.Episodes, num(g.Team.Min), num(g.Team.Max), num(g.Team.Mean), num(g.Team.Std)),
				Value: num(g.Team.Mean)},
			Bar{X: x, Y: y(g.Team.Mean) - 1, W: step, H: 2, Class: "group-mean"},
		)
	}
	c.Lines = append(c.Lines, Line{X1: left, Y1: h - 30, X2: float64(w - 10), Y2: h - 30, Class: "axis"})
	// The last group's label is right-aligned at the chart's edge: with
	// few groups the chart is narrower than both labels.
	w = max(w, int(math.Ceil(left+textWidth(fmt.Sprintf("group %d", groups[0].Group), 10)+textWidth(fmt.Sprintf("group %d", groups[len(groups)-1].Group), 10)+30)))
	c.W = w
	c.Texts = append(c.Texts,
		Text{X: left - 4, Y: y(hi) + 4, Anchor: "end", Class: "tick", S: num(hi)},
		Text{X: left - 4, Y: y(lo), Anchor: "end", Class: "tick", S: num(lo)},
		Text{X: left, Y: h - 12, Anchor: "start", Class: "tick", S: fmt.Sprintf("group %d", groups[0].Group)},
		Text{X: float64(w - 10), Y: h - 12, Anchor: "end", Class: "tick", S: fmt.Sprintf("group %d", groups[len(groups)-1].Group)},
	)
	return c
}

// creditChart draws each agent's value per sample under every allocator,
// side by side, each allocator on its own scale with its zero: one scale
// for all, the team reward's, made difference rewards (-0.13 to +0.03
// against G = 14) invisible. Each column's head names its scale.
func creditChart(e *Episode) Chart {
	if len(e.Allocators) == 0 || len(e.Seats) == 0 {
		return Chart{}
	}
	const label, colW, rowH = 130, 190, 16
	w := label + colW*len(e.Allocators) + 10
	h := 44 + rowH*len(e.Seats)
	c := Chart{W: w, H: h}
	for a, name := range e.Allocators {
		peak := 0.0
		for _, s := range e.Seats {
			if cr := s.Credit[a]; cr.N > 0 && !math.IsInf(cr.Mean(), 0) {
				peak = math.Max(peak, math.Abs(cr.Mean()))
			}
		}
		if peak == 0 || math.IsNaN(peak) {
			peak = 1
		}
		x0 := float64(label + colW*a)
		zero := x0 + colW/2
		c.Texts = append(c.Texts,
			Text{X: zero, Y: 14, Anchor: "middle", Class: "col-head", S: clip(name, 30)},
			Text{X: zero, Y: 28, Anchor: "middle", Class: "tick scale", S: "±" + num(peak)},
		)
		c.Lines = append(c.Lines, Line{X1: zero, Y1: 34, X2: zero, Y2: float64(h), Class: "zero"})
		for i, s := range e.Seats {
			cr := s.Credit[a]
			if cr.N == 0 {
				continue
			}
			v := cr.Mean()
			bw := (colW/2 - 8) * math.Abs(v) / peak
			if math.IsNaN(bw) || math.IsInf(bw, 0) {
				bw = 0
			}
			x := zero
			class := "credit-bar pos"
			if v < 0 {
				x, class = zero-bw, "credit-bar neg"
			}
			title := fmt.Sprintf("%s under %s: %s per sample over %d samples", s.ID, name, num(v), cr.N)
			if cr.Varies() {
				title += fmt.Sprintf(" (from %s to %s)", num(cr.Min), num(cr.Max))
			}
			c.Bars = append(c.Bars, Bar{X: x, Y: float64(38 + rowH*i), W: math.Max(bw, 0.5), H: rowH - 4, Class: class,
				Title: title, Agent: s.ID, Alloc: name, Value: num(v)})
		}
	}
	for i, s := range e.Seats {
		c.Texts = append(c.Texts, Text{X: label - 6, Y: float64(38 + rowH*i + 10), Anchor: "end", Class: "row-head", S: clip(s.ID, 20)})
	}
	return c
}
