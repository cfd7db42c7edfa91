package experiment

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// The files an experiment writes under Out, besides the cells.
const (
	EpisodesCSV    = "episodes.csv"
	EpisodesJSON   = "episodes.json"
	ResultsCSV     = "results.csv"
	ResultsJSON    = "results.json"
	FinalsCSV      = "finals.csv"
	ComparisonsCSV = "comparisons.csv"
	CreditCSV      = "credit.csv"
	ModesCSV       = "modes.csv"
	CostCSV        = "cost.csv"
	SweepCSV       = "sweep.csv" // written for a sweep of learners only
	ReportMD       = "report.md"
)

// writeOutputs writes the metrics, the plots and the report, and returns
// their names relative to Out.
func (p *plan) writeOutputs(res *Result) ([]string, error) {
	var files []string
	write := func(name string, data []byte) error {
		if err := writeAtomic(p.cfg.FS, filepath.Join(p.cfg.Out, name), data); err != nil {
			return err
		}
		files = append(files, name)
		return nil
	}
	type output struct {
		name string
		make func(*Result) ([]byte, error)
	}
	outputs := []output{
		{EpisodesCSV, p.episodesCSV},
		{EpisodesJSON, p.episodesJSON},
		{ResultsCSV, p.resultsCSV},
		{ResultsJSON, p.resultsJSON},
		{FinalsCSV, p.finalsCSV},
		{ComparisonsCSV, p.comparisonsCSV},
		{CreditCSV, p.creditCSV},
		{ModesCSV, p.modesCSV},
		{CostCSV, p.costCSV},
	}
	if len(p.specs) > 1 {
		outputs = append(outputs, output{SweepCSV, p.sweepCSV})
	}
	for _, o := range outputs {
		data, err := o.make(res)
		if err != nil {
			return files, fmt.Errorf("%s: %w", o.name, err)
		}
		if err := write(o.name, data); err != nil {
			return files, err
		}
	}
	plots, err := p.plots(res)
	if err != nil {
		return files, err
	}
	for _, pl := range plots {
		for _, f := range pl.files {
			if err := write(f.name, f.data); err != nil {
				return files, err
			}
		}
	}
	if err := write(ReportMD, p.report(res, plots)); err != nil {
		return files, err
	}
	return files, nil
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// paramNames are the scenario parameters every point sets (its axes, the
// fixed ones and the defaults), sorted: the parameter columns of the CSV
// files.
func (p *plan) paramNames() []string {
	if len(p.points) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(p.points[0].params.Map()))
}

// leadHeader heads the columns every tidy CSV file starts with: the
// scenario, every scenario parameter, the learner and the run's shape; with
// alloc, the allocator.
func (p *plan) leadHeader(alloc bool) []string {
	h := append([]string{"scenario"}, p.paramNames()...)
	h = append(h, "learner", "episodes", "group", "window", "root_seed")
	if alloc {
		h = append(h, "allocator")
	}
	return h
}

// lead is the leading columns of point pi and learner li (and allocator
// ai, when ≥ 0).
func (p *plan) lead(pi, li, ai int) []string {
	m := p.points[pi].params.Map()
	rec := []string{p.name}
	for _, k := range p.paramNames() {
		rec = append(rec, m[k])
	}
	rec = append(rec, p.specNames[li], strconv.Itoa(p.cfg.Episodes), strconv.Itoa(p.group()), strconv.Itoa(p.window), strconv.FormatUint(p.cfg.Seed, 10))
	if ai >= 0 {
		rec = append(rec, p.allocs[ai])
	}
	return rec
}

// gStar is point pi's G* as a CSV field: empty when unknown.
func (p *plan) gStar(pi int) string {
	if !p.points[pi].known {
		return ""
	}
	return ftoa(p.points[pi].optimum)
}

// writeCSV renders a header and records.
func writeCSV(header []string, each func(emit func([]string) error) error) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(header); err != nil {
		return nil, err
	}
	if err := each(w.Write); err != nil {
		return nil, err
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// episodesCSV has one line per cell and episode: the lead columns, the
// seed, the episode, G (column team; with a compared side, the side's
// reward, column team_SIDE), G* and G/G* (empty when G* is unknown) and
// the mean reward the samples got.
//
// It is the largest output (a line per episode of every cell), so it is
// appended by hand: the lead columns, which may need quoting, are rendered
// once per cell by encoding/csv, and the numbers, which never do, are
// appended after them. The bytes are encoding/csv's (the golden files
// hold them); the cost is a fifth of writing every field through it.
func (p *plan) episodesCSV(res *Result) ([]byte, error) {
	g := "team"
	if p.cfg.Side != "" {
		g = "team_" + p.cfg.Side // the compared side's own reward, not the sum
	}
	header := append(p.leadHeader(true), "seed", "episode", g, "g_star", "ratio", "reward", "cost")
	metrics := p.metricNames(res)
	header = append(header, metrics...)
	// A line is its lead and at most 25 bytes per number: the buffer is
	// sized once, not grown through copies of megabytes.
	rows := 0
	for _, cell := range res.Cells {
		rows += len(cell.Team)
	}
	buf, err := csvLine(make([]byte, 0, rows*(64+25*(6+len(metrics)))), header)
	if err != nil {
		return nil, err
	}
	for _, c := range p.cells {
		cell := res.Cells[c.index]
		lead, err := csvLine(nil, append(p.lead(c.point, c.spec, c.alloc), strconv.Itoa(cell.Seed)))
		if err != nil {
			return nil, err
		}
		lead = lead[:len(lead)-1] // its newline
		gs := p.gStar(c.point)
		for e := range cell.Team {
			buf = append(buf, lead...)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(e), 10)
			buf = append(buf, ',')
			buf = c.json.number(buf, e, 0, cell.Team[e])
			buf = append(buf, ',')
			buf = append(buf, gs...)
			buf = append(buf, ',')
			if gs != "" {
				buf = appendFtoa(buf, cell.Ratio(e))
			}
			buf = append(buf, ',')
			buf = c.json.number(buf, e, 1, cell.Reward[e])
			buf = append(buf, ',')
			if e < len(cell.Cost) {
				buf = strconv.AppendInt(buf, cell.Cost[e], 10)
			}
			for m := range metrics {
				buf = append(buf, ',')
				if m < len(cell.Metrics) {
					buf = appendFtoa(buf, cell.Metrics[m][e])
				}
			}
			buf = append(buf, '\n')
		}
	}
	return buf, nil
}

// csvLine appends record as encoding/csv writes it, newline included.
func csvLine(dst []byte, record []string) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(record); err != nil {
		return nil, err
	}
	w.Flush()
	return append(dst, b.Bytes()...), w.Error()
}

func (p *plan) axisNames() []string {
	names := make([]string, len(p.cfg.Axes))
	for i, a := range p.cfg.Axes {
		names[i] = a.Param
	}
	return names
}

// episodesJSON holds every cell, its configuration and its per-episode
// series: the encoding of
//
//	struct {
//		Scenario string   `json:"scenario"`
//		Metric   string   `json:"metric"`
//		Axes     []string `json:"axes"`
//		Cells    []*Cell  `json:"cells"`
//	}
//
// with the cells' encodings spliced in where this Run wrote their files
// (json.Marshal encodes a cell alike alone and in a list), so that the
// per-episode series, most of the bytes, are encoded once.
func (p *plan) episodesJSON(res *Result) ([]byte, error) {
	head, err := json.Marshal(struct {
		Scenario string   `json:"scenario"`
		Metric   string   `json:"metric"`
		Axes     []string `json:"axes"`
	}{p.name, res.Metric, p.axisNames()})
	if err != nil {
		return nil, err
	}
	datas := make([][]byte, len(p.cells))
	size := len(head) + 16
	for i, c := range p.cells {
		if c.json != nil {
			datas[i] = c.json.data
		} else if datas[i], err = json.Marshal(res.Cells[c.index]); err != nil {
			return nil, err
		}
		size += len(datas[i]) + 1
	}
	// Sized once: the cells are megabytes, and growing the buffer by
	// doubling would copy them again and again.
	buf := append(make([]byte, 0, size), head[:len(head)-1]...)
	buf = append(buf, `,"cells":[`...)
	for i, data := range datas {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, data...)
	}
	return append(buf, "]}\n"...), nil
}

func statsFields(s Stats) []string {
	return []string{ftoa(s.Mean), ftoa(s.CILow), ftoa(s.CIHigh), ftoa(s.Std), ftoa(s.Median), ftoa(s.Min), ftoa(s.Max)}
}

func statsHeader(prefix string) []string {
	var h []string
	for _, f := range []string{"mean", "ci_low", "ci_high", "std", "median", "min", "max"} {
		h = append(h, prefix+"_"+f)
	}
	return h
}

// resultsCSV has one line per point and allocator: the lead columns, the
// metric, G*, the number of seeds, and the summaries across seeds of the
// final and overall results and of the lock-in.
func (p *plan) resultsCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "metric", "g_star", "seeds")
	header = append(header, statsHeader("final")...)
	header = append(header, "final_modes")
	header = append(header, statsHeader("overall")...)
	header = append(header, statsHeader("locked_in")...)
	header = append(header, statsHeader("factoredness")...)
	header = append(header, statsHeader("learnability")...)
	header = append(header, "signal_std_mean", "credit_spread_mean")
	metrics := p.metricNames(res)
	for _, m := range metrics {
		header = append(header, "final_"+m)
	}
	orEmpty := func(ok bool, s Stats) []string {
		if !ok {
			return make([]string, 7)
		}
		return statsFields(s)
	}
	return writeCSV(header, func(emit func([]string) error) error {
		for i, r := range res.Rows {
			pi, li, ai := p.rowAt(i)
			rec := append(p.lead(pi, li, ai), res.Metric, p.gStar(pi), strconv.Itoa(r.FinalStats.N))
			rec = append(rec, statsFields(r.FinalStats)...)
			rec = append(rec, strconv.Itoa(len(r.Modes)))
			rec = append(rec, statsFields(r.OverallStats)...)
			rec = append(rec, orEmpty(r.LockedIn != nil, r.LockedInStats)...)
			d := r.Diagnostics
			rec = append(rec, orEmpty(d != nil && d.Factoredness.N > 0, statsOf(d, true))...)
			rec = append(rec, orEmpty(d != nil && d.Learnability.N > 0, statsOf(d, false))...)
			rec = append(rec, ftoa(r.Signal.Mean), ftoa(r.Spread.Mean))
			for m := range metrics {
				v := ""
				if m < len(r.FinalMetrics) {
					v = ftoa(r.FinalMetrics[m])
				}
				rec = append(rec, v)
			}
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// statsOf returns d's factoredness (f) or learnability summary.
func statsOf(d *RowDiagnostics, f bool) Stats {
	if d == nil {
		return Stats{}
	}
	if f {
		return d.Factoredness
	}
	return d.Learnability
}

// metricNames are the scenario's episode metrics, those of the first row
// that has them (the points of a grid share their names when they share
// the parameters the names depend on; a grid over El Farol's nights has
// the longest list last).
func (p *plan) metricNames(res *Result) []string {
	var names []string
	for _, r := range res.Rows {
		if len(r.MetricNames) > len(names) {
			names = r.MetricNames
		}
	}
	return names
}

// creditCSV has one line per cell and learning agent: the mean reward of
// the agent's samples over the final window.
func (p *plan) creditCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "seed", "agent", "mean_credit")
	return writeCSV(header, func(emit func([]string) error) error {
		for _, c := range p.cells {
			cell := res.Cells[c.index]
			if cell.Credit == nil {
				continue
			}
			lead := append(p.lead(c.point, c.spec, c.alloc), strconv.Itoa(cell.Seed))
			for a, id := range cell.Credit.Agents {
				rec := append(lead[:len(lead):len(lead)], id, ftoa(cell.Credit.Mean[a]))
				if err := emit(rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// finalsCSV has one line per cell: each seed's final and overall result
// and its lock-in, the data of the strip plots.
func (p *plan) finalsCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "seed", "run_seed", "metric", "final", "overall", "locked_in")
	return writeCSV(header, func(emit func([]string) error) error {
		for i, r := range res.Rows {
			pi, li, ai := p.rowAt(i)
			for s := range r.Final {
				lock := ""
				if r.LockedIn != nil {
					lock = ftoa(r.LockedIn[s])
				}
				rec := append(p.lead(pi, li, ai), strconv.Itoa(s), strconv.FormatUint(seeds.Mix(p.cfg.Seed, uint64(s)), 10), res.Metric, ftoa(r.Final[s]), ftoa(r.Overall[s]), lock)
				if err := emit(rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// comparisonsCSV has one line per paired comparison.
func (p *plan) comparisonsCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(false), "metric", "allocator_a", "allocator_b", "seeds", "diff", "ci_low", "ci_high", "wins", "ties", "p_t", "p_sign_flip", "p_holm", "cohen_dz")
	k := len(p.allocs)
	return writeCSV(header, func(emit func([]string) error) error {
		per := k * (k - 1) / 2
		for i, c := range res.Comparisons {
			pl := i / max(per, 1) // the comparison's point and learner
			rec := append(p.lead(pl/len(p.specs), pl%len(p.specs), -1), res.Metric, c.A, c.B, strconv.Itoa(c.N), ftoa(c.Diff), ftoa(c.CILow), ftoa(c.CIHigh),
				strconv.Itoa(c.Wins), strconv.Itoa(c.Ties), ftoa(c.PT), ftoa(c.PSign), ftoa(c.PHolm), ftoa(float64(c.D)))
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// resultsJSON is the results table with each seed's values and the paired
// comparisons.
func (p *plan) resultsJSON(res *Result) ([]byte, error) {
	type row struct {
		Point     map[string]string  `json:"point"`
		Learner   string             `json:"learner"`
		Allocator string             `json:"allocator"`
		Final     []float64          `json:"final"`
		Overall   []float64          `json:"overall"`
		LockedIn  []float64          `json:"locked_in,omitempty"`
		FinalS    Stats              `json:"final_stats"`
		Modes     []Mode             `json:"final_modes"`
		OverallS  Stats              `json:"overall_stats"`
		LockedInS *Stats             `json:"locked_in_stats,omitempty"`
		Diag      *RowDiagnostics    `json:"diagnostics,omitempty"`
		Signal    Stats              `json:"signal_std"`
		Spread    Stats              `json:"credit_spread"`
		Metrics   map[string]float64 `json:"final_metrics,omitempty"`
	}
	type comparison struct {
		Point map[string]string `json:"point"`
		Comparison
	}
	type sweep struct {
		Point map[string]string `json:"point"`
		SweepRow
	}
	type ordering struct {
		Point map[string]string `json:"point"`
		Ordering
	}
	doc := struct {
		Scenario    string            `json:"scenario"`
		Params      map[string]string `json:"params"`
		Learners    []string          `json:"learners"`
		Metric      string            `json:"metric"`
		Episodes    int               `json:"episodes"`
		Group       int               `json:"group"`
		Window      int               `json:"window"`
		Seeds       int               `json:"seeds"`
		RootSeed    uint64            `json:"root_seed"`
		Confidence  float64           `json:"confidence"`
		Rows        []row             `json:"rows"`
		Comparisons []comparison      `json:"comparisons"`
		Sweep       []sweep           `json:"sweep,omitempty"`
		Orderings   []ordering        `json:"orderings,omitempty"`
	}{p.name, p.cfg.Params, p.specNames, res.Metric, p.cfg.Episodes, p.group(), p.window, p.cfg.Seeds, p.cfg.Seed, Confidence, nil, nil, nil, nil}
	point := func(values []string) map[string]string {
		pt := map[string]string{}
		for i, a := range p.cfg.Axes {
			pt[a.Param] = values[i]
		}
		return pt
	}
	for _, r := range res.Rows {
		rw := row{Point: point(r.Point), Learner: r.Learner, Allocator: r.Allocator, Final: r.Final, Overall: r.Overall, LockedIn: r.LockedIn,
			FinalS: r.FinalStats, Modes: r.Modes, OverallS: r.OverallStats, Diag: r.Diagnostics, Signal: r.Signal, Spread: r.Spread}
		if len(r.MetricNames) > 0 {
			rw.Metrics = map[string]float64{}
			for m, name := range r.MetricNames {
				rw.Metrics[name] = r.FinalMetrics[m]
			}
		}
		if r.LockedIn != nil {
			rw.LockedInS = &r.LockedInStats
		}
		doc.Rows = append(doc.Rows, rw)
	}
	for _, c := range res.Comparisons {
		doc.Comparisons = append(doc.Comparisons, comparison{point(c.Point), c})
	}
	for _, s := range res.Sweep {
		doc.Sweep = append(doc.Sweep, sweep{point(s.Point), s})
	}
	for _, o := range res.Orderings {
		doc.Orderings = append(doc.Orderings, ordering{point(o.Point), o})
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	return append(data, '\n'), err
}

// modesCSV has one line per mode of each row's final results (FindModes).
func (p *plan) modesCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "metric", "seeds", "mode", "mode_seeds", "mode_share", "mode_center", "mode_low", "mode_high")
	return writeCSV(header, func(emit func([]string) error) error {
		for i, r := range res.Rows {
			pi, li, ai := p.rowAt(i)
			lead := append(p.lead(pi, li, ai), res.Metric, strconv.Itoa(len(r.Final)))
			for k, m := range r.Modes {
				rec := append(lead[:len(lead):len(lead)], strconv.Itoa(k+1), strconv.Itoa(m.Seeds), ftoa(m.Share), ftoa(m.Center), ftoa(m.Low), ftoa(m.High))
				if err := emit(rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// sweepCSV has one line per point, allocator and learner of a sweep: the
// learner's mean final result, its rank among the allocators, and the
// allocator's best, median and worst over the sweep.
func (p *plan) sweepCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "metric", "g_star", "seeds", "final_mean", "rank", "learners", "best", "best_learner", "median", "worst", "worst_learner", "first_at")
	return writeCSV(header, func(emit func([]string) error) error {
		for i, s := range res.Sweep {
			pi, ai := i/len(p.allocs), i%len(p.allocs)
			for li := range p.specs {
				rec := append(p.lead(pi, li, ai), res.Metric, p.gStar(pi), strconv.Itoa(p.cfg.Seeds), ftoa(s.Means[li]), strconv.Itoa(s.Ranks[li]),
					strconv.Itoa(len(p.specs)), ftoa(s.Best), s.BestLearner, ftoa(s.Median), ftoa(s.Worst), s.WorstLearner, strconv.Itoa(s.Top))
				if err := emit(rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
