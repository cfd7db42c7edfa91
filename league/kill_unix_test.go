//go:build unix

package league_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/scenarios"
)

// childEnv names the league a re-executed test binary plays until it is
// killed.
const childEnv = "TROUPE_LEAGUE_TEST_CHILD"

// killCheckpointEvery is the child's commit interval: the test waits for
// its first commit, and the reference replays every match up to the kill,
// so this sets what the test costs (four commits' worth of matches and
// snapshots every 60; 1,000 cost the test a minute and a half under -race
// on a busy machine).
const killCheckpointEvery = 250

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		l, err := league.Open(dir, scenarios.Builtin())
		if err == nil {
			err = l.Play(context.Background(), league.PlayOptions{Until: 1 << 40, CheckpointEvery: killCheckpointEvery})
		}
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func killedCfg() (league.Config, []league.Player) {
	return league.Config{Seed: 11, Rule: "mix:pfsp=0.6,latest=0.4", SnapshotEvery: 60, Batch: 4},
		[]league.Player{learnerPlayer("learner", "reinforce:rate=0.2"), scripted("random"), scripted("center-first")}
}

// A league killed by SIGKILL while it plays (between two commits, with
// matches in its log that league.json does not count yet) resumes from
// its last commit and ends with the bytes of a league that was never
// interrupted: the log, league.json, the learner's values and every
// snapshot.
func TestKilledLeagueResumesByteIdentically(t *testing.T) {
	cfg, players := killedCfg()
	dir := t.TempDir()
	newLeague(t, dir, cfg, players...).Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var committed struct {
		Matches  int64 `json:"matches"`
		LogBytes int64 `json:"log_bytes"`
	}
	tail := false
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(dir, league.FileLeague))
		if err == nil && json.Unmarshal(b, &committed) == nil && committed.Matches >= killCheckpointEvery {
			st, err := os.Stat(filepath.Join(dir, league.FileLog))
			if tail = err == nil && st.Size() > committed.LogBytes; tail || committed.Matches >= 6*killCheckpointEvery {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Kill())
	killed = true
	err := cmd.Wait()
	require.Error(t, err, "the child was killed")
	t.Logf("killed after %d committed matches; uncommitted log tail seen: %v", committed.Matches, tail)

	l, err := league.Open(dir, scenarios.Builtin())
	require.NoError(t, err)
	resumedAt := l.Matches()
	require.GreaterOrEqual(t, resumedAt, int64(killCheckpointEvery))
	target := resumedAt + 60
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{Until: target}))
	require.NoError(t, l.Close())

	ref := t.TempDir()
	r := newLeague(t, ref, cfg, players...)
	require.NoError(t, r.Play(context.Background(), league.PlayOptions{Until: target, Concurrency: 2}))
	require.NoError(t, r.Close())
	assertSameTree(t, ref, dir)
}
