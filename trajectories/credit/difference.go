package credit

import (
	"context"
	"fmt"
	"strconv"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// DefaultAlternatives is how many alternative actions the average-action
// difference reward weighs at most, by default.
const DefaultAlternatives = 16

// Difference is the difference reward of Wolpert & Tumer (2001), the
// "wonderful life utility": D_i = G(z) - G(z_-i ∪ c_i), the team reward
// minus what it would have been had agent i played c_i instead, everything
// else as Sim says. In a scenario with teams, G is G_T, the reward of i's
// own team T, in both terms: D_i = G_T(z) - G_T(z_-i ∪ c_i), whatever
// the other teams then earn.
//
// With Average false (c=null, WL0), c_i is the scenario's null action for
// i's role, played at every one of its turns (K re-simulations).
//
// With Average true (c=average, WLa), c_i is the average action, defined
// as the average agent of i's role: the empirical distribution of the
// actions all seats of that role played in this episode (each action
// weighted by how many turns played it), restricted to its Alternatives
// most frequent actions (ties broken by text) and renormalised:
//
//	D_i = G(z) - Σ_a p_role(a) · G(z_-i ∪ a)
//
// where "∪ a" means agent i plays a at every one of its turns. The
// allocator cannot see the scenario's legal actions (an episode does not
// record them); the role's empirical distribution needs no scenario
// support, is what "average action" means for an agent population, and
// stays finite for free-text actions. It is most meaningful for roles that
// decide once per episode (El Farol); for multi-turn roles a constant
// action at every turn is a crude counterfactual. In frozen mode, the
// alternative an agent actually played (at every turn) is scored G(z)
// without a re-simulation.
//
// Only agents with samples are evaluated: fixed opponents cost nothing.
// The re-simulations an episode needs must fit the budget, or Allocate
// fails with ErrBudget.
type Difference struct {
	Average      bool
	Alternatives int // WLa: most frequent actions weighed; 0 means DefaultAlternatives
	Sim          Sim
}

func (d Difference) alternatives() int {
	if d.Alternatives <= 0 {
		return DefaultAlternatives
	}
	return d.Alternatives
}

// Name implements trajectories.Allocator.
func (d Difference) Name() string {
	params := []kv{{"c", "null", "null"}}
	if d.Average {
		params = []kv{{"c", "average", "null"}, {"alternatives", strconv.Itoa(d.alternatives()), strconv.Itoa(DefaultAlternatives)}}
	}
	return specName("difference", append(params, d.Sim.params()...)...)
}

// Needs implements Needer.
func (d Difference) Needs() Needs { return Needs{Replay: true, Null: !d.Average} }

// Allocate implements trajectories.Allocator.
func (d Difference) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	if !d.Average {
		return perAgent(ctx, d.Sim, Null, group, dst)
	}
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		want := emitted(ep, seats)
		byRole := roleActions(ep)
		acts := seatActions(ep)
		type term struct {
			seat int
			w    float64
			cf   int // index into cfs, or -1 for G(z)
		}
		var terms []term
		var cfs []episode.Counterfactual
		var teams []int // per counterfactual: the team whose reward it is valued by
		for i, seat := range ep.Seats {
			if !want[i] {
				continue
			}
			alts := byRole[seat.Role]
			alts = alts[:min(len(alts), d.alternatives())]
			total := 0
			for _, a := range alts {
				total += a.n
			}
			for _, a := range alts {
				t := term{seat: i, w: float64(a.n) / float64(total), cf: -1}
				if d.Sim.Resimulate || !playedOnly(acts[i], a.text) {
					t.cf = len(cfs)
					cfs, teams = append(cfs, d.Sim.replace(i, a.text)), append(teams, seat.Team)
				}
				terms = append(terms, t)
			}
		}
		if err := checkBudget(ep, len(cfs), d.Sim); err != nil {
			return err
		}
		vals, err := d.Sim.runList(ctx, ep, cfs, teams)
		if err != nil {
			return err
		}
		share := make([]float64, len(ep.Seats))
		for i := range share {
			if want[i] {
				share[i] = ep.SeatReward(i)
			}
		}
		for _, t := range terms {
			v := ep.SeatReward(t.seat)
			if t.cf >= 0 {
				v = vals[t.cf]
			}
			share[t.seat] -= t.w * v
		}
		for s, i := range seats {
			dst[e][s] = share[i]
		}
	}
	return nil
}

// LeaveOneOut is r_i = v(N) - v(N \ {i}): the team reward minus what the
// others would have earned without agent i (in a scenario with teams, the
// reward of i's team, v_T(N) - v_T(N \ {i})) (absent, or playing its null
// action with Out = Null, which makes it Difference's WL0). Only agents
// with samples are evaluated, one re-simulation each.
type LeaveOneOut struct {
	Out Presence
	Sim Sim
}

// Name implements trajectories.Allocator.
func (l LeaveOneOut) Name() string {
	return specName("leave-one-out", append([]kv{{"mode", l.Out.String(), Absent.String()}}, l.Sim.params()...)...)
}

// Needs implements Needer.
func (l LeaveOneOut) Needs() Needs { return l.Out.needs() }

// Allocate implements trajectories.Allocator.
func (l LeaveOneOut) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	return perAgent(ctx, l.Sim, l.Out, group, dst)
}

// perAgent gives every agent with samples G(z) minus the team reward of
// the counterfactual in which its seat alone is out (sim.without(out, ·)).
// A frozen episode whose replayer answers them all at once
// (episode.OneOutReplayer) is asked so; otherwise, or when it cannot,
// each is replayed.
func perAgent(ctx context.Context, sim Sim, out Presence, group []*trajectories.Episode, dst [][]float64) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeatsInto(sc.seats, ep)
		if err != nil {
			return err
		}
		sc.seats = seats
		want := emittedInto(sc.want, ep, seats)
		sc.want = want
		who := sc.who[:0]
		for i := range want {
			if want[i] {
				who = append(who, i)
			}
		}
		sc.who = who
		if err := checkBudget(ep, len(who), sim); err != nil {
			return err
		}
		vals := sized(sc.vals, len(who))
		sc.vals = vals
		// The one-out replayer answers with the one team reward: a
		// scenario with teams values each counterfactual by the reward of
		// the left-out seat's team, replayed one by one.
		if oo, ok := ep.Replay.(episode.OneOutReplayer); !ok || sim.Resimulate || ep.Teams != nil || !oo.ReplayOneOut(out == Null, who, vals) {
			// Each counterfactual's seat list is its stretch of who:
			// nothing is allocated per agent.
			if _, err := sim.runInto(ctx, vals, ep, len(who), func(k int) (episode.Counterfactual, int) {
				return sim.without(out, who[k:k+1:k+1]), ep.Seats[who[k]].Team
			}); err != nil {
				return err
			}
		} else if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		share := sized(sc.share, len(ep.Seats))
		clear(share)
		sc.share = share
		for k, i := range who {
			share[i] = ep.SeatReward(i) - vals[k]
		}
		for s, i := range seats {
			dst[e][s] = share[i]
		}
	}
	return nil
}

// checkBudget fails when an exact allocator needs more re-simulations than
// its budget.
func checkBudget(ep *trajectories.Episode, need int, sim Sim) error {
	if need > sim.budget() {
		return fmt.Errorf("%w: episode %d of %s needs %d re-simulations, the budget is %d", ErrBudget, ep.Index, ep.Scenario, need, sim.budget())
	}
	return nil
}
