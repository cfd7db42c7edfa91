//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/viewer"
)

// BenchmarkOpen1M opens a file of a million samples that troupe itself
// writes (El Farol, 100 patrons, 10,000 episodes; about 690 MB) and renders
// its overview, its list and an episode: what `troupe view FILE` does
// before the first page shows. It reports the CPU time (user+sys) per
// open, the peak heap while opening (sampled every millisecond) and the
// heap the index keeps. $TROUPE_VIEW_BENCH_FILE names an existing file
// to open instead of writing one.
func BenchmarkOpen1M(b *testing.B) {
	path := os.Getenv("TROUPE_VIEW_BENCH_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "elfarol-1m.jsonl")
		troupe(b, "run", "elfarol", "-n", "10000", "-p", "agents=100", "-q", "-o", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	var f *viewer.File
	for b.Loop() {
		if f != nil {
			f.Close()
		}
		if f, err = viewer.Open(path); err != nil {
			b.Fatal(err)
		}
		v, err := viewer.New([]*viewer.File{f}, nil)
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(v.Handler("", true))
		for _, page := range []string{"/run-0/index.html", "/run-0/episodes.html", "/run-0/ep-0.html"} {
			resp, err := srv.Client().Get(srv.URL + page)
			if err != nil || resp.StatusCode != 200 {
				b.Fatal(page, err, resp.StatusCode)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		srv.Close()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	close(stop)
	<-done
	cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()+after.Stime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
	if f.Len() != 10000 && os.Getenv("TROUPE_VIEW_BENCH_FILE") == "" {
		b.Fatalf("%d episodes", f.Len())
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(cpu.Seconds(), "cpu-s/op")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "kept-heap-MiB")
	b.ReportMetric(float64(f.Lines), "lines")
	f.Close()
}
