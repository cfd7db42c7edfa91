package credit

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/troupe-rl/troupe/trajectories"
)

// NormMode is how GroupNorm turns a group's rewards into advantages.
type NormMode int

const (
	// NormStd is GRPO (Shao et al., DeepSeekMath, arXiv 2402.03300,
	// §4.1.2): A_j = (R_j - mean) / (std + ε), std the sample
	// standard deviation (n-1 in the denominator, as torch.std and slime
	// compute it).
	NormStd NormMode = iota
	// NormCentre is Dr.GRPO (Liu et al., arXiv 2503.20783): A_j = R_j -
	// mean, without the std.
	NormCentre
	// NormLeaveOneOut is RLOO (Kool et al., "Buy 4 REINFORCE Samples, Get
	// a Baseline for Free!", 2019; Ahmadian et al., "Back to Basics",
	// arXiv 2402.14740): A_j = R_j − b_j, b_j the mean of the independent samples
	// other than j. In a group of multi-agent episodes the samples of one
	// episode are not independent (with the team reward they share its G),
	// so b_j is the mean over the units of j's key in the group's other
	// episodes: with one unit per episode and key, A_j = G/(G−1) · (R_j −
	// mean), Dr.GRPO's advantage scaled by G/(G−1), G the units.
	NormLeaveOneOut
)

var normNames = []string{"grpo", "dr-grpo", "rloo"}

// GroupKey chooses which fields put two agents of a group in the same
// normalisation group. Combine the flags; the zero value means
// DefaultGroupKey.
type GroupKey uint8

// The fields of a group key.
const (
	KeyScenario GroupKey = 1 << iota // the scenario name
	KeyGroup                         // the episode's group_index
	KeyRole                          // the agent's role
	KeyAgent                         // the agent's id (the same seat across the group's episodes)
	// KeyTurn makes the unit one turn rather than one agent's episode:
	// an agent's t-th turn is compared with the t-th turns that share
	// the rest of the key, across the group's episodes (turn-wise
	// grouping, as AT-GRPO groups the candidates of one agent at one
	// turn).
	KeyTurn

	// DefaultGroupKey is (scenario, group_index, role): the agents of one
	// role across the episodes of one group are compared.
	DefaultGroupKey = KeyScenario | KeyGroup | KeyRole
)

var keyNames = []string{"scenario", "group", "role", "agent", "turn"}

// String renders the key as its fields joined by '+', the value of the key
// parameter.
func (k GroupKey) String() string {
	if k == 0 {
		k = DefaultGroupKey
	}
	var parts []string
	for i, n := range keyNames {
		if k&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, "+")
}

// ParseGroupKey parses fields joined by '+': scenario, group, role, agent,
// turn.
func ParseGroupKey(s string) (GroupKey, error) {
	var k GroupKey
	for part := range strings.SplitSeq(s, "+") {
		i := -1
		for j, n := range keyNames {
			if strings.TrimSpace(part) == n {
				i = j
			}
		}
		if i < 0 || k&(1<<i) != 0 {
			return 0, fmt.Errorf("%w: group key %q: want distinct fields among %s joined by '+'", ErrBadAllocatorParam, s, strings.Join(keyNames, ", "))
		}
		k |= 1 << i
	}
	return k, nil
}

// DefaultEps is GRPO's default ε.
const DefaultEps = 1e-6

// GroupNorm is group-relative normalisation: GRPO, Dr.GRPO or RLOO (see
// NormMode), computed over the agents of the group that share a key.
//
// The unit of a normalisation group is one agent in one episode (an
// agent's turns are one response, as a rollout is in single-agent GRPO):
// its reward R is Base (the team reward by default), its advantage goes to
// every one of its samples. Only agents with samples and episodes that
// finished count; the samples of an unfinished episode get 0.
//
// Uneven groups are fine: each key's group is normalised by its own size.
// A group of one unit has no baseline and gets advantage 0 (in every
// mode); a group whose rewards are all equal gets 0 too.
//
// The runner calls Allocate with the episodes of one group_index, so the
// key only ever splits a group further, by role or agent.
//
// When allocators coincide, with the team reward: every unit of an episode
// has its G, so with n episodes of N units of a key each, dr-grpo equals
// magrpo (to rounding: the mean of N·n values where magrpo takes that of
// n), rloo is n/(n−1) times it, and grpo is magrpo:std=true times
// sqrt((N·n−1)/(N·(n−1))), its std being taken over the N·n units; keyed
// so that each key has one unit per episode (key=scenario+group+agent),
// grpo is magrpo:std=true and dr-grpo magrpo, bit for bit.
//
// In a scenario with teams, a unit's team reward is its side's (G_T), and
// the units of different sides are in different groups whatever the key:
// a side is compared with itself only (in a zero-sum game the two sides'
// rewards mirror each other, and pooling them would cancel the signal).
type GroupNorm struct {
	Mode NormMode
	Eps  float64  // ε, added to the std (NormStd only)
	Key  GroupKey // zero means DefaultGroupKey
	Base Source   // the reward normalised: SourceTeam (zero), SourceIndividual or SourceAuto
}

// GRPO returns GroupNorm with the std, ε = DefaultEps, the default key and
// the team reward.
func GRPO() GroupNorm { return GroupNorm{Mode: NormStd, Eps: DefaultEps} }

// DrGRPO returns GroupNorm without the std.
func DrGRPO() GroupNorm { return GroupNorm{Mode: NormCentre} }

// RLOO returns GroupNorm with leave-one-out baselines.
func RLOO() GroupNorm { return GroupNorm{Mode: NormLeaveOneOut} }

// Name implements trajectories.Allocator.
func (g GroupNorm) Name() string {
	name := fmt.Sprintf("GroupNorm(%d)", int(g.Mode))
	if g.Mode >= 0 && int(g.Mode) < len(normNames) {
		name = normNames[g.Mode]
	}
	params := []kv{
		{"key", g.Key.String(), DefaultGroupKey.String()},
		{"base", g.Base.String(), SourceTeam.String()},
	}
	if g.Mode == NormStd {
		params = append(params, kv{"eps", ftoa(g.Eps), ftoa(DefaultEps)})
	}
	return specName(name, params...)
}

// Needs implements Needer. RLOO, a team-based GroupNorm, or one whose key
// holds the agent, needs groups of several episodes: RLOO's baseline
// leaves out the unit's own episode, and within one episode every unit of
// a key has the same team reward, or is alone in its key.
func (g GroupNorm) Needs() Needs {
	return Needs{AgentScores: g.Base == SourceIndividual, Group: g.Mode == NormLeaveOneOut || g.Base == SourceTeam || g.Key&KeyAgent != 0}
}

type groupKey struct {
	// team is the unit's side, in a scenario with teams: units of two
	// sides are never normalised together, whatever the key.
	team     string
	scenario string
	group    int64
	role     string
	agent    string
	turn     int // KeyTurn: the agent's turn number; else -1
}

// Allocate implements trajectories.Allocator.
func (g GroupNorm) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	if g.Mode < NormStd || g.Mode > NormLeaveOneOut {
		return fmt.Errorf("%w: unknown normalisation mode %d", ErrBadAllocatorParam, int(g.Mode))
	}
	if math.IsNaN(g.Eps) || g.Eps < 0 {
		return fmt.Errorf("%w: %s: eps %g is negative", ErrBadAllocatorParam, g.Name(), g.Eps)
	}
	units, groups, unitOf, err := g.units(group)
	if err != nil {
		return err
	}
	for _, idx := range groups {
		if len(idx) >= 2 { // else no baseline: advantage 0
			g.normalize(units, idx)
		}
	}
	for e := range group {
		for s, u := range unitOf[e] {
			dst[e][s] = units[u].adv
		}
	}
	return nil
}

// normUnit is what GroupNorm normalises: an agent's episode, or its turn
// under KeyTurn.
type normUnit struct {
	r   float64
	adv float64
	ep  int // the unit's episode in the group
}

// units returns the units of group's finished episodes, the units of
// each normalisation group (in order of first use, each in episode
// order), and, per episode and sample, its unit.
func (g GroupNorm) units(group []*trajectories.Episode) (units []normUnit, groups [][]int, unitOf [][]int, err error) {
	key := g.Key
	if key == 0 {
		key = DefaultGroupKey
	}
	members := map[groupKey]int{} // a key's position in groups
	unitOf = make([][]int, len(group))
	perTurn := key&KeyTurn != 0
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		seats, err := sampleSeats(ep)
		if err != nil {
			return nil, nil, nil, err
		}
		var turns []int
		if perTurn {
			_, turns = sampleTimes(ep)
		}
		unitOf[e] = make([]int, len(seats))
		bySeat := map[int]int{} // a seat's unit, when the unit is the agent's episode
		for s, i := range seats {
			if u, ok := bySeat[i]; ok && !perTurn {
				unitOf[e][s] = u
				continue
			}
			r, err := g.Base.value(ep, i)
			if err != nil {
				return nil, nil, nil, err
			}
			k := groupKey{turn: -1, team: ep.TeamName(ep.Seats[i].Team)}
			if key&KeyScenario != 0 {
				k.scenario = ep.Scenario
			}
			if key&KeyGroup != 0 {
				k.group = ep.GroupIndex
			}
			if key&KeyRole != 0 {
				k.role = ep.Seats[i].Role
			}
			if key&KeyAgent != 0 {
				k.agent = ep.Seats[i].ID
			}
			if perTurn {
				k.turn = turns[s]
			}
			m, ok := members[k]
			if !ok {
				m = len(groups)
				members[k] = m
				groups = append(groups, nil)
			}
			bySeat[i] = len(units)
			unitOf[e][s] = len(units)
			groups[m] = append(groups[m], len(units))
			units = append(units, normUnit{r: r, ep: e})
		}
	}
	return units, groups, unitOf, nil
}

// normalize sets the advantage of the units idx of one group, at least
// two, by g.Mode.
func (g GroupNorm) normalize(units []normUnit, idx []int) {
	n := float64(len(idx))
	// Work on deviations from the first reward: equal rewards then give
	// exactly 0, not a rounding residue, and large offsets lose no
	// precision.
	shift := units[idx[0]].r
	sum := 0.0
	for _, u := range idx {
		sum += units[u].r - shift
	}
	mean := sum / n
	switch g.Mode {
	case NormStd:
		ss := 0.0
		for _, u := range idx {
			d := units[u].r - shift - mean
			ss += d * d
		}
		den := math.Sqrt(ss/(n-1)) + g.Eps
		if den == 0 {
			return // all equal, ε = 0: nothing to tell apart
		}
		for _, u := range idx {
			units[u].adv = (units[u].r - shift - mean) / den
		}
	case NormCentre:
		for _, u := range idx {
			units[u].adv = units[u].r - shift - mean
		}
	case NormLeaveOneOut:
		// The baseline leaves out the unit's whole episode: the units of
		// one episode share its outcome, so they are not independent
		// samples of the unit's reward. idx runs through the episodes in
		// order, so each episode's units are consecutive.
		for lo := 0; lo < len(idx); {
			e, hi, own := units[idx[lo]].ep, lo, 0.0
			for ; hi < len(idx) && units[idx[hi]].ep == e; hi++ {
				own += units[idx[hi]].r - shift
			}
			if others := len(idx) - (hi - lo); others > 0 {
				b := (sum - own) / float64(others)
				for _, u := range idx[lo:hi] {
					units[u].adv = units[u].r - shift - b
				}
			}
			lo = hi
		}
	}
}
