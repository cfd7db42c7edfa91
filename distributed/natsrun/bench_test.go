package natsrun_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/trajectories"
)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runIDs numbers the runs of one benchmark process.
var runIDs atomic.Int64

// playN plays n episodes of rc: locally when c is nil, else through c.
func playN(b *testing.B, c *natsrun.Client, rc runPlan, spec natsrun.Spec, n int) {
	rc.Episodes = n
	ctx := context.Background()
	if c == nil {
		if _, err := play.Run(ctx, rc.Config, rc.out(b, trajectories.Discard)); err != nil {
			b.Fatal(err)
		}
		return
	}
	x, err := c.Start(ctx, "bench-"+strconv.FormatInt(runIDs.Add(1), 10), rc.Config, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	sum, err := x.Run(ctx, rc.out(b, trajectories.Discard))
	if err != nil {
		b.Fatal(err)
	}
	if sum.Episodes != n {
		b.Fatalf("%d of %d episodes written", sum.Episodes, n)
	}
}

// BenchmarkBroker measures what NATS costs per episode, with a scripted
// scenario (two turns of count, random policy: microseconds of game) so
// that the broker is all there is to measure. Everything runs in this
// process (server, submitter, worker), so cpu-µs/ep is the whole cost of
// an episode on every side; subtract local's for the broker's share.
//
//   - local: play.Run alone, the baseline;
//   - throughput: 8 worker slots, the queue kept full (Ahead 1024), over
//     an in-process connection (no sockets) and over loopback TCP;
//   - latency: one episode at a time (Ahead 1, one slot): ns/op is the
//     round trip request -> worker -> result -> collector;
//   - batch=16: the throughput cases with 16 episodes per work message
//     (Config.Batch), as scripted runs are meant to be played.
//
// BenchmarkCluster's nodes=1 cases are the same workload against an
// external nats-server process: compare their ep/s and all-cpu-µs/ep with
// throughput/tcp's here, whose server is embedded.
func BenchmarkBroker(b *testing.B) {
	reg := testscen.Registry(testscen.Options{})
	rc, spec := plan(b, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "2"}, Policy: "random", Seed: 1, Concurrency: 8, Allocators: []string{"team"}})
	cases := []struct {
		name  string
		nats  bool
		tcp   bool
		ahead int
		slots int
		conc  int
		batch int
	}{
		{name: "local"},
		{name: "throughput/inprocess", nats: true, ahead: 1024, slots: 8, conc: 8, batch: 1},
		{name: "throughput/tcp", nats: true, tcp: true, ahead: 1024, slots: 8, conc: 8, batch: 1},
		{name: "throughput/inprocess/batch=16", nats: true, ahead: 1024, slots: 8, conc: 8, batch: 16},
		{name: "throughput/tcp/batch=16", nats: true, tcp: true, ahead: 1024, slots: 8, conc: 8, batch: 16},
		{name: "latency/inprocess", nats: true, ahead: 1, slots: 1, conc: 1, batch: 1},
		{name: "latency/tcp", nats: true, tcp: true, ahead: 1, slots: 1, conc: 1, batch: 1},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var c *natsrun.Client
			run := rc
			if tc.nats {
				listen := ""
				if tc.tcp {
					listen = "127.0.0.1:0"
				}
				srv, _ := embedded(b, listen)
				cfg := natsrun.Config{Ahead: tc.ahead, Batch: tc.batch}
				if tc.tcp {
					c = open(b, connectURL(b, srv.ClientURL()), cfg)
					worker(b, open(b, connectURL(b, srv.ClientURL()), cfg), natsrun.WorkerConfig{Registry: reg, Concurrency: tc.slots})
				} else {
					c = open(b, connect(b, srv), cfg)
					worker(b, open(b, connect(b, srv), cfg), natsrun.WorkerConfig{Registry: reg, Concurrency: tc.slots})
				}
				run.Concurrency = tc.conc
			}
			playN(b, c, run, spec, 50) // warm up: connections, consumers, engines
			b.ResetTimer()
			cpu := cpuTime(b)
			playN(b, c, run, spec, b.N)
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/ep")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ep/s")
		})
	}
}

// BenchmarkScaling plays latency-bound episodes (count, two turns, each an
// LLM call to an llmtest server that answers after 50ms) on 1, 2, 4 and 8
// worker processes of 4 slots each, and reports episodes per second, the
// fraction of the ideal (slots / 100ms) and of linear scaling (against the
// 1-worker figure) reached, and the CPU per episode of the workers and of
// this process, which holds the NATS server, the LLM server and the
// submitter.
func BenchmarkScaling(b *testing.B) {
	const slots, latency = 4, 50 * time.Millisecond
	llmSrv := llmtest.Start(b, llmtest.Options{Latency: latency, Brain: llmtest.First})
	reg := testscen.Registry(testscen.Options{LLM: llmSrv.URL()})
	rc, spec := plan(b, reg, testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "2"}, Policy: "llm", Seed: 1, Concurrency: 64, Allocators: []string{"team"}})
	bin := testworkerBin(b)
	var perWorker1 float64
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			srv, _ := embedded(b, "127.0.0.1:0")
			cfg := natsrun.Config{}
			c := open(b, connectURL(b, srv.ClientURL()), cfg)
			var workers []*proc
			for i := range n {
				workers = append(workers, start(b, true, bin, "worker", "-url", srv.ClientURL(), "-concurrency", strconv.Itoa(slots),
					"-llm", llmSrv.URL(), "-name", "w"+strconv.Itoa(i)))
			}
			workersCPU := func() time.Duration {
				var d time.Duration
				for _, p := range workers {
					d += procCPU(b, p.cmd.Process.Pid)
				}
				return d
			}
			playN(b, c, rc, spec, 2*n*slots) // warm up
			b.ResetTimer()
			cpu, wcpu := cpuTime(b), workersCPU()
			playN(b, c, rc, spec, b.N)
			b.ReportMetric(float64((workersCPU()-wcpu).Microseconds())/float64(b.N), "workers-cpu-µs/ep")
			eps := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(eps, "ep/s")
			b.ReportMetric(eps/float64(n*slots)*(2*latency).Seconds()*100, "%ideal")
			if n == 1 {
				perWorker1 = eps
			} else if perWorker1 > 0 {
				b.ReportMetric(eps/(float64(n)*perWorker1)*100, "%linear")
			}
			// This process holds the NATS server, the LLM server and the
			// submitter.
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "host-cpu-µs/ep")
		})
	}
}

// procCPU is the CPU time process pid has used, from /proc (Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th, in clock ticks (100 per second).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkCluster runs BenchmarkBroker's throughput case against
// nats-server processes on loopback: one server (R1), and a 3-node
// JetStream cluster with every stream and bucket replicated 3 times (R3).
// The submitter and an 8-slot worker run in this process. Episodes are
// small (count, 2 samples, ~2 KB encoded) or large (El Farol with 60
// patrons, 60 samples, ~44 KB), one episode per work message or 16
// (batch=16). servers-cpu-µs/ep is the servers' CPU per episode, all nodes
// together; client-cpu-µs/ep this process's; all-cpu-µs/ep both.
func BenchmarkCluster(b *testing.B) {
	reg := testscen.Registry(testscen.Options{})
	sizes := []struct {
		name string
		plan testscen.Plan
	}{
		{"small", testscen.Plan{Scenario: "count", Params: map[string]string{"turns": "2"}, Policy: "random", Seed: 1, Concurrency: 8, Allocators: []string{"team"}}},
		{"large", testscen.Plan{Scenario: "elfarol", Policy: "random", Seed: 1, Concurrency: 8, Allocators: []string{"team"}}},
	}
	for _, nodes := range []int{1, 3} {
		for _, size := range sizes {
			for _, batch := range []int{1, 16} {
				name := fmt.Sprintf("nodes=%d/%s", nodes, size.name)
				if batch > 1 {
					name += fmt.Sprintf("/batch=%d", batch)
				}
				clusterCase(b, name, nodes, batch, reg, size.plan)
			}
		}
	}
}

func clusterCase(b *testing.B, name string, nodes, batch int, reg *env.Registry, p testscen.Plan) {
	b.Run(name, func(b *testing.B) {
		cl := startCluster(b, nodes)
		cfg := natsrun.Config{Replicas: nodes, Batch: batch}
		c := open(b, connectURL(b, cl.url()), cfg)
		worker(b, open(b, connectURL(b, cl.url()), cfg), natsrun.WorkerConfig{Registry: reg, Concurrency: 8})
		rc, spec := plan(b, reg, p)
		serversCPU := func() time.Duration {
			var d time.Duration
			for _, p := range cl.procs {
				d += procCPU(b, p.cmd.Process.Pid)
			}
			return d
		}
		playN(b, c, rc, spec, 100) // warm up
		b.ResetTimer()
		cpu, scpu := cpuTime(b), serversCPU()
		playN(b, c, rc, spec, b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ep/s")
		client, servers := cpuTime(b)-cpu, serversCPU()-scpu
		b.ReportMetric(float64(client.Microseconds())/float64(b.N), "client-cpu-µs/ep")
		b.ReportMetric(float64(servers.Microseconds())/float64(b.N), "servers-cpu-µs/ep")
		b.ReportMetric(float64((client+servers).Microseconds())/float64(b.N), "all-cpu-µs/ep")
	})
}
