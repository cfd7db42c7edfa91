package experiment

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// figure is a rendered plot: its caption, and its PNG and SVG files.
type figure struct {
	caption string
	note    string // how to read it
	base    string // file name without extension
	files   []namedData
}

type namedData struct {
	name string
	data []byte
}

// Plot size and resolution: PNGs are 1600 × 1000 pixels.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
	plotDPI    = 200
)

// plots draws the learning curves of every point (and learner), the
// final results (against the first axis, or the learners of a sweep, or
// at the single point), and every seed's final result.
func (p *plan) plots(res *Result) ([]figure, error) {
	var figs []figure
	for pi := range p.points {
		for li := range p.specs {
			for _, byCost := range []bool{false, true} {
				f, err := p.curves(res, pi, li, byCost)
				if err != nil {
					return nil, err
				}
				figs = append(figs, f)
			}
		}
	}
	finals, err := p.finals(res)
	if err != nil {
		return nil, err
	}
	figs = append(figs, finals...)
	if len(p.specs) > 1 {
		return figs, nil // the finals against the learners show every seed
	}
	strip, err := p.strip(res)
	if err != nil {
		return nil, err
	}
	return append(figs, strip), nil
}

// okabeIto is Okabe & Ito's colour-blind-safe palette, less its yellow,
// which shows poorly on white, and black, which draws the optimum: blue,
// vermillion, bluish green, orange, sky blue, reddish purple.
var okabeIto = [...]color.NRGBA{
	{0x00, 0x72, 0xb2, 0xff},
	{0xd5, 0x5e, 0x00, 0xff},
	{0x00, 0x9e, 0x73, 0xff},
	{0xe6, 0x9f, 0x00, 0xff},
	{0x56, 0xb4, 0xe9, 0xff},
	{0xcc, 0x79, 0xa7, 0xff},
}

// color of allocator i, the same in every plot: Okabe-Ito's, in turn
// (the dashes and marker shapes tell apart allocators beyond six).
func colorOf(i int) color.Color { return okabeIto[i%len(okabeIto)] }

// faded returns c at the given opacity (0 to 255).
func faded(c color.Color, alpha uint8) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: alpha}
}

// chart is a plot with its legend, drawn beside it rather than over the
// data.
type chart struct {
	pl     *plot.Plot
	legend plot.Legend
	ratio  bool // the metric is G/G*: the optimum line and a y axis to 1.05
	lo, hi float64
}

func newChart(metric, title, x, y string) *chart {
	c := &chart{pl: plot.New(), legend: plot.NewLegend(), ratio: metric == "G/G*", lo: math.Inf(1), hi: math.Inf(-1)}
	c.pl.Title.Text = title
	c.pl.X.Label.Text = x
	c.pl.Y.Label.Text = y
	c.legend.Top = true
	c.legend.Left = true
	c.pl.Add(plotter.NewGrid())
	return c
}

// see widens the y range the data need.
func (c *chart) see(ys ...float64) {
	for _, y := range ys {
		c.lo, c.hi = min(c.lo, y), max(c.hi, y)
	}
}

// finish sets the y axis and adds the optimum line. G/G* runs to 1.05, the
// optimum G/G* = 1 drawn, from a little below the lowest value shown (a
// round number, 0 when the data reach down to 0.3); G from 5% below its
// lowest to 5% above its highest. Ticks are at round steps, about ten to
// the axis.
func (c *chart) finish(xmin, xmax float64) error {
	if math.IsInf(c.lo, 0) {
		c.lo, c.hi = 0, 1
	}
	c.pl.Y.Tick.Marker = roundTicks{}
	if c.ratio {
		hi := max(1.05, c.hi+0.02)
		lo := math.Floor((c.lo-0.02)*20) / 20
		if lo < 0.3 {
			lo = min(0, lo)
		}
		c.pl.Y.Min, c.pl.Y.Max = lo, hi
		line, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: 1}, {X: xmax, Y: 1}})
		if err != nil {
			return err
		}
		line.Color = color.Black
		line.Width = vg.Points(1)
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		c.pl.Add(line)
		c.legend.Add("optimum G* (G/G* = 1)", line)
		return nil
	}
	span := c.hi - c.lo
	if span == 0 {
		span = 1
	}
	c.pl.Y.Min, c.pl.Y.Max = c.lo-0.05*span, c.hi+0.05*span
	return nil
}

// roundTicks puts a labelled tick at every multiple of a round step (1, 2
// or 5 times a power of ten) that gives five to ten ticks, and an
// unlabelled one halfway.
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10(span)))
	for _, f := range []float64{1, 2, 5, 10} {
		if span/(step*f/10) <= 10 {
			step *= f / 10
			break
		}
	}
	digits := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+1e-9*step; k++ {
		v := k * step
		label := strconv.FormatFloat(v, 'f', digits, 64)
		if v == 0 {
			label = strconv.FormatFloat(0, 'f', digits, 64) // never "-0"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
		if half := v + step/2; half < hi {
			ticks = append(ticks, plot.Tick{Value: half})
		}
	}
	return ticks
}

// render draws the chart as SVG, and as PNG too when png is set, its
// legend in a column on the right.
func (c *chart) render(base, caption string, png bool) (figure, error) {
	f := figure{caption: caption, base: base}
	formats := []string{"svg"}
	if png {
		formats = []string{"png", "svg"}
	}
	for _, format := range formats {
		var cw vg.CanvasWriterTo
		switch format {
		case "png":
			cw = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))}
		default:
			cw = vgsvg.New(plotWidth, plotHeight)
		}
		dc := draw.New(cw)
		width := c.legend.Rectangle(dc).Size().X + vg.Points(16)
		c.pl.Draw(draw.Crop(dc, 0, -width, 0, 0))
		leg := draw.Crop(dc, plotWidth-width+vg.Points(8), 0, 0, -vg.Points(40))
		c.legend.Draw(leg)
		var b bytes.Buffer
		if _, err := cw.WriteTo(&b); err != nil {
			return figure{}, fmt.Errorf("plot %s: %w", base, err)
		}
		f.files = append(f.files, namedData{base + "." + format, b.Bytes()})
	}
	return f, nil
}

// curves draws the learning curves of point pi and learner li: per
// allocator, the mean over seeds of the metric averaged in bins of
// episodes, and a band for the 95% confidence interval of that mean
// (Student's t over the seeds, within the seeds' range; none for one
// seed). Against episodes, or, byCost, against the cumulative cost in
// environment steps (Cell.Cost), each seed's curve read at common costs
// (onGrid) up to the cost every seed of the allocator reached.
func (p *plan) curves(res *Result, pi, li int, byCost bool) (figure, error) {
	desc := describePoint(p.cfg.Axes, p.points[pi].values)
	kind := "learning curves"
	if byCost {
		kind = "learning curves against cost"
	}
	title := fmt.Sprintf("%s: %s, %s", p.name, kind, desc)
	if len(p.cfg.Axes) == 0 {
		title = p.name + ": " + kind
	}
	if len(p.specs) > 1 {
		title += ", learner " + p.specLabels[li]
	}
	xLabel, xmax := "episode", float64(p.cfg.Episodes)
	if byCost {
		xLabel, xmax = "cost (environment steps)", 0
	}
	c := newChart(res.Metric, title, xLabel, res.Metric)
	c.pl.X.Tick.Marker = roundTicks{}
	xs := make([][][]float64, len(p.allocs))
	ys := make([][][]float64, len(p.allocs))
	for _, cp := range p.cells {
		if cp.point == pi && cp.spec == li {
			cx, cy := curveOf(res.Cells[cp.index])
			if byCost {
				cx, cy = costCurveOf(res.Cells[cp.index])
			}
			xs[cp.alloc], ys[cp.alloc] = append(xs[cp.alloc], cx), append(ys[cp.alloc], cy)
		}
	}
	far, err := c.addCurves(p.allocs, xs, ys, byCost)
	if err != nil {
		return figure{}, err
	}
	xmax = max(xmax, far)
	c.pl.X.Min, c.pl.X.Max = 0, max(xmax, 1)
	if err := c.finish(0, max(xmax, 1)); err != nil {
		return figure{}, err
	}
	base, caption := "curves", "Learning curves, "+desc
	if byCost {
		base, caption = "cost_curves", "Learning curves against cost, "+desc
	}
	if len(p.cfg.Axes) > 0 {
		base += "_" + slug(strings.ReplaceAll(desc, " ", "_"))
	}
	if ls := p.learnerSlug(li); ls != "" {
		base += "_" + ls
		caption += ", learner " + p.specLabels[li]
	}
	f, err := c.render(base, caption, p.cfg.PNG)
	f.note = fmt.Sprintf("%s per episode, averaged over bins of %d episodes: the line is the mean over %d seeds, the band its 95%% confidence interval (Student's t, within the seeds' range).", res.Metric, max(1, (p.cfg.Episodes+maxPoints-1)/maxPoints), p.cfg.Seeds)
	if byCost {
		f.note += " Each bin is placed at the run's cumulative cost at its end, in logical environment steps (main lines, counterfactual re-simulations, tree candidates' continuations), and each seed's curve is read at common costs, up to the least any seed of the allocator spent."
	}
	return f, err
}

// addCurves draws one learning curve per line: the mean over its seeds of
// their curves (xs[i][s], ys[i][s]: curveOf, or costCurveOf when byCost),
// and a band for the 95% confidence interval of that mean (Student's t
// over the seeds, within the seeds' range; none for one seed). Against
// cost, each seed's curve is read at common costs (onGrid) up to the
// least any of the line's seeds reached. far is the largest x drawn.
func (c *chart) addCurves(labels []string, xs, ys [][][]float64, byCost bool) (far float64, err error) {
	var lines []*plotter.Line
	for i, label := range labels {
		var x []float64
		seeds := ys[i]
		if len(xs[i]) > 0 {
			x = xs[i][len(xs[i])-1]
		}
		if byCost {
			x, seeds = onGrid(xs[i], ys[i])
		}
		if len(x) > 0 {
			far = max(far, x[len(x)-1])
		}
		tq := tQuantile(len(seeds))
		mean := make(plotter.XYs, len(x))
		band := make(plotter.XYs, 2*len(x)) // upper edge left to right, lower right to left
		for j := range x {
			s := 0.0
			for _, y := range seeds {
				s += y[j]
			}
			m := s / float64(len(seeds))
			ss := 0.0
			for _, y := range seeds {
				ss += (y[j] - m) * (y[j] - m)
			}
			half := 0.0
			if n := len(seeds); n > 1 {
				half = tq * math.Sqrt(ss/float64(n-1)/float64(n))
			}
			// The t interval of a mean near a bound (G/G* near 1) can pass
			// it; no mean lies outside the seeds' range, so neither does the
			// band.
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, y := range seeds {
				lo, hi = min(lo, y[j]), max(hi, y[j])
			}
			mean[j] = plotter.XY{X: x[j], Y: m}
			band[j] = plotter.XY{X: x[j], Y: min(m+half, hi)}
			band[len(band)-1-j] = plotter.XY{X: x[j], Y: max(m-half, lo)}
			c.see(band[j].Y, band[len(band)-1-j].Y)
		}
		if len(seeds) > 1 {
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return 0, err
			}
			poly.Color = faded(colorOf(i), 0x40)
			poly.LineStyle.Width = 0
			c.pl.Add(poly)
		}
		line, err := plotter.NewLine(mean)
		if err != nil {
			return 0, err
		}
		line.Color = colorOf(i)
		line.Width = vg.Points(2)
		// Lines that give the same rewards draw the same curve: the
		// dashes keep the one drawn last from hiding the others.
		line.Dashes = plotutil.Dashes(i)
		lines = append(lines, line)
		c.legend.Add(label, line)
	}
	for _, l := range lines { // over every band
		c.pl.Add(l)
	}
	return far, nil
}

// tQuantile is the two-sided 95% quantile of Student's t with n − 1
// degrees of freedom, by bisection of studentTwoSided; 0 for n < 2.
func tQuantile(n int) float64 {
	if n < 2 {
		return 0
	}
	lo, hi := 0.0, 1000.0
	for range 60 {
		mid := (lo + hi) / 2
		if studentTwoSided(mid, float64(n-1)) > 1-Confidence {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// jitter is a seed's horizontal offset in a strip of half-width w: spread
// evenly by seed, so that the same seeds always land in the same place.
func jitter(seed, seeds int, w float64) float64 {
	if seeds < 2 {
		return 0
	}
	return -w + 2*w*float64(seed)/float64(seeds-1)
}

// finalView is one final-results figure: its x positions and labels, and
// the row each x position and allocator shows.
type finalView struct {
	title, xlabel, base, caption string
	xs                           []float64
	labels                       []string
	rotate                       bool // long labels: drawn upright
	categories                   bool // x values without an order: the means are not joined by lines
	row                          func(x, ai int) int
}

// finals draws the final results, one figure per view: with one learner,
// against the first axis, a figure per combination of the other axes'
// values (a grid without axes: its single point); in a sweep, against the
// learners, a figure per point. Per allocator: the mean over seeds with
// its bootstrap 95% interval, and each seed as a dot.
func (p *plan) finals(res *Result) ([]figure, error) {
	var views []finalView
	k := len(p.allocs)
	switch {
	case len(p.specs) > 1:
		xs := make([]float64, len(p.specs))
		long := false
		for i, l := range p.specLabels {
			xs[i] = float64(i)
			long = long || len(l) > 12
		}
		for pi := range p.points {
			v := finalView{title: fmt.Sprintf("%s: final %s across the learners", p.name, res.Metric), xlabel: "learner", base: "final",
				caption: fmt.Sprintf("Final %s across the learners", res.Metric), xs: xs, labels: p.specLabels, rotate: long, categories: true,
				row: func(x, ai int) int { return p.row(pi, x, ai) }}
			if len(p.cfg.Axes) > 0 {
				desc := describePoint(p.cfg.Axes, p.points[pi].values)
				v.title += " (" + desc + ")"
				v.caption += ", " + desc
				v.base += "_" + slug(strings.ReplaceAll(desc, " ", "_"))
			}
			views = append(views, v)
		}
	case len(p.cfg.Axes) == 0:
		views = append(views, finalView{title: fmt.Sprintf("%s: final %s", p.name, res.Metric), base: "final",
			caption: fmt.Sprintf("Final %s", res.Metric), xs: []float64{0}, labels: []string{p.name}, categories: true,
			row: func(_, ai int) int { return ai }})
	default:
		first := p.cfg.Axes[0]
		xs, numeric := make([]float64, len(first.Values)), true
		for i, v := range first.Values {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				numeric = false
				break
			}
			xs[i] = f
		}
		if !numeric {
			for i := range xs {
				xs[i] = float64(i)
			}
		}
		// Rows are in grid order: the first axis slowest, allocators fastest.
		perFirst := len(res.Rows) / len(first.Values) // rows per first-axis value
		for o := range perFirst / k {                 // combinations of the other axes
			v := finalView{title: fmt.Sprintf("%s: final %s against %s", p.name, res.Metric, first.Param), xlabel: first.Param, base: "final",
				caption: fmt.Sprintf("Final %s against %s", res.Metric, first.Param), xs: xs, labels: first.Values,
				row: func(x, ai int) int { return x*perFirst + o*k + ai }}
			if len(p.cfg.Axes) > 1 {
				rest := describePoint(p.cfg.Axes[1:], res.Rows[o*k].Point[1:])
				v.title += " (" + rest + ")"
				v.caption += ", " + rest
				v.base += "_" + slug(strings.ReplaceAll(rest, " ", "_"))
			}
			views = append(views, v)
		}
	}
	figs := make([]figure, 0, len(views))
	for _, v := range views {
		f, err := p.finalFigure(res, v)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f)
	}
	return figs, nil
}

// finalFigure draws one view of the final results.
func (p *plan) finalFigure(res *Result, v finalView) (figure, error) {
	xs := v.xs
	spread := 1.0 // the least gap between the x values, for the dots' strips
	if len(xs) > 1 {
		spread = math.Inf(1)
		for i := 1; i < len(xs); i++ {
			spread = min(spread, math.Abs(xs[i]-xs[i-1]))
		}
	}
	c := newChart(res.Metric, v.title, v.xlabel, "final "+res.Metric)
	ticks := make([]plot.Tick, len(xs))
	for i, l := range v.labels {
		ticks[i] = plot.Tick{Value: xs[i], Label: l}
	}
	c.pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	if v.rotate {
		c.pl.X.Tick.Label.Rotation = math.Pi / 2
		c.pl.X.Tick.Label.XAlign = draw.XRight
		c.pl.X.Tick.Label.YAlign = draw.YCenter
	}
	k := float64(len(p.allocs))
	for ai, spec := range p.allocs {
		pts := make(errPoints, len(xs))
		var dots plotter.XYs
		for xi := range xs {
			r := res.Rows[v.row(xi, ai)]
			f := r.FinalStats
			// Each allocator's dots in a strip of its own beside the value.
			centre := xs[xi] + spread*0.3*((float64(ai)+0.5)/k-0.5)
			pts[xi] = errPoint{x: xs[xi], y: f.Mean, lo: f.Mean - f.CILow, hi: f.CIHigh - f.Mean}
			for s, y := range r.Final {
				dots = append(dots, plotter.XY{X: centre + jitter(s, len(r.Final), spread*0.1/k), Y: y})
			}
			c.see(f.Min, f.Max)
		}
		line, scatter, err := plotter.NewLinePoints(pts)
		if err != nil {
			return figure{}, err
		}
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return figure{}, err
		}
		seedDots, err := plotter.NewScatter(dots)
		if err != nil {
			return figure{}, err
		}
		line.Color, scatter.Color, bars.Color = colorOf(ai), colorOf(ai), colorOf(ai)
		line.Dashes = plotutil.Dashes(ai)
		if v.categories {
			line.Width = 0 // nothing between two learners: no line to draw
		}
		scatter.Shape = plotutil.Shape(ai)
		seedDots.Color = faded(colorOf(ai), 0x90)
		seedDots.Radius = vg.Points(1.5)
		seedDots.Shape = plotutil.Shape(ai)
		c.pl.Add(seedDots, line, scatter, bars)
		c.legend.Add(spec, line, scatter)
	}
	pad := spread * 0.4
	c.pl.X.Min, c.pl.X.Max = xs[0]-pad, xs[len(xs)-1]+pad
	if err := c.finish(c.pl.X.Min, c.pl.X.Max); err != nil {
		return figure{}, err
	}
	f, err := c.render(v.base, v.caption, p.cfg.PNG)
	if err != nil {
		return figure{}, err
	}
	means := "the line joins the means"
	if v.categories {
		means = "the large markers are the means"
	}
	f.note = fmt.Sprintf("%s averaged over the last %d episodes of each seed: %s over %d seeds, the bars are their bootstrap 95%% confidence intervals, and the small dots beside each value are the seeds, one each.", res.Metric, p.window, means, p.cfg.Seeds)
	return f, nil
}

// strip draws every seed's final result, per point and allocator, so that
// bimodal outcomes show: a dot per seed, with the mean and its bootstrap
// 95% interval beside them.
func (p *plan) strip(res *Result) (figure, error) {
	c := newChart(res.Metric, fmt.Sprintf("%s: final %s of every seed", p.name, res.Metric), strings.Join(p.axisNames(), ", "), "final "+res.Metric)
	if len(p.cfg.Axes) == 0 {
		c.pl.X.Label.Text = ""
	}
	k := len(p.allocs)
	ticks := make([]plot.Tick, len(p.points))
	for pi := range p.points {
		ticks[pi] = plot.Tick{Value: float64(pi), Label: strings.Join(p.points[pi].values, ", ")}
	}
	if len(p.cfg.Axes) == 0 {
		ticks = []plot.Tick{{Value: 0, Label: p.name}}
	}
	c.pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	width := 0.8 / float64(k) // each allocator's strip
	for ai, spec := range p.allocs {
		var dots plotter.XYs
		var means errPoints
		for pi := range p.points {
			r := res.Rows[pi*k+ai]
			centre := float64(pi) - 0.4 + width*(float64(ai)+0.5)
			for s, v := range r.Final {
				dots = append(dots, plotter.XY{X: centre - width*0.15 + jitter(s, len(r.Final), width*0.2), Y: v})
			}
			f := r.FinalStats
			means = append(means, errPoint{x: centre + width*0.25, y: f.Mean, lo: f.Mean - f.CILow, hi: f.CIHigh - f.Mean})
			c.see(f.Min, f.Max)
		}
		sc, err := plotter.NewScatter(dots)
		if err != nil {
			return figure{}, err
		}
		sc.Color, sc.Shape, sc.Radius = faded(colorOf(ai), 0xb0), plotutil.Shape(ai), vg.Points(2)
		m, err := plotter.NewScatter(means)
		if err != nil {
			return figure{}, err
		}
		m.Color, m.Shape, m.Radius = colorOf(ai), draw.BoxGlyph{}, vg.Points(3)
		bars, err := plotter.NewYErrorBars(means)
		if err != nil {
			return figure{}, err
		}
		bars.Color = colorOf(ai)
		c.pl.Add(sc, m, bars)
		c.legend.Add(spec, sc)
	}
	c.pl.X.Min, c.pl.X.Max = -0.5, float64(len(p.points))-0.5
	if err := c.finish(c.pl.X.Min, c.pl.X.Max); err != nil {
		return figure{}, err
	}
	f, err := c.render("seeds", fmt.Sprintf("Final %s of every seed", res.Metric), p.cfg.PNG)
	f.note = fmt.Sprintf("Each dot is one seed's %s averaged over its last %d episodes; beside each strip, the square is the mean over the %d seeds and the bar its bootstrap 95%% confidence interval. Two clusters mean a bimodal outcome that a mean alone hides.", res.Metric, p.window, p.cfg.Seeds)
	return f, err
}

// errPoints are points with asymmetric vertical error bars.
type errPoint struct{ x, y, lo, hi float64 }
type errPoints []errPoint

func (e errPoints) Len() int                        { return len(e) }
func (e errPoints) XY(i int) (float64, float64)     { return e[i].x, e[i].y }
func (e errPoints) YError(i int) (float64, float64) { return e[i].lo, e[i].hi }
