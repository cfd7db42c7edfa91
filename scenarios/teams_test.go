package scenarios_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// teamAllocators are the specs testdata/teamcredit.py recomputes, in its
// order.
var teamAllocators = []string{
	"team", "equal-split", "difference:sim=resimulate", "leave-one-out:sim=resimulate", "shapley:sim=resimulate",
	"dr-grpo", "magrpo",
}

// Per-side credit of the two-team games, werewolf (zero-sum, hidden roles),
// bargain (general-sum) and blotto (zero-sum, simultaneous), equals a brute force in Python
// (testdata/teamcredit.py) that is given only the episode and sample files
// and what re-simulations give each team for every subset of seats
// present and for every seat playing its null action: it picks the
// coalitions each allocator needs itself (its side's members present or
// not, the other side present), and enumerates the orderings of each
// side's members for Shapley.
func TestTeamCreditMatchesBruteForce(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("TROUPE_REQUIRE_PYTHON") != "" {
			t.Fatalf("%s is required (TROUPE_REQUIRE_PYTHON) to recompute the per-side credit: %v", python, err)
		}
		t.Skipf("%s is absent: the per-side credit is not recomputed in Python", python)
	}
	for _, tc := range []struct {
		name   string
		params map[string]string
	}{
		{"werewolf", nil},
		{"bargain", map[string]string{"members": "3"}},
		{"blotto", map[string]string{"n": "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := scenarios.Builtin().Lookup(tc.name)
			require.NoError(t, err)
			p, err := sc.Info().ParseParams(tc.params)
			require.NoError(t, err)
			policy, err := scenariotest.NamedPolicy(sc, p, "scripted")
			require.NoError(t, err)
			var allocs []trajectories.Allocator
			for _, spec := range teamAllocators {
				a, err := credit.Builtin().Parse(spec)
				require.NoError(t, err)
				allocs = append(allocs, a)
			}
			dir := t.TempDir()
			samples, err := os.Create(filepath.Join(dir, "samples.jsonl"))
			require.NoError(t, err)
			episodes, err := os.Create(filepath.Join(dir, "episodes.jsonl"))
			require.NoError(t, err)
			var eps []*trajectories.Episode
			out := &trajectories.Output{
				Sink:       trajectories.Tee(trajectories.NewJSONLWriter(samples, trajectories.Flat), trajectories.NewEpisodeWriter(episodes)),
				Allocators: allocs, Format: trajectories.RewardDict,
				Observe: func(ep *trajectories.Episode) {
					c := *ep
					eps = append(eps, &c)
				},
			}
			_, err = play.Run(t.Context(), play.Config{
				Play:     env.Play{Scenario: sc, Params: p, Policy: policy},
				Episodes: 12, GroupSize: 3, Seed: 5, Concurrency: 2,
			}, out)
			require.NoError(t, err)
			require.NoError(t, samples.Close())
			require.NoError(t, episodes.Close())

			type replays struct {
				Present [][]float64 `json:"present"`
				Null    [][]float64 `json:"null"`
			}
			values := map[int64]replays{}
			for _, ep := range eps {
				require.True(t, ep.Finished(), ep.Err)
				n := len(ep.Seats)
				var r replays
				for mask := range 1 << n {
					var absent []int
					for i := range n {
						if mask&(1<<i) == 0 {
							absent = append(absent, i)
						}
					}
					score, err := ep.Replay.Replay(t.Context(), episode.Counterfactual{Absent: absent, Resimulate: true})
					require.NoError(t, err)
					r.Present = append(r.Present, score.Teams)
				}
				for i := range n {
					score, err := ep.Replay.Replay(t.Context(), episode.Counterfactual{Null: []int{i}, Resimulate: true})
					require.NoError(t, err)
					r.Null = append(r.Null, score.Teams)
				}
				values[ep.RolloutID] = r
			}
			data, err := json.Marshal(values)
			require.NoError(t, err)
			valuesPath := filepath.Join(dir, "values.json")
			require.NoError(t, os.WriteFile(valuesPath, data, 0o644))
			cmd := exec.CommandContext(t.Context(), python, "-B", "testdata/teamcredit.py", episodes.Name(), samples.Name(), valuesPath)
			res, err := cmd.CombinedOutput()
			require.NoError(t, err, "teamcredit.py:\n%s", res)
			t.Logf("teamcredit.py: %s", res)
		})
	}
}
