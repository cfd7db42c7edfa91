package experiment

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
)

// The files an experiment writes under Out, besides the cells.
const (
	EpisodesCSV  = "episodes.csv"
	EpisodesJSON = "episodes.json"
	ResultsCSV   = "results.csv"
	ResultsJSON  = "results.json"
	ReportMD     = "report.md"
)

// writeOutputs writes the metrics, the plots and the report, and returns
// their names relative to Out.
func (p *plan) writeOutputs(res *Result) ([]string, error) {
	var files []string
	write := func(name string, data []byte) error {
		if err := writeAtomic(filepath.Join(p.cfg.Out, name), data); err != nil {
			return err
		}
		files = append(files, name)
		return nil
	}
	outputs := []struct {
		name string
		make func(*Result) ([]byte, error)
	}{
		{EpisodesCSV, p.episodesCSV},
		{EpisodesJSON, p.episodesJSON},
		{ResultsCSV, p.resultsCSV},
		{ResultsJSON, p.resultsJSON},
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

// episodesCSV has one line per cell and episode: the axis values, the
// allocator, the seed, the episode, G, G/G* (when known) and the mean
// reward the samples got.
func (p *plan) episodesCSV(res *Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	known := res.Metric == "G/G*"
	header := p.axisNames()
	header = append(header, "allocator", "seed", "episode", "team")
	if known {
		header = append(header, "ratio")
	}
	header = append(header, "reward")
	if err := w.Write(header); err != nil {
		return nil, err
	}
	for _, c := range p.cells {
		cell := res.Cells[c.index]
		lead := append(append([]string(nil), p.points[c.point].values...), cell.Allocator, strconv.Itoa(cell.Seed))
		for e := range cell.Team {
			rec := append(lead[:len(lead):len(lead)], strconv.Itoa(e), ftoa(cell.Team[e]))
			if known {
				rec = append(rec, ftoa(cell.Ratio(e)))
			}
			rec = append(rec, ftoa(cell.Reward[e]))
			if err := w.Write(rec); err != nil {
				return nil, err
			}
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

func (p *plan) axisNames() []string {
	names := make([]string, len(p.cfg.Axes))
	for i, a := range p.cfg.Axes {
		names[i] = a.Param
	}
	return names
}

// episodesJSON holds every cell, its configuration and its per-episode
// series.
func (p *plan) episodesJSON(res *Result) ([]byte, error) {
	doc := struct {
		Scenario string   `json:"scenario"`
		Metric   string   `json:"metric"`
		Axes     []string `json:"axes"`
		Cells    []*Cell  `json:"cells"`
	}{p.name, res.Metric, p.axisNames(), res.Cells}
	data, err := json.Marshal(doc)
	return append(data, '\n'), err
}

// resultsCSV has one line per point and allocator.
func (p *plan) resultsCSV(res *Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	header := append(p.axisNames(), "allocator", "seeds", "final_mean", "final_std", "final_min", "final_max", "overall_mean", "overall_std")
	if err := w.Write(header); err != nil {
		return nil, err
	}
	for _, r := range res.Rows {
		f, o := r.FinalStats, r.OverallStats
		rec := append(append([]string(nil), r.Point...), r.Allocator, strconv.Itoa(f.N),
			ftoa(f.Mean), ftoa(f.Std), ftoa(f.Min), ftoa(f.Max), ftoa(o.Mean), ftoa(o.Std))
		if err := w.Write(rec); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// resultsJSON is the results table with each seed's values.
func (p *plan) resultsJSON(res *Result) ([]byte, error) {
	type row struct {
		Point     map[string]string `json:"point"`
		Allocator string            `json:"allocator"`
		Final     []float64         `json:"final"`
		Overall   []float64         `json:"overall"`
		FinalS    Stats             `json:"final_stats"`
		OverallS  Stats             `json:"overall_stats"`
	}
	doc := struct {
		Scenario string            `json:"scenario"`
		Params   map[string]string `json:"params"`
		Learner  string            `json:"learner"`
		Metric   string            `json:"metric"`
		Episodes int               `json:"episodes"`
		Window   int               `json:"window"`
		Seeds    int               `json:"seeds"`
		Rows     []row             `json:"rows"`
	}{p.name, p.cfg.Params, p.cfg.Learner.String(), res.Metric, p.cfg.Episodes, p.window, p.cfg.Seeds, nil}
	for _, r := range res.Rows {
		pt := map[string]string{}
		for i, a := range p.cfg.Axes {
			pt[a.Param] = r.Point[i]
		}
		doc.Rows = append(doc.Rows, row{pt, r.Allocator, r.Final, r.Overall, r.FinalStats, r.OverallStats})
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	return append(data, '\n'), err
}
