package experiment

import (
	"context"
	"fmt"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/policies/learn"
)

// NashConv asks that each cell's learnt joint policy be measured exactly
// at the cell's end (league.NashConv): each side's best-response gain and
// their sum, for two-sided games small enough to search (tic-tac-toe,
// small Blotto, bargain). The learning roles play the learnt policy
// (CellNashConv.Policy says which); the other roles their fixed policies.
type NashConv struct {
	// Markov searches positions rather than histories
	// (league.Search.Markov): for games of perfect information whose
	// policies decide from the view, as tic-tac-toe's learners do.
	Markov bool `json:"markov,omitempty"`
	// MaxNodes bounds the search (league.Search.MaxNodes); 0 is
	// league.DefaultMaxNodes.
	MaxNodes int `json:"max_nodes,omitempty"`
}

// CellNashConv is a cell's NashConv measure, or why it has none.
type CellNashConv struct {
	// Policy is what the learning roles played: "distribution", the
	// learner's own action probabilities (a learner that implements
	// league.Distribution), or "greedy", its greedy snapshot
	// (learn.Snapshot.Greedy: its best actions, ties and unknown states
	// uniformly).
	Policy  string          `json:"policy"`
	Measure *league.Exploit `json:"measure,omitempty"`
	// Error says why the game could not be measured (not two-sided, too
	// large, no exact best response); the cell's other results stand.
	Error string `json:"error,omitempty"`
}

// nashConv measures cell c's joint policy at its end: policy with the
// learner replaced by what it learnt. The cell's run seed is the scenario
// seed and the policy seed of the search, which its result states.
func (p *plan) nashConv(ctx context.Context, c *cellPlan, params env.Params, policy env.PolicyFor, learner learn.Learner) (*CellNashConv, error) {
	out := &CellNashConv{Policy: "distribution"}
	var learnt agents.Policy = learner
	if _, ok := learner.(league.Distribution); !ok {
		out.Policy = "greedy"
		snap, err := learn.TakeSnapshot(p.specs[c.spec], learner)
		if err != nil {
			return nil, fmt.Errorf("cell %s: nashconv: %w", p.describe(c), err)
		}
		if learnt, err = snap.Greedy(learn.Options{State: p.cfg.State}); err != nil {
			return nil, fmt.Errorf("cell %s: nashconv: %w", p.describe(c), err)
		}
	}
	joint := func(s env.Seat) agents.Policy {
		if pol := policy(s); pol != learner {
			return pol
		}
		return learnt
	}
	search := league.Search{Seeds: []uint64{c.runSeed}, PolicySeed: c.runSeed, Markov: p.cfg.NashConv.Markov,
		MaxNodes: p.cfg.NashConv.MaxNodes, Limits: p.cfg.Limits}
	e, err := league.NashConv(ctx, p.cfg.Scenario, params, joint, search)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		out.Error = err.Error()
		return out, nil
	}
	out.Measure = e
	return out, nil
}

// nashConvTable renders, per row, the NashConv of its seeds' learnt joint
// policies and each side's gain; "" when none was asked for.
func (p *plan) nashConvTable(res *Result) string {
	if p.cfg.NashConv == nil || len(res.Rows) == 0 {
		return ""
	}
	var b strings.Builder
	search := "every history"
	if p.cfg.NashConv.Markov {
		search = "every position (the views of a game of perfect information)"
	}
	fmt.Fprintf(&b, "- **NashConv**: at the end of each cell, the learnt joint policy (the learning roles' %s, the other roles' fixed policies) measured exactly: "+
		"for each side, the value of its best response against the other side's policies minus its value when everyone plays them, searched over %s "+
		"from the cell's run seed (`league.NashConv`); the sum of the two gains is NashConv, 0 at a Nash equilibrium, and half of it the exploitability of a "+
		"two-player zero-sum game. Mean over seeds [95%% CI], each side's mean gain, and the seeds that could not be measured, with the first reason.\n\n",
		p.nashConvPolicy(res), search)
	var names [2]string
	for _, c := range res.Cells {
		if c.NashConv != nil && c.NashConv.Measure != nil {
			names = [2]string{c.NashConv.Measure.Sides[0].Name, c.NashConv.Measure.Sides[1].Name}
			break
		}
	}
	head := append(p.pointHead(), "reward", "NashConv [95% CI]", "gain of "+orDash(names[0]), "gain of "+orDash(names[1]), "not measured")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(head)) + "\n")
	for i, r := range res.Rows {
		var nc []float64
		var gains [2][]float64
		failed, why := 0, ""
		for _, c := range res.Cells[i*p.cfg.Seeds : (i+1)*p.cfg.Seeds] {
			switch {
			case c.NashConv == nil:
				failed++
			case c.NashConv.Measure == nil:
				failed++
				if why == "" {
					why = c.NashConv.Error
				}
			default:
				m := c.NashConv.Measure
				nc = append(nc, m.NashConv)
				gains[0] = append(gains[0], m.Sides[0].Gain())
				gains[1] = append(gains[1], m.Sides[1].Gain())
			}
		}
		cells := append(p.pointCells(i), "`"+r.Allocator+"`")
		if len(nc) == 0 {
			cells = append(cells, "–", "–", "–")
		} else {
			s := withCI(nc, statsSeed(p.cfg.Seed, 6, i))
			cells = append(cells, fmt.Sprintf("%.4g [%.4g, %.4g]", s.Mean, s.CILow, s.CIHigh),
				fmt.Sprintf("%.4g", summarise(gains[0]).Mean), fmt.Sprintf("%.4g", summarise(gains[1]).Mean))
		}
		miss := fmt.Sprintf("%d of %d", failed, p.cfg.Seeds)
		if why != "" {
			miss += ": " + strings.ReplaceAll(why, "|", "\\|")
		}
		cells = append(cells, miss)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// nashConvPolicy names what the learning roles played in the measures.
func (p *plan) nashConvPolicy(res *Result) string {
	for _, c := range res.Cells {
		if c.NashConv != nil && c.NashConv.Policy == "distribution" {
			return "action probabilities"
		}
	}
	return "greedy policies (`learn.Snapshot.Greedy`: ties and unknown states uniformly)"
}

// orDash is s, or "–" for "".
func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
