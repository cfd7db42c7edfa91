package cli

import (
	"context"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/troupe-rl/troupe/internal/cputime"
)

// BenchmarkRunAgents is `troupe run elfarol` as a user runs it, samples
// written to a file (with its progress file), at 100 and at 100,000
// agents per episode, the same 200,000 samples each: it reports the CPU
// time (user+sys) per sample of each, their ratio (flat scaling is 1),
// and the heap the process held from the system after the large run.
//
//	go test -run '^$' -bench RunAgents -benchtime 3x ./cli
func BenchmarkRunAgents(b *testing.B) {
	const samples = 200_000
	dir := b.TempDir()
	run := func(agents int) float64 {
		args := []string{"run", "elfarol", "-p", "agents=" + strconv.Itoa(agents), "-n", strconv.Itoa(samples / agents),
			"-o", filepath.Join(dir, "out.jsonl"), "-q"}
		app := New(io.Discard, io.Discard)
		cpu := cputime.Seconds()
		if code := app.Main(context.Background(), args); code != 0 {
			b.Fatalf("%v: exit %d", args, code)
		}
		return (cputime.Seconds() - cpu) / samples
	}
	var small, large float64
	for b.Loop() {
		small += run(100)
		large += run(100_000)
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	k := float64(b.N)
	b.ReportMetric(small/k*1e9, "cpu-ns/sample@100")
	b.ReportMetric(large/k*1e9, "cpu-ns/sample@100k")
	b.ReportMetric(large/small, "ratio-100k/100")
	b.ReportMetric(float64(m.HeapSys-m.HeapReleased)/(1<<20), "heap-MiB")
	b.ReportMetric(0, "ns/op")
}
