package experiment

import (
	"context"
	"testing"

	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// BenchmarkElFarolOutputs writes the outputs of BenchmarkElFarolGrid's
// grid (4 sizes × 3 rewards × 3 seeds × 1,000 weeks), played once before
// the timer: the cell files, metrics, plots and report, what the
// command's --out costs beyond the grid. cpu-s/outputs is its user+system
// CPU time.
func BenchmarkElFarolOutputs(b *testing.B) {
	spec, err := learn.Parse("egreedy")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{
		Scenario:   elfarol.New(),
		Params:     map[string]string{"nights": "7", "capacity": "6"},
		Axes:       []Axis{{Param: "agents", Values: []string{"20", "60", "100", "200"}}},
		Allocators: []string{"team", "individual", "difference"},
		Learners:   []learn.Spec{spec},
		Seeds:      3,
		Seed:       1,
		Episodes:   1000,
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	cpu := cputime.Seconds()
	for b.Loop() {
		cfg.Out = b.TempDir()
		p, err := newPlan(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range p.cells {
			if c.json, err = writeCell(cfg.FS, cfg.Out, c.file, res.Cells[c.index]); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := p.writeOutputs(res); err != nil {
			b.Fatal(err)
		}
	}
	if cputime.Available {
		b.ReportMetric((cputime.Seconds()-cpu)/float64(b.N), "cpu-s/outputs")
	}
}
