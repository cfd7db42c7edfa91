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

// Plot size.
const (
	plotWidth  = 6 * vg.Inch
	plotHeight = 4 * vg.Inch
)

// plots draws the learning curves of every point and the final results
// against the first axis.
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
	return figs, nil
}

// color of allocator i, the same in every plot.
func colorOf(i int) color.Color { return plotutil.Color(i) }

// translucent returns c at a quarter opacity, for bands.
func translucent(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	const a = 0x40
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: a}
}

// curves draws point pi's learning curves: per allocator, the mean over
// seeds of the metric averaged in bins of episodes, in a band from the
// lowest seed to the highest.
func (p *plan) curves(res *Result, pi int) (figure, error) {
	pl := plot.New()
	desc := describePoint(p.cfg.Axes, p.points[pi].values)
	pl.Title.Text = fmt.Sprintf("%s: learning curves, %s", p.name, desc)
	if len(p.cfg.Axes) == 0 {
		pl.Title.Text = p.name + ": learning curves"
	}
	pl.X.Label.Text = "episode"
	pl.Y.Label.Text = res.Metric
	pl.Legend.Top = true
	lowest, highest := math.Inf(1), math.Inf(-1)
	for ai, spec := range p.allocs {
		var x []float64
		var ys [][]float64
		for _, c := range p.cells {
			if c.point == pi && c.alloc == ai {
				cx, cy := p.curve(res.Cells[c.index])
				x = cx
				ys = append(ys, cy)
			}
		}
		mean, lo, hi := make(plotter.XYs, len(x)), make(plotter.XYs, len(x)), make(plotter.XYs, len(x))
		for j := range x {
			s := 0.0
			l, h := math.Inf(1), math.Inf(-1)
			for _, y := range ys {
				s += y[j]
				l, h = min(l, y[j]), max(h, y[j])
			}
			mean[j] = plotter.XY{X: x[j], Y: s / float64(len(ys))}
			lo[j], hi[j] = plotter.XY{X: x[j], Y: l}, plotter.XY{X: x[j], Y: h}
			lowest, highest = min(lowest, l), max(highest, h)
		}
		ring := append(plotter.XYs{}, hi...)
		for j := len(lo) - 1; j >= 0; j-- {
			ring = append(ring, lo[j])
		}
		band, err := plotter.NewPolygon(ring)
		if err != nil {
			return figure{}, err
		}
		band.Color = translucent(colorOf(ai))
		band.LineStyle.Width = 0
		line, err := plotter.NewLine(mean)
		if err != nil {
			return figure{}, err
		}
		line.Color = colorOf(ai)
		line.Width = vg.Points(1.5)
		// Allocators that give the same rewards draw the same curve: the
		// dashes keep the one drawn last from hiding the others.
		line.Dashes = plotutil.Dashes(ai)
		pl.Add(band, line)
		pl.Legend.Add(spec, line)
	}
	pl.Add(plotter.NewGrid())
	legendRoom(pl, lowest, highest, len(p.allocs))
	base := "curves"
	if len(p.cfg.Axes) > 0 {
		base += "_" + slug(strings.ReplaceAll(desc, " ", "_"))
	}
	f, err := render(pl, base, fmt.Sprintf("Learning curves, %s", desc))
	f.note = fmt.Sprintf("%s per episode, averaged over bins of episodes: the line is the mean over %d seeds, the band spans the lowest to the highest seed.", res.Metric, p.cfg.Seeds)
	return f, err
}

// finals draws the final results against the first axis, one plot per
// combination of the other axes' values.
func (p *plan) finals(res *Result) ([]figure, error) {
	first := p.cfg.Axes[0]
	numeric := true
	xs := make([]float64, len(first.Values))
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
	others := perFirst / len(p.allocs)            // combinations of the other axes
	var figs []figure
	for o := range others {
		pl := plot.New()
		rest := ""
		if len(p.cfg.Axes) > 1 {
			r := res.Rows[o*len(p.allocs)]
			rest = describePoint(p.cfg.Axes[1:], r.Point[1:])
		}
		pl.Title.Text = fmt.Sprintf("%s: final %s against %s", p.name, res.Metric, first.Param)
		if rest != "" {
			pl.Title.Text += " (" + rest + ")"
		}
		pl.X.Label.Text = first.Param
		pl.Y.Label.Text = "final " + res.Metric
		// A tick at every value of the axis, and only there.
		ticks := make([]plot.Tick, len(first.Values))
		for i, v := range first.Values {
			ticks[i] = plot.Tick{Value: xs[i], Label: v}
		}
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		pl.Legend.Top = true
		lowest, highest := math.Inf(1), math.Inf(-1)
		for ai, spec := range p.allocs {
			pts := make(errPoints, len(first.Values))
			for fi := range first.Values {
				r := res.Rows[fi*perFirst+o*len(p.allocs)+ai]
				f := r.FinalStats
				pts[fi] = errPoint{x: xs[fi], y: f.Mean, lo: f.Mean - f.Min, hi: f.Max - f.Mean}
				lowest, highest = min(lowest, f.Min), max(highest, f.Max)
			}
			line, scatter, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return nil, err
			}
			line.Color, scatter.Color, bars.Color = colorOf(ai), colorOf(ai), colorOf(ai)
			line.Dashes = plotutil.Dashes(ai)
			scatter.Shape = plotutil.Shape(ai)
			pl.Add(line, scatter, bars)
			pl.Legend.Add(spec, line, scatter)
		}
		pl.Add(plotter.NewGrid())
		legendRoom(pl, lowest, highest, len(p.allocs))
		base := "final"
		caption := fmt.Sprintf("Final %s against %s", res.Metric, first.Param)
		if rest != "" {
			base += "_" + slug(strings.ReplaceAll(rest, " ", "_"))
			caption += ", " + rest
		}
		f, err := render(pl, base, caption)
		if err != nil {
			return nil, err
		}
		f.note = fmt.Sprintf("%s averaged over the last %d episodes of each seed: the mean over %d seeds, with bars from the lowest to the highest seed.", res.Metric, p.window, p.cfg.Seeds)
		figs = append(figs, f)
	}
	return figs, nil
}

// legendRoom sets the y range to the data's, from 0 when the data are
// positive, with room above it for a legend of n entries, so that the
// legend never hides a curve.
func legendRoom(pl *plot.Plot, lowest, highest float64, n int) {
	if math.IsInf(lowest, 0) || math.IsInf(highest, 0) {
		return
	}
	lowest = min(lowest, 0)
	span := highest - lowest
	if span == 0 {
		span = 1
	}
	pl.Y.Min = lowest
	pl.Y.Max = highest + span*(0.05+0.07*float64(n))
}

// errPoints are points with asymmetric vertical error bars.
type errPoint struct{ x, y, lo, hi float64 }
type errPoints []errPoint

func (e errPoints) Len() int                        { return len(e) }
func (e errPoints) XY(i int) (float64, float64)     { return e[i].x, e[i].y }
func (e errPoints) YError(i int) (float64, float64) { return e[i].lo, e[i].hi }

// render draws pl as PNG and SVG.
func render(pl *plot.Plot, base, caption string) (figure, error) {
	f := figure{caption: caption, base: base}
	for _, format := range []string{"png", "svg"} {
		w, err := pl.WriterTo(plotWidth, plotHeight, format)
		if err != nil {
			return figure{}, fmt.Errorf("plot %s: %w", base, err)
		}
		var b bytes.Buffer
		if _, err := w.WriteTo(&b); err != nil {
			return figure{}, fmt.Errorf("plot %s: %w", base, err)
		}
		f.files = append(f.files, namedData{base + "." + format, b.Bytes()})
	}
	return f, nil
}
