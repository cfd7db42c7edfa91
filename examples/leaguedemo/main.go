// Command leaguedemo is the learning demonstration of docs/leagues.md: a
// tabular learner on tic-tac-toe trained (a) against a fixed opponent,
// (b) by pure self-play and (c) in a league of its past snapshots with
// prioritised matchmaking, measured by its exact exploitability (the
// value a best response gets against its greedy policy), its score
// against minimax, and the Glicko-2 ratings of its snapshots in one
// evaluation league. It writes the figures and a results table.
//
//	go run ./examples/leaguedemo -out docs/images
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// condition is one way of training.
type condition struct {
	name, rule string
	opponents  []string // scripted players besides the learner
}

var conditions = []condition{
	{"fixed opponent (random)", "fixed:random=1", []string{"random"}},
	{"pure self-play", "self", nil},
	{"league of past snapshots (PFSP)", "mix:self=0.35,pfsp=0.5,uniform=0.15", []string{"random"}},
}

// point is a measurement after some matches.
type point struct {
	matches        int64
	exploitability float64
	vsMinimax      float64 // mean score against minimax over both roles
	vsRandom       float64 // mean score against random, 400 games
}

func main() {
	out := flag.String("out", "docs/images", "directory for the figures")
	matches := flag.Int64("matches", 60000, "training matches per run")
	every := flag.Int64("every", 3000, "measure and snapshot every N matches")
	seeds := flag.Int("seeds", 3, "runs per condition")
	learner := flag.String("learner", "egreedy:alpha=0.3,epsilon=0.2,unbiased=0", "the learner spec (plain α steps from 0: the demonstration of docs/leagues.md)")
	flag.Parse()
	if err := run(*out, *matches, *every, *seeds, *learner); err != nil {
		fmt.Fprintln(os.Stderr, "leaguedemo:", err)
		os.Exit(1)
	}
}

func run(out string, matches, every int64, nseeds int, learnerSpec string) error {
	ctx := context.Background()
	reg := scenarios.Builtin()
	sc, err := reg.Lookup("tictactoe")
	if err != nil {
		return err
	}
	params, err := sc.Info().ParseParams(nil)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "leaguedemo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	curves := make([][][]point, len(conditions)) // condition, seed, time
	var snapshots [][]string                     // seed 0's snapshot files, per condition
	for ci, c := range conditions {
		for seed := range nseeds {
			dir := filepath.Join(tmp, fmt.Sprintf("c%d-s%d", ci, seed))
			l, err := league.Create(dir, league.Config{Name: fmt.Sprintf("c%d", ci), Scenario: "tictactoe", Seed: uint64(1000*ci + seed),
				Rule: c.rule, SnapshotEvery: every}, reg)
			if err != nil {
				return err
			}
			settings, _ := json.Marshal(league.LearnerSettings{Spec: learnerSpec})
			if err := l.Add(league.Player{Name: "learner", Policy: runspec.Policy{Name: league.PolicyLearner, Settings: settings}}); err != nil {
				return err
			}
			for _, o := range c.opponents {
				if err := l.Add(league.Player{Name: o, Policy: runspec.Policy{Name: o}}); err != nil {
					return err
				}
			}
			var curve []point
			for l.Matches() < matches {
				if err := l.Play(ctx, league.PlayOptions{N: every, CheckpointEvery: matches}); err != nil {
					return err
				}
				p, err := measure(ctx, sc, params, l)
				if err != nil {
					return err
				}
				curve = append(curve, p)
			}
			curves[ci] = append(curves[ci], curve)
			if seed == 0 {
				var files []string
				for _, p := range l.Players() {
					if p.Parent == "learner" {
						files = append(files, filepath.Join(dir, league.DirSnapshots, p.Name+".json"))
					}
				}
				snapshots = append(snapshots, files)
			}
			fmt.Fprintf(os.Stderr, "%s, seed %d: exploitability %.3f after %d matches\n", c.name, seed, curve[len(curve)-1].exploitability, matches)
			if err := l.Close(); err != nil {
				return err
			}
		}
	}
	ratings, refs, err := evaluate(ctx, reg, filepath.Join(tmp, "eval"), snapshots)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := plotCurves(filepath.Join(out, "leagues-exploitability.svg"), curves, "exact exploitability of the greedy policy",
		func(p point) float64 { return p.exploitability }, nseeds, true); err != nil {
		return err
	}
	if err := plotCurves(filepath.Join(out, "leagues-vs-random.svg"), curves, "mean score against random (greedy policy)",
		func(p point) float64 { return p.vsRandom }, nseeds, false); err != nil {
		return err
	}
	if err := plotRatings(filepath.Join(out, "leagues-ratings.svg"), ratings, refs, every); err != nil {
		return err
	}
	table(curves, ratings, refs)
	return nil
}

// measure evaluates the league's learner, greedily.
func measure(ctx context.Context, sc env.Scenario, params env.Params, l *league.League) (point, error) {
	lr, spec := l.TrainedLearner()
	snap, err := learn.TakeSnapshot(spec, lr)
	if err != nil {
		return point{}, err
	}
	greedy, err := snap.Greedy(learn.Options{})
	if err != nil {
		return point{}, err
	}
	p := point{matches: l.Matches()}
	if p.exploitability, err = league.Exploitability(ctx, sc, params, greedy, 1, 2); err != nil {
		return point{}, err
	}
	minimax, err := sc.Info().MakePolicy(env.PolicyRequest{Scenario: sc, Params: params, Role: "x", Name: "minimax"})
	if err != nil {
		return point{}, err
	}
	if p.vsMinimax, err = versus(ctx, sc, params, greedy, minimax, 1); err != nil {
		return point{}, err
	}
	if p.vsRandom, err = versus(ctx, sc, params, greedy, agents.Random(), 200); err != nil {
		return point{}, err
	}
	return p, nil
}

// versus is pol's mean score against opp over n games in each role: a
// run of n episodes per role (play.Run), game i with scenario seed i and
// policy seed 7919·i + the role's seat.
func versus(ctx context.Context, sc env.Scenario, params env.Params, pol, opp agents.Policy, n int) (float64, error) {
	total := 0.0
	for seat, role := range []string{"x", "o"} {
		other := map[string]string{"x": "o", "o": "x"}[role]
		cfg := play.Config{
			Play:     env.Play{Scenario: sc, Params: params, Policy: env.ByRole(map[string]agents.Policy{role: pol, other: opp}, nil)},
			Episodes: n,
			Seeds:    func(i int) (uint64, uint64) { return uint64(i), uint64(7919*i + seat) },
		}
		out := &trajectories.Output{ObserveCredit: func(rec *episode.Record, _ *trajectories.Credit) error {
			total += rec.Score.Agents[seat]
			return nil
		}}
		if _, err := play.Run(ctx, cfg, out); err != nil {
			return 0, err
		}
	}
	return total / float64(2*n), nil
}

// evaluate rates seed 0's greedy snapshots of every condition, with
// random, center-first and minimax, in one league: uniform matchmaking,
// every player in turn.
func evaluate(ctx context.Context, reg *env.Registry, dir string, snapshots [][]string) ([][]float64, map[string]float64, error) {
	l, err := league.Create(dir, league.Config{Name: "eval", Scenario: "tictactoe", Seed: 99, GlickoPeriod: 50}, reg)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	for _, name := range []string{"random", "center-first", "minimax"} {
		if err := l.Add(league.Player{Name: name, Policy: runspec.Policy{Name: name}}); err != nil {
			return nil, nil, err
		}
	}
	names := make([][]string, len(snapshots))
	for ci, files := range snapshots {
		for k, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, err
			}
			rel := filepath.ToSlash(filepath.Join(league.DirSnapshots, fmt.Sprintf("c%d-%d.json", ci, k)))
			if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
				return nil, nil, err
			}
			settings, _ := json.Marshal(league.SnapshotSettings{File: rel, Greedy: true})
			name := fmt.Sprintf("c%d-%d", ci, k)
			if err := l.Add(league.Player{Name: name, Policy: runspec.Policy{Name: league.PolicySnapshot, Settings: settings}}); err != nil {
				return nil, nil, err
			}
			names[ci] = append(names[ci], name)
		}
	}
	if err := l.Play(ctx, league.PlayOptions{N: int64(400 * len(l.Players())), Concurrency: 2, CheckpointEvery: 1 << 40}); err != nil {
		return nil, nil, err
	}
	by := map[string]float64{}
	for _, r := range l.Ratings() {
		by[r.Player] = r.R
	}
	out := make([][]float64, len(names))
	for ci, ns := range names {
		for _, n := range ns {
			out[ci] = append(out[ci], by[n])
		}
	}
	return out, map[string]float64{"random": by["random"], "center-first": by["center-first"], "minimax": by["minimax"]}, nil
}

// newPlot is a plot with its legend in the bottom corner, left or right,
// where the curves are not.
func newPlot(title, y string, left bool) *plot.Plot {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "training matches"
	pl.Y.Label.Text = y
	pl.Legend.Left = left
	pl.Add(plotter.NewGrid())
	return pl
}

// save writes pl to path (.svg) and beside it as PNG.
func save(pl *plot.Plot, path string) error {
	for _, format := range []string{"svg", "png"} {
		w, err := pl.WriterTo(6*vg.Inch, 4*vg.Inch, format)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if _, err := w.WriteTo(&b); err != nil {
			return err
		}
		if err := os.WriteFile(strings.TrimSuffix(path, ".svg")+"."+format, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func plotCurves(path string, curves [][][]point, what string, metric func(point) float64, nseeds int, left bool) error {
	pl := newPlot("tic-tac-toe learner: "+what, what, left)
	for ci, c := range conditions {
		var mean, lo, hi plotter.XYs
		for t := range curves[ci][0] {
			s, l, h := 0.0, math.Inf(1), math.Inf(-1)
			for _, run := range curves[ci] {
				v := metric(run[t])
				s, l, h = s+v, min(l, v), max(h, v)
			}
			x := float64(curves[ci][0][t].matches)
			mean = append(mean, plotter.XY{X: x, Y: s / float64(len(curves[ci]))})
			lo, hi = append(lo, plotter.XY{X: x, Y: l}), append(hi, plotter.XY{X: x, Y: h})
		}
		ring := append(plotter.XYs{}, hi...)
		for j := len(lo) - 1; j >= 0; j-- {
			ring = append(ring, lo[j])
		}
		band, err := plotter.NewPolygon(ring)
		if err != nil {
			return err
		}
		r, g, b, _ := plotutil.Color(ci).RGBA()
		band.Color = colorA(r, g, b)
		band.LineStyle.Width = 0
		line, err := plotter.NewLine(mean)
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = plotutil.Color(ci), vg.Points(1.5), plotutil.Dashes(ci)
		pl.Add(band, line)
		pl.Legend.Add(fmt.Sprintf("%s (mean of %d, band min–max)", c.name, nseeds), line)
	}
	return save(pl, path)
}

func plotRatings(path string, ratings [][]float64, refs map[string]float64, every int64) error {
	pl := newPlot("Glicko-2 rating of the learner's greedy snapshots (seed 0)", "Glicko-2 rating (evaluation league)", false)
	for ci, c := range conditions {
		var xy plotter.XYs
		for k, r := range ratings[ci] {
			xy = append(xy, plotter.XY{X: float64(int64(k+1) * every), Y: r})
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = plotutil.Color(ci), vg.Points(1.5), plotutil.Dashes(ci)
		pl.Add(line)
		pl.Legend.Add(c.name, line)
	}
	last := float64(int64(len(ratings[0])) * every)
	for i, name := range []string{"minimax", "center-first", "random"} {
		line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: refs[name]}, {X: last, Y: refs[name]}})
		if err != nil {
			return err
		}
		line.Color, line.Dashes = plotutil.Color(3+i), []vg.Length{vg.Points(1), vg.Points(3)}
		pl.Add(line)
		pl.Legend.Add(name, line)
	}
	return save(pl, path)
}

func table(curves [][][]point, ratings [][]float64, refs map[string]float64) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| condition\t| exploitability (mean, min–max)\t| best exploitability seen\t| vs minimax\t| vs random\t| final snapshot Glicko-2\t|")
	for ci, c := range conditions {
		var final, best []float64
		vm, vr := 0.0, 0.0
		for _, run := range curves[ci] {
			p := run[len(run)-1]
			final = append(final, p.exploitability)
			b := math.Inf(1)
			for _, q := range run {
				b = min(b, q.exploitability)
			}
			best = append(best, b)
			vm += p.vsMinimax / float64(len(curves[ci]))
			vr += p.vsRandom / float64(len(curves[ci]))
		}
		fmt.Fprintf(tw, "| %s\t| %.3f (%.3f–%.3f)\t| %.3f\t| %+.3f\t| %+.3f\t| %.0f\t|\n", c.name, mean(final), slices.Min(final), slices.Max(final),
			mean(best), vm, vr, ratings[ci][len(ratings[ci])-1])
	}
	tw.Flush()
	var refNames []string
	for _, n := range []string{"minimax", "center-first", "random"} {
		refNames = append(refNames, fmt.Sprintf("%s %.0f", n, refs[n]))
	}
	fmt.Println("\nreference ratings in the evaluation league: " + strings.Join(refNames, ", "))
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func colorA(r, g, b uint32) color.NRGBA {
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x40}
}
