package blotto_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// rulesAllocators are the specs testdata/rules.py recomputes, in its order.
var rulesAllocators = []string{"team", "individual", "difference", "difference:sim=resimulate", "leave-one-out"}

// The rewards of played episodes equal an independent implementation of
// blotto.md's rules in Python (testdata/rules.py), given only the episode
// file: the battlefields each soldier answered, the sides' rewards, every
// soldier's local reward and the per-side difference reward, which it
// works out by sending each soldier home itself. Random soldiers, an
// answer that is not a battlefield and soldiers at home included.
func TestRewardsMatchThePythonRules(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("TROUPE_REQUIRE_PYTHON") != "" {
			t.Fatalf("%s is required (TROUPE_REQUIRE_PYTHON) to recompute blotto's rewards: %v", python, err)
		}
		t.Skipf("%s is absent: blotto's rewards are not recomputed in Python", python)
	}
	sc := blotto.New()
	var allocs []trajectories.Allocator
	for _, spec := range rulesAllocators {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err)
		allocs = append(allocs, a)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		params map[string]string
		policy env.PolicyFor
	}{
		{"random-n3", map[string]string{"n": "3"}, env.SamePolicy(agents.Random())},
		{"random-n12-f4", map[string]string{"n": "12", "fields": "4"}, env.SamePolicy(agents.Random())},
		// A policy that answers off the board now and then: soldiers home.
		{"some-home-n6", map[string]string{"n": "6", "fields": "3"}, env.SamePolicy(agents.PolicyFunc(sometimesHome))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := sc.Info().ParseParams(tc.params)
			require.NoError(t, err)
			f, err := os.Create(filepath.Join(dir, tc.name+".jsonl"))
			require.NoError(t, err)
			out := &trajectories.Output{Sink: trajectories.NewEpisodeWriter(f), Allocators: allocs, Format: trajectories.RewardDict}
			_, err = play.Run(t.Context(), play.Config{
				Play:     env.Play{Scenario: sc, Params: p, Policy: tc.policy},
				Episodes: 200, Seed: 7, Concurrency: 2,
			}, out)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			res, err := exec.CommandContext(t.Context(), python, "-B", "testdata/rules.py", p.Map()["fields"], f.Name()).CombinedOutput()
			require.NoError(t, err, "rules.py:\n%s", res)
			t.Logf("rules.py: %s", res)
		})
	}
}

// sometimesHome answers a random battlefield, "home" one turn in eight and
// "retreat" (not a battlefield: home, noted illegal) one in eight.
func sometimesHome(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	switch obs.Intn(0, 8) {
	case 0:
		return agents.Action{Text: blotto.NullAction}, nil
	case 1:
		return agents.Action{Text: "retreat"}, nil
	}
	return agents.Action{Text: obs.Legal[obs.Intn(1, len(obs.Legal))]}, nil
}
