package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Group, tree sampling and the episodes per cell are experiment-wide, so
// the arms one must compare at equal cost (a difference reward without
// groups, few episodes since each costs N+1 main lines; grpo with groups
// of 8; at-grpo with --tree 4) live in separate experiment directories.
// Compare reads them, checks that their seeds are paired (the same
// scenario, fixed parameters and scenario seeds), and compares every arm
// with a reference arm at equal cost and at equal episodes.

// Compare's output files, in CompareConfig.Out.
const (
	CompareCSV      = "compare.csv"
	CompareTestsCSV = "compare_tests.csv"
)

// ErrIncomparable is wrapped by the error of a Compare whose directories
// cannot be compared seed by seed: another scenario, other fixed
// parameters, other seeds, or an unfinished experiment. The error names
// the directory and what differs.
var ErrIncomparable = errors.New("the experiments cannot be compared")

// CompareSource is one experiment directory (what Run's Out holds) and the
// label of its arms.
type CompareSource struct {
	Dir string
	// Label names the directory's arms; empty, an arm is named by its
	// allocator, group and tree ("grpo (group 8)", "at-grpo (tree 4)").
	// A directory of several allocators or learners adds theirs to it.
	Label string
}

// ParseCompareSource parses DIR or DIR=LABEL.
func ParseCompareSource(s string) (CompareSource, error) {
	dir, label, labelled := strings.Cut(s, "=")
	if dir == "" || labelled && label == "" {
		return CompareSource{}, fmt.Errorf("%q: want DIR or DIR=LABEL", s)
	}
	return CompareSource{Dir: dir, Label: label}, nil
}

// CompareConfig configures Compare.
type CompareConfig struct {
	Sources []CompareSource
	// Out is the directory the comparison is written to; not one of the
	// sources.
	Out string
	// Reference is the label of the arm every other is compared with;
	// empty, the first arm.
	Reference string
	// Window is the final episodes averaged at the common episode count
	// E (0: a tenth of E); the view at equal cost averages the same share
	// of the budget (Cell.AtCost).
	Window int
	// Modes is the rule that clusters the seeds' values (FindModes).
	Modes ModeRule
	// Command is the command line, for the report.
	Command string
}

// Arm is one learner and allocator of one compared directory.
type Arm struct {
	Label     string `json:"label"`
	Dir       string `json:"dir"`
	Learner   string `json:"learner"`
	Allocator string `json:"allocator"`
	Group     int    `json:"group"`
	// Tree is the candidates per tree-sampled turn, 0 without.
	Tree     int `json:"tree"`
	Episodes int `json:"episodes"`
	// cells holds, per compared point and seed, the arm's cell.
	cells [][]*Cell
}

// Compare views: the metric at the common cost budget, and the final
// result at the common episode count.
const (
	ViewCost     = "cost"
	ViewEpisodes = "episodes"
)

// CompareRow is one arm's values at one point in one view, per seed.
type CompareRow struct {
	Point []string
	Arm   string
	// View is ViewCost, ViewEpisodes, or the name of a value each cell
	// holds once, at its end (cellFinals).
	View string
	// Budget is the common cost budget B (ViewCost) or episode count E
	// (ViewEpisodes); 0 for a cell's final value.
	Budget float64
	Values []float64
	Stats  Stats
	Modes  []Mode
}

// CompareTest is the paired comparison of an arm with the reference arm
// at one point in one view: Comparison.A is the arm, B the reference;
// PHolm adjusts PSign over the comparisons at the point, every view's.
type CompareTest struct {
	View   string
	Budget float64
	Comparison
}

// CompareResult is what Compare compared and found.
type CompareResult struct {
	Scenario string
	// Axes are the grid's parameters; Points the points every directory
	// holds, which are compared, in the first directory's order.
	Axes   []string
	Points [][]string
	Metric string
	Seeds  int
	Arms   []Arm
	// Reference is the reference arm's label.
	Reference string
	Rows      []CompareRow
	Tests     []CompareTest
	// Files are the files written, relative to Out.
	Files []string
}

// cellFinal is a value a cell holds once, for its end (not per episode),
// which Compare compares across arms as it does the metric: NaN where a
// cell has none: the share of the learner's rows locked in (learn.Lock),
// the factoredness (Config.Diagnose), the learnt policy's NashConv
// (Config.NashConv). A new such field of Cell is compared once it is
// listed here.
type cellFinal struct {
	name string
	of   func(*Cell) float64
}

func cellFinals() []cellFinal {
	return []cellFinal{
		{"locked_in", func(c *Cell) float64 {
			if c.Lock == nil {
				return math.NaN()
			}
			return c.Lock.LockedIn()
		}},
		{"factoredness", func(c *Cell) float64 {
			if c.Diagnostics == nil {
				return math.NaN()
			}
			return c.Diagnostics.Factoredness()
		}},
		{"nashconv", func(c *Cell) float64 {
			if c.NashConv == nil || c.NashConv.Measure == nil {
				return math.NaN()
			}
			return c.NashConv.Measure.NashConv
		}},
		{"evaluation", func(c *Cell) float64 {
			if c.Evaluation == nil {
				return math.NaN()
			}
			return c.Evaluation.Mean
		}},
	}
}

// compareSource is a source read: its manifest and its cells by key.
type compareSource struct {
	CompareSource
	m     manifest
	cells map[string]*Cell
}

// cellKey identifies a cell within its directory.
func cellKey(point []string, learner, allocator string, seed int) string {
	return strings.Join(point, "\x00") + "\x01" + learner + "\x01" + allocator + "\x01" + strconv.Itoa(seed)
}

// Compare reads the experiments in cfg.Sources, compares their arms at
// every grid point they share, at equal cost and at equal episodes, and
// writes the comparison to cfg.Out: compare.csv, compare_tests.csv, the
// learning curves of every arm against episodes and cost, and report.md.
// The same directories and settings give the same bytes.
func Compare(ctx context.Context, cfg CompareConfig) (*CompareResult, error) {
	if len(cfg.Sources) < 2 {
		return nil, badConfig("compare: give two experiment directories at least")
	}
	if cfg.Window < 0 {
		return nil, badConfig("compare: window %d: want 0 (a tenth) or more episodes", cfg.Window)
	}
	if err := cfg.Modes.check(); err != nil {
		return nil, err
	}
	if cfg.Out == "" {
		return nil, badConfig("compare: no output directory")
	}
	for _, s := range cfg.Sources {
		if filepath.Clean(s.Dir) == filepath.Clean(cfg.Out) {
			return nil, badConfig("compare: the output directory %s is one of the compared experiments", cfg.Out)
		}
	}
	srcs := make([]*compareSource, len(cfg.Sources))
	for i, s := range cfg.Sources {
		src, err := readManifest(s)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			if err := paired(srcs[0], src); err != nil {
				return nil, err
			}
		}
		srcs[i] = src
	}
	for _, src := range srcs {
		if err := src.readCells(); err != nil {
			return nil, err
		}
	}
	res := &CompareResult{Scenario: srcs[0].m.Scenario, Seeds: srcs[0].m.Seeds}
	for _, a := range srcs[0].m.Grid {
		res.Axes = append(res.Axes, a.Param)
	}
	res.Points = commonPoints(srcs)
	if len(res.Points) == 0 {
		return nil, fmt.Errorf("%w: %s and the others share no grid point", ErrIncomparable, srcs[0].Dir)
	}
	var err error
	if res.Arms, err = arms(srcs, res.Points); err != nil {
		return nil, err
	}
	if err := checkSeeds(res); err != nil {
		return nil, err
	}
	if res.Metric, err = compareMetric(srcs[0].m, res); err != nil {
		return nil, err
	}
	res.Reference = res.Arms[0].Label
	if cfg.Reference != "" {
		if !slices.ContainsFunc(res.Arms, func(a Arm) bool { return a.Label == cfg.Reference }) {
			labels := make([]string, len(res.Arms))
			for i, a := range res.Arms {
				labels[i] = strconv.Quote(a.Label)
			}
			return nil, badConfig("compare: reference %q is no arm; the arms are %s", cfg.Reference, strings.Join(labels, ", "))
		}
		res.Reference = cfg.Reference
	}
	if err := res.compare(cfg, srcs[0].m.Seed); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return res, res.write(cfg)
}

// readManifest reads a directory's manifest.
func readManifest(s CompareSource) (*compareSource, error) {
	path := filepath.Join(s.Dir, ManifestJSON)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s holds no experiment (no %s)", ErrIncomparable, s.Dir, ManifestJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	src := &compareSource{CompareSource: s, cells: map[string]*Cell{}}
	if err := json.Unmarshal(data, &src.m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrIncomparable, path, err)
	}
	if src.m.Version != manifestVersion {
		return nil, fmt.Errorf("%w: %s is of format %d, not %d: written by another version of troupe", ErrIncomparable, path, src.m.Version, manifestVersion)
	}
	return src, nil
}

// readCells reads the directory's cells, each of the experiment its
// manifest describes.
func (src *compareSource) readCells() error {
	dir := filepath.Join(src.Dir, cellsDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compare: %w", err)
	}
	for _, e := range entries { // in name order
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue // a temporary file of a write in flight
		}
		path := filepath.Join(dir, name)
		cell, err := readCell(nil, path, src.m.Episodes)
		if err == nil {
			err = cell.checkCost(path, src.m.Episodes)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIncomparable, err)
		}
		if cell.Scenario != src.m.Scenario || cell.Group != src.m.Group || !slices.Contains(src.m.Learners, cell.Learner) || !slices.Contains(src.m.Allocators, cell.Allocator) {
			return fmt.Errorf("%w: cell %s is not of the experiment %s holds", ErrIncomparable, path, filepath.Join(src.Dir, ManifestJSON))
		}
		point := make([]string, len(src.m.Grid))
		for i, a := range src.m.Grid {
			point[i] = cell.Params[a.Param]
		}
		src.cells[cellKey(point, cell.Learner, cell.Allocator, cell.Seed)] = cell
	}
	return nil
}

// paired checks that b's seeds are a's: the same scenario, fixed
// parameters, grid parameters, learning roles, fixed policies, side,
// limits, seeds and root seed. What the arms compare may differ: the
// learners, allocators, groups, tree sampling and episodes.
func paired(a, b *compareSource) error {
	axes := func(m manifest) []string {
		var names []string
		for _, ax := range m.Grid {
			names = append(names, ax.Param)
		}
		return names
	}
	fields := []struct {
		name string
		x, y any
	}{
		{"scenario", a.m.Scenario, b.m.Scenario},
		{"params", a.m.Params, b.m.Params},
		{"grid parameters", axes(a.m), axes(b.m)},
		{"learn", a.m.Learn, b.m.Learn},
		{"policies", a.m.Policies, b.m.Policies},
		{"side", a.m.Side, b.m.Side},
		{"side_allocators", a.m.SideAlloc, b.m.SideAlloc},
		{"limits", a.m.Limits, b.m.Limits},
		{"seeds", a.m.Seeds, b.m.Seeds},
		{"seed", a.m.Seed, b.m.Seed},
		{"custom_state", a.m.CustomState, b.m.CustomState},
	}
	var diffs []string
	for _, f := range fields {
		x, _ := json.Marshal(f.x)
		y, _ := json.Marshal(f.y)
		if string(x) != string(y) {
			diffs = append(diffs, fmt.Sprintf("%s %s, not %s", f.name, y, x))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s differs from %s: %s", ErrIncomparable, filepath.Join(b.Dir, ManifestJSON), filepath.Join(a.Dir, ManifestJSON), strings.Join(diffs, "; "))
	}
	return nil
}

// commonPoints are the grid points of the first source that every other
// holds, matched by their parameters' values, in the first's order (the
// first axis outermost, as Run's grid).
func commonPoints(srcs []*compareSource) [][]string {
	points := [][]string{{}}
	for _, ax := range srcs[0].m.Grid {
		var next [][]string
		for _, p := range points {
			for _, v := range ax.Values {
				next = append(next, append(slices.Clone(p), v))
			}
		}
		points = next
	}
	return slices.DeleteFunc(points, func(p []string) bool {
		for _, s := range srcs[1:] {
			for i, ax := range s.m.Grid {
				if !slices.Contains(ax.Values, p[i]) {
					return true
				}
			}
		}
		return false
	})
}

// arms lists every source's learners and allocators, each with its
// cells at the points, and labels them.
func arms(srcs []*compareSource, points [][]string) ([]Arm, error) {
	var out []Arm
	learners := map[string]bool{}
	for _, s := range srcs {
		for _, l := range s.m.Learners {
			learners[l] = true
		}
	}
	for _, s := range srcs {
		tree := 0
		if s.m.Tree != nil {
			tree = s.m.Tree.K
		}
		for _, l := range s.m.Learners {
			for _, alloc := range s.m.Allocators {
				a := Arm{Dir: s.Dir, Learner: l, Allocator: alloc, Group: s.m.Group, Tree: tree, Episodes: s.m.Episodes}
				a.Label = armLabel(s, a, len(learners) > 1)
				for _, pt := range points {
					cells := make([]*Cell, s.m.Seeds)
					for seed := range cells {
						cells[seed] = s.cells[cellKey(pt, l, alloc, seed)]
						if cells[seed] == nil {
							return nil, fmt.Errorf("%w: %s is unfinished: no cell for %s, learner %s, allocator %s, seed %d (finish it with troupe experiment --resume)",
								ErrIncomparable, s.Dir, describePoint(axesOf(s.m), pt), l, alloc, seed)
						}
					}
					a.cells = append(a.cells, cells)
				}
				out = append(out, a)
			}
		}
	}
	for i := range out {
		for j := range i {
			if out[i].Label == out[j].Label {
				return nil, badConfig("compare: the arms %s of %s and of %s are both labelled %q: label the directories (DIR=LABEL)",
					out[i].Allocator, out[j].Dir, out[i].Dir, out[i].Label)
			}
		}
	}
	return out, nil
}

// armLabel names an arm: its source's label (with the allocator when
// the source compares several), else its allocator with its group and
// tree; with the learner when the source sweeps learners, or, unlabelled,
// when the arms' learners differ.
func armLabel(s *compareSource, a Arm, learnersDiffer bool) string {
	label := s.Label
	if label == "" {
		label = a.Allocator
		var how []string
		if a.Group > 1 {
			how = append(how, fmt.Sprintf("group %d", a.Group))
		}
		if a.Tree > 0 {
			how = append(how, fmt.Sprintf("tree %d", a.Tree))
		}
		if len(how) > 0 {
			label += " (" + strings.Join(how, ", ") + ")"
		}
	} else if len(s.m.Allocators) > 1 {
		label += " · " + a.Allocator
	}
	if len(s.m.Learners) > 1 || s.Label == "" && learnersDiffer {
		label += ", " + a.Learner
	}
	return label
}

func axesOf(m manifest) []Axis {
	axes := make([]Axis, len(m.Grid))
	for i, a := range m.Grid {
		axes[i] = Axis(a)
	}
	return axes
}

// checkSeeds checks that seed s of every arm ran from the same seed at
// every point: the pairing the tests rely on.
func checkSeeds(res *CompareResult) error {
	ref := res.Arms[0]
	for _, a := range res.Arms[1:] {
		for pi := range res.Points {
			for s, c := range a.cells[pi] {
				if want := ref.cells[pi][s].RunSeed; c.RunSeed != want {
					return fmt.Errorf("%w: seed %d of %s (%s) ran from %d, that of %s (%s) from %d: unpaired seeds",
						ErrIncomparable, s, a.Label, a.Dir, c.RunSeed, ref.Label, ref.Dir, want)
				}
			}
		}
	}
	return nil
}

// compareMetric names the metric as Run does: the side's reward, G/G*
// where the cells know G*, else G.
func compareMetric(m manifest, res *CompareResult) (string, error) {
	if m.Side != "" {
		return "G_" + m.Side, nil
	}
	known := res.Arms[0].cells[0][0].Optimum != nil
	for _, a := range res.Arms {
		for _, cells := range a.cells {
			for _, c := range cells {
				if (c.Optimum != nil) != known {
					return "", fmt.Errorf("%w: the cells of %s and %s do not all know the optimum G*", ErrIncomparable, res.Arms[0].Dir, a.Dir)
				}
			}
		}
	}
	if known {
		return "G/G*", nil
	}
	return "G", nil
}

// compare fills the rows and tests: at every point, each arm's values
// at the common budget, at the common episode count, and its cells'
// final values, and the paired tests of every arm against the
// reference, Holm-adjusted over the point's tests.
func (res *CompareResult) compare(cfg CompareConfig, root uint64) error {
	episodes := res.Arms[0].Episodes
	for _, a := range res.Arms {
		episodes = min(episodes, a.Episodes)
	}
	window := cfg.Window
	if window == 0 {
		window = max(1, episodes/10)
	}
	if window > episodes {
		return badConfig("compare: window %d is longer than the %d episodes every arm played", window, episodes)
	}
	share := float64(window) / float64(episodes)
	ref := slices.IndexFunc(res.Arms, func(a Arm) bool { return a.Label == res.Reference })
	for pi, pt := range res.Points {
		budget := math.Inf(1)
		for _, a := range res.Arms {
			for _, c := range a.cells[pi] {
				budget = min(budget, float64(c.Cost[len(c.Cost)-1]))
			}
		}
		views := []struct {
			name   string
			budget float64
			of     func(*Cell) float64
		}{
			{ViewCost, budget, func(c *Cell) float64 { return c.AtCost(budget, share) }},
			{ViewEpisodes, float64(episodes), func(c *Cell) float64 {
				sum := 0.0
				for e := episodes - window; e < episodes; e++ {
					sum += c.Ratio(e)
				}
				return sum / float64(window)
			}},
		}
		for _, f := range cellFinals() {
			views = append(views, struct {
				name   string
				budget float64
				of     func(*Cell) float64
			}{f.name, 0, f.of})
		}
		first := len(res.Tests)
		for _, v := range views {
			values := make([][]float64, len(res.Arms))
			complete := true
			for ai, a := range res.Arms {
				for _, c := range a.cells[pi] {
					x := v.of(c)
					complete = complete && !math.IsNaN(x) && !math.IsInf(x, 0)
					values[ai] = append(values[ai], x)
				}
			}
			if !complete {
				continue // a final value some cell lacks: not compared
			}
			for ai, a := range res.Arms {
				res.Rows = append(res.Rows, CompareRow{
					Point: pt, Arm: a.Label, View: v.name, Budget: v.budget, Values: values[ai],
					Stats: withCI(values[ai], statsSeed(root, 7, len(res.Rows))),
					Modes: FindModes(values[ai], cfg.Modes),
				})
			}
			for ai, a := range res.Arms {
				if ai == ref {
					continue
				}
				c := compare(values[ai], values[ref], statsSeed(root, 8, len(res.Tests)))
				c.Point, c.Learner, c.A, c.B = pt, a.Learner, a.Label, res.Reference
				res.Tests = append(res.Tests, CompareTest{View: v.name, Budget: v.budget, Comparison: c})
			}
		}
		at := make([]Comparison, len(res.Tests)-first)
		for i := range at {
			at[i] = res.Tests[first+i].Comparison
		}
		holm(at)
		for i := range at {
			res.Tests[first+i].PHolm = at[i].PHolm
		}
	}
	return nil
}
