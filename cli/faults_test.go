package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/internal/vfs/vfstest"
)

var (
	faultEpisodes = flag.Int("faults.episodes", 4, "TestFaultMatrixRun: episodes of the faulty run (make faults runs a larger one)")
	faultsAll     = flag.Bool("faults.all", false, "TestFaultMatrix*: fail every call, not the first, the last and every sixth of each op (make faults)")
)

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

// faultSweep fails, in turn, every call that the command args makes to
// the file layer, starting from the files of start, in every way that
// applies to the call, and resumes each with the command resume on the
// same files, healthy again (after a power loss when the fault implies
// one). Each must end with the files under dir what want holds (the
// uninterrupted command's; a temporary file, whose name starts with a
// dot, is not compared), or in a refusal (exit 2) that names a file under
// dir. It returns the matrix: by call and fault, how many calls ended
// which way.
type faultSweep struct {
	dir          string
	start        *vfstest.Mem
	args, resume []string
	want         map[string][]byte
	// every, when above 1, fails only the first call of each op, every
	// every-th after it, and the last (-faults.all: every call).
	every int
	// afterFault, when set, checks the files a fault left (after the
	// reboot), before the resume.
	afterFault func(t *testing.T, fault vfstest.Fault, m *vfstest.Mem)
}

// cell is a row of the matrix.
type cell struct {
	op   vfstest.Op
	kind vfstest.Kind
}

// sampled thins the calls of each op make test fails: the first, the
// last and every sixth between, so that every op and fault is tried
// within a modest CPU time under the race detector.
const sampled = 6

func (s *faultSweep) run(t *testing.T) map[cell]map[string]int {
	t.Helper()
	if *faultsAll {
		s.every = 1
	}
	healthy := s.start.Clone()
	res := onFS(t, healthy, s.args...)
	counts := healthy.Counts()
	outcomes := map[cell]map[string]int{}
	for _, op := range vfstest.Ops {
		for n := 1; n <= counts[op]; n++ {
			if s.every > 1 && (n-1)%s.every != 0 && n != counts[op] {
				continue
			}
			for _, kind := range vfstest.Kinds(op) {
				fault := vfstest.Fault{Op: op, N: n, Kind: kind}
				m := s.start.Clone()
				m.Inject(fault)
				first := onFS(t, m, s.args...)
				require.True(t, m.Fired(), "%s: the command made fewer calls than the healthy one (exit %d: %s)", fault, res.code, res.stderr)
				unharmed := first.code == 0 && s.same(m)
				crashed := m.Reboot()
				if s.afterFault != nil {
					s.afterFault(t, fault, m)
				}
				again := onFS(t, m, s.resume...)
				var outcome string
				switch {
				case again.code == 0 && s.same(m) && unharmed && !crashed:
					outcome = "absorbed"
				case again.code == 0 && s.same(m):
					outcome = "resumed byte-identical"
				case again.code == 0:
					t.Errorf("%s: the resumed command (exit 0) left other files than the uninterrupted one: %s; first: exit %d: %s; resume: %s", fault, s.diff(m), first.code, first.stderr, again.stderr)
					outcome = "SILENTLY DIFFERENT"
				case again.code == ExitUsage && strings.Contains(again.stderr, s.dir+"/"):
					outcome = "refused: " + refusal(again.stderr)
				default:
					t.Errorf("%s: the resume failed (exit %d) without a refusal naming a file: %s (first: exit %d: %s)", fault, again.code, again.stderr, first.code, first.stderr)
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
	return outcomes
}

// files are the files under dir on m, by path, but the temporary ones.
func (s *faultSweep) files(m *vfstest.Mem) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range m.Files() {
		if !strings.HasPrefix(p, s.dir+"/") || strings.HasPrefix(filepath.Base(p), ".") {
			continue
		}
		data, err := m.ReadFile(p)
		if err == nil {
			out[p] = data
		}
	}
	return out
}

func (s *faultSweep) same(m *vfstest.Mem) bool {
	return maps.EqualFunc(s.files(m), s.want, bytes.Equal)
}

// diff names the files that differ from want.
func (s *faultSweep) diff(m *vfstest.Mem) string {
	got := s.files(m)
	var out []string
	for _, p := range slices.Sorted(maps.Keys(s.want)) {
		switch g, ok := got[p]; {
		case !ok:
			out = append(out, p+" missing")
		case !bytes.Equal(g, s.want[p]):
			out = append(out, fmt.Sprintf("%s differs (%d bytes, want %d)", p, len(g), len(s.want[p])))
		}
	}
	for p := range got {
		if _, ok := s.want[p]; !ok {
			out = append(out, p+" extra")
		}
	}
	return strings.Join(out, ", ")
}

// osFiles reads every file under dir on the operating system's file
// system, but the temporary ones.
func osFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		data, err := os.ReadFile(p)
		out[p] = data
		return err
	}))
	return out
}

// matrix renders outcomes as docs/faults.md's table.
func matrix(outcomes map[cell]map[string]int) string {
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
	return b.String()
}

// refusal is the reason a refused resume gives, without its paths and
// numbers: what the matrix groups outcomes by.
func refusal(stderr string) string {
	for _, known := range []string{
		"shorter than its checkpoint", "do not match the checkpoint", "the file is missing",
		"bad progress file", "has no progress file", "not at the end of a line",
		"holds no experiment", "holds cells but no", "manifest is damaged",
	} {
		if strings.Contains(stderr, known) {
			return known
		}
	}
	line, _, _ := strings.Cut(stderr, "\n")
	return line
}

// newSweep runs args on the operating system's files under dir and on a
// copy of start, demands the same files of both, and returns the sweep
// of args from start, whose uninterrupted outcome that is, and the copy.
func newSweep(t *testing.T, dir string, start *vfstest.Mem, args, resume []string, every int) (*faultSweep, *vfstest.Mem) {
	t.Helper()
	res := onFS(t, nil, args...)
	require.Equal(t, 0, res.code, res.stderr)
	sweep := &faultSweep{dir: dir, start: start, args: args, resume: resume, want: osFiles(t, dir), every: every}
	healthy := start.Clone()
	res = onFS(t, healthy, args...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, sweep.want, sweep.files(healthy), "the in-memory file system ends with what the operating system's does")
	return sweep, healthy
}

// faultRun is the run TestFaultMatrixRun fails: groups of two, samples
// and episode records, RAE's state in the checkpoints, a checkpoint at
// every group (so that the calls are the same every time), under dir.
func faultRun(dir string, episodes int) []string {
	return []string{"run", "elfarol", "-n", fmt.Sprint(episodes), "-g", "2", "-c", "1", "-p", "agents=5",
		"-a", "rae,team", "-q", "--checkpoint-every", "1ns",
		"-o", filepath.Join(dir, "out", "samples.jsonl"), "--episodes-out", filepath.Join(dir, "episodes", "episodes.jsonl")}
}

// TestFaultMatrixRun fails every call the durable writers of a troupe run
// make (every open, write, fsync, rename, ... of the samples, the episode
// records and the progress file) in every way that applies to it (a short
// write, EIO, ENOSPC, an fsync that lies, a power loss at the call, a
// write torn by one), and resumes: each ends in the uninterrupted run's
// bytes, or in a refusal that names the file at fault. Then it does the
// same to the calls of a resume (of a run stopped half way). The matrices
// it logs (-v) are docs/faults.md's.
func TestFaultMatrixRun(t *testing.T) {
	dir := t.TempDir()
	args := faultRun(dir, *faultEpisodes)
	resume := append(slices.Clone(args), "--resume")
	sweep, healthy := newSweep(t, dir, vfstest.New(dir), args, resume, sampled)
	want := sweep.want
	writes := healthy.Counts()[vfstest.OpWrite]
	healthy.Crash()
	require.Equal(t, want, sweep.files(healthy), "a run that exited 0 survives a power loss")
	t.Logf("fault matrix, %s:\n%s", strings.Join(args, " "), matrix(sweep.run(t)))

	// A resume's own calls: of a run stopped by a failed write half way.
	stopped := vfstest.New(dir)
	stopped.Inject(vfstest.Fault{Op: vfstest.OpWrite, N: writes/2 + 1, Kind: vfstest.EIO})
	res := onFS(t, stopped, args...)
	require.NotEqual(t, 0, res.code, "the write failed")
	stopped.Reboot()
	require.NotEmpty(t, sweep.files(stopped)[args[len(args)-3]], "the run stopped half way, not before it wrote")
	sweep = &faultSweep{dir: dir, start: stopped, args: resume, resume: resume, want: want, every: sampled}
	t.Logf("fault matrix of the resume, %s:\n%s", strings.Join(resume, " "), matrix(sweep.run(t)))
}

// TestFaultMatrixExperiment is TestFaultMatrixRun's sweep for troupe
// experiment: its manifest, cell files and outputs (tables, plots, the
// report), sampled more sparsely: its calls are many and alike (plots
// and tables, each written atomically the same way).
func TestFaultMatrixExperiment(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "exp")
	args := []string{"experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--allocator", "team",
		"--seeds", "2", "--episodes", "4", "-j", "1", "-q", "--out", out}
	resume := append(slices.Clone(args), "--resume")
	sweep, healthy := newSweep(t, dir, vfstest.New(dir), args, resume, 2*sampled)
	healthy.Crash()
	// The cells are not synced (a resume plays a lost one again); every
	// output is.
	for p, data := range sweep.want {
		if filepath.Base(filepath.Dir(p)) != "cells" {
			got, err := healthy.ReadFile(p)
			require.NoError(t, err, "a finished experiment's %s survives a power loss", p)
			require.Equal(t, data, got, p)
		}
	}
	t.Logf("fault matrix, %s:\n%s", strings.Join(args, " "), matrix(sweep.run(t)))
}

// TestFaultMatrixExport is the sweep for troupe export --parquet, whose
// "resume" is the same command again: besides ending in the tables of an
// uninterrupted export, a fault (but an fsync that lied) must never leave
// a table under its final name that is not whole. It exports the samples
// (-faults.all: and the episode records).
func TestFaultMatrixExport(t *testing.T) {
	dir := t.TempDir()
	res := onFS(t, nil, faultRun(dir, 4)...)
	require.Equal(t, 0, res.code, res.stderr)
	inputs := osFiles(t, dir)
	samples, episodes := filepath.Join(dir, "out", "samples.jsonl"), filepath.Join(dir, "episodes", "episodes.jsonl")
	args := []string{"export", "--parquet", filepath.Join(dir, "pq"), samples}
	if *faultsAll {
		// And the four tables of the records: its zstd encoders cost the
		// race detector a minute of CPU.
		args = append(args, episodes)
	}
	start := vfstest.New(dir)
	for p, data := range inputs {
		start.Put(p, data)
	}
	sweep, healthy := newSweep(t, dir, start, args, args, sampled)
	want := sweep.want
	healthy.Crash()
	require.Equal(t, want, sweep.files(healthy), "an export that exited 0 survives a power loss")
	sweep.afterFault = func(t *testing.T, fault vfstest.Fault, m *vfstest.Mem) {
		if fault.Kind == vfstest.LostSync {
			return // a disk that lies can leave anything; the export again replaces it
		}
		for p, data := range sweep.files(m) {
			if !bytes.Equal(data, want[p]) {
				t.Errorf("%s: %s holds %d bytes, not the whole table's %d", fault, p, len(data), len(want[p]))
			}
		}
	}
	t.Logf("fault matrix, %s:\n%s", strings.Join(args, " "), matrix(sweep.run(t)))
}

// An experiment directory whose manifest does not decode (what a power
// loss after an fsync that lied leaves of it) is refused, naming it,
// before anything is played: it once resumed as if it matched.
func TestExperimentRefusesADamagedManifest(t *testing.T) {
	out := t.TempDir()
	args := []string{"experiment", "elfarol", "--param", "agents=4", "--param", "nights=2", "--allocator", "team",
		"--seeds", "1", "--episodes", "2", "-q", "--out", out}
	for _, manifest := range []string{"", `{"version": 2, "scen`} {
		require.NoError(t, os.WriteFile(filepath.Join(out, "experiment.json"), []byte(manifest), 0o644))
		res := onFS(t, nil, append(slices.Clone(args), "--resume")...)
		require.Equal(t, ExitUsage, res.code, res.stderr)
		require.Contains(t, res.stderr, "manifest is damaged")
		require.Contains(t, res.stderr, filepath.Join(out, "experiment.json"))
		entries, err := os.ReadDir(out)
		require.NoError(t, err)
		require.Len(t, entries, 1, "nothing was played")
	}
}

// TestResumeAuditsTheRunsFileSystem: --resume checks a run's files on the
// file system it writes them to, the audit as well as the digests: a run
// whose files are on an in-memory file system, and nowhere on disk,
// resumes there as complete (the audit read the disk before, and found
// no files where the progress file vouches for bytes).
func TestResumeAuditsTheRunsFileSystem(t *testing.T) {
	dir := t.TempDir()
	args := faultRun(dir, 4)
	mem := vfstest.New(dir)
	res := onFS(t, mem, args...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, osFiles(t, dir), "nothing on disk")
	res = onFS(t, mem, append(slices.Clone(args), "--resume")...)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr+res.stdout, "nothing to resume")
}
