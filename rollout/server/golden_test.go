package server_test

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/scenarios"
)

var update = flag.Bool("update", false, "rewrite the golden answers in testdata/golden")

// goldenCase is a sequence of requests to one fresh service: the answers
// of the later ones may depend on the earlier ones (ids and indexes from
// the service's counters, RAE's baselines).
type goldenCase struct {
	name     string
	cfg      server.Config
	requests []string
}

// TestGoldenAnswers pins the bytes the service answers slime with: every
// answer's status, allocation sequence and body, for requests that cover
// the request's fields (ids and seeds given and defaulted, policies per
// role, emit, limits, the invalid rule, allocators and their reward
// formats, RAE across requests, the dataset row's prompt and label,
// keep_failed, refusals between answers). A change in them is a change in
// what slime trains on: run with -update only when it is meant, and say
// why in the commit.
func TestGoldenAnswers(t *testing.T) {
	reg := goldenRegistry(t)
	for _, tc := range []goldenCase{
		{name: "ids-and-seeds", cfg: server.Config{Seed: 9}, requests: []string{
			`{"scenario":"tictactoe","n":3,"rollout_id":100,"group_index":7,"index":1000,"policy":"minimax","policies":{"o":"random"},"allocators":["individual"]}`,
			`{"scenario":"signal","n":4,"rollout_id":3,"group_index":2,"index":0,"seed":11,"policy_seed":5,"allocators":["team","rloo(key=role)"],"reward_format":"dict"}`,
			`{"scenario":"signal","n":2,"seed":0,"policy_seed":0,"rollout_id":0,"group_index":0,"index":0}`,
		}},
		{name: "service-counters", cfg: server.Config{Seed: 4, RolloutIDBase: 500}, requests: []string{
			`{"scenario":"tictactoe","n":2}`,
			`{"scenario":"signal","params":{"candidates":40}}`, // refused: takes no ids
			`{"scenario":"signal","policy":"genius"}`,          // refused: takes no ids
			`{"scenario":"signal","n":3,"policy":"random"}`,
			`{"scenario":"tictactoe","group_index":3}`,
			`{"scenario":"elfarol","params":{"agents":5,"nights":2},"n":2,"allocators":["team","equal-split","individual"],"reward_format":"dict"}`,
		}},
		{name: "limits-emit-invalid", cfg: server.Config{}, requests: []string{
			`{"scenario":"tictactoe","limits":{"max_turns":3},"emit":["o"],"rollout_id":1,"group_index":1,"index":0}`,
			`{"scenario":"tictactoe","limits":{"max_turns":1},"emit":["o"],"rollout_id":2,"group_index":1,"index":0}`,
			`{"scenario":"tictactoe","limits":{"max_steps":2,"timeout_seconds":30},"rollout_id":3,"group_index":1,"index":0}`,
			`{"scenario":"negotiation","n":2,"invalid":"forfeit","emit":["bob","alice","bob"],"rollout_id":4,"group_index":2,"index":0}`,
			`{"scenario":"negotiation","invalid":"spiral","params":{"rounds":2,"scoring":"cooperative"},"rollout_id":6,"group_index":3,"index":0}`,
			`{"scenario":"debate","n":2,"params":{"kind":"linear"},"limits":{"max_messages":2},"rollout_id":7,"group_index":4,"index":0}`,
		}},
		{name: "dataset-row", cfg: server.Config{}, requests: []string{
			`{"scenario":"quiz","prompt":"six times seven?","label":"42","rollout_id":1,"group_index":0,"index":0}`,
			`{"scenario":"quiz","prompt":[{"role":"user","content":"hi"}],"label":{"answer":4.50,"k":[1,2]},"rollout_id":2,"group_index":0,"index":1}`,
			`{"scenario":"quiz","params":{"label":"41"},"label":"42","rollout_id":3,"group_index":0,"index":2}`,
			`{"scenario":"tictactoe","prompt":"unused","label":7,"rollout_id":4,"group_index":1,"index":3}`,
		}},
		{name: "rae-across-requests", cfg: server.Config{Seed: 2}, requests: []string{
			`{"scenario":"tictactoe","n":4,"allocators":["rae"],"policies":{"x":"minimax"}}`,
			`{"scenario":"tictactoe","n":4,"allocators":["rae:alpha=0.95","team"],"reward_format":"dict"}`,
			`{"scenario":"tictactoe","n":2,"allocators":["rae:alpha=0.5"],"rollout_id":9,"group_index":9,"index":9}`,
			`{"scenario":"tictactoe","n":3,"allocators":["rae"]}`,
		}},
		{name: "counterfactual", cfg: server.Config{}, requests: []string{
			`{"scenario":"signal","n":2,"allocators":["coma","difference:c=average"],"reward_format":"dict","rollout_id":1,"group_index":1,"index":0}`,
			`{"scenario":"committee","n":2,"allocators":["shapley","team"],"reward_format":"dict","rollout_id":3,"group_index":2,"index":0}`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Scenarios = reg
			s := newServer(t, cfg)
			var got bytes.Buffer
			for i, body := range tc.requests {
				a := post(t, s, body)
				fmt.Fprintf(&got, "# request %d: %s\n# status %d, allocation seq %q\n", i, body, a.status, a.header.Get(rollout.HeaderAllocationSeq))
				if a.status != http.StatusOK {
					// Refusals are pinned by their code; their messages
					// are checked where they are tested.
					fmt.Fprintf(&got, "%s\n", decodeError(t, a).Code)
					continue
				}
				decodeResponse(t, a) // a well-formed answer
				got.Write(a.body)
			}
			path := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestGoldenAnswers -update to write it")
			if !bytes.Equal(want, got.Bytes()) {
				assert.Equal(t, strings.Split(string(want), "\n"), strings.Split(got.String(), "\n"), "the answers changed (rerun with -update only if that is meant)")
			}
		})
	}
}

// goldenRegistry is every built-in scenario and the quiz.
func goldenRegistry(t testing.TB) *env.Registry {
	t.Helper()
	r, err := env.NewRegistry(append(scenarios.List(), quiz())...)
	require.NoError(t, err)
	return r
}
