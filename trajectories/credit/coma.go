package credit

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/trajectories"
)

// DefaultCOMASamples is COMA's default number of alternative actions per
// agent.
const DefaultCOMASamples = 16

// COMA is a counterfactual baseline in the style of COMA (Foerster et al.
// 2018): agent i's advantage is the team reward minus the expected team
// reward over alternative actions u' of agent i, everything else as Sim
// says (frozen by default):
//
//	A_i = G(z) - Σ_{u'} π(u') G(z_-i, u')
//
// troupe has no access to the policy's distribution π, so π is uniform
// over the alternatives: the distinct actions the seats of i's role played
// in the episode (the allocator cannot see the scenario's legal actions;
// for a single-decision role whose agents cover the action space, as in
// El Farol, the two coincide). When there are more than Samples of them,
// Samples are drawn without replacement, from a generator seeded by the
// episode's seeds, Seed and i, so the baseline is a deterministic
// function of the episode. u' is played at every one of i's turns. In
// frozen mode the action i actually played (at every turn) is scored
// G(z) without a re-simulation.
//
// When the alternatives of all agents with samples exceed the budget, each
// agent gets the largest number of alternatives that fits (the same for
// all, at least 1), and the episode's notes say so (NoteBudgetExhausted,
// NoteSamplesUsed); if not even one fits, Allocate fails with ErrBudget.
//
// Sampling u' from the agent's own policy instead needs the environment to
// re-ask one seat with a different seed, which episode.Counterfactual
// cannot express yet.
type COMA struct {
	Samples int // alternatives per agent at most; 0 means DefaultCOMASamples
	Seed    uint64
	Sim     Sim
}

func (c COMA) samples() int {
	if c.Samples <= 0 {
		return DefaultCOMASamples
	}
	return c.Samples
}

// Name implements trajectories.Allocator.
func (c COMA) Name() string {
	return specName("coma", append([]kv{
		{"samples", strconv.Itoa(c.samples()), strconv.Itoa(DefaultCOMASamples)},
		{"seed", strconv.FormatUint(c.Seed, 10), "0"},
	}, c.Sim.params()...)...)
}

// Needs implements Needer.
func (c COMA) Needs() Needs { return Needs{Replay: true} }

// Allocate implements trajectories.Allocator.
func (c COMA) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	return c.AllocateNoted(ctx, group, dst, nil)
}

// AllocateNoted implements Noter.
func (c COMA) AllocateNoted(ctx context.Context, group []*trajectories.Episode, dst [][]float64, notes []map[string]any) error {
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		acts := seatActions(ep)
		order := c.alternatives(ep, emitted(ep, seats))
		m, err := c.fitSamples(ep, order, acts)
		if err != nil {
			return err
		}
		adv, short, err := c.advantages(ctx, ep, order, acts, m)
		if err != nil {
			return err
		}
		if short {
			note(notes, e, NoteBudgetExhausted, true)
			note(notes, e, NoteSamplesUsed, m)
		}
		for s, i := range seats {
			dst[e][s] = adv[i]
		}
	}
	return nil
}

// alternatives returns, for each seat of ep with a sample (want), its
// role's distinct actions in a random order of its own; the first m are
// scored. The orders do not depend on m, so a smaller m (to fit the
// budget) scores a subset of what a larger one would.
func (c COMA) alternatives(ep *trajectories.Episode, want []bool) [][]string {
	support := map[string][]string{} // per role: its distinct actions, by text
	for role, list := range roleActions(ep) {
		texts := make([]string, len(list))
		for n, a := range list {
			texts[n] = a.text
		}
		slices.Sort(texts)
		support[role] = texts
	}
	order := make([][]string, len(ep.Seats))
	for i, seat := range ep.Seats {
		if !want[i] {
			continue
		}
		u := slices.Clone(support[seat.Role])
		rng := rand.New(rand.NewPCG(seeds.Mix(ep.Seed, ep.PolicySeed, c.Seed, uint64(i)), pcgStream))
		rng.Shuffle(len(u), func(a, b int) { u[a], u[b] = u[b], u[a] })
		order[i] = u
	}
	return order
}

// fitSamples returns the most alternatives per agent, at most samples(),
// whose re-simulations fit the budget (an action the agent played needs
// none unless the replays resimulate); it refuses an episode where even
// one does not fit.
func (c COMA) fitSamples(ep *trajectories.Episode, order, acts [][]string) (int, error) {
	cost := func(m int) int {
		n := 0
		for i, u := range order {
			for _, a := range u[:min(m, len(u))] {
				if c.Sim.Resimulate || !playedOnly(acts[i], a) {
					n++
				}
			}
		}
		return n
	}
	longest := 0
	for _, u := range order {
		longest = max(longest, len(u))
	}
	m := min(c.samples(), longest)
	for m > 0 && cost(m) > c.Sim.budget() {
		m--
	}
	if m == 0 && longest > 0 {
		return 0, checkBudget(ep, cost(1), c.Sim)
	}
	return m, nil
}

// advantages is each seat's reward less the mean of its reward over its
// first m alternatives (the counterfactual baseline); short reports that
// the budget cut an agent's alternatives below samples().
func (c COMA) advantages(ctx context.Context, ep *trajectories.Episode, order, acts [][]string, m int) (adv []float64, short bool, err error) {
	var cfs []episode.Counterfactual
	var teams []int                  // per counterfactual: the team whose reward it is valued by
	type term struct{ seat, cf int } // cf -1: G(z)
	var terms []term
	for i, u := range order {
		if len(u) > m {
			short = m < c.samples()
		}
		for _, a := range u[:min(m, len(u))] {
			t := term{seat: i, cf: -1}
			if c.Sim.Resimulate || !playedOnly(acts[i], a) {
				t.cf = len(cfs)
				cfs, teams = append(cfs, c.Sim.replace(i, a)), append(teams, ep.Seats[i].Team)
			}
			terms = append(terms, t)
		}
	}
	vals, err := c.Sim.runList(ctx, ep, cfs, teams)
	if err != nil {
		return nil, false, err
	}
	sum := make([]float64, len(ep.Seats))
	n := make([]int, len(ep.Seats))
	for _, t := range terms {
		v := ep.SeatReward(t.seat)
		if t.cf >= 0 {
			v = vals[t.cf]
		}
		sum[t.seat] += v
		n[t.seat]++
	}
	adv = make([]float64, len(ep.Seats))
	for i := range adv {
		if n[i] > 0 {
			adv[i] = ep.SeatReward(i) - sum[i]/float64(n[i])
		}
	}
	return adv, short, nil
}
