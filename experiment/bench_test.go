package experiment_test

import (
	"context"
	"flag"
	"testing"

	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// elFarolGrid is the El Farol grid: 4 sizes × 3 rewards × 3 seeds ×
// 1,000 weeks, about 3.4 million agent-turns, the command of
// docs/experiments/elfarol.md.
func elFarolGrid(b testing.TB, out string) experiment.Config {
	spec, err := learn.Parse("egreedy")
	if err != nil {
		b.Fatal(err)
	}
	return experiment.Config{
		Scenario:   elfarol.New(),
		Params:     map[string]string{"nights": "7", "capacity": "6"},
		Axes:       []experiment.Axis{{Param: "agents", Values: []string{"20", "60", "100", "200"}}},
		Allocators: []string{"team", "individual", "difference"},
		Learners:   []learn.Spec{spec},
		Seeds:      3,
		Seed:       1,
		Episodes:   1000,
		Out:        out,
	}
}

// BenchmarkElFarolGrid runs the whole grid per iteration, on every core,
// through the same engine, bus and allocators as every run, writing
// nothing: the time of the learning runs alone. agent-updates/s counts
// the turns learned, one per agent-turn: 3.42 million per grid.
// cpu-s/grid is the process's user+system CPU time per grid, the number
// a shared machine leaves comparable (wall time there measures the
// neighbours too).
func BenchmarkElFarolGrid(b *testing.B) {
	cfg := elFarolGrid(b, "")
	var updates int64
	cpu := cputime.Seconds()
	for b.Loop() {
		res, err := experiment.Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		updates += res.Updates
	}
	cpu = cputime.Seconds() - cpu
	secs := b.Elapsed().Seconds()
	b.ReportMetric(secs/float64(b.N), "s/grid")
	b.ReportMetric(float64(updates)/secs, "agent-updates/s")
	if cputime.Available {
		b.ReportMetric(cpu/float64(b.N), "cpu-s/grid")
	}
}

// BenchmarkElFarolGridWithOutputs adds writing the cells, metrics, plots
// and report: its cpu-s/grid less BenchmarkElFarolGrid's is what the
// outputs cost (with -png, PNG plots too).
func BenchmarkElFarolGridWithOutputs(b *testing.B) {
	cpu := cputime.Seconds()
	for b.Loop() {
		cfg := elFarolGrid(b, b.TempDir())
		cfg.PNG = *benchPNG
		if _, err := experiment.Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
	cpu = cputime.Seconds() - cpu
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/grid")
	if cputime.Available {
		b.ReportMetric(cpu/float64(b.N), "cpu-s/grid")
	}
}

var benchPNG = flag.Bool("png", false, "BenchmarkElFarolGridWithOutputs renders PNG plots too")

// BenchmarkElFarolGridDiagnosed is the grid with the credit diagnostics of
// docs/experiments/elfarol.md: 10 episodes per cell, 8 agents, 4
// counterfactuals of each kind. Its cpu-s/grid less the grid's is what the
// diagnostics cost.
func BenchmarkElFarolGridDiagnosed(b *testing.B) {
	cfg := elFarolGrid(b, "")
	cfg.Diagnose = experiment.Diagnose{Episodes: 10}
	cpu := cputime.Seconds()
	for b.Loop() {
		if _, err := experiment.Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
	if cputime.Available {
		b.ReportMetric((cputime.Seconds()-cpu)/float64(b.N), "cpu-s/grid")
	}
}
