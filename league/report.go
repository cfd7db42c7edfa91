package league

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Rating is one row of the ratings table.
type Rating struct {
	Player string
	// Elo is the Elo rating; R, RD and Sigma the Glicko-2 rating, its
	// deviation and its volatility, as of the last closed rating period.
	Elo          float64
	R, RD, Sigma float64
	Record       Record // against every other player
}

// Ratings is the ratings table, best Glicko-2 rating first (then Elo,
// then name), every player of the league included.
func (l *League) Ratings() []Rating {
	out := make([]Rating, 0, len(l.state.Players))
	for _, p := range l.state.Players {
		g := l.ratings.glicko.Of(p.Name)
		var rec Record
		if t := l.ratings.totals[p.Name]; t != nil {
			rec = *t
		}
		out = append(out, Rating{Player: p.Name, Elo: l.ratings.elo.Of(p.Name), R: g.R, RD: g.RD, Sigma: g.Sigma, Record: rec})
	}
	slices.SortStableFunc(out, func(a, b Rating) int {
		return cmp.Or(cmp.Compare(b.R, a.R), cmp.Compare(b.Elo, a.Elo), cmp.Compare(a.Player, b.Player))
	})
	return out
}

// WriteRatings writes the ratings table as aligned text.
func (l *League) WriteRatings(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "player\tpolicy\telo\tglicko-2\t±2RD\tgames\twins\tdraws\tlosses\tmean score\t")
	for _, r := range l.Ratings() {
		p := l.Player(r.Player)
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%d\t%d\t%d\t%d\t%+.3f\t\n", r.Player, p.Policy.Name, r.Elo, r.R, 2*r.RD,
			r.Record.Games, r.Record.Wins, r.Record.Draws, r.Record.Losses, r.Record.MeanScore())
	}
	return tw.Flush()
}

// Payoff is the payoff matrix between players: Mean[i][j] is player i's
// mean result (its roles' mean score) in its matches against player j,
// Games[i][j] how many there were; NaN where they never met.
type Payoff struct {
	Players []string
	Mean    [][]float64
	Games   [][]int
}

// Payoff is the league's payoff matrix, the players in the order they
// joined.
func (l *League) Payoff() Payoff {
	p := Payoff{}
	for _, pl := range l.state.Players {
		p.Players = append(p.Players, pl.Name)
	}
	n := len(p.Players)
	p.Mean, p.Games = make([][]float64, n), make([][]int, n)
	for i, a := range p.Players {
		p.Mean[i], p.Games[i] = make([]float64, n), make([]int, n)
		for j, b := range p.Players {
			r := l.Versus(a, b)
			p.Games[i][j] = r.Games
			p.Mean[i][j] = math.NaN()
			if r.Games > 0 {
				p.Mean[i][j] = r.MeanScore()
			}
		}
	}
	return p
}

// Write writes the matrix as aligned text: the row player's mean result
// against the column player, with the number of matches.
func (p Payoff) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "row vs column\t")
	for _, c := range p.Players {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintln(tw)
	for i, r := range p.Players {
		fmt.Fprintf(tw, "%s\t", r)
		for j := range p.Players {
			if p.Games[i][j] == 0 {
				fmt.Fprint(tw, "·\t")
				continue
			}
			fmt.Fprintf(tw, "%+.2f (%d)\t", p.Mean[i][j], p.Games[i][j])
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// Point is the ratings after a number of matches.
type Point struct {
	Matches int64
	Elo     map[string]float64
	Glicko  map[string]GlickoRating
}

// History replays the league's results and returns the ratings every
// `every` matches (and after the last), for plots of ratings over time.
func (l *League) History(every int64) []Point {
	every = max(every, 1)
	rt := newRatings(&l.state.Config)
	var out []Point
	snap := func(m int64) {
		pt := Point{Matches: m, Elo: map[string]float64{}, Glicko: map[string]GlickoRating{}}
		for name, r := range rt.elo.Rating {
			pt.Elo[name] = r
		}
		for name, r := range rt.glicko.Player {
			pt.Glicko[name] = *r
		}
		out = append(out, pt)
	}
	snap(0)
	for i := range l.results {
		rt.add(l.info, &l.results[i])
		if m := int64(i + 1); m%every == 0 || m == int64(len(l.results)) {
			snap(m)
		}
	}
	return out
}

// PlotRatings draws the players' ratings over the league's matches as
// SVG: Elo, or Glicko-2 (with a band of ±2 RD) when glicko is set. A
// player's line starts when it was first rated. players nil draws all.
func (l *League) PlotRatings(every int64, glicko bool, players []string) ([]byte, error) {
	hist := l.History(every)
	if players == nil {
		for _, p := range l.state.Players {
			players = append(players, p.Name)
		}
	}
	pl := plot.New()
	what := "Elo"
	if glicko {
		what = "Glicko-2 rating (band: ±2 RD)"
	}
	pl.Title.Text = fmt.Sprintf("league %s (%s): %s over matches", l.state.Name, l.info.Name, strings.SplitN(what, " (", 2)[0])
	pl.X.Label.Text = "matches"
	pl.Y.Label.Text = what
	pl.Legend.Top = true
	pl.Legend.Left = true
	for i, name := range players {
		var line, lo, hi plotter.XYs
		for _, pt := range hist {
			if glicko {
				g, ok := pt.Glicko[name]
				if !ok {
					continue
				}
				line = append(line, plotter.XY{X: float64(pt.Matches), Y: g.R})
				lo = append(lo, plotter.XY{X: float64(pt.Matches), Y: g.R - 2*g.RD})
				hi = append(hi, plotter.XY{X: float64(pt.Matches), Y: g.R + 2*g.RD})
				continue
			}
			r, ok := pt.Elo[name]
			if !ok {
				continue
			}
			line = append(line, plotter.XY{X: float64(pt.Matches), Y: r})
		}
		if len(line) == 0 {
			continue
		}
		if glicko && len(line) > 1 {
			ring := append(plotter.XYs{}, hi...)
			for j := len(lo) - 1; j >= 0; j-- {
				ring = append(ring, lo[j])
			}
			band, err := plotter.NewPolygon(ring)
			if err != nil {
				return nil, err
			}
			c := plotutil.Color(i)
			r, g, b, _ := c.RGBA()
			band.Color = colorNRGBA(r, g, b)
			band.LineStyle.Width = 0
			pl.Add(band)
		}
		ln, err := plotter.NewLine(line)
		if err != nil {
			return nil, err
		}
		ln.Color = plotutil.Color(i)
		ln.Dashes = plotutil.Dashes(i)
		ln.Width = vg.Points(1.5)
		pl.Add(ln)
		pl.Legend.Add(name, ln)
	}
	pl.Add(plotter.NewGrid())
	w, err := pl.WriterTo(6*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// colorNRGBA is a colour of 16-bit channels at a quarter opacity, for
// bands.
func colorNRGBA(r, g, b uint32) color.NRGBA {
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x40}
}
