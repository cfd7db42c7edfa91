//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/viewer"
)

// TestLargeFileIndexMemory indexes $TROUPE_VIEW_LARGE_FILE and logs what
// the index keeps and the process's peak resident memory: run by hand,
// alone (docs/viewer.md gives the command and numbers).
func TestLargeFileIndexMemory(t *testing.T) {
	runtime.KeepAlive(openLarge(t))
}

// openLarge indexes $TROUPE_VIEW_LARGE_FILE (the test is skipped without
// it) and logs the time it took, the heap the index keeps (after a
// collection), per episode, what its columns cost, and the process's peak
// resident memory (VmHWM), which the index pass bounds.
func openLarge(t *testing.T) *viewer.File {
	t.Helper()
	path := os.Getenv(EnvLargeFile)
	if path == "" {
		t.Skipf("$%s names no file: this check of a million episodes is run by hand", EnvLargeFile)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	x := openFiles(t, path)[0]
	took := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	kept := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	t.Logf("%d episodes indexed in %v; heap kept %.1f MiB, %.1f B per episode (the columns: %.1f B); peak RSS %s", x.Len(), took,
		kept/(1<<20), kept/float64(x.Len()), float64(x.IndexBytes())/float64(x.Len()), peakRSS())
	return x
}

// peakRSS reads this process's peak resident set from /proc (Linux).
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			f := bytes.Fields(v)
			if kb, err := strconv.Atoi(string(f[0])); err == nil {
				return strconv.FormatFloat(float64(kb)/1024, 'f', 0, 64) + " MiB"
			}
		}
	}
	return "unknown"
}
