package experiment

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/trajectories"
)

// Diagnose configures the credit diagnostics of every cell: Agogino &
// Tumer's factoredness and learnability of the cell's reward, estimated
// from sampled counterfactuals of some of its episodes. The zero value
// measures none.
//
// At each diagnosed episode z, for each sampled learning agent i, the
// diagnostics take Samples alternative actions a' of i (uniformly among
// its turn's other legal actions, or the other actions its role played
// when the turn has no legal list; every alternative once, in order, when
// there are no more than Samples of them, which makes the own-change
// measurements an exact enumeration) and Samples joint alternatives of
// the other learning agents (each drawn uniformly among its actions), and
// score the counterfactual episodes by the scenario's re-simulation with
// every other action as recorded (Episode.Replay with Replace), or asked
// again of their policies where the scenario declares that its agents
// answer each other (env.CounterfactualSpec.Resimulate: a decider must
// hear the changed advice). The allocator, a fresh instance of the cell's,
// rewards each counterfactual episode as it rewards a played one (its own
// counterfactuals are taken relative to it), in the group of the
// diagnosed episode; r_i is the mean reward of i's samples.
//
//   - factoredness: the share of own changes z → z' whose Δr_i and ΔG =
//     G(z') − G(z) have the same sign (both zero counting as agreeing).
//     1 means that whatever raises i's reward raises the team's. A change
//     within TieTolerance of the magnitudes involved counts as zero: a move
//     that only permutes a sum's terms (El Farol's patron moving from a
//     night of 10 to a night of 9) leaves G unchanged, yet floating-point
//     sums in another order differ in their last bits (ΔG = −1.78e-15
//     against G ≈ 14), which the exact sign would count as a change.
//   - learnability: Agogino & Tumer's per-state ratio of expectations,
//     averaged over the states measured. At each state (z, i), L_i(z) =
//     E|Δr_i| over changes of i's own action ÷ E|Δr_i| over changes of
//     the others' actions: how much of the reward's variation at z is i's
//     own doing. The team reward's is small in large teams: one agent's
//     move barely shows in G, the others' do. Each expectation is
//     estimated by its sample mean (the own one exactly when every
//     alternative is enumerated), and the ratio of the two means, which
//     overstates the ratio of the expectations by about CV²/Samples (CV
//     the coefficient of variation of the others' |Δr_i|: E[1/x̄] > 1/E[x];
//     12 to 65% with 4 samples on El Farol at random play), is corrected
//     to second order:
//     L̂ = (ā/b̄)·(1 − s_b²/(m·b̄²)), m the others' samples and s_b² their
//     variance. What bias remains is of order 1/m² (see
//     DefaultDiagnoseSamples). A state where neither kind of change moves
//     r_i says nothing and is left out; one where only i's own changes
//     move it has an unbounded ratio, which would swamp the mean: it is
//     counted apart (Diagnostics.Unbounded, reported as a share), and the
//     learnability is the mean over the finite states (+Inf when every
//     state measured is unbounded). Its interval
//     (Diagnostics.LearnabilityInterval) is the delta method's, over the
//     counterfactuals drawn at the states measured: it says how far the
//     estimate may be from the exact mean of those states' ratios, which
//     a larger Samples narrows; how the states themselves vary is the
//     spread across seeds (RowDiagnostics).
//
// A stateful allocator (trajectories.Sequential, such as rae) is not
// diagnosed: a fresh instance would not give the cell's rewards.
type Diagnose struct {
	// Episodes is how many episodes of each cell are diagnosed, spread
	// evenly from the first to the last; 0 diagnoses none.
	Episodes int
	// Agents is how many learning agents each diagnosed episode samples;
	// 0 means DefaultDiagnoseAgents.
	Agents int
	// Samples is the number of counterfactuals per agent and kind (own
	// action, others' actions); 0 means DefaultDiagnoseSamples, and at
	// least 2 are needed (the learnability's correction and interval use
	// the others' sample variance). The counterfactuals cost
	// Episodes × Agents × (Samples + the own alternatives, at most
	// Samples) re-simulations, each allocated.
	Samples int
}

// Defaults of Diagnose. DefaultDiagnoseSamples puts the learnability's
// bias (see Diagnose) well below its noise. Measured on El Farol (7
// nights, capacity 6, random play, N = 20, 100 and 200; team, local and
// difference rewards), against the ratio of expectations under the
// empirical distribution of 800 to 1500 draws of each state's others:
// the plain ratio of the sample means overstates it by 12 to 65% with 4
// samples and by 1.2 to 4.3% with 32; the corrected estimate of 32 samples
// is within 0.4% of it, and its standard error within 15% of the spread
// of the estimates (within 40% with 16 samples, whose correction is off by
// up to 1.2%).
const (
	DefaultDiagnoseAgents  = 8
	DefaultDiagnoseSamples = 32
)

// minDiagnoseSamples is the least Diagnose.Samples: the learnability's
// correction and interval need the others' sample variance.
const minDiagnoseSamples = 2

// check reports a Diagnose that cannot be measured.
func (d Diagnose) check() error {
	if d.Episodes > 0 && d.Samples != 0 && d.Samples < minDiagnoseSamples {
		return fmt.Errorf("diagnose samples %d: at least %d are needed (the learnability's correction and interval use the sample variance of the others' counterfactuals)", d.Samples, minDiagnoseSamples)
	}
	return nil
}

func (d Diagnose) agents() int  { return cmpOr(d.Agents, DefaultDiagnoseAgents) }
func (d Diagnose) samples() int { return cmpOr(d.Samples, DefaultDiagnoseSamples) }

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// TieTolerance is the relative size under which a change of the team
// reward or of an agent's reward counts as none in the diagnostics: |Δ| ≤
// TieTolerance · the largest magnitude of G and r_i before and after.
const TieTolerance = 1e-9

// Diagnostics are a cell's counterfactual measurements, kept as sums so
// that they add up across episodes and read back exactly.
type Diagnostics struct {
	Episodes int `json:"episodes"` // episodes diagnosed
	// Own counts the own-action counterfactuals, Aligned those whose Δr_i
	// and ΔG agree in sign; OwnAbs sums their |Δr_i|, OwnAbsG their |ΔG|.
	Own     int     `json:"own"`
	Aligned int     `json:"aligned"`
	OwnAbs  float64 `json:"own_abs"`
	OwnAbsG float64 `json:"own_abs_g"`
	// Others counts the others'-actions counterfactuals, OthersAbs sums
	// their |Δr_i|.
	Others    int     `json:"others"`
	OthersAbs float64 `json:"others_abs"`
	// States counts the states (z, i) whose learnability is finite,
	// StateSum sums their estimates and StateVar the estimates'
	// variances (the delta method's); Unbounded counts those where only
	// i's own changes moved r_i.
	States    int     `json:"learn_states"`
	StateSum  float64 `json:"learn_sum"`
	StateVar  float64 `json:"learn_var"`
	Unbounded int     `json:"learn_unbounded"`
}

// Factoredness is Aligned/Own, NaN without samples.
func (d *Diagnostics) Factoredness() float64 {
	if d == nil || d.Own == 0 {
		return math.NaN()
	}
	return float64(d.Aligned) / float64(d.Own)
}

// Learnability is the mean of the finite per-state learnabilities (see
// Diagnose); +Inf when every state measured is unbounded (only i's own
// changes move r_i), NaN when no state was measured or nothing moved r_i
// anywhere.
func (d *Diagnostics) Learnability() float64 {
	switch {
	case d == nil:
		return math.NaN()
	case d.States > 0:
		return d.StateSum / float64(d.States)
	case d.Unbounded > 0:
		return math.Inf(1)
	}
	return math.NaN()
}

// LearnabilityInterval is the 95% interval of Learnability over the
// counterfactuals drawn: Learnability ± 1.96 standard errors, the
// per-state variances by the delta method, the states held fixed. It is
// [L, L] when no sampled |Δr_i| varied within a state, and NaN (or +Inf)
// with Learnability.
func (d *Diagnostics) LearnabilityInterval() (low, high float64) {
	l := d.Learnability()
	if d == nil || d.States == 0 {
		return l, l
	}
	half := z95 * math.Sqrt(d.StateVar) / float64(d.States)
	return l - half, l + half
}

// z95 is the standard normal quantile of a two-sided 95% interval.
const z95 = 1.959963984540054

// UnboundedShare is the share of the states measured whose learnability
// is unbounded; NaN when none was measured.
func (d *Diagnostics) UnboundedShare() float64 {
	if d == nil || d.States+d.Unbounded == 0 {
		return math.NaN()
	}
	return float64(d.Unbounded) / float64(d.States+d.Unbounded)
}

// addState adds the learnability of one state (z, i) from the |Δr_i| of
// its own changes (every alternative once when exact) and of the others'
// redraws. See Diagnose for the estimator: the ratio of the sample means
// less its first-order bias, E[ā/b̄] ≈ (A/B)·(1 + Var b̄/B²) for
// independent draws, and the delta method's variance,
// (A/B)²·(Var ā/A² + Var b̄/B²), each Var from the sample variance.
func (d *Diagnostics) addState(own []float64, exact bool, others []float64) {
	if len(own) == 0 || len(others) == 0 {
		return
	}
	a, va := meanVar(own)
	b, vb := meanVar(others)
	switch {
	case a == 0 && b == 0:
		return // nothing moves r_i: no information
	case b == 0:
		d.Unbounded++
		return
	}
	relB := vb / (float64(len(others)) * b * b) // Var b̄ / b̄²
	relA := 0.0
	if !exact && a > 0 {
		relA = va / (float64(len(own)) * a * a)
	}
	ratio := a / b
	d.States++
	d.StateSum += ratio * (1 - relB)
	d.StateVar += ratio * ratio * (relA + relB)
}

// meanVar returns the mean of xs and their sample variance (0 for one).
func meanVar(xs []float64) (m, v float64) {
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	if len(xs) < 2 {
		return m, 0
	}
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, v / float64(len(xs)-1)
}

// tie reports whether the change from a to b is none, within TieTolerance
// of the largest of the magnitudes given.
func tie(a, b float64, scale ...float64) bool {
	m := max(math.Abs(a), math.Abs(b))
	for _, s := range scale {
		m = max(m, math.Abs(s))
	}
	return math.Abs(b-a) <= TieTolerance*m
}

// diagnoser measures one cell's diagnostics.
type diagnoser struct {
	cfg   Diagnose
	alloc trajectories.Allocator // a fresh instance of the cell's allocator
	learn map[string]bool        // the learning roles
	at    map[int]bool           // the episodes diagnosed
	seed  uint64
	// resimulate re-asks the other agents' policies in the counterfactual
	// episodes, for scenarios that declare it.
	resimulate bool
	result     *Diagnostics
}

func (p *plan) diagnoser(c *cellPlan) (*diagnoser, error) {
	d := p.cfg.Diagnose
	if d.Episodes <= 0 {
		return nil, nil
	}
	alloc, err := p.allocator(c)
	if err != nil {
		return nil, err
	}
	if s, ok := alloc.(trajectories.Sequential); ok && s.Sequential() {
		return nil, nil
	}
	at := map[int]bool{}
	n := p.cfg.Episodes
	for k := range min(d.Episodes, n) {
		if d.Episodes == 1 {
			at[n-1] = true
			break
		}
		at[k*(n-1)/(min(d.Episodes, n)-1)] = true
	}
	learn := map[string]bool{}
	for _, r := range p.learners {
		learn[r] = true
	}
	cf := p.cfg.Scenario.Info().Counterfactual
	return &diagnoser{cfg: d, alloc: alloc, learn: learn, at: at, seed: seeds.Mix(c.runSeed, 0xd1a9),
		resimulate: cf != nil && cf.Resimulate, result: &Diagnostics{}}, nil
}

// wants reports whether episode index e is diagnosed.
func (d *diagnoser) wants(e int64) bool { return d != nil && d.at[int(e)] }

// episode measures the diagnosed episodes of a group, given whole.
func (d *diagnoser) group(ctx context.Context, group []*episode.Record) error {
	for k, rec := range group {
		if d.wants(rec.Index) && rec.Finished() && rec.Replay != nil {
			if err := d.measure(ctx, group, k); err != nil {
				return fmt.Errorf("diagnostics of episode %d: %w", rec.Index, err)
			}
		}
	}
	return nil
}

// rewards allocates the group with episode k replaced by ep and returns
// the mean reward of each seat's samples in ep (NaN for a seat without).
func (d *diagnoser) rewards(ctx context.Context, group []*episode.Record, k int, ep *trajectories.Episode) ([]float64, error) {
	eps := make([]*trajectories.Episode, len(group))
	dst := make([][]float64, len(group))
	for i, rec := range group {
		if i == k {
			eps[i] = ep
		} else {
			eps[i] = trajectories.RecordOnly(rec)
		}
		dst[i] = make([]float64, eps[i].SampleCount())
	}
	if err := d.alloc.Allocate(ctx, eps, dst); err != nil {
		return nil, err
	}
	sum := make([]float64, len(ep.Seats))
	count := make([]int, len(ep.Seats))
	s := 0
	for _, t := range ep.Turns {
		if t.Emit {
			sum[t.Seat] += dst[k][s]
			count[t.Seat]++
			s++
		}
	}
	for i := range sum {
		if count[i] == 0 {
			sum[i] = math.NaN()
		} else {
			sum[i] /= float64(count[i])
		}
	}
	return sum, nil
}

// under returns rec with the seats of replace playing those actions at
// every turn: its team reward and scores re-simulated, the others' actions
// as recorded or, with resimulate (a scenario whose agents answer each
// other: env.CounterfactualSpec.Resimulate), asked again of their
// policies with the same seeds; its turns showing the new actions; and a
// replayer whose counterfactuals are taken relative to it.
func under(ctx context.Context, rec *episode.Record, replace map[int]string, resimulate bool) (*trajectories.Episode, error) {
	score, err := rec.Replay.Replay(ctx, episode.Counterfactual{Replace: replace, Resimulate: resimulate})
	if err != nil {
		return nil, err
	}
	cp := *rec
	cp.Score = episode.Score{Team: score.Team, Teams: slices.Clone(score.Teams), Agents: slices.Clone(score.Agents)} // a scenario may reuse its arrays
	cp.Turns = slices.Clone(rec.Turns)
	for i := range cp.Turns {
		if a, ok := replace[cp.Turns[i].Seat]; ok {
			cp.Turns[i].Action = a
		}
	}
	outer := rec.Replay
	cp.Replay = episode.ReplayerFunc(func(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
		// The inner counterfactual's own changes win. Its absent and null
		// seats need nothing here: a replay takes them out before it
		// looks at Replace (env's engine and rescorers do), so only its
		// replacements are merged, and the map (of every other agent, in
		// a redraw of the others) is not copied for each of its replays.
		if len(cf.Replace) == 0 {
			cf.Replace = replace // a replayer only reads it
			return outer.Replay(ctx, cf)
		}
		merged := maps.Clone(replace)
		maps.Copy(merged, cf.Replace)
		cf.Replace = merged
		return outer.Replay(ctx, cf)
	})
	return trajectories.RecordOnly(&cp), nil
}

// measure samples the counterfactuals of group[k].
func (d *diagnoser) measure(ctx context.Context, group []*episode.Record, k int) error {
	rec := group[k]
	rng := rand.New(rand.NewPCG(d.seed, uint64(rec.Index)))
	// Made here, not in alternatives, so that they stay on the stack.
	alts, pools := map[int][]string{}, map[int][]string{}
	seatsIn := d.alternatives(rec, alts, pools)
	base, err := d.rewards(ctx, group, k, trajectories.RecordOnly(rec))
	if err != nil {
		return err
	}
	sample := slices.Clone(seatsIn)
	rng.Shuffle(len(sample), func(a, b int) { sample[a], sample[b] = sample[b], sample[a] })
	sample = sample[:min(len(sample), d.cfg.agents())]
	res := d.result
	res.Episodes++
	m := counterfactuals{d: d, group: group, k: k, base: base, rng: rng}
	var own, others []float64
	for _, i := range sample {
		if len(alts[i]) == 0 {
			continue // nothing else i could have done
		}
		var exact bool
		var err error
		if own, exact, err = m.own(ctx, i, alts[i], own[:0]); err != nil {
			return err
		}
		if others, err = m.others(ctx, i, seatsIn, pools, others[:0]); err != nil {
			return err
		}
		res.addState(own, exact, others)
	}
	return nil
}

// alternatives returns the learning seats of rec with an emitted turn,
// and sets, for each one, in alts the actions other than its own at its
// first such turn and in pools every action it could have played there:
// its legal actions, or, when the record has none, every action its role
// played.
func (d *diagnoser) alternatives(rec *episode.Record, alts, pools map[int][]string) (seatsIn []int) {
	played := map[string][]string{} // per role: the actions played
	first := map[int]*episode.Turn{}
	for i := range rec.Turns {
		t := &rec.Turns[i]
		role := rec.Seats[t.Seat].Role
		if !slices.Contains(played[role], t.Action) {
			played[role] = append(played[role], t.Action)
		}
		if t.Emit && d.learn[role] && first[t.Seat] == nil {
			first[t.Seat] = t
			seatsIn = append(seatsIn, t.Seat)
		}
	}
	for _, s := range seatsIn {
		t := first[s]
		pool := t.Legal
		if len(pool) == 0 {
			pool = played[rec.Seats[s].Role]
		}
		pools[s] = pool
		for _, a := range pool {
			if a != t.Action {
				alts[s] = append(alts[s], a)
			}
		}
	}
	return seatsIn
}

// counterfactuals measures how much one seat's reward in group[k] moves
// when it, or the others, act otherwise; base are the rewards as played.
// Both measures draw from rng in turn, so the diagnosis is a function of
// the seed.
type counterfactuals struct {
	d     *diagnoser
	group []*episode.Record
	k     int
	base  []float64
	rng   *rand.Rand
}

// own replays the episode with seat i's action replaced by its
// alternatives alts (every one once, exact, when there are no more than
// the samples asked for; otherwise drawn uniformly), and returns dst with
// the |Δr_i| of each replay appended. It counts each replay, and whether
// r_i and the team reward move together, in the diagnosis.
func (m *counterfactuals) own(ctx context.Context, i int, alts []string, dst []float64) (_ []float64, exact bool, err error) {
	d, rec, res := m.d, m.group[m.k], m.d.result
	n := d.cfg.samples()
	exact = len(alts) <= n
	if exact {
		n = len(alts)
	}
	for s := range n {
		a := alts[s%len(alts)]
		if !exact {
			a = alts[m.rng.IntN(len(alts))]
		}
		ep, err := under(ctx, rec, map[int]string{i: a}, d.resimulate)
		if err != nil {
			return nil, false, err
		}
		r, err := d.rewards(ctx, m.group, m.k, ep)
		if err != nil {
			return nil, false, err
		}
		g0, g1 := rec.Score.Team, ep.Score.Team
		dr, dg := r[i]-m.base[i], g1-g0
		if tie(g0, g1) {
			dg = 0
		}
		if tie(m.base[i], r[i], g0, g1) {
			dr = 0
		}
		res.Own++
		if dr*dg > 0 || (dr == 0 && dg == 0) {
			res.Aligned++
		}
		res.OwnAbs += math.Abs(dr)
		res.OwnAbsG += math.Abs(dg)
		dst = append(dst, math.Abs(dr))
	}
	return dst, exact, nil
}

// others replays the episode with every other learning seat of seatsIn
// acting anew, z − z_−i + z'_−i: each one's action drawn uniformly from
// its pool (its recorded one included). It returns dst with the |Δr_i| of
// each replay appended: none when no other seat could have done
// otherwise.
func (m *counterfactuals) others(ctx context.Context, i int, seatsIn []int, pools map[int][]string, dst []float64) ([]float64, error) {
	d, rec, res := m.d, m.group[m.k], m.d.result
	for range d.cfg.samples() {
		replace := map[int]string{}
		for _, j := range seatsIn {
			if j != i && len(pools[j]) > 0 {
				replace[j] = pools[j][m.rng.IntN(len(pools[j]))]
			}
		}
		if len(replace) == 0 {
			continue // no other agent could have done otherwise
		}
		ep, err := under(ctx, rec, replace, d.resimulate)
		if err != nil {
			return nil, err
		}
		r, err := d.rewards(ctx, m.group, m.k, ep)
		if err != nil {
			return nil, err
		}
		dr := r[i] - m.base[i]
		if tie(m.base[i], r[i], rec.Score.Team, ep.Score.Team) {
			dr = 0
		}
		res.Others++
		res.OthersAbs += math.Abs(dr)
		dst = append(dst, math.Abs(dr))
	}
	return dst, nil
}
