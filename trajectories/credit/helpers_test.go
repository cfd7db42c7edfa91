package credit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// game is a coalition game given by its characteristic function: v[mask]
// is the value of the coalition whose members are the set bits.
type game struct {
	k int
	v []float64
}

func (g game) full() int { return 1<<g.k - 1 }

// randomGame returns a k-player game with v(∅) = 0 and every other value
// uniform in [0, 1).
func randomGame(rng *rand.Rand, k int) game {
	v := make([]float64, 1<<k)
	for m := 1; m < len(v); m++ {
		v[m] = rng.Float64()
	}
	return game{k, v}
}

// gloveGame is the glove game: player 0 holds a left glove, players 1 and
// 2 a right one, and a coalition is worth 1 when it holds a pair.
func gloveGame() game {
	v := make([]float64, 8)
	for m := range v {
		if m&1 != 0 && m&6 != 0 {
			v[m] = 1
		}
	}
	return game{3, v}
}

// episode returns a finished episode of g with one sample per agent, whose
// Replay computes v of the coalition of agents that are neither absent nor
// playing the null action. replays counts the re-simulations.
func (g game) episode(replays *atomic.Int64) *trajectories.Episode {
	ep := &trajectories.Episode{
		Record: episode.Record{
			Scenario:   "game",
			Seed:       7,
			PolicySeed: 11,
			Status:     protocol.StatusCompleted,
			End:        "terminated",
			Score:      episode.Score{Team: g.v[g.full()]},
		},
	}
	for i := range g.k {
		id := fmt.Sprintf("p%d", i)
		ep.Seats = append(ep.Seats, episode.Seat{ID: id, Role: "player"})
		ep.Turns = append(ep.Turns, episode.Turn{Step: 1, Seat: i, Action: "play"})
		ep.Samples = append(ep.Samples, protocol.Sample{Metadata: protocol.Metadata{Agent: id, Role: "player", Step: 1}})
	}
	ep.Steps = 1
	ep.Replay = episode.ReplayerFunc(func(ctx context.Context, cf episode.Counterfactual) (episode.Score, error) {
		if replays != nil {
			replays.Add(1)
		}
		if len(cf.Replace) > 0 {
			return episode.Score{}, errors.New("the game has no alternative actions")
		}
		m := g.full()
		for _, i := range slices.Concat(cf.Absent, cf.Null) {
			m &^= 1 << i
		}
		return episode.Score{Team: g.v[m]}, ctx.Err()
	})
	return ep
}

// allocate runs a over the episodes as one group and returns the values.
func allocate(a trajectories.Allocator, eps ...*trajectories.Episode) ([][]float64, error) {
	dst := make([][]float64, len(eps))
	for e, ep := range eps {
		dst[e] = make([]float64, len(ep.Samples))
	}
	return dst, a.Allocate(context.Background(), eps, dst)
}

// agentEpisode builds a finished episode of the given seats (id:role) with
// team reward g and, when scores is non-nil, per-agent scores; each seat
// takes turns[i] turns (one step each, every turn emitted).
func agentEpisode(g float64, scores []float64, seats []episode.Seat, turns []int) *trajectories.Episode {
	ep := &trajectories.Episode{
		Record: episode.Record{
			Scenario: "test",
			Status:   protocol.StatusCompleted,
			Seats:    seats,
			Score:    episode.Score{Team: g, Agents: scores},
		},
	}
	step := 0
	for i, s := range seats {
		for t := range turns[i] {
			step++
			ep.Turns = append(ep.Turns, episode.Turn{Step: step, Seat: i, Turn: t, Action: "x"})
			ep.Samples = append(ep.Samples, protocol.Sample{Metadata: protocol.Metadata{Agent: s.ID, Role: s.Role, Turn: t, Step: step}})
		}
	}
	ep.Steps = step
	return ep
}

// seats makes seats called a0, a1, ... with the given roles.
func seats(roles ...string) []episode.Seat {
	out := make([]episode.Seat, len(roles))
	for i, r := range roles {
		out[i] = episode.Seat{ID: fmt.Sprintf("a%d", i), Role: r}
	}
	return out
}
