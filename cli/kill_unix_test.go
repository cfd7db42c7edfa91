//go:build unix

package cli_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/testbin"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// killRun is one kind of run the kill test interrupts: its flags, besides
// -o (and --episodes-out when episodes is set).
type killRun struct {
	name     string
	args     []string
	episodes bool // also --episodes-out
}

var killRuns = []killRun{
	{"flat", []string{"elfarol", "-n", "1200", "-p", "agents=20", "-a", "team"}, false},
	{"nested groups rae dict", []string{"elfarol", "-n", "1200", "-g", "4", "-p", "agents=20", "-a", "rae,team", "--reward-format", "dict", "--layout", "nested"}, true},
	{"flat groups counterfactual rae", []string{"elfarol", "-n", "800", "-g", "4", "-p", "agents=10", "-a", "difference,rae"}, true},
	{"nested tictactoe rae", []string{"tictactoe", "-n", "2000", "-g", "8", "-a", "rae:alpha=0.9", "--layout", "nested"}, false},
	// Episodes of 20,000 agents, groups of two: each group is written to
	// the file in pieces before it ends (trajectories.JSONLWriter), so a
	// kill leaves part of one, which the resumed run must cut away.
	{"flat groups of large episodes", []string{"elfarol", "-n", "8", "-g", "2", "-p", "agents=20000"}, false},
}

// TestKilledRunsResumeByteIdentical drives the real troupe binary: it
// interrupts runs of every kind with SIGKILL, SIGINT or SIGTERM at random
// moments, checks that what each left is a prefix of the uninterrupted
// run's output (a SIGINT or SIGTERM leaves whole groups; a SIGKILL may
// leave part of a group, and cut the last line), resumes it with --resume, and demands the uninterrupted
// run's bytes. 30 moments, every kind of run under every signal twice
// (15 under -short, each once); TROUPE_KILL_MOMENTS asks for more (a
// stress run), TROUPE_KILL_SEED repeats a test's moments.
func TestKilledRunsResumeByteIdentical(t *testing.T) {
	bin := buildTroupe(t)
	moments := 2 * len(killRuns) * 3
	if testing.Short() {
		moments = len(killRuns) * 3
	}
	if s := os.Getenv("TROUPE_KILL_MOMENTS"); s != "" {
		var err error
		moments, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	rng := killRand(t, 0)

	type reference struct {
		samples, episodes []byte
		elapsed           time.Duration
	}
	dir := t.TempDir()
	refs := make([]reference, len(killRuns))
	for i, kr := range killRuns {
		out := filepath.Join(dir, fmt.Sprintf("ref%d.jsonl", i))
		start := time.Now()
		res := runBin(t, bin, append([]string{"run"}, kr.flags(out)...)...)
		require.Equal(t, 0, res.code, "%s: %s", kr.name, res.stderr)
		refs[i].elapsed = time.Since(start)
		refs[i].samples = readFile(t, out)
		if kr.episodes {
			refs[i].episodes = readFile(t, out+".episodes")
		}
		check := runBin(t, bin, "check", out, out+".episodes")
		if !kr.episodes {
			check = runBin(t, bin, "check", out)
		}
		require.Equal(t, 0, check.code, "%s: %s", kr.name, check.stdout)
	}

	signals := []syscall.Signal{syscall.SIGKILL, syscall.SIGINT, syscall.SIGTERM}
	var interrupted, cutLines int
	defer func() {
		t.Logf("%d of %d runs interrupted before they finished, %d of them with a cut last line", interrupted, moments, cutLines)
	}()
	for m := range moments {
		k := m % len(killRuns)
		kr, ref := killRuns[k], refs[k]
		sig := signals[(m/len(killRuns))%len(signals)]
		// Anywhere from the start to a little past the end of a run.
		at := time.Duration(rng.Int64N(int64(ref.elapsed) * 11 / 10))
		name := fmt.Sprintf("%d %s %v at %v", m, kr.name, sig, at.Round(time.Millisecond))
		out := filepath.Join(dir, fmt.Sprintf("run%d.jsonl", m))

		cmd := exec.Command(bin, append([]string{"run"}, kr.flags(out)...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		time.Sleep(at)
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		code := exitCode(err)
		switch {
		case code == 0: // it finished first
		case sig == syscall.SIGKILL:
			require.Equal(t, -1, code, "%s: %v %s", name, err, stderr.String())
		default:
			require.Contains(t, []int{-1, 128 + int(sig)}, code, "%s: %s", name, stderr.String())
		}

		// What the interrupted run left is a prefix of the full output.
		got := readFileOrEmpty(t, out)
		require.True(t, bytes.HasPrefix(ref.samples, got), "%s: the interrupted file is not a prefix of the uninterrupted run's (%d bytes)", name, len(got))
		if code != 0 {
			interrupted++
			if len(got) > 0 && got[len(got)-1] != '\n' {
				cutLines++
			}
		}
		if code == 128+int(sig) {
			assert.True(t, groupEndsAt(t, ref.samples, len(got)), "%s: a %v left %d bytes, not whole groups", name, sig, len(got))
		}
		if kr.episodes {
			require.True(t, bytes.HasPrefix(ref.episodes, readFileOrEmpty(t, out+".episodes")), "%s: episodes", name)
		}

		res := runBin(t, bin, append(append([]string{"run"}, kr.flags(out)...), "--resume")...)
		require.Equal(t, 0, res.code, "%s: resume: %s", name, res.stderr)
		require.True(t, bytes.Equal(ref.samples, readFile(t, out)), "%s: the resumed file differs from the uninterrupted run's", name)
		if kr.episodes {
			require.True(t, bytes.Equal(ref.episodes, readFile(t, out+".episodes")), "%s: the resumed episodes differ", name)
		}
		require.NoError(t, os.Remove(out))
	}
}

// TestResumeRefusesAnotherRun: --resume with flags that change the output
// is refused, naming the difference; a finished run resumes to nothing.
func TestResumeRefusesAnotherRun(t *testing.T) {
	bin := buildTroupe(t)
	out := filepath.Join(t.TempDir(), "a.jsonl")
	res := runBin(t, bin, "run", "elfarol", "-n", "20", "-g", "2", "-p", "agents=5", "-o", out)
	require.Equal(t, 0, res.code, res.stderr)
	want := readFile(t, out)

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-n", "30", "-g", "2", "-p", "agents=5"}, "episodes: 20, now 30 (--episodes)"},
		{[]string{"-n", "20", "-g", "2", "-p", "agents=6"}, `params.agents: "5", now "6" (--param)`},
		{[]string{"-n", "20", "-g", "2", "-p", "agents=5", "--layout", "nested"}, "files: samples " + out + " (flat), now samples " + out + " (nested)"},
		{[]string{"-n", "20", "-g", "2", "-p", "agents=5", "--merge-turns"}, "files: samples " + out + " (flat), now samples " + out + " (flat, merged turns)"},
		{[]string{"-n", "20", "-g", "2", "-p", "agents=5", "-a", "rae"}, `allocators: ["team"], now ["rae"] (--allocator)`},
	} {
		res := runBin(t, bin, append([]string{"run", "elfarol", "-o", out, "--resume"}, tc.args...)...)
		assert.Equal(t, 2, res.code, res.stderr)
		assert.Contains(t, res.stderr, tc.says)
	}
	assert.Equal(t, want, readFile(t, out), "a refused resume leaves the file alone")

	res = runBin(t, bin, "run", "elfarol", "-n", "20", "-g", "2", "-p", "agents=5", "-o", out, "--resume", "-c", "7")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "is complete")
	assert.Equal(t, want, readFile(t, out))

	// A file troupe did not write is not resumed.
	other := filepath.Join(t.TempDir(), "b.jsonl")
	require.NoError(t, os.WriteFile(other, want, 0o644))
	res = runBin(t, bin, "run", "elfarol", "-n", "20", "-o", other, "--resume")
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "has no progress file")

	// A checkpoint the file does not match (the file was cut by hand)
	// is refused, not resumed into a wrong file.
	require.NoError(t, os.Truncate(out, int64(len(want)/2)))
	prog, err := durable.Read(nil, durable.PathOf(out))
	require.NoError(t, err)
	prog.Complete = false
	require.NoError(t, prog.Write(nil, durable.PathOf(out)))
	res = runBin(t, bin, "run", "elfarol", "-n", "20", "-g", "2", "-p", "agents=5", "-o", out, "--resume")
	assert.Equal(t, 2, res.code, res.stderr)
	assert.Contains(t, res.stderr, "shorter than its checkpoint")
}

func (kr killRun) flags(out string) []string {
	// Checkpoints every 20ms: a run of a few tenths of a second takes
	// several, so a kill resumes from the middle, allocator states and all.
	args := append(append([]string{}, kr.args...), "-c", "2", "-q", "--checkpoint-every", "20ms", "-o", out)
	if kr.episodes {
		args = append(args, "--episodes-out", out+".episodes")
	}
	return args
}

// groupEndsAt reports whether a group of the sample file data ends at
// offset off: at the file's start or end, or at a line end between lines
// of two groups. It reads the two lines around off only: reading every
// line of the uninterrupted runs (megabytes of samples, under the race
// detector) was most of the kill test's CPU time.
func groupEndsAt(t *testing.T, data []byte, off int) bool {
	t.Helper()
	switch {
	case off == 0 || off == len(data):
		return true
	case off > len(data) || data[off-1] != '\n':
		return false
	}
	prev := data[bytes.LastIndexByte(data[:off-1], '\n')+1 : off]
	next := data[off : off+bytes.IndexByte(data[off:], '\n')+1]
	return groupOf(t, prev) != groupOf(t, next)
}

// groupOf is the group index of a sample line.
func groupOf(t *testing.T, line []byte) int64 {
	t.Helper()
	samples, err := trajectories.NewReader(bytes.NewReader(line)).Next()
	require.NoError(t, err)
	return samples[0].GroupIndex
}

type binResult struct {
	code           int
	stdout, stderr string
}

func runBin(t *testing.T, bin string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return binResult{code: exitCode(err), stdout: stdout.String(), stderr: stderr.String()}
}

// exitCode is a finished command's exit status, -1 when a signal killed it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -2
}

// troupeBin is the troupe binary the tests here drive, built once for
// them all (buildTroupe) into testbin's cache, where it stays for the next
// run (and for examples/slime's tests).
var (
	troupeOnce sync.Once
	troupeBin  string
	troupeErr  error
)

// buildTroupe returns the path of the troupe binary, built on the first
// call (a link of a few seconds, more on a busy machine, unless the cached
// one is up to date) and shared by every test after it.
func buildTroupe(t *testing.T) string {
	t.Helper()
	troupeOnce.Do(func() { troupeBin, troupeErr = testbin.Build("troupe", "../cmd/troupe") })
	if errors.Is(troupeErr, testbin.ErrNoGo) {
		t.Skip("no go command to build troupe with:", troupeErr)
	}
	if troupeErr != nil {
		t.Fatal(troupeErr)
	}
	return troupeBin
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func readFileOrEmpty(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	return b
}

// killRand is a kill test's source of random moments, stream of its seed:
// TROUPE_KILL_SEED when set (to repeat a run), else the clock's, logged.
func killRand(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TROUPE_KILL_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("TROUPE_KILL_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, stream))
}
