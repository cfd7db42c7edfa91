package scenarios_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
)

// update rewrites testdata/baselines.golden. Every package under scenarios/
// declares it, so that `go test ./scenarios/... -update` works.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// nonDefault are parameter sets, other than the defaults, that every
// built-in scenario must pass the harness with.
var nonDefault = map[string][]map[string]string{
	"bargain":     {{"members": "1", "rounds": "1"}, {"members": "3", "pie": "20", "discount": "0.5"}},
	"blotto":      {{"n": "1", "fields": "1"}, {"n": "24", "fields": "5"}},
	"committee":   {{"informed": "1", "uninformed": "0", "options": "2"}, {"informed": "3", "uninformed": "9", "options": "6"}},
	"debate":      {{"kind": "arithmetic", "difficulty": "5", "rounds": "1"}, {"kind": "linear", "difficulty": "3", "rounds": "5", "skill": "0.2"}},
	"elfarol":     {{"agents": "7", "nights": "2", "capacity": "3"}, {"agents": "200", "nights": "10"}},
	"negotiation": {{"scoring": "zero-sum", "illegal": "penalty"}, {"scoring": "cooperative", "items": "6", "max_count": "10", "rounds": "2"}},
	"signal":      {{"vocab": "symbols", "candidates": "6"}, {"attributes": "3", "values": "2", "candidates": "8"}},
	"tictactoe":   {{"illegal": "penalty"}},
	"werewolf":    {{"players": "5", "wolves": "1", "seers": "0", "days": "2"}, {"players": "12", "wolves": "3"}},
}

func TestBuiltinNames(t *testing.T) {
	assert.Equal(t, []string{"bargain", "blotto", "committee", "debate", "elfarol", "negotiation", "signal", "tictactoe", "werewolf"}, scenarios.Builtin().Names())
	for name := range nonDefault {
		_, err := scenarios.Builtin().Lookup(name)
		require.NoError(t, err)
	}
}

func TestBuiltinsPassTheHarness(t *testing.T) {
	reg := scenarios.Builtin()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, nonDefault, name, "give the new scenario non-default parameters to check")
			sc, err := reg.Lookup(name)
			require.NoError(t, err)
			scenariotest.Check(t, sc, scenariotest.Options{
				Params: append([]map[string]string{nil}, nonDefault[name]...),
				Seeds:  []uint64{1, 2, 3},
			})
		})
	}
}

// TestDefaultsRun plays each scenario as `troupe run NAME` does with no
// flags: default parameters, default policy.
func TestDefaultsRun(t *testing.T) {
	reg := scenarios.Builtin()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			sc, err := reg.Lookup(name)
			require.NoError(t, err)
			info := sc.Info()
			p, err := info.ParseParams(nil)
			require.NoError(t, err)
			def := info.DefaultPolicy
			if def == "" {
				def = "random"
			}
			policy, err := scenariotest.NamedPolicy(sc, p, def)
			require.NoError(t, err)
			var c trajectories.Collector
			sum, err := play.Run(context.Background(), play.Config{
				Play:        env.Play{Scenario: sc, Params: p, Policy: policy},
				Episodes:    20,
				Concurrency: 2,
				Seed:        9,
				FailFast:    true,
			}, &trajectories.Output{Sink: &c})
			require.NoError(t, err)
			assert.Equal(t, 20, sum.ByStatus[protocol.StatusCompleted])
			assert.Positive(t, sum.Samples)
		})
	}
}

// TestBaselines records, for every built-in scenario and policy, the mean
// team reward and each role's mean score over a fixed run, so that a
// change in a scenario's rules or policies shows up in review as a change
// of numbers. The file is also the scenarios' reference table: random
// versus scripted signalling, minimax versus random tic-tac-toe.
func TestBaselines(t *testing.T) {
	const episodes = 500
	reg := scenarios.Builtin()
	var b strings.Builder
	fmt.Fprintf(&b, "# mean over %d episodes, run seed 1, default parameters\n", episodes)
	fmt.Fprintf(&b, "# scenario policy: team <mean team reward>  <role> <mean agent score> ...\n")
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		info := sc.Info()
		p, err := info.ParseParams(nil)
		require.NoError(t, err)
		for _, pol := range info.PolicyNames() {
			policy, err := scenariotest.NamedPolicy(sc, p, pol)
			require.NoError(t, err)
			roleSum, roleN := map[string]float64{}, map[string]int{}
			sum, err := play.Run(context.Background(), play.Config{
				Play:        env.Play{Scenario: sc, Params: p, Policy: policy},
				Episodes:    episodes,
				Concurrency: 4,
				Seed:        1,
				FailFast:    true,
			}, &trajectories.Output{Sink: trajectories.Discard, Observe: func(ep *trajectories.Episode) {
				for i, v := range ep.Score.Agents {
					roleSum[ep.Seats[i].Role] += v
					roleN[ep.Seats[i].Role]++
				}
			}})
			require.NoError(t, err, "%s %s", name, pol)
			fmt.Fprintf(&b, "%s %s: team %.4f", name, pol, sum.MeanTeamReward())
			for _, r := range info.Roles {
				if roleN[r.Name] > 0 {
					fmt.Fprintf(&b, "  %s %.4f", r.Name, roleSum[r.Name]/float64(roleN[r.Name]))
				}
			}
			b.WriteString("\n")
		}
	}
	got := b.String()
	scenariotest.Golden(t, "testdata/baselines.golden", got, *update)

	// What the table must show, whatever its exact numbers.
	line := func(prefix string) string {
		i := slices.IndexFunc(strings.Split(got, "\n"), func(l string) bool { return strings.HasPrefix(l, prefix) })
		require.GreaterOrEqual(t, i, 0, prefix)
		return strings.Split(got, "\n")[i]
	}
	assert.Contains(t, line("tictactoe minimax:"), "team 0.0000  x 0.0000  o 0.0000", "perfect play always draws")
	assert.Contains(t, line("tictactoe random:"), "team 0.0000", "a zero-sum game's team reward is 0")
}
