package credit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/trajectories"
)

// Limits of exact Shapley.
const (
	// DefaultMaxAgents is the number of agents above which exact Shapley
	// refuses an episode, by default (2^12 - 1 = 4095 re-simulations).
	DefaultMaxAgents = 12
	// MaxShapleyAgents is the highest limit it accepts.
	MaxShapleyAgents = 20
)

// Shapley is the exact Shapley value of the coalition game
// v(S) = the team reward of the episode re-simulated with the agents
// outside S absent (or playing their null action, Out = Null):
//
//	φ_i = Σ_{S ⊆ N\{i}} |S|!(K-|S|-1)!/K! · (v(S ∪ {i}) - v(S))
//
// Every one of the 2^K coalition values is computed once (v(N) is the
// recorded G, the other 2^K - 1 are re-simulated, in parallel) and reused
// by all K agents. The shares satisfy efficiency, Σ_i φ_i = v(N) - v(∅),
// symmetry, the null-player property and additivity.
//
// In a scenario with teams, the game is per team T: v_T(S) is the reward
// of T in the episode re-simulated with the members of T outside S absent
// (or null) and every seat of the other teams present, S ranging over
// T's members; Σ_{i∈T} φ_i = v_T(T) - v_T(∅). That is Σ_T (2^|T| - 1)
// re-simulations, and MaxAgents bounds the largest team. A team none of
// whose members has samples is not evaluated.
//
// An episode with more than MaxAgents agents (on one team) fails with
// ErrTooManyAgents (use MonteCarloShapley), one that needs more
// re-simulations than the budget with ErrBudget.
type Shapley struct {
	Out       Presence
	MaxAgents int // 0 means DefaultMaxAgents; at most MaxShapleyAgents
	Sim       Sim
}

func (s Shapley) maxAgents() int {
	if s.MaxAgents <= 0 {
		return DefaultMaxAgents
	}
	return min(s.MaxAgents, MaxShapleyAgents)
}

// Name implements trajectories.Allocator.
func (s Shapley) Name() string {
	return specName("shapley", append([]kv{
		{"mode", s.Out.String(), Absent.String()},
		{"max-agents", strconv.Itoa(s.maxAgents()), strconv.Itoa(DefaultMaxAgents)},
	}, s.Sim.params()...)...)
}

// Needs implements Needer.
func (s Shapley) Needs() Needs { return s.Out.needs() }

// Allocate implements trajectories.Allocator.
func (sh Shapley) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		want := emitted(ep, seats)
		phi := make([]float64, len(ep.Seats))
		need := 0
		var members []int
		for t := range ep.TeamCount() {
			members = ep.Members(members[:0], t)
			if !anyOf(want, members) {
				continue // a side without samples needs no credit
			}
			k := len(members)
			if k > sh.maxAgents() {
				return fmt.Errorf("%w: episode %d of %s has %d agents%s, above the limit of %d (max-agents, at most %d); use shapley-mc", ErrTooManyAgents, ep.Index, ep.Scenario, k, onTeam(ep, t), sh.maxAgents(), MaxShapleyAgents)
			}
			full := 1<<k - 1
			need += full
			if err := checkBudget(ep, need, sh.Sim); err != nil {
				return err
			}
			v, err := sh.Sim.run(ctx, ep, full, func(mask int) (episode.Counterfactual, int) {
				out := make([]int, 0, k-bits.OnesCount(uint(mask)))
				for j, i := range members {
					if mask&(1<<j) == 0 {
						out = append(out, i)
					}
				}
				return sh.Sim.without(sh.Out, out), t
			})
			if err != nil {
				return err
			}
			for j, p := range ExactShapley(k, append(v, ep.Score.Of(t))) {
				phi[members[j]] = p
			}
		}
		for s, i := range seats {
			dst[e][s] = phi[i]
		}
	}
	return nil
}

// anyOf reports whether want holds for any of seats.
func anyOf(want []bool, seats []int) bool {
	for _, i := range seats {
		if want[i] {
			return true
		}
	}
	return false
}

// onTeam names team t of ep for an error message: " on team NAME", or
// nothing in a scenario without teams.
func onTeam(ep *trajectories.Episode, t int) string {
	if ep.Teams == nil {
		return ""
	}
	return " on team " + strconv.Quote(ep.TeamName(t))
}

// ExactShapley returns the Shapley values of the k-player game whose
// coalition values v are indexed by bit mask (bit i set: player i is in;
// len(v) = 2^k).
func ExactShapley(k int, v []float64) []float64 {
	// w[s] = s!(k-s-1)!/k!, by w[0] = 1/k and w[s]/w[s-1] = s/(k-s).
	w := make([]float64, k)
	w[0] = 1 / float64(k)
	for s := 1; s < k; s++ {
		w[s] = w[s-1] * float64(s) / float64(k-s)
	}
	phi := make([]float64, k)
	for i := range k {
		bit := 1 << i
		sum := 0.0
		for mask := range v {
			if mask&bit == 0 {
				sum += w[bits.OnesCount(uint(mask))] * (v[mask|bit] - v[mask])
			}
		}
		phi[i] = sum
	}
	return phi
}

// DefaultPermutations is Monte Carlo Shapley's default number of sampled
// orderings.
const DefaultPermutations = 100

// MonteCarloShapley estimates the Shapley values of the same game as
// Shapley by sampling orderings of the agents (Castro, Gómez & Tejada
// 2009): for M random permutations π,
//
//	φ̂_i = 1/M Σ_m (v(Pre_i^π_m ∪ {i}) - v(Pre_i^π_m))
//
// where Pre_i^π is the set of agents before i in π. Each permutation costs
// at most K - 1 re-simulations (v(∅) and v(N) are shared, and coalitions
// already seen are reused). For every permutation the marginals sum to
// v(N) - v(∅), so the estimate is exactly efficient; it is unbiased for
// every other φ_i, with an error falling as 1/√M.
//
// In a scenario with teams, each team's members are ordered apart (the
// game of Shapley), the teams with samples sharing the budget equally and
// one generator, which draws their permutations team after team.
//
// The permutations are drawn from a PCG generator seeded by the episode's
// scenario and policy seeds and Seed, so the estimate is a deterministic
// function of the episode. Permutations are planned in order until the
// next one would take the coalitions past the budget; the estimate then
// rests on the permutations planned so far, and the episode's notes say so
// (NoteBudgetExhausted, NoteSamplesUsed). A budget too small for a single
// permutation is an error wrapping ErrBudget.
type MonteCarloShapley struct {
	Out          Presence
	Permutations int // M; 0 means DefaultPermutations
	Seed         uint64
	Sim          Sim
}

func (m MonteCarloShapley) permutations() int {
	if m.Permutations <= 0 {
		return DefaultPermutations
	}
	return m.Permutations
}

// Name implements trajectories.Allocator.
func (m MonteCarloShapley) Name() string {
	return specName("shapley-mc", append([]kv{
		{"mode", m.Out.String(), Absent.String()},
		{"permutations", strconv.Itoa(m.permutations()), strconv.Itoa(DefaultPermutations)},
		{"seed", strconv.FormatUint(m.Seed, 10), "0"},
	}, m.Sim.params()...)...)
}

// Needs implements Needer.
func (m MonteCarloShapley) Needs() Needs { return m.Out.needs() }

// Allocate implements trajectories.Allocator.
func (m MonteCarloShapley) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	return m.AllocateNoted(ctx, group, dst, nil)
}

// pcgStream is the second word of the PCG generators of the sampling
// allocators: any constant will do, it only has to stay fixed.
const pcgStream = 0x7c0f_5eed_c4ed_1700

// AllocateNoted implements Noter.
func (m MonteCarloShapley) AllocateNoted(ctx context.Context, group []*trajectories.Episode, dst [][]float64, notes []map[string]any) error {
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return err
		}
		want := emitted(ep, seats)
		// The sides with samples share the budget equally; one
		// generator draws their orderings, side after side.
		var teams [][]int
		for t := range ep.TeamCount() {
			if members := ep.Members(nil, t); anyOf(want, members) {
				teams = append(teams, members)
			} else {
				teams = append(teams, nil)
			}
		}
		credited := 0
		for _, members := range teams {
			if members != nil {
				credited++
			}
		}
		rng := rand.New(rand.NewPCG(seeds.Mix(ep.Seed, ep.PolicySeed, m.Seed), pcgStream))
		phi := make([]float64, len(ep.Seats))
		used := m.permutations()
		for t, members := range teams {
			if members == nil {
				continue
			}
			p, n, err := m.estimate(ctx, ep, rng, t, members, m.Sim.budget()/credited)
			if err != nil {
				return err
			}
			used = min(used, n)
			for j, v := range p {
				phi[members[j]] = v
			}
		}
		if used < m.permutations() {
			note(notes, e, NoteBudgetExhausted, true)
			note(notes, e, NoteSamplesUsed, used)
		}
		for s, i := range seats {
			dst[e][s] = phi[i]
		}
	}
	return nil
}

// estimate returns the estimated Shapley values of the members of team t
// of ep, in the order of members, and the number of permutations they
// rest on, drawn from rng within budget re-simulations.
func (m MonteCarloShapley) estimate(ctx context.Context, ep *trajectories.Episode, rng *rand.Rand, t int, members []int, budget int) ([]float64, int, error) {
	k := len(members)
	words := (k + 63) / 64

	// Plan: walk each permutation's prefixes, giving every new coalition
	// an index; the full coalition is -1 (its value is G).
	index := map[string]int{}
	var coalitions [][]uint64
	var perms, ids [][]int
	key := make([]byte, 8*words)
	for range m.permutations() {
		perm := rng.Perm(k)
		cur := make([]uint64, words)
		at := make([]int, k+1)
		at[k] = -1
		var fresh [][]uint64
		var freshKeys []string
		for j := range k {
			if j > 0 {
				p := perm[j-1]
				cur[p/64] |= 1 << (p % 64)
			}
			for w, x := range cur {
				binary.LittleEndian.PutUint64(key[8*w:], x)
			}
			if id, ok := index[string(key)]; ok {
				at[j] = id
				continue
			}
			at[j] = len(coalitions) + len(fresh)
			fresh = append(fresh, append([]uint64(nil), cur...))
			freshKeys = append(freshKeys, string(key))
		}
		if len(coalitions)+len(fresh) > budget {
			break
		}
		for n, c := range fresh {
			index[freshKeys[n]] = len(coalitions)
			coalitions = append(coalitions, c)
		}
		perms, ids = append(perms, perm), append(ids, at)
	}
	if len(perms) == 0 {
		return nil, 0, fmt.Errorf("%w: episode %d of %s: one permutation of %d agents%s needs up to %d re-simulations, the budget is %d", ErrBudget, ep.Index, ep.Scenario, k, onTeam(ep, t), k, budget)
	}

	v, err := m.Sim.run(ctx, ep, len(coalitions), func(n int) (episode.Counterfactual, int) {
		out := []int{}
		for j, i := range members {
			if coalitions[n][j/64]&(1<<(j%64)) == 0 {
				out = append(out, i)
			}
		}
		return m.Sim.without(m.Out, out), t
	})
	if err != nil {
		return nil, 0, err
	}
	value := func(id int) float64 {
		if id < 0 {
			return ep.Score.Of(t)
		}
		return v[id]
	}
	phi := make([]float64, k)
	for n, perm := range perms {
		at := ids[n]
		for j, i := range perm {
			phi[i] += value(at[j+1]) - value(at[j])
		}
	}
	for i := range phi {
		phi[i] /= float64(len(perms))
	}
	return phi, len(perms), nil
}
