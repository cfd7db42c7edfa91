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

// plots draws the learning curves of every point, the final results
// against the first axis, and every seed's final result.
func (p *plan) plots(res *Result) ([]figure, error) {
	var figs []figure
	for pi := range p.points {
		f, err := p.curves(res, pi)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f)
	}
	if len(p.cfg.Axes) > 0 {
		finals, err := p.finals(res)
		if err != nil {
			return nil, err
		}
		figs = append(figs, finals...)
	}
	strip, err := p.strip(res)
	if err != nil {
		return nil, err
	}
	return append(figs, strip), nil
}

// color of allocator i, the same in every plot.
func colorOf(i int) color.Color { return plotutil.Color(i) }

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

func (p *plan) newChart(res *Result, title, x, y string) *chart {
	c := &chart{pl: plot.New(), legend: plot.NewLegend(), ratio: res.Metric == "G/G*", lo: math.Inf(1), hi: math.Inf(-1)}
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
		c.pl.Y.Tick.Marker = roundTicks{}
		return nil
	}
	span := c.hi - c.lo
	if span == 0 {
		span = 1
	}
	c.pl.Y.Min, c.pl.Y.Max = c.lo-0.05*span, c.hi+0.05*span
	c.pl.Y.Tick.Marker = roundTicks{}
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

// curves draws point pi's learning curves: per allocator, every seed's
// metric averaged in bins of episodes as a thin line, and their mean as a
// thick one.
func (p *plan) curves(res *Result, pi int) (figure, error) {
	desc := describePoint(p.cfg.Axes, p.points[pi].values)
	title := fmt.Sprintf("%s: learning curves, %s", p.name, desc)
	if len(p.cfg.Axes) == 0 {
		title = p.name + ": learning curves"
	}
	c := p.newChart(res, title, "episode", res.Metric)
	c.pl.X.Tick.Marker = roundTicks{}
	c.pl.X.Min, c.pl.X.Max = 0, float64(p.cfg.Episodes)
	for ai, spec := range p.allocs {
		var x []float64
		var ys [][]float64
		for _, cp := range p.cells {
			if cp.point == pi && cp.alloc == ai {
				cx, cy := p.curve(res.Cells[cp.index])
				x = cx
				ys = append(ys, cy)
			}
		}
		mean := make(plotter.XYs, len(x))
		for _, y := range ys {
			seed := make(plotter.XYs, len(x))
			for j := range x {
				seed[j] = plotter.XY{X: x[j], Y: y[j]}
				mean[j].X, mean[j].Y = x[j], mean[j].Y+y[j]/float64(len(ys))
			}
			c.see(y...)
			thin, err := plotter.NewLine(seed)
			if err != nil {
				return figure{}, err
			}
			thin.Color = faded(colorOf(ai), 0x50)
			thin.Width = vg.Points(0.5)
			c.pl.Add(thin)
		}
		line, err := plotter.NewLine(mean)
		if err != nil {
			return figure{}, err
		}
		line.Color = colorOf(ai)
		line.Width = vg.Points(2)
		// Allocators that give the same rewards draw the same curve: the
		// dashes keep the one drawn last from hiding the others.
		line.Dashes = plotutil.Dashes(ai)
		c.pl.Add(line)
		c.legend.Add(spec, line)
	}
	if err := c.finish(0, float64(p.cfg.Episodes)); err != nil {
		return figure{}, err
	}
	base := "curves"
	if len(p.cfg.Axes) > 0 {
		base += "_" + slug(strings.ReplaceAll(desc, " ", "_"))
	}
	f, err := c.render(base, fmt.Sprintf("Learning curves, %s", desc), p.cfg.PNG)
	f.note = fmt.Sprintf("%s per episode, averaged over bins of %d episodes: a thin line per seed (%d seeds), the thick line their mean.", res.Metric, max(1, (p.cfg.Episodes+maxPoints-1)/maxPoints), p.cfg.Seeds)
	return f, err
}

// jitter is a seed's horizontal offset in a strip of half-width w: spread
// evenly by seed, so that the same seeds always land in the same place.
func jitter(seed, seeds int, w float64) float64 {
	if seeds < 2 {
		return 0
	}
	return -w + 2*w*float64(seed)/float64(seeds-1)
}

// finals draws the final results against the first axis, one plot per
// combination of the other axes' values: per allocator the mean over
// seeds with its bootstrap 95% interval, and each seed as a dot.
func (p *plan) finals(res *Result) ([]figure, error) {
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
	spread := 1.0 // the least gap between the axis' values, for the dots' strips
	if len(xs) > 1 {
		spread = math.Inf(1)
		for i := 1; i < len(xs); i++ {
			spread = min(spread, math.Abs(xs[i]-xs[i-1]))
		}
	}
	// Rows are in grid order: the first axis slowest, allocators fastest.
	perFirst := len(res.Rows) / len(first.Values) // rows per first-axis value
	others := perFirst / len(p.allocs)            // combinations of the other axes
	var figs []figure
	for o := range others {
		rest := ""
		if len(p.cfg.Axes) > 1 {
			rest = describePoint(p.cfg.Axes[1:], res.Rows[o*len(p.allocs)].Point[1:])
		}
		title := fmt.Sprintf("%s: final %s against %s", p.name, res.Metric, first.Param)
		if rest != "" {
			title += " (" + rest + ")"
		}
		c := p.newChart(res, title, first.Param, "final "+res.Metric)
		ticks := make([]plot.Tick, len(first.Values))
		for i, v := range first.Values {
			ticks[i] = plot.Tick{Value: xs[i], Label: v}
		}
		c.pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		k := float64(len(p.allocs))
		for ai, spec := range p.allocs {
			pts := make(errPoints, len(first.Values))
			var dots plotter.XYs
			for fi := range first.Values {
				r := res.Rows[fi*perFirst+o*len(p.allocs)+ai]
				f := r.FinalStats
				// Each allocator's dots in a strip of its own beside the value.
				centre := xs[fi] + spread*0.3*((float64(ai)+0.5)/k-0.5)
				pts[fi] = errPoint{x: xs[fi], y: f.Mean, lo: f.Mean - f.CILow, hi: f.CIHigh - f.Mean}
				for s, v := range r.Final {
					dots = append(dots, plotter.XY{X: centre + jitter(s, len(r.Final), spread*0.1/k), Y: v})
				}
				c.see(f.Min, f.Max)
			}
			line, scatter, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, err
			}
			seedDots, err := plotter.NewScatter(dots)
			if err != nil {
				return nil, err
			}
			line.Color, scatter.Color, bars.Color = colorOf(ai), colorOf(ai), colorOf(ai)
			line.Dashes = plotutil.Dashes(ai)
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
			return nil, err
		}
		base := "final"
		caption := fmt.Sprintf("Final %s against %s", res.Metric, first.Param)
		if rest != "" {
			base += "_" + slug(strings.ReplaceAll(rest, " ", "_"))
			caption += ", " + rest
		}
		f, err := c.render(base, caption, p.cfg.PNG)
		if err != nil {
			return nil, err
		}
		f.note = fmt.Sprintf("%s averaged over the last %d episodes of each seed: the line joins the means over %d seeds, the bars are their bootstrap 95%% confidence intervals, and the small dots beside each value are the seeds, one each.", res.Metric, p.window, p.cfg.Seeds)
		figs = append(figs, f)
	}
	return figs, nil
}

// strip draws every seed's final result, per point and allocator, so that
// bimodal outcomes show: a dot per seed, with the mean and its bootstrap
// 95% interval beside them.
func (p *plan) strip(res *Result) (figure, error) {
	c := p.newChart(res, fmt.Sprintf("%s: final %s of every seed", p.name, res.Metric), strings.Join(p.axisNames(), ", "), "final "+res.Metric)
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
