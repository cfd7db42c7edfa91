package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/internal/vfs/vfstest"
)

var faultEpisodes = flag.Int("faults.episodes", 4, "TestFaultMatrix: episodes of the faulty run (make faults runs a larger one)")

// faultRun is the run TestFaultMatrix fails: groups of two, samples and
// episode records, RAE's state in the checkpoints, a checkpoint at every
// group (so the calls are the same every time), under dir.
func faultRun(dir string, episodes int) []string {
	return []string{"run", "elfarol", "-n", fmt.Sprint(episodes), "-g", "2", "-c", "1", "-p", "agents=5",
		"-a", "rae,team", "-q", "--checkpoint-every", "1ns",
		"-o", filepath.Join(dir, "out", "samples.jsonl"), "--episodes-out", filepath.Join(dir, "episodes", "episodes.jsonl")}
}

// onFS runs the command line with its durable files on fsys.
func onFS(t *testing.T, fsys vfs.FS, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := New(&stdout, &stderr)
	app.fs = fsys
	app.Terminal = func(io.Writer) bool { return false }
	code := app.Main(t.Context(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// TestFaultMatrix fails, in turn, every call the durable writers of a
// troupe run make to the file layer (every open, write, fsync, rename,
// ... of the samples, the episode records and the progress file), in
// every way that applies to it (a short write, EIO, ENOSPC, an fsync that
// lies, a power loss at the call, a write torn by one), then restarts the
// machine when the fault implies a power loss, and runs the same command
// with --resume on a healthy file system. Each must end in the
// uninterrupted run's bytes, or in a refusal (exit 2) that names the file
// at fault: never a file that silently lost or repeated episodes. The
// matrix it logs (-v) is docs/faults.md's.
func TestFaultMatrix(t *testing.T) {
	const dir = "/run"
	args := faultRun(dir, *faultEpisodes)
	samples, episodes := filepath.Join(dir, "out", "samples.jsonl"), filepath.Join(dir, "episodes", "episodes.jsonl")

	// The uninterrupted run, on the operating system's files and on the
	// in-memory ones: the same bytes.
	osDir := t.TempDir()
	res := onFS(t, nil, faultRun(osDir, *faultEpisodes)...)
	require.Equal(t, 0, res.code, res.stderr)
	wantSamples := readFile(t, filepath.Join(osDir, "out", "samples.jsonl"))
	wantEpisodes := readFile(t, filepath.Join(osDir, "episodes", "episodes.jsonl"))
	healthy := vfstest.New(dir)
	res = onFS(t, healthy, args...)
	require.Equal(t, 0, res.code, res.stderr)
	same := func(m *vfstest.Mem) bool {
		s, serr := m.ReadFile(samples)
		e, eerr := m.ReadFile(episodes)
		return serr == nil && eerr == nil && bytes.Equal(s, wantSamples) && bytes.Equal(e, wantEpisodes)
	}
	require.True(t, same(healthy), "the in-memory file system writes what the operating system's does")
	counts := healthy.Counts()

	type cell struct {
		op   vfstest.Op
		kind vfstest.Kind
	}
	outcomes := map[cell]map[string]int{}
	for _, op := range vfstest.Ops {
		for n := 1; n <= counts[op]; n++ {
			for _, kind := range vfstest.Kinds(op) {
				fault := vfstest.Fault{Op: op, N: n, Kind: kind}
				m := vfstest.New(dir)
				m.Inject(fault)
				first := onFS(t, m, args...)
				require.True(t, m.Fired(), "%s: the run made fewer calls than the healthy one", fault)
				ok := first.code == 0 && same(m)
				crashed := m.Reboot()
				again := onFS(t, m, append(slices.Clone(args), "--resume")...)
				var outcome string
				switch {
				case again.code == 0 && same(m) && ok && !crashed:
					outcome = "absorbed"
				case again.code == 0 && same(m):
					outcome = "resumed byte-identical"
				case again.code == 0:
					t.Errorf("%s: the resumed run (exit 0) wrote other bytes than the uninterrupted run; first run: exit %d: %s; resume: %s", fault, first.code, first.stderr, again.stderr)
					outcome = "SILENTLY DIFFERENT"
				case again.code == ExitUsage && strings.Contains(again.stderr, dir+"/"):
					outcome = "refused: " + refusal(again.stderr)
				default:
					t.Errorf("%s: the resume failed (exit %d) without a refusal naming a file: %s (first run: exit %d: %s)", fault, again.code, again.stderr, first.code, first.stderr)
					outcome = fmt.Sprintf("FAILED (exit %d)", again.code)
				}
				c := cell{op, kind}
				if outcomes[c] == nil {
					outcomes[c] = map[string]int{}
				}
				outcomes[c][outcome]++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| call | fault | calls failed | outcome |\n|---|---|---|---|\n")
	for _, op := range vfstest.Ops {
		for _, kind := range vfstest.Kinds(op) {
			o := outcomes[cell{op, kind}]
			if len(o) == 0 {
				continue
			}
			var parts []string
			total := 0
			for _, k := range slices.Sorted(maps.Keys(o)) {
				parts = append(parts, fmt.Sprintf("%d %s", o[k], k))
				total += o[k]
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", op, kind, total, strings.Join(parts, ", "))
		}
	}
	t.Logf("fault matrix, %s:\n%s", strings.Join(args, " "), b.String())
}

// refusal is the reason a refused resume gives, without its paths and
// numbers: what the matrix groups outcomes by.
func refusal(stderr string) string {
	for _, known := range []string{
		"shorter than its checkpoint", "do not match the checkpoint", "the file is missing",
		"bad progress file", "has no progress file", "not at the end of a line",
	} {
		if strings.Contains(stderr, known) {
			return known
		}
	}
	line, _, _ := strings.Cut(stderr, "\n")
	return line
}
