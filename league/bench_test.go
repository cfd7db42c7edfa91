package league_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

func reportMatches(b *testing.B, cpu float64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu, "matches/cpu-s")
	}
}

// BenchmarkLeague is the league's cost on a scripted game: random against
// random at tic-tac-toe, played as a plain run (play.Run, records only) and
// as league matches (matchmaking, a policy lookup per role, the result
// logged and rated by Elo and Glicko-2, one commit at the end), in batches
// of 64 at the machine's concurrency and one at a time; and with a
// tabular learner that learns every match. matches/cpu-s is the figure to
// compare on a shared machine.
func BenchmarkLeague(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	b.Run("plain-run", func(b *testing.B) {
		sc, err := scenarios.Builtin().Lookup("tictactoe")
		if err != nil {
			b.Fatal(err)
		}
		p, err := sc.Info().ParseParams(nil)
		if err != nil {
			b.Fatal(err)
		}
		cfg := play.Config{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(agents.Random())}, Episodes: b.N, Concurrency: workers, Seed: 1}
		b.ResetTimer()
		cpu := cputime.Seconds()
		if _, err := play.Run(context.Background(), cfg, &trajectories.Output{Sink: trajectories.Discard}); err != nil {
			b.Fatal(err)
		}
		cpu = cputime.Seconds() - cpu
		b.StopTimer()
		reportMatches(b, cpu)
	})
	play := func(b *testing.B, batch, conc int, players ...league.Player) {
		l, err := league.Create(b.TempDir(), league.Config{Name: "bench", Scenario: "tictactoe", Seed: 1, Batch: batch}, scenarios.Builtin())
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		for _, p := range players {
			if err := l.Add(p); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		cpu := cputime.Seconds()
		if err := l.Play(context.Background(), league.PlayOptions{N: int64(b.N), Concurrency: conc, CheckpointEvery: 1 << 40}); err != nil {
			b.Fatal(err)
		}
		cpu = cputime.Seconds() - cpu
		b.StopTimer()
		reportMatches(b, cpu)
	}
	randoms := []league.Player{{Name: "r1", Policy: runspec.Policy{Name: "random"}}, {Name: "r2", Policy: runspec.Policy{Name: "random"}}}
	b.Run("league-batch64", func(b *testing.B) { play(b, 64, workers, randoms...) })
	b.Run("league-batch1", func(b *testing.B) { play(b, 1, 1, randoms...) })
	b.Run("learner-vs-random", func(b *testing.B) {
		play(b, 1, 1, learnerPlayer("learner", "egreedy:alpha=0.1,epsilon=0.1"), randoms[0])
	})
}

// BenchmarkNashConv is an exact search's cost: tic-tac-toe against a
// uniform policy by positions (Search.Markov) and by histories (the full
// search, 1.1 million of them), Blotto with 3 soldiers a side on 3
// battlefields (27 joint moves a side) and a 1-against-1 bargain over 4
// coins in 3 rounds. histories/cpu-s is the figure to compare: the search
// forks an episode per history, so its cost is the scenario's steps.
func BenchmarkNashConv(b *testing.B) {
	reg := scenarios.Builtin()
	for _, c := range []struct {
		name, scenario string
		params         map[string]string
		markov         bool
	}{
		{"tictactoe-markov", "tictactoe", nil, true},
		{"tictactoe-full", "tictactoe", nil, false},
		{"blotto-3x3", "blotto", map[string]string{"n": "3", "fields": "3"}, false},
		{"bargain-1v1", "bargain", map[string]string{"members": "1", "pie": "4", "rounds": "3"}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			sc, err := reg.Lookup(c.scenario)
			if err != nil {
				b.Fatal(err)
			}
			params, err := sc.Info().ParseParams(c.params)
			if err != nil {
				b.Fatal(err)
			}
			nodes := 0
			cpu := cputime.Seconds()
			for b.Loop() {
				e, err := league.NashConv(context.Background(), sc, params, env.ByRole(nil, uniform{}), league.Search{Markov: c.markov})
				if err != nil {
					b.Fatal(err)
				}
				nodes += e.Nodes
			}
			b.ReportMetric(float64(nodes)/float64(b.N), "histories/op")
			b.ReportMetric(float64(nodes)/(cputime.Seconds()-cpu), "histories/cpu-s")
		})
	}
}
