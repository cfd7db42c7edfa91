package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// result is what one invocation of the command line did.
type result struct {
	code           int
	stdout, stderr string
}

// invoke runs the command line of app's registries with args.
func invoke(t *testing.T, ctx context.Context, reg *env.Registry, tty bool, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := New(&stdout, &stderr)
	if reg != nil {
		app.Scenarios = reg
	}
	app.Terminal = func(io.Writer) bool { return tty }
	code := app.Main(ctx, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// troupe runs the command line with the built-in scenarios.
func troupe(t *testing.T, args ...string) result {
	t.Helper()
	return invoke(t, t.Context(), nil, false, args...)
}

// withRelay runs the command line with the relay test scenario beside the
// built-in ones.
func withRelay(t *testing.T, ctx context.Context, extra map[string]env.PolicyMaker, args ...string) result {
	t.Helper()
	app := New(io.Discard, io.Discard, WithScenarios(newRelay(extra)))
	require.NoError(t, app.err)
	return invoke(t, ctx, app.Scenarios, false, args...)
}

// readRollouts reads a JSONL file back as rollouts and validates each as
// slime validates a fan-out list.
func readRollouts(t *testing.T, data []byte) [][]protocol.Sample {
	t.Helper()
	rollouts, err := trajectories.ReadRollouts(bytes.NewReader(data))
	require.NoError(t, err)
	for _, r := range rollouts {
		require.NoError(t, protocol.ValidateRollout(r))
	}
	return rollouts
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func TestRunWritesValidSamplesToAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deep", "dir", "elfarol.jsonl")
	r := troupe(t, "run", "elfarol", "-n", "20", "-c", "3", "-g", "4", "--param", "agents=9", "--seed", "7",
		"--rollout-id-base", "1000", "-o", path)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Empty(t, r.stdout, "samples go to the file, not stdout")

	rollouts := readRollouts(t, readFile(t, path))
	require.Len(t, rollouts, 20)
	index := int64(0)
	for i, ro := range rollouts {
		require.Len(t, ro, 9, "one sample per patron")
		for k, s := range ro {
			assert.Equal(t, int64(1000+i), s.RolloutID)
			assert.Equal(t, int64(i/4), s.GroupIndex, "groups of 4")
			assert.Equal(t, index, s.Index, "indexes number the samples in output order")
			index++
			assert.Equal(t, protocol.StatusCompleted, s.Status)
			assert.Equal(t, "elfarol", s.Metadata.Scenario)
			assert.Equal(t, int64(i), s.Metadata.Episode)
			assert.Equal(t, "patron", s.Metadata.Role)
			assert.Equal(t, "patron-"+strconv.Itoa(k), s.Metadata.Agent)
			assert.Equal(t, "team", s.Metadata.Allocator)
			assert.True(t, s.Metadata.TextOnly)
			v, ok := s.Reward.Get("")
			require.True(t, ok)
			assert.Equal(t, s.Metadata.TeamReward, v, "the team allocator gives every sample G")
			assert.Equal(t, ro[0].Metadata.Seed, s.Metadata.Seed)
		}
		assert.Equal(t, rollouts[i/4*4][0].Metadata.Seed, ro[0].Metadata.Seed, "a group shares its scenario seed")
	}
	assert.NotEqual(t, rollouts[0][0].Metadata.Seed, rollouts[4][0].Metadata.Seed, "groups have their own seeds")

	assert.Contains(t, r.stderr, "20 episodes, 180 samples written to "+path)
	assert.Contains(t, r.stderr, "completed 20")
	assert.Contains(t, r.stderr, "team reward: mean")
	assert.Contains(t, r.stderr, "turns/s")
	assert.Contains(t, r.stderr, "episodes/s")
	assert.Contains(t, r.stderr, "elapsed:")
	assert.Contains(t, r.stderr, "policies:    patron=random")
	assert.NotContains(t, r.stderr, "first failure")
}

func TestRunToStdoutMatchesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	args := []string{"run", "elfarol", "-n", "12", "-p", "agents=5", "-a", "team,equal-split", "--reward-format", "dict"}
	toFile := troupe(t, append(args, "-o", path)...)
	require.Equal(t, ExitOK, toFile.code, toFile.stderr)
	toStdout := troupe(t, append(args, "--out", "-")...)
	require.Equal(t, ExitOK, toStdout.code, toStdout.stderr)
	assert.Contains(t, toStdout.stderr, "written to standard output")

	require.Equal(t, string(readFile(t, path)), toStdout.stdout)
	for _, ro := range readRollouts(t, []byte(toStdout.stdout)) {
		for _, s := range ro {
			require.Equal(t, protocol.RewardDict, s.Reward.Kind)
			team, _ := s.Reward.Get("team")
			split, _ := s.Reward.Get("equal-split")
			assert.Equal(t, s.Metadata.TeamReward, team)
			assert.InDelta(t, s.Metadata.TeamReward/5, split, 1e-12)
			assert.Equal(t, "team equal-split", s.Metadata.Allocator)
		}
	}
}

func TestRunDefaultOutputIsNamedAfterTheScenario(t *testing.T) {
	t.Chdir(t.TempDir())
	r := troupe(t, "run", "elfarol", "-n", "2", "-p", "agents=3")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Len(t, readRollouts(t, readFile(t, "troupe-elfarol.jsonl")), 2)
	assert.Contains(t, r.stderr, "written to troupe-elfarol.jsonl")
}

func TestRunIsDeterministicWhateverTheConcurrency(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]string{
		"elfarol": {"run", "elfarol", "-n", "240", "-g", "4", "-p", "agents=9", "-a", "team", "-a", "equal-split-sample", "--reward-format", "dict", "--seed", "42"},
		"relay":   {"run", "relay", "-n", "100", "-g", "3", "-p", "runners=5", "--seed", "3"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var outputs [][]byte
			for _, c := range []string{"1", "8"} {
				path := filepath.Join(dir, name+"-c"+c+".jsonl")
				r := withRelay(t, t.Context(), nil, append(args, "-c", c, "-o", path)...)
				require.Equal(t, ExitOK, r.code, r.stderr)
				outputs = append(outputs, readFile(t, path))
			}
			require.NotEmpty(t, outputs[0])
			require.True(t, bytes.Equal(outputs[0], outputs[1]), "concurrency 1 and 8 must write the same bytes")
			readRollouts(t, outputs[0])
		})
	}
}

func TestRunSeedChangesTheOutput(t *testing.T) {
	a := troupe(t, "run", "elfarol", "-n", "5", "-p", "agents=20", "--seed", "1", "-o", "-")
	b := troupe(t, "run", "elfarol", "-n", "5", "-p", "agents=20", "--seed", "2", "-o", "-")
	require.Equal(t, ExitOK, a.code)
	require.Equal(t, ExitOK, b.code)
	assert.NotEqual(t, a.stdout, b.stdout)
}

func TestRunNestedLayoutHoldsTheSameSamples(t *testing.T) {
	flat := troupe(t, "run", "elfarol", "-n", "6", "-p", "agents=4", "-o", "-")
	nested := troupe(t, "run", "elfarol", "-n", "6", "-p", "agents=4", "-o", "-", "--layout", "nested")
	require.Equal(t, ExitOK, flat.code)
	require.Equal(t, ExitOK, nested.code)
	assert.Equal(t, 6, strings.Count(nested.stdout, "\n"), "one line per episode")
	assert.Equal(t, 24, strings.Count(flat.stdout, "\n"), "one line per sample")
	assert.Equal(t, readRollouts(t, []byte(flat.stdout)), readRollouts(t, []byte(nested.stdout)))
}

func TestRunPolicies(t *testing.T) {
	for _, spec := range []string{"first-night", "patron=first-night"} {
		r := troupe(t, "run", "elfarol", "-n", "3", "-p", "agents=6", "-o", "-", "--policy", spec)
		require.Equal(t, ExitOK, r.code, r.stderr)
		for _, ro := range readRollouts(t, []byte(r.stdout)) {
			for _, s := range ro {
				assert.Equal(t, "0", s.Response, spec)
			}
		}
		assert.Contains(t, r.stderr, "patron=first-night")
	}

	// A role's own policy wins over the one for every role.
	r := withRelay(t, t.Context(), nil, "run", "relay", "-n", "2", "-o", "-", "-P", "random", "-P", "follow=always-a")
	require.Equal(t, ExitOK, r.code, r.stderr)
	responses := map[string]map[string]bool{"lead": {}, "follow": {}}
	for _, ro := range readRollouts(t, []byte(r.stdout)) {
		for _, s := range ro {
			responses[s.Metadata.Role][s.Response] = true
		}
	}
	assert.Equal(t, map[string]bool{"a": true}, responses["follow"])
	assert.Equal(t, map[string]bool{"a": true, "b": true}, responses["lead"], "random plays both answers over 2 episodes × 8 lead turns")
	assert.Contains(t, r.stderr, "lead=random, follow=always-a")
}

func TestRunEmitsOnlyTheChosenRoles(t *testing.T) {
	for _, emit := range [][]string{{"--emit", "lead"}, {"--emit", "lead,follow"}, {"--emit", "all"}} {
		args := append([]string{"run", "relay", "-n", "3", "-p", "runners=3", "-p", "laps=2", "-o", "-"}, emit...)
		r := withRelay(t, t.Context(), nil, args...)
		require.Equal(t, ExitOK, r.code, r.stderr)
		rollouts := readRollouts(t, []byte(r.stdout))
		require.Len(t, rollouts, 3)
		for _, ro := range rollouts {
			if emit[1] == "lead" {
				require.Len(t, ro, 4, "runners 0 and 2 lead, 2 laps each")
				for _, s := range ro {
					assert.Equal(t, "lead", s.Metadata.Role)
				}
			} else {
				require.Len(t, ro, 6)
			}
		}
	}
}

func TestRunLimitsTruncateEpisodes(t *testing.T) {
	for _, lim := range []struct {
		flag, end string
		samples   int
	}{
		{"--max-steps", env.EndMaxSteps, 5},
		{"--max-turns", env.EndMaxTurns, 5},
	} {
		r := withRelay(t, t.Context(), nil, "run", "relay", "-n", "4", "-o", "-", lim.flag, "5")
		require.Equal(t, ExitOK, r.code, r.stderr)
		for _, ro := range readRollouts(t, []byte(r.stdout)) {
			require.Len(t, ro, lim.samples, lim.flag)
			for _, s := range ro {
				assert.Equal(t, protocol.StatusTruncated, s.Status)
				assert.Equal(t, lim.end, s.Metadata.End)
			}
		}
		assert.Contains(t, r.stderr, "truncated 4")
	}
}

func TestRunRecordsFailedEpisodesAndFailFastStops(t *testing.T) {
	r := withRelay(t, t.Context(), nil, "run", "relay", "-n", "5", "-o", "-", "-P", "broken")
	require.Equal(t, ExitFailure, r.code, "a run whose every episode failed failed: %s", r.stderr)
	assert.Contains(t, r.stderr, "troupe: "+ErrTooManyFailures.Error()+": 5 of the 5 episodes written (aborted 5, failed 0), more than --max-failures 0 allows; the first: episode 0: ")
	for _, ro := range readRollouts(t, []byte(r.stdout)) {
		for _, s := range ro {
			assert.Equal(t, protocol.StatusAborted, s.Status)
			assert.Equal(t, env.EndPolicyError, s.Metadata.End)
			assert.Contains(t, s.Metadata.Error, errBroken.Error())
		}
	}
	assert.Contains(t, r.stderr, "aborted 5")
	assert.Contains(t, r.stderr, "first failure: episode 0:")
	assert.Contains(t, r.stderr, errBroken.Error())

	// --max-failures -1: failed episodes are data, the run is not failed;
	// the output is the same.
	anyN := withRelay(t, t.Context(), nil, "run", "relay", "-n", "5", "-o", "-", "-P", "broken", "--max-failures", "-1")
	require.Equal(t, ExitOK, anyN.code, anyN.stderr)
	assert.Equal(t, r.stdout, anyN.stdout)
	assert.NotContains(t, anyN.stderr, ErrTooManyFailures.Error())

	ff := withRelay(t, t.Context(), nil, "run", "relay", "-n", "5", "-c", "1", "-o", "-", "-P", "broken", "--fail-fast")
	require.Equal(t, ExitFailure, ff.code)
	assert.Contains(t, ff.stderr, "run stopped")
	assert.Contains(t, ff.stderr, play.ErrEpisodeFailed.Error())
	readRollouts(t, []byte(ff.stdout))
}

func TestRunQuietPrintsNothing(t *testing.T) {
	r := troupe(t, "run", "elfarol", "-n", "3", "-p", "agents=3", "-o", "-", "--quiet")
	require.Equal(t, ExitOK, r.code)
	assert.Empty(t, r.stderr)
	assert.NotEmpty(t, r.stdout)

	for _, limit := range []string{"-1", "0"} {
		failing := withRelay(t, t.Context(), nil, "run", "relay", "-n", "2", "-o", "-", "-P", "broken", "-q", "--max-failures", limit)
		assert.Equal(t, map[string]int{"-1": ExitOK, "0": ExitFailure}[limit], failing.code, failing.stderr)
		assert.Equal(t, 1, strings.Count(failing.stderr, "\n"), "quiet still names the first failure, once: %q", failing.stderr)
		assert.Contains(t, failing.stderr, errBroken.Error())
	}
}

// TestRunMaxFailures: a run exits 1 exactly when more of its episodes
// ended aborted or failed than --max-failures allows, and writes the same
// output either way; a negative bound other than -1 is a usage error.
func TestRunMaxFailures(t *testing.T) {
	// flaky fails an agent whose first turn's seed is a multiple of 8: some
	// episodes, not all.
	extra := map[string]env.PolicyMaker{"flaky": func(env.PolicyRequest) (agents.Policy, error) {
		return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			if obs.Turn == 0 && obs.Seed%8 == 0 {
				return agents.Action{}, errBroken
			}
			return agents.Action{Text: "a"}, nil
		}), nil
	}}
	const n = 12
	run := func(limit int) result {
		return withRelay(t, t.Context(), extra, "run", "relay", "-n", strconv.Itoa(n), "-o", "-", "-P", "flaky", "--max-failures", strconv.Itoa(limit))
	}
	all := run(-1)
	require.Equal(t, ExitOK, all.code, all.stderr)
	failed := 0
	for _, ro := range readRollouts(t, []byte(all.stdout)) {
		if ro[0].Status == protocol.StatusAborted {
			failed++
		}
	}
	require.True(t, 0 < failed && failed < n, "the flaky policy fails %d of %d episodes: pick another", failed, n)
	for _, tc := range []struct {
		limit, code int
	}{{failed, ExitOK}, {failed + 1, ExitOK}, {failed - 1, ExitFailure}, {0, ExitFailure}} {
		r := run(tc.limit)
		assert.Equal(t, tc.code, r.code, "--max-failures %d with %d failed: %s", tc.limit, failed, r.stderr)
		assert.Equal(t, all.stdout, r.stdout, "--max-failures %d changed the output", tc.limit)
		if tc.code == ExitFailure {
			assert.Contains(t, r.stderr, fmt.Sprintf("%d of the %d episodes written (aborted %d, failed 0), more than --max-failures %d allows", failed, n, failed, tc.limit))
		}
	}
	bad := run(-2)
	assert.Equal(t, ExitUsage, bad.code)
	assert.Contains(t, bad.stderr, "--max-failures -2")
}

func TestRunDrawsAProgressBarOnATerminal(t *testing.T) {
	r := invoke(t, t.Context(), nil, true, "run", "elfarol", "-n", "10", "-p", "agents=3", "-o", "-")
	require.Equal(t, ExitOK, r.code)
	assert.Contains(t, r.stderr, "\r\x1b[K[##############################] 100%  10/10 episodes")
	// The bar's line ends before the summary starts.
	assert.Regexp(t, `episodes[^\n]*\ntroupe: elfarol: 10 episodes`, r.stderr)

	plain := invoke(t, t.Context(), nil, false, "run", "elfarol", "-n", "10", "-p", "agents=3", "-o", "-")
	assert.NotContains(t, plain.stderr, "\r")
}

// cancelAt is a relay policy that plays "a" and cancels the run at the
// given turn, counted over the whole run.
func cancelAt(turn int64, cancel context.CancelCauseFunc, cause error) map[string]env.PolicyMaker {
	var turns atomic.Int64
	return map[string]env.PolicyMaker{
		"cancel-at": func(env.PolicyRequest) (agents.Policy, error) {
			return agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
				if turns.Add(1) == turn {
					cancel(cause)
				}
				return agents.Action{Text: "a"}, nil
			}), nil
		},
	}
}

var writtenRe = regexp.MustCompile(`(\d+) episodes written to .*, (\d+) interrupted and not written, (\d+) not started`)

func TestRunInterruptedKeepsOnlyWholeEpisodes(t *testing.T) {
	const perEpisode = 12 // runners 3 × laps 4
	t.Run("sequential", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		path := filepath.Join(t.TempDir(), "cut.jsonl")
		// Cancelled at the 5th turn of episode 5 (from 0): episodes 0-4
		// are whole, episode 5 is cut, and the rest are not written. (The
		// runner may already have handed episode 6 to a worker, which
		// then stops it at once: it counts as interrupted, not as not
		// started.)
		r := withRelay(t, ctx, cancelAt(5*perEpisode+5, cancel, context.Canceled),
			"run", "relay", "-n", "50", "-c", "1", "-o", path, "-P", "cancel-at")
		require.Equal(t, ExitInterrupted, r.code, r.stderr)
		m := writtenRe.FindStringSubmatch(r.stderr)
		require.NotNil(t, m, r.stderr)
		assert.Equal(t, "5", m[1], "episodes written")
		interrupted, _ := strconv.Atoi(m[2])
		notStarted, _ := strconv.Atoi(m[3])
		assert.Equal(t, 45, interrupted+notStarted)
		assert.Contains(t, []int{1, 2}, interrupted)
		assert.Contains(t, r.stderr, "interrupted (context canceled): 5 episodes written to "+path)

		data := readFile(t, path)
		require.True(t, bytes.HasSuffix(data, []byte("\n")), "no partial last line")
		rollouts := readRollouts(t, data)
		require.Len(t, rollouts, 5)
		for i, ro := range rollouts {
			require.Len(t, ro, perEpisode)
			for _, s := range ro {
				assert.Equal(t, int64(i), s.RolloutID)
				assert.Equal(t, protocol.StatusCompleted, s.Status)
			}
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		path := filepath.Join(t.TempDir(), "cut.jsonl")
		r := withRelay(t, ctx, cancelAt(20*perEpisode+7, cancel, &SignalError{Signal: syscall.SIGTERM}),
			"run", "relay", "-n", "400", "-c", "8", "-g", "2", "-o", path, "-P", "cancel-at")
		require.Equal(t, 128+int(syscall.SIGTERM), r.code, r.stderr)
		assert.Contains(t, r.stderr, "terminated signal received")

		m := writtenRe.FindStringSubmatch(r.stderr)
		require.NotNil(t, m, r.stderr)
		written, _ := strconv.Atoi(m[1])
		interrupted, _ := strconv.Atoi(m[2])
		notStarted, _ := strconv.Atoi(m[3])
		assert.Equal(t, 400, written+interrupted+notStarted)
		assert.Positive(t, interrupted, "the cancelling episode itself was cut")

		data := readFile(t, path)
		rollouts := readRollouts(t, data)
		require.Len(t, rollouts, written)
		seen := map[int64]bool{}
		for _, ro := range rollouts {
			require.Len(t, ro, perEpisode, "only whole episodes are written")
			id := ro[0].RolloutID
			assert.False(t, seen[id], "rollout %d written twice", id)
			seen[id] = true
			for k, s := range ro {
				assert.Equal(t, protocol.StatusCompleted, s.Status)
				assert.Equal(t, k/3, s.Metadata.Turn, "turns in order")
			}
		}
	})
}

func TestRunUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string // substrings of the message
	}{
		{"no scenario", []string{"run"}, []string{"scenario name", "elfarol"}},
		{"two scenarios", []string{"run", "elfarol", "relay"}, []string{"one scenario"}},
		{"unknown scenario", []string{"run", "nope"}, []string{`unknown scenario "nope"`, "elfarol"}},
		{"misspelt scenario", []string{"run", "elfarl"}, []string{`unknown scenario "elfarl"; did you mean "elfarol"?`}},
		{"misspelt parameter", []string{"run", "elfarol", "--param", "capacty=3"}, []string{`did you mean "capacity"?`}},
		{"unknown param", []string{"run", "elfarol", "--param", "bogus=1"}, []string{`"bogus"`, "agents", "nights", "capacity"}},
		{"malformed param", []string{"run", "elfarol", "--param", "agents"}, []string{`"agents" is not key=value`}},
		{"param twice", []string{"run", "elfarol", "-p", "agents=3", "-p", "agents=4"}, []string{`"agents" given twice`}},
		{"bad param value", []string{"run", "elfarol", "-p", "agents=many"}, []string{"agents", `"many" is not an integer`}},
		{"param out of range", []string{"run", "elfarol", "-p", "agents=0"}, []string{"agents", "outside"}},
		{"unknown policy", []string{"run", "elfarol", "--policy", "genius"}, []string{`no policy "genius"`, "first-night", "random"}},
		{"unknown policy role", []string{"run", "elfarol", "--policy", "barman=random"}, []string{`no role "barman"`, "patron"}},
		{"policy for a role twice", []string{"run", "elfarol", "-P", "patron=random", "-P", "patron=first-night"}, []string{"already given"}},
		{"two policies for every role", []string{"run", "elfarol", "-P", "random", "-P", "first-night"}, []string{"already given"}},
		{"empty policy", []string{"run", "elfarol", "-P", "patron="}, []string{"empty policy name"}},
		{"unknown allocator", []string{"run", "elfarol", "--allocator", "shapley-magic"}, []string{`unknown allocator "shapley-magic"`, "team", "equal-split"}},
		{"allocator twice", []string{"run", "elfarol", "-a", "team,team"}, []string{"given twice"}},
		{"empty allocator", []string{"run", "elfarol", "-a", "team,"}, []string{"empty allocator"}},
		{"allocator params", []string{"run", "elfarol", "-a", "team:x=1"}, []string{"takes no parameters"}},
		{"counterfactual without absence", []string{"run", "tictactoe", "-a", "leave-one-out"}, []string{"scenario tictactoe does not declare what an absent agent means"}},
		{"counterfactual without null action", []string{"run", "tictactoe", "-a", "difference"}, []string{`scenario tictactoe declares no null action for role "x"`}},
		{"reward format", []string{"run", "elfarol", "--reward-format", "tensor"}, []string{"--reward-format", `"tensor"`}},
		{"layout", []string{"run", "elfarol", "--layout", "columnar"}, []string{"--layout", `"columnar"`, "flat", "nested"}},
		{"emit unknown role", []string{"run", "elfarol", "--emit", "barman"}, []string{`no role "barman"`, "patron"}},
		{"emit all and roles", []string{"run", "elfarol", "--emit", "all,patron"}, []string{"either all or"}},
		{"zero episodes", []string{"run", "elfarol", "-n", "0"}, []string{"--episodes 0"}},
		{"negative episodes", []string{"run", "elfarol", "-n", "-3"}, []string{"--episodes -3"}},
		{"negative concurrency", []string{"run", "elfarol", "-c", "-1"}, []string{"--concurrency -1"}},
		{"zero group size", []string{"run", "elfarol", "-g", "0"}, []string{"--group-size 0"}},
		{"negative max steps", []string{"run", "elfarol", "--max-steps", "-1"}, []string{"--max-steps -1"}},
		{"negative max turns", []string{"run", "elfarol", "--max-turns", "-1"}, []string{"--max-turns -1"}},
		{"negative max messages", []string{"run", "elfarol", "--max-messages", "-1"}, []string{"--max-messages -1"}},
		{"negative timeout", []string{"run", "elfarol", "--timeout", "-1s"}, []string{"--timeout -1s"}},
		{"negative rollout id base", []string{"run", "elfarol", "--rollout-id-base", "-5"}, []string{"--rollout-id-base -5"}},
		{"empty out", []string{"run", "elfarol", "--out", ""}, []string{"--out is empty"}},
		{"unknown flag", []string{"run", "elfarol", "--bogus"}, []string{"unknown flag: --bogus"}},
		{"not a number", []string{"run", "elfarol", "-n", "lots"}, []string{`"lots"`, "--episodes"}},
		{"negative seed", []string{"run", "elfarol", "--seed", "-1"}, []string{"--seed"}},
		{"bad duration", []string{"run", "elfarol", "--timeout", "soon"}, []string{`"soon"`, "--timeout"}},
		{"unknown command", []string{"train"}, []string{`unknown command "train"`}},
		{"scenarios unknown", []string{"scenarios", "nope"}, []string{`unknown scenario "nope"`, "elfarol"}},
		{"scenarios two names", []string{"scenarios", "elfarol", "relay"}, []string{"at most one"}},
		{"scenarios diagram", []string{"scenarios", "elfarol", "--diagram", "ascii"}, []string{`--diagram "ascii"`}},
		{"allocators args", []string{"allocators", "team"}, []string{"no arguments"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A usage error must not touch the output file.
			path := filepath.Join(t.TempDir(), "keep.jsonl")
			require.NoError(t, os.WriteFile(path, []byte("keep\n"), 0o644))
			args := tc.args
			if args[0] == "run" && !slices.Contains(args, "--out") {
				args = append(slices.Clone(args), "-o", path)
			}
			r := troupe(t, args...)
			require.Equal(t, ExitUsage, r.code, r.stderr)
			for _, w := range tc.want {
				assert.Contains(t, r.stderr, w)
			}
			assert.Contains(t, r.stderr, "--help' for usage")
			assert.Empty(t, r.stdout)
			assert.Equal(t, "keep\n", string(readFile(t, path)))
		})
	}
}

func TestRunOutputErrors(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))

	r := troupe(t, "run", "elfarol", "-n", "1", "-o", filepath.Join(blocker, "out.jsonl"))
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "output")

	r = troupe(t, "run", "elfarol", "-n", "1", "-o", dir)
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "output")
}

func TestHelpAndNoCommand(t *testing.T) {
	r := troupe(t)
	assert.Equal(t, ExitOK, r.code)
	assert.Contains(t, r.stdout, "Usage:")
	for _, cmd := range []string{"run", "scenarios", "allocators"} {
		assert.Contains(t, r.stdout, cmd)
	}

	h := troupe(t, "run", "--help")
	assert.Equal(t, ExitOK, h.code)
	for _, flag := range []string{"--episodes", "--concurrency", "--seed", "--out", "--param", "--allocator", "--reward-format",
		"--group-size", "--layout", "--policy", "--emit", "--max-steps", "--max-turns", "--max-messages", "--timeout",
		"--fail-fast", "--rollout-id-base", "--quiet"} {
		assert.Contains(t, h.stdout, flag)
	}
}

func TestScenariosListsEveryScenario(t *testing.T) {
	r := troupe(t, "scenarios")
	require.Equal(t, ExitOK, r.code, r.stderr)
	reg := scenarios.Builtin()
	require.NotEmpty(t, reg.Names())
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		assert.Regexp(t, "(?m)^"+regexp.QuoteMeta(name)+`\s+`+sc.Info().Schedule.String()+`\s+`+regexp.QuoteMeta(sc.Info().Summary)+"$", r.stdout)
	}
}

func TestScenariosDescribesEach(t *testing.T) {
	reg := scenarios.Builtin()
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			sc, err := reg.Lookup(name)
			require.NoError(t, err)
			info := sc.Info()
			r := troupe(t, "scenarios", name)
			require.Equal(t, ExitOK, r.code, r.stderr)
			assert.True(t, strings.HasPrefix(r.stdout, name+": "+info.Summary+"\n"))
			assert.Contains(t, r.stdout, "Schedule: "+info.Schedule.String())
			for _, role := range info.Roles {
				d, err := role.Diagram(agents.Mermaid)
				require.NoError(t, err)
				assert.Contains(t, r.stdout, "  "+role.Name)
				for line := range strings.Lines(d) {
					assert.Contains(t, r.stdout, "    "+line)
				}
			}
			for _, p := range info.Params {
				assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(p.Name)+`\s+`+p.Kind.String()+`\s+`, r.stdout)
			}
			assert.Contains(t, r.stdout, strings.Join(info.PolicyNames(), ", "))
			assert.Contains(t, r.stdout, "Counterfactuals: ")

			g := troupe(t, "scenarios", name, "--diagram", "graphviz")
			require.Equal(t, ExitOK, g.code)
			assert.Contains(t, g.stdout, "digraph")
		})
	}
}

func TestScenariosDescribesElFarol(t *testing.T) {
	r := troupe(t, "scenarios", "elfarol")
	require.Equal(t, ExitOK, r.code)
	for _, want := range []string{
		"stateDiagram-v2",
		"deciding --> attended: attend",
		"initial state deciding; acts in: deciding; terminal states: attended, home",
		"agents    int    60       [1, 1000000]",
		"(default: random)",
		"absent agents: allowed",
		`null action of patron: "home"`,
	} {
		assert.Contains(t, r.stdout, want)
	}
}

func TestDescribeUndeclaredCounterfactuals(t *testing.T) {
	var b strings.Builder
	require.NoError(t, describeScenario(&b, newRelay(nil).Info(), agents.Mermaid))
	assert.Contains(t, b.String(), "Counterfactuals: not declared")
	assert.Contains(t, b.String(), "(default: random)")
	assert.Contains(t, b.String(), "always-a, broken, random")
}

func TestAllocatorsListsEveryAllocator(t *testing.T) {
	r := troupe(t, "allocators")
	require.Equal(t, ExitOK, r.code)
	reg := credit.Builtin()
	require.NotEmpty(t, reg.Names())
	words := strings.Join(strings.Fields(r.stdout), " ")
	for _, name := range reg.Names() {
		assert.Regexp(t, "(?m)^"+regexp.QuoteMeta(name)+"$", r.stdout)
		assert.Contains(t, words, strings.Join(strings.Fields(reg.Doc(name)), " "))
	}
}

// Every built-in scenario runs through the command line with its defaults
// and writes valid rollouts.
func TestRunEveryBuiltinScenario(t *testing.T) {
	for _, name := range scenarios.Builtin().Names() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".jsonl")
			r := troupe(t, "run", name, "-n", "4", "-c", "2", "-g", "2", "--max-turns", "10000", "-o", path)
			require.Equal(t, ExitOK, r.code, r.stderr)
			rollouts := readRollouts(t, readFile(t, path))
			for i, ro := range rollouts {
				for _, s := range ro {
					assert.Equal(t, name, s.Metadata.Scenario)
					assert.Equal(t, int64(i), s.RolloutID)
				}
			}
		})
	}
}

func TestBuildAllocatorsSplitsSpecs(t *testing.T) {
	var got []map[string]string
	reg, err := credit.NewRegistry(
		credit.Entry{Name: "team", Make: func(map[string]string) (trajectories.Allocator, error) { return credit.Team{}, nil }},
		credit.Entry{Name: "scaled", Params: []credit.Param{{Name: "factor"}, {Name: "offset"}}, Make: func(p map[string]string) (trajectories.Allocator, error) {
			got = append(got, p)
			return named("scaled"), nil
		}},
	)
	require.NoError(t, err)

	allocs, err := buildAllocators(reg, []string{"scaled:factor=2,offset=1,team"}, false)
	require.NoError(t, err)
	require.Len(t, allocs, 2)
	assert.Equal(t, "scaled", allocs[0].Name())
	assert.Equal(t, "team", allocs[1].Name())
	assert.Equal(t, []map[string]string{{"factor": "2", "offset": "1"}}, got)

	allocs, err = buildAllocators(reg, []string{"team", "scaled"}, false)
	require.NoError(t, err)
	require.Len(t, allocs, 2)

	// Commas inside parentheses belong to the nested spec.
	allocs, err = buildAllocators(credit.Builtin(), []string{"discount:gamma=0.5,of=dr-grpo(key=role),team"}, false)
	require.NoError(t, err)
	require.Len(t, allocs, 2)
	assert.Equal(t, "team", allocs[1].Name())

	_, err = buildAllocators(reg, []string{"offset=1"}, false)
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	assert.ErrorIs(t, err, credit.ErrUnknownAllocator)
}

// named is an allocator that gives nothing, under a name.
type named string

func (n named) Name() string { return string(n) }
func (named) Allocate(context.Context, []*trajectories.Episode, [][]float64) error {
	return nil
}

func TestUsageErrorsWrapTheirCause(t *testing.T) {
	reg := scenarios.Builtin()
	f := &runFlags{episodes: 1, concurrency: 1, groupSize: 1, out: "-", allocators: []string{"team"}, layout: "flat", emit: []string{"all"}}

	f.params = []string{"bogus=1"}
	_, err := buildPlan(reg, credit.Builtin(), "elfarol", f)
	assert.ErrorIs(t, err, env.ErrBadParam)
	assert.True(t, errors.As(err, new(*UsageError)))

	f.params = nil
	_, err = buildPlan(reg, credit.Builtin(), "nope", f)
	assert.ErrorIs(t, err, env.ErrUnknownScenario)
}

func TestRunSavesStatefulAllocators(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "rae.json")
	r := troupe(t, "run", "tictactoe", "-n", "50", "-a", "rae:state="+state, "-o", filepath.Join(dir, "out.jsonl"))
	require.Equal(t, ExitOK, r.code, r.stderr)
	var saved map[string]any
	require.NoError(t, json.Unmarshal(readFile(t, state), &saved), "the RAE baselines are saved when the run ends")
	assert.Contains(t, string(readFile(t, state)), "tictactoe")
}

// A policy's panic names its file and line in the summary, with the
// panicking code's stack, and the episode record keeps the stack.
func TestAPanicNamesItsPlaceAndStack(t *testing.T) {
	extra := map[string]env.PolicyMaker{
		"panicky": func(env.PolicyRequest) (agents.Policy, error) {
			return agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
				var m map[string]int
				m["x"]++ // assignment to entry in nil map
				return agents.Action{Text: "a"}, nil
			}), nil
		},
	}
	dir := t.TempDir()
	r := withRelay(t, t.Context(), extra, "run", "relay", "-n", "2", "-c", "1", "-P", "panicky", "--fail-fast",
		"-o", filepath.Join(dir, "s.jsonl"), "--episodes-out", filepath.Join(dir, "e.jsonl"))
	require.Equal(t, ExitFailure, r.code, r.stderr)
	assert.Regexp(t, `assignment to entry in nil map \(at cli_test\.go:\d+ in github\.com/troupe-rl/troupe/cli\.TestAPanicNamesItsPlaceAndStack\.func1\.1\)`, r.stderr)
	assert.Regexp(t, `panicked in:\n\s+github\.com/troupe-rl/troupe/cli\.TestAPanicNamesItsPlaceAndStack\.func1\.1 \(cli_test\.go:\d+\)`, r.stderr)
	data, err := os.ReadFile(filepath.Join(dir, "e.jsonl"))
	require.NoError(t, err)
	rec, _, err := trajectories.DecodeEpisode(bytes.SplitN(data, []byte("\n"), 2)[0])
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(rec.Stack, "github.com/troupe-rl/troupe/cli.TestAPanicNamesItsPlaceAndStack.func1.1 (cli_test.go:"), rec.Stack)
}
