package viewer_test

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// TestLargeFileIndexMemory indexes $TROUPE_VIEW_LARGE_FILE and logs what
// the index keeps (the heap after a collection, per episode) and the
// process's peak resident memory (VmHWM), which the index pass bounds.
// Run by hand, alone (docs/viewer.md gives the command and numbers).
func TestLargeFileIndexMemory(t *testing.T) {
	path := os.Getenv(EnvLargeFile)
	if path == "" {
		t.Skipf("$%s names no file: this measure of a million episodes is run by hand", EnvLargeFile)
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
	t.Logf("%d episodes indexed in %v; heap kept %.1f MiB, %.1f B per episode; peak RSS %s", x.Len(), took,
		kept/(1<<20), kept/float64(x.Len()), peakRSS(t))
	t.Logf("the columns: %.1f B per episode", float64(x.IndexBytes())/float64(x.Len()))
	runtime.KeepAlive(x)
}

// peakRSS reads this process's peak resident set from /proc (Linux).
func peakRSS(t *testing.T) string {
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
