package league_test

import (
	"context"
	"fmt"
	"os"

	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
)

// A tic-tac-toe league of three scripted players, every player in turn
// the focal one, opponents drawn uniformly; the ratings rank them.
func ExampleLeague_Play() {
	dir, err := os.MkdirTemp("", "league-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	l, err := league.Create(dir, league.Config{Name: "ttt", Scenario: "tictactoe", Seed: 1}, scenarios.Builtin())
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for _, name := range []string{"random", "center-first", "minimax"} {
		if err := l.Add(league.Player{Name: name, Policy: runspec.Policy{Name: name}}); err != nil {
			panic(err)
		}
	}
	if err := l.Play(context.Background(), league.PlayOptions{N: 600}); err != nil {
		panic(err)
	}
	for _, r := range l.Ratings() {
		fmt.Printf("%-12s lost %d of %d\n", r.Player, r.Record.Losses, r.Record.Games)
	}
	fmt.Println("minimax vs random:", l.Versus("minimax", "random").Wins > 0)
	// Output:
	// center-first lost 1 of 388
	// minimax      lost 0 of 407
	// random       lost 365 of 405
	// minimax vs random: true
}
