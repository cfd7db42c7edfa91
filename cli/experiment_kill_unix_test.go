//go:build unix

package cli_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// experimentArgs is a grid of 24 cells that takes a few tenths of a second
// on one core, so that a kill lands between cells and inside them.
func experimentArgs(out string) []string {
	return []string{"experiment", "elfarol", "--grid", "agents=10,30", "--param", "nights=4", "--param", "capacity=3",
		"--allocator", "team,difference,grpo", "--group", "2", "--seeds", "4", "--episodes", "200", "--diagnose", "3",
		"-j", "1", "-q", "--out", out}
}

// treeOf reads every file under dir by relative path, temporary files
// (an atomic write cut short) aside.
func treeOf(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".tmp") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err == nil {
			files[rel], err = os.ReadFile(path)
		}
		return err
	}))
	return files
}

// TestKilledExperimentsResumeByteIdentical drives the real troupe binary:
// it interrupts an experiment with SIGKILL, SIGINT or SIGTERM at random
// moments, resumes it with --resume, and demands every file of an
// uninterrupted run's directory, byte for byte (cells, metrics, plots,
// report). TROUPE_KILL_SEED repeats a test's moments.
func TestKilledExperimentsResumeByteIdentical(t *testing.T) {
	bin := buildTroupe(t)
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	start := time.Now()
	res := runBin(t, bin, experimentArgs(ref)...)
	require.Equal(t, 0, res.code, res.stderr)
	elapsed := time.Since(start)
	want := treeOf(t, ref)
	require.Contains(t, want, "report.md")

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TROUPE_KILL_SEED"); s != "" {
		_, err := fmt.Sscan(s, &seed)
		require.NoError(t, err)
	}
	t.Logf("TROUPE_KILL_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	signals := []syscall.Signal{syscall.SIGKILL, syscall.SIGINT, syscall.SIGTERM}
	moments := 6
	if testing.Short() {
		moments = 3
	}
	interrupted := 0
	for m := range moments {
		sig := signals[m%len(signals)]
		out := filepath.Join(dir, fmt.Sprintf("run%d", m))
		cmd := exec.Command(bin, experimentArgs(out)...)
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(rng.Int64N(int64(elapsed))))
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		if err != nil {
			interrupted++
		}
		// A run killed before it wrote its experiment.json left nothing to
		// resume (and --resume says so); it starts again.
		args := experimentArgs(out)
		if _, err := os.Stat(filepath.Join(out, "experiment.json")); err == nil {
			args = append(args, "--resume")
		} else {
			refused := runBin(t, bin, append(experimentArgs(out), "--resume")...)
			require.Equal(t, 2, refused.code, refused.stderr)
			require.Contains(t, refused.stderr, "nothing to resume")
		}
		res := runBin(t, bin, args...)
		require.Equal(t, 0, res.code, "%v at moment %d: %s", sig, m, res.stderr)
		got := treeOf(t, out)
		assert.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "%v at moment %d: the same files", sig, m)
		for name, data := range want {
			if name == "report.md" {
				// The report names the command, --out and all.
				data = bytes.ReplaceAll(data, []byte(ref), []byte(out))
			}
			assert.True(t, bytes.Equal(data, got[name]), "%v at moment %d: %s differs", sig, m, name)
		}
	}
	t.Logf("%d of %d runs were interrupted before they finished", interrupted, moments)
}
