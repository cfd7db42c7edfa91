package experiment

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CostRow compares one point, learner and allocator at equal cost: an
// allocator that re-simulates (difference rewards, Shapley, COMA) or
// tree-samples buys its credit with environment steps, and a comparison
// by episodes hides that price.
type CostRow struct {
	Point     []string
	Learner   string
	Allocator string
	// Total is, per seed, the cell's whole cost in logical environment
	// steps (Cell.Cost's last value).
	Total      []float64
	TotalStats Stats
	// Budget is the common cost budget of the row's point and learner:
	// the smallest Total of any seed of any allocator compared there.
	Budget float64
	// AtBudget is, per seed, the metric at Budget (AtCost): the mean of
	// the cell's curve against cost over the last Window/Episodes of the
	// budget (a tenth by default), as the final result is over the last
	// Window episodes.
	AtBudget      []float64
	AtBudgetStats Stats
}

// AtCost is the metric of a cell at cumulative cost budget: the mean of
// its curve against cost over the last share of the budget, the cost
// interval (budget·(1−share), budget], as the final result is the mean
// over the last Window episodes. Episode e holds the curve at its metric
// over the cost it spent, (Cost[e−1], Cost[e]], so it weighs by its cost
// within the interval, an episode across an end by its part: a cell whose
// episodes cost alike gets the mean of its episodes in the interval. A
// budget within one episode's cost gives that episode's value.
func (c *Cell) AtCost(budget, share float64) float64 {
	n := min(len(c.Cost), len(c.Team))
	if n == 0 {
		return math.NaN()
	}
	lo := budget * (1 - min(max(share, 0), 1))
	sum, span, spent := 0.0, 0.0, 0.0
	for e := range n {
		cost := float64(c.Cost[e])
		if a, b := max(spent, lo), min(cost, budget); b > a {
			sum += c.Ratio(e) * (b - a)
			span += b - a
		}
		if cost >= budget || e == n-1 {
			if span == 0 {
				return c.Ratio(e)
			}
			break
		}
		spent = cost
	}
	return sum / span
}

// costRows compares the cells at equal cost, one row per point, learner
// and allocator in grid order, as Rows.
func (p *plan) costRows(cells []*Cell) []CostRow {
	rows := make([]CostRow, len(p.points)*len(p.specs)*len(p.allocs))
	budgets := make([]float64, len(p.points)*len(p.specs))
	for i := range budgets {
		budgets[i] = math.Inf(1)
	}
	for _, c := range p.cells {
		cell := cells[c.index]
		r := &rows[p.row(c.point, c.spec, c.alloc)]
		if r.Allocator == "" {
			r.Point, r.Learner, r.Allocator = p.points[c.point].values, p.specNames[c.spec], p.allocs[c.alloc]
		}
		total := 0.0
		if n := len(cell.Cost); n > 0 {
			total = float64(cell.Cost[n-1])
		}
		r.Total = append(r.Total, total)
		b := &budgets[c.point*len(p.specs)+c.spec]
		*b = min(*b, total)
	}
	for _, c := range p.cells {
		r := &rows[p.row(c.point, c.spec, c.alloc)]
		r.Budget = budgets[c.point*len(p.specs)+c.spec]
		r.AtBudget = append(r.AtBudget, cells[c.index].AtCost(r.Budget, float64(p.window)/float64(p.cfg.Episodes)))
	}
	for i := range rows {
		r := &rows[i]
		r.TotalStats = summarise(r.Total)
		r.AtBudgetStats = withCI(r.AtBudget, statsSeed(p.cfg.Seed, 6, i))
	}
	return rows
}

// costCSV writes the comparison at equal cost: per point, learner and
// allocator, the cells' total cost across seeds, the common budget and
// the metric at it.
func (p *plan) costCSV(res *Result) ([]byte, error) {
	header := append(p.leadHeader(true), "metric", "seeds", "cost_mean", "cost_min", "cost_max", "budget")
	header = append(header, statsHeader("at_budget")...)
	return writeCSV(header, func(emit func([]string) error) error {
		for i, r := range res.Costs {
			pi, li, ai := p.rowAt(i)
			rec := append(p.lead(pi, li, ai), res.Metric, strconv.Itoa(len(r.Total)),
				ftoa(r.TotalStats.Mean), ftoa(r.TotalStats.Min), ftoa(r.TotalStats.Max), ftoa(r.Budget))
			rec = append(rec, statsFields(r.AtBudgetStats)...)
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// costTable renders the comparison at equal cost for the report.
func (p *plan) costTable(res *Result) string {
	var b strings.Builder
	m := res.Metric
	head := append(p.pointHead(), "reward", "cost per seed (steps), mean", "min – max", "budget", fmt.Sprintf("%s at budget [95%% CI]", m), "min – max")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Costs {
		t, a := r.TotalStats, r.AtBudgetStats
		cells := append(p.pointCells(i), "`"+r.Allocator+"`",
			fmt.Sprintf("%.0f", t.Mean), fmt.Sprintf("%.0f – %.0f", t.Min, t.Max), fmt.Sprintf("%.0f", r.Budget),
			fmt.Sprintf("%.3f [%.3f, %.3f]", a.Mean, a.CILow, a.CIHigh), fmt.Sprintf("%.3f – %.3f", a.Min, a.Max))
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// costCurveOf is one cell's metric in bins of episodes (curveOf), each bin
// placed at the cumulative cost at its end rather than its episode count.
func costCurveOf(cell *Cell) (x, y []float64) {
	ex, y := curveOf(cell)
	x = make([]float64, len(ex))
	for j, e := range ex {
		if k := int(e) - 1; k >= 0 && k < len(cell.Cost) {
			x[j] = float64(cell.Cost[k])
		}
	}
	return x, y
}

// onGrid resamples the curves (x[s], y[s]) of the seeds at common costs:
// maxPoints costs from the latest of the seeds' first points to the
// earliest of their last ones, each seed's value there linear between
// its two points around it. No grid when the seeds' costs do not overlap.
func onGrid(xs, ys [][]float64) (grid []float64, out [][]float64) {
	lo, hi := math.Inf(-1), math.Inf(1)
	for _, x := range xs {
		if len(x) == 0 {
			return nil, nil
		}
		lo, hi = max(lo, x[0]), min(hi, x[len(x)-1])
	}
	if !(hi >= lo) {
		return nil, nil
	}
	n := maxPoints
	if hi == lo {
		n = 1
	}
	grid = make([]float64, n)
	for j := range grid {
		if n > 1 {
			grid[j] = lo + (hi-lo)*float64(j)/float64(n-1)
		} else {
			grid[j] = lo
		}
	}
	out = make([][]float64, len(xs))
	for s, x := range xs {
		out[s] = make([]float64, n)
		k := 0
		for j, g := range grid {
			for k < len(x)-1 && x[k+1] < g {
				k++
			}
			switch {
			case k == len(x)-1 || x[k+1] == x[k] || g <= x[k]:
				out[s][j] = ys[s][k]
			default:
				f := (g - x[k]) / (x[k+1] - x[k])
				out[s][j] = ys[s][k] + f*(ys[s][k+1]-ys[s][k])
			}
		}
	}
	return grid, out
}

// shareText names a share of the budget for the report: "tenth" for
// 0.1, else a percentage.
func shareText(share float64) string {
	if share == 0.1 {
		return "tenth"
	}
	return strconv.FormatFloat(100*share, 'g', 3, 64) + "%"
}
