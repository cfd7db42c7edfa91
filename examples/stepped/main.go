// Command stepped is a driver of troupe's stepped episode written outside
// package env: it plays tic-tac-toe with no troupe policy at all, x
// choosing each move by flat Monte Carlo search over forks of the episode
// (every legal move tried in forks played out at random, the best mean
// score kept), o moving at random. It prints x's results and the cost of
// a fork.
//
//	go run ./examples/stepped -games 50 -rollouts 16
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

func main() {
	games := flag.Int("games", 50, "games to play")
	rollouts := flag.Int("rollouts", 16, "random play-outs per candidate move")
	seed := flag.Uint64("seed", 1, "seed of the games and of the drivers' draws")
	flag.Parse()
	res, err := play(*games, *rollouts, *seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepped:", err)
		os.Exit(1)
	}
	fmt.Printf("x (fork search, %d play-outs a move) against o (random), %d games: %d won, %d drawn, %d lost; %d forks\n",
		*rollouts, *games, res.won, res.drawn, res.lost, res.forks)
}

type results struct{ won, drawn, lost, forks int }

// play plays the games and tallies x's outcomes.
func play(games, rollouts int, seed uint64) (results, error) {
	var res results
	sc := tictactoe.New()
	params, err := sc.Info().ParseParams(nil)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	for g := range games {
		ep, err := env.NewEpisode(env.Setup{Play: env.Play{Scenario: sc, Params: params}, Seed: seed + uint64(g)})
		if err != nil {
			return res, err
		}
		for !ep.Done() {
			o := ep.Pending()[0] // tic-tac-toe is sequential: one mover a step
			move := o.Legal[rng.IntN(len(o.Legal))]
			if o.Role == "x" {
				if move, err = search(ep, o, rollouts, rng, &res.forks); err != nil {
					return res, err
				}
			}
			if err := ep.Act(o.Seat, agents.Action{Text: move}); err != nil {
				return res, err
			}
		}
		switch x := ep.Record().Score.Agents[0]; {
		case x > 0:
			res.won++
		case x < 0:
			res.lost++
		default:
			res.drawn++
		}
	}
	return res, nil
}

// search tries every legal move of the mover o in forks of ep, each
// played out at random rollouts times, and returns the move whose mean
// score for o's seat is best.
func search(ep *env.Episode, o env.PendingSeat, rollouts int, rng *rand.Rand, forks *int) (string, error) {
	best, bestMean := o.Legal[0], -2.0
	for _, move := range o.Legal {
		sum := 0.0
		for range rollouts {
			f, err := ep.Fork()
			if err != nil {
				return "", err
			}
			*forks++
			if err := f.Step(agents.Action{Text: move}); err != nil {
				return "", err
			}
			for !f.Done() {
				p := f.Pending()[0]
				if err := f.Step(agents.Action{Text: p.Legal[rng.IntN(len(p.Legal))]}); err != nil {
					return "", err
				}
			}
			sum += f.Record().Score.Agents[o.Seat]
		}
		if mean := sum / float64(rollouts); mean > bestMean {
			best, bestMean = move, mean
		}
	}
	return best, nil
}
