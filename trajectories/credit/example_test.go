package credit_test

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// spotlight gives the whole team reward to the agents with the best
// individual score, and nothing to the others.
type spotlight struct{}

func (spotlight) Name() string { return "spotlight" }

func (spotlight) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e, ep := range group {
		best := ep.Score.Agents[0]
		for _, v := range ep.Score.Agents {
			best = max(best, v)
		}
		for s, sample := range ep.Samples {
			for i, seat := range ep.Seats {
				if seat.ID == sample.Metadata.Agent && ep.Score.Agents[i] == best {
					dst[e][s] = ep.Score.Team
				}
			}
		}
	}
	return nil
}

// A user-defined allocator, registered beside the built-in ones and used
// with them.
func Example_customAllocator() {
	reg, err := credit.Builtin().With(credit.Entry{
		Name: "spotlight",
		Doc:  "the best-scoring agents get G, the others 0",
		Make: func(map[string]string) (trajectories.Allocator, error) { return spotlight{}, nil },
	})
	if err != nil {
		panic(err)
	}
	var allocs []trajectories.Allocator
	for _, spec := range []string{"spotlight", "equal-split", "discount:gamma=0.5,of=spotlight"} {
		a, err := reg.Parse(spec)
		if err != nil {
			panic(err)
		}
		allocs = append(allocs, a)
	}

	// A finished episode: ann plays twice, bob once; ann scored best.
	ep := &trajectories.Episode{
		Record: episode.Record{
			Status: protocol.StatusCompleted,
			Seats:  []episode.Seat{{ID: "ann", Role: "player"}, {ID: "bob", Role: "player"}},
			Turns: []episode.Turn{
				{Step: 1, Seat: 0, Turn: 0}, {Step: 2, Seat: 1, Turn: 0}, {Step: 3, Seat: 0, Turn: 1},
			},
			Score: episode.Score{Team: 10, Agents: []float64{7, 3}},
		},
	}
	for _, a := range ep.Turns {
		id := ep.Seats[a.Seat].ID
		ep.Samples = append(ep.Samples, protocol.Sample{Metadata: protocol.Metadata{Agent: id, Turn: a.Turn, Step: a.Step}})
	}
	if err := trajectories.Allocate(context.Background(), []*trajectories.Episode{ep}, allocs, trajectories.RewardDict); err != nil {
		panic(err)
	}
	for _, s := range ep.Samples {
		r := s.Reward.Dict
		fmt.Printf("%s turn %d: spotlight %g, equal-split %g, discounted %g\n",
			s.Metadata.Agent, s.Metadata.Turn, r["spotlight"], r["equal-split"], r["discount:gamma=0.5,of=spotlight"])
	}
	// Output:
	// ann turn 0: spotlight 10, equal-split 5, discounted 5
	// bob turn 0: spotlight 0, equal-split 5, discounted 0
	// ann turn 1: spotlight 10, equal-split 5, discounted 10
}

// Credit per side: in a scenario with teams, each seat is credited out of
// its own team's reward, among its team. Two teams bargain over a pie of
// 12: east demands 5 and 1, west 4 and 2, a deal; east's reward is 6 and
// west's 6, and each bargainer's Shapley value to its side is its demand.
func Example_teams() {
	sc := bargain.New()
	p, err := sc.Info().ParseParams(map[string]string{"rounds": "1"})
	if err != nil {
		panic(err)
	}
	demands := map[string]string{"east-0": "5", "east-1": "1", "west-0": "4", "west-1": "2"}
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p,
		Policy: func(s env.Seat) agents.Policy { return agents.Replay(demands[s.ID]) }}})
	ep := trajectories.NewEpisode(rec)
	fmt.Println("teams", ep.Teams, "rewards", ep.Score.Teams, "sum", ep.Score.Team)
	for _, spec := range []string{"team", "equal-split", "shapley"} {
		a, err := credit.Builtin().Parse(spec)
		if err != nil {
			panic(err)
		}
		dst := [][]float64{make([]float64, len(ep.Samples))}
		if err := a.Allocate(context.Background(), []*trajectories.Episode{ep}, dst); err != nil {
			panic(err)
		}
		fmt.Println(spec, dst[0])
	}
	// Output:
	// teams [east west] rewards [6 6] sum 12
	// team [6 6 6 6]
	// equal-split [3 3 3 3]
	// shapley [5 1 4 2]
}
