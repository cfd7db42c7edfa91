package experiment

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/trajectories"
)

// evaluationKey derives the evaluation episodes' run seed from a cell's,
// so that they are episodes the cell never trained on.
const evaluationKey = 0x65_76_61_6c // "eval"

// CellEvaluation is the metric of a cell's learnt policy, played at the
// cell's end (Config.Evaluate): the mean and standard deviation over its
// evaluation episodes of what the cell's series measure (G/G*, G, or the
// compared side's G).
type CellEvaluation struct {
	Episodes int     `json:"episodes"`
	Mean     float64 `json:"mean"`
	Std      float64 `json:"std"`
}

// evaluate plays cell c's learnt policy for Config.Evaluate episodes of
// their own seeds, without tree sampling, learning nothing and counting
// no cost: what the learner plays on its own. A tree-sampled cell's
// series measure its main lines, which keep the best of K candidates at
// every turn (a search's outcome); this is the learner's alone, measured
// the same way for every allocator.
func (p *plan) evaluate(ctx context.Context, c *cellPlan, cell *Cell, params env.Params, policy env.PolicyFor) (*CellEvaluation, error) {
	n := p.cfg.Evaluate
	values := make([]float64, 0, n)
	out := &trajectories.Output{Sink: trajectories.Discard, ObserveCredit: func(rec *episode.Record, _ *trajectories.Credit) error {
		v := rec.Score.Team
		if p.side >= 0 {
			v = rec.Score.Of(p.side)
		}
		if cell.Optimum != nil {
			v /= *cell.Optimum
		}
		values = append(values, v)
		return nil
	}}
	run := play.Config{
		Play:     env.Play{Scenario: p.cfg.Scenario, Params: params, Policy: policy, Limits: p.cfg.Limits, Emit: env.EmitRoles(p.learners...)},
		Episodes: n, GroupSize: 1, Seed: seeds.Mix1(c.runSeed, evaluationKey),
		Lockstep: true, FailFast: true,
	}
	if _, err := play.Run(ctx, run, out); err != nil {
		return nil, fmt.Errorf("cell %s: evaluate: %w", p.describe(c), err)
	}
	if len(values) != n {
		return nil, fmt.Errorf("cell %s: evaluate: %d of %d episodes played", p.describe(c), len(values), n)
	}
	m, v := meanVar(values)
	return &CellEvaluation{Episodes: n, Mean: m, Std: math.Sqrt(v)}, nil
}

// evaluationTable renders, per row, the mean over seeds of the cells'
// evaluations with its bootstrap CI; "" when none was asked for.
func (p *plan) evaluationTable(res *Result) string {
	if p.cfg.Evaluate <= 0 || len(res.Rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s of the learnt policy played on its own at the end of each cell: %d episodes of seeds no cell trained on, "+
		"without tree sampling, learning nothing and counting no cost; mean over seeds [95%% CI] and the seeds' range.\n\n", res.Metric, p.cfg.Evaluate)
	head := append(p.pointHead(), "reward", res.Metric+" [95% CI]", "min – max")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Rows {
		var xs []float64
		for _, c := range res.Cells[i*p.cfg.Seeds : (i+1)*p.cfg.Seeds] {
			if c.Evaluation != nil {
				xs = append(xs, c.Evaluation.Mean)
			}
		}
		cells := append(p.pointCells(i), "`"+r.Allocator+"`")
		if len(xs) == 0 {
			cells = append(cells, "–", "–")
		} else {
			s := withCI(xs, statsSeed(p.cfg.Seed, 8, i))
			cells = append(cells, fmt.Sprintf("%.4g [%.4g, %.4g]", s.Mean, s.CILow, s.CIHigh), fmt.Sprintf("%.4g – %.4g", s.Min, s.Max))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}
