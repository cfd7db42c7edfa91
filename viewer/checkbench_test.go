//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/viewer"
)

// BenchmarkCheckBesideIndex checks a file and indexes it as troupe view
// does (viewer.Open), in one run, and reports each one's CPU time (user +
// sys) per GB. The file is El Farol with 20 patrons, written by troupe run:
// $TROUPE_CHECK_BENCH_EPISODES episodes (default 500, about 7 MB; 170,000
// make 2.3 GB), or $TROUPE_CHECK_BENCH_FILE, an existing file.
func BenchmarkCheckBesideIndex(b *testing.B) {
	path := os.Getenv("TROUPE_CHECK_BENCH_FILE")
	if path == "" {
		n := 500
		if s := os.Getenv("TROUPE_CHECK_BENCH_EPISODES"); s != "" {
			var err error
			if n, err = strconv.Atoi(s); err != nil {
				b.Fatal(err)
			}
		}
		path = filepath.Join(b.TempDir(), "elfarol-20.jsonl")
		troupe(b, "run", "elfarol", "-n", strconv.Itoa(n), "-p", "agents=20", "-q", "-o", path)
		os.Remove(path + ".progress.json") // the check reads the samples alone
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var checkCPU, indexCPU time.Duration
	b.SetBytes(fi.Size())
	for b.Loop() {
		t0 := cpu()
		rep := trajectories.CheckAt(f, fi.Size(), trajectories.CheckOptions{})
		t1 := cpu()
		x, err := viewer.Open(path)
		t2 := cpu()
		if err != nil {
			b.Fatal(err)
		}
		if !rep.OK() || int64(x.Len()) != rep.Episodes {
			b.Fatalf("check: %v, %d episodes; index: %d", rep.Problems, rep.Episodes, x.Len())
		}
		x.Close()
		checkCPU += t1 - t0
		indexCPU += t2 - t1
	}
	gb := float64(fi.Size()) / 1e9 * float64(b.N)
	b.ReportMetric(checkCPU.Seconds()/gb, "check-cpu-s/GB")
	b.ReportMetric(indexCPU.Seconds()/gb, "index-cpu-s/GB")
	b.ReportMetric(float64(fi.Size())/1e6, "MB")
}
