package credit

import (
	"context"
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
)

// MAGRPO is multi-agent GRPO (Liu et al., "LLM Collaboration With
// Multi-Agent Reinforcement Learning", arXiv 2508.04652): the
// group-relative advantage of joint rollout g among G joint rollouts from
// the same history,
//
//	Â^(g) = R^(g) − (1/G) Σ_g' R^(g')
//
// shared by every agent's sample of the joint rollout, R being the team
// reward (with Std, Â is further divided by the group's sample standard
// deviation plus Eps, as GRPO does). Its groups depend on how the
// episodes were played:
//
//   - a tree-sampled episode (env.PlayTree, episode.Tree): the groups are
//     the candidates drawn at one turn from one history, R^(c) the team
//     reward of candidate c's continuation (episode.Candidate.Team). With
//     Tree.Joint, candidate c of a step is one joint action of every
//     sampled seat, as the paper's multi-turn MAGRPO samples them, and every
//     seat's candidate c gets the same Â; without it, a seat's candidates
//     are compared with the other seats' moves held fixed. The samples of
//     seats that were not sampled get 0;
//   - any other episode: the group's episodes are the G joint rollouts
//     (the same scenario seed); each gets R − mean over the group's
//     finished episodes. Only in a one-step game do they share the
//     history at every turn, as the paper requires: in a multi-turn game
//     their histories part after the first step.
//
// A group of one, or of equal rewards, gets 0; the samples of an
// unfinished episode get 0, and it takes no part in the mean.
//
// In a scenario with teams, R is the reward of the seat's own side (G_T,
// and a candidate's Team is its seat's side's), and each side is
// compared across the group's episodes with itself only.
//
// When allocators coincide: on episodes that are not tree-sampled, with
// the team reward, magrpo equals dr-grpo (and magrpo:std=true grpo)
// whenever the group key gives each unit's group one unit per episode,
// such as key=scenario+group+agent, or the default key with one agent per
// role; rloo is then magrpo × G/(G−1). On tree-sampled episodes,
// magrpo:std=true equals at-grpo whenever every candidate's reward is its
// team reward (Tree.Alpha 1 and a scenario without agent scores).
type MAGRPO struct {
	Std bool
	Eps float64 // added to the std (Std only)
}

// Name implements trajectories.Allocator.
func (m MAGRPO) Name() string {
	params := []kv{{"std", fmt.Sprint(m.Std), "false"}}
	if m.Std {
		params = append(params, kv{"eps", ftoa(m.Eps), ftoa(DefaultEps)})
	}
	return specName("magrpo", params...)
}

// Needs implements Needer: MAGRPO compares the episodes of a group (or
// the candidates of a tree-sampled one).
func (MAGRPO) Needs() Needs { return Needs{Group: true} }

// Allocate implements trajectories.Allocator.
func (m MAGRPO) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	if math.IsNaN(m.Eps) || m.Eps < 0 {
		return fmt.Errorf("%w: %s: eps %g is negative", ErrBadAllocatorParam, m.Name(), m.Eps)
	}
	for e := range dst {
		clear(dst[e])
	}
	mode := NormCentre
	if m.Std {
		mode = NormStd
	}
	plain, trees := splitTrees(group)
	for _, e := range trees {
		if finished(group[e]) {
			treeAdvantages(group[e], dst[e], mode, m.Eps, func(c *episode.Candidate) float64 { return c.Team })
		}
	}
	// Every side is compared across the group's episodes with itself
	// (one side, whose reward is G, in a scenario without teams).
	sides := 1
	for _, e := range plain {
		sides = max(sides, group[e].TeamCount())
	}
	var r []float64
	var who []int
	for t := range sides {
		r, who = r[:0], who[:0]
		for _, e := range plain {
			if ep := group[e]; finished(ep) && t < ep.TeamCount() {
				r, who = append(r, ep.Score.Of(t)), append(who, e)
			}
		}
		normalise(r, mode, m.Eps)
		for j, e := range who {
			ep := group[e]
			if ep.Teams == nil {
				for s := range dst[e] {
					dst[e][s] = r[j]
				}
				continue
			}
			seats, err := sampleSeats(ep)
			if err != nil {
				return err
			}
			for s, i := range seats {
				if ep.Seats[i].Team == t {
					dst[e][s] = r[j]
				}
			}
		}
	}
	return nil
}

// ATKey is AT-GRPO's group key for episodes that are not tree-sampled: one
// agent's t-th turns across the episodes of a group.
const ATKey = KeyScenario | KeyGroup | KeyAgent | KeyTurn

// ATGRPO is AT-GRPO, agent- and turn-wise grouped GRPO (Zhao et al.,
// "Stronger Together: On-Policy Reinforcement Learning for Collaborative
// LLMs", arXiv 2510.11062, Algorithm 1). On a tree-sampled episode
// (env.PlayTree) its groups are the paper's: the K candidates drawn for
// one agent at one turn from the same history (group key (episode, agent,
// turn)), each rewarded with the mix the paper defines,
//
//	r_c = α · r_team + r_local
//
// (episode.Candidate.Reward: α is Tree.Alpha, r_team the team reward and
// r_local the agent's own score of the candidate's continuation), and
// candidate c gets GRPO's advantage within its group,
//
//	A_c = (r_c − mean_c' r_c') / (std_c' r_c' + ε)
//
// (std the sample standard deviation, as GroupNorm's NormStd; Mode may make
// it Dr.GRPO's or RLOO's instead). The samples of seats that were not
// tree-sampled get 0. The main line's turn is the candidate that won
// (Candidate.Chosen); every candidate is a sample.
//
// On episodes that are not tree-sampled there are no such groups, and
// ATGRPO falls back to GroupNorm with Key (ATKey when zero): an agent's
// t-th turn is compared with its t-th turns in the group's other episodes.
// That is the paper's grouping only where those turns share their prompt:
// at the first turn, or in a one-step game. Base applies to that fallback
// only.
//
// When allocators coincide: on tree-sampled episodes, at-grpo equals
// magrpo:std=true when every candidate's reward is its team reward (α = 1
// and no agent scores). On other episodes it is grpo with key=ATKey; with
// the team reward and one turn per agent (El Farol), grpo with
// key=scenario+group+agent, and magrpo:std=true.
type ATGRPO struct{ GroupNorm }

// NewATGRPO returns ATGRPO with the std, ε = DefaultEps, ATKey and the
// team reward.
func NewATGRPO() ATGRPO { return ATGRPO{GroupNorm{Mode: NormStd, Eps: DefaultEps, Key: ATKey}} }

func (a ATGRPO) norm() GroupNorm {
	g := a.GroupNorm
	if g.Key == 0 {
		g.Key = ATKey
	}
	return g
}

// Name implements trajectories.Allocator.
func (a ATGRPO) Name() string {
	g := a.norm()
	return specName("at-grpo", kv{"key", g.Key.String(), ATKey.String()}, kv{"base", g.Base.String(), SourceTeam.String()}, kv{"eps", ftoa(g.Eps), ftoa(DefaultEps)})
}

// Needs implements Needer.
func (a ATGRPO) Needs() Needs { return a.norm().Needs() }

// Allocate implements trajectories.Allocator.
func (a ATGRPO) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	g := a.norm()
	if g.Mode < NormStd || g.Mode > NormLeaveOneOut {
		return fmt.Errorf("%w: unknown normalisation mode %d", ErrBadAllocatorParam, int(g.Mode))
	}
	if math.IsNaN(g.Eps) || g.Eps < 0 {
		return fmt.Errorf("%w: %s: eps %g is negative", ErrBadAllocatorParam, a.Name(), g.Eps)
	}
	plain, trees := splitTrees(group)
	for _, e := range trees {
		clear(dst[e])
		if finished(group[e]) {
			treeAdvantages(group[e], dst[e], g.Mode, g.Eps, func(c *episode.Candidate) float64 { return c.Reward })
		}
	}
	if len(trees) == 0 {
		return g.Allocate(ctx, group, dst)
	}
	sub, subDst := make([]*trajectories.Episode, len(plain)), make([][]float64, len(plain))
	for j, e := range plain {
		sub[j], subDst[j] = group[e], dst[e]
	}
	return g.Allocate(ctx, sub, subDst)
}
