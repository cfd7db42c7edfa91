package credit

import (
	"context"
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/trajectories"
)

// MAGRPO is multi-agent GRPO (Liu et al., arXiv 2508.04652): the group's
// episodes are G joint rollouts from the same history (the same scenario
// seed), and each joint rollout g gets the advantage
//
//	Â^(g) = R^(g) − mean over the group's finished episodes of R
//
// for every sample of every agent in it, R being the team reward: the
// agents of a rollout share its advantage, unlike GroupNorm, whose units
// are agents. With Std, the advantage is divided by the group's sample
// standard deviation plus Eps, as GRPO does. A group of one finished
// episode, or of equal rewards, gets 0; the samples of an unfinished
// episode get 0 and it takes no part in the mean.
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

// Needs implements Needer: MAGRPO compares the episodes of a group.
func (MAGRPO) Needs() Needs { return Needs{Group: true} }

// Allocate implements trajectories.Allocator.
func (m MAGRPO) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	if math.IsNaN(m.Eps) || m.Eps < 0 {
		return fmt.Errorf("%w: %s: eps %g is negative", ErrBadAllocatorParam, m.Name(), m.Eps)
	}
	n, shift, sum := 0, 0.0, 0.0
	for _, ep := range group {
		if !finished(ep) {
			continue
		}
		if n == 0 {
			shift = ep.Score.Team // deviations from the first: equal rewards give exactly 0
		}
		n++
		sum += ep.Score.Team - shift
	}
	for e := range dst {
		clear(dst[e])
	}
	if n < 2 {
		return nil
	}
	mean := sum / float64(n)
	den := 1.0
	if m.Std {
		ss := 0.0
		for _, ep := range group {
			if finished(ep) {
				d := ep.Score.Team - shift - mean
				ss += d * d
			}
		}
		den = math.Sqrt(ss/float64(n-1)) + m.Eps
		if den == 0 {
			return nil
		}
	}
	for e, ep := range group {
		if !finished(ep) {
			continue
		}
		adv := (ep.Score.Team - shift - mean) / den
		for s := range dst[e] {
			dst[e][s] = adv
		}
	}
	return nil
}

// ATKey is AT-GRPO's group key: one agent's t-th turns across the
// episodes of a group.
const ATKey = KeyScenario | KeyGroup | KeyAgent | KeyTurn

// ATGRPO is agent- and turn-wise grouped GRPO, after AT-GRPO (PettingLLMs):
// GroupNorm whose unit is one turn of one agent, compared with the same
// agent's turns of the same number across the group's episodes (the
// candidates sampled for that agent at that turn, when a group's episodes
// share a scenario seed). Key zero means ATKey.
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
	return a.norm().Allocate(ctx, group, dst)
}
