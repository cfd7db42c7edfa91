// Command testworker is the process the distributed tests and benchmarks
// start, so that they can kill it: a worker, or a submitter.
//
//	testworker worker -url URL [flags]     play episodes until SIGTERM
//	testworker submit -url URL -run ID -plan JSON -out FILE [-progress] [flags]
//
// Both print "ready" on stdout once connected. The worker exits 0 after a
// SIGTERM or SIGINT, once it has handed back what it held; the submitter
// exits 0 when the run is written.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/distributed/natsrun/internal/testscen"
	"github.com/troupe-rl/troupe/trajectories"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testworker worker|submit [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	url := fs.String("url", "", "NATS URL(s)")
	prefix := fs.String("prefix", "", "deployment prefix")
	replicas := fs.Int("replicas", 1, "stream replicas")
	ackWait := fs.Duration("ack-wait", 0, "consumer ack wait")
	maxDeliver := fs.Int("max-deliver", 0, "consumer max deliver")
	leaseTTL := fs.Duration("lease", 0, "submitter lease TTL")
	batch := fs.Int("batch", 1, "episodes per work message (submit; 0: chosen per run)")
	concurrency := fs.Int("concurrency", 1, "worker slots")
	delay := fs.Duration("delay", 0, "the sleepy policy's delay")
	drain := fs.Duration("drain", 0, "worker drain time")
	pollWait := fs.Duration("poll-wait", 200*time.Millisecond, "worker pull wait")
	crash := fs.Bool("crash", false, "allow the crash policy")
	llmURL := fs.String("llm", "", "OpenAI base URL of the llm policy's server")
	capacity := fs.String("elfarol-capacity", "", "play elfarol with this capacity, whatever its parameter (a changed build of it)")
	name := fs.String("name", "", "worker name")
	run := fs.String("run", "", "run id (submit)")
	plan := fs.String("plan", "", "testscen.Plan as JSON (submit)")
	out := fs.String("out", "", "output JSONL (submit)")
	progress := fs.Bool("progress", false, "print \"episode N\" on stdout as each episode reaches the output, in order (submit)")
	verbose := fs.Bool("v", false, "log to stderr")
	_ = fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	nc, err := natsrun.Connect(ctx, natsrun.ConnOptions{URL: *url, Name: mode})
	check(err)
	defer nc.Close()
	cfg := natsrun.Config{Prefix: *prefix, Replicas: *replicas, AckWait: *ackWait, MaxDeliver: *maxDeliver, LeaseTTL: *leaseTTL, Batch: *batch}
	client, err := natsrun.Open(ctx, nc, cfg, natsrun.WithLogger(logger))
	check(err)
	reg := testscen.Registry(testscen.Options{Delay: *delay, Crash: *crash, LLM: *llmURL, ElfarolCapacity: *capacity})

	switch mode {
	case "worker":
		w, err := client.NewWorker(ctx, natsrun.WorkerConfig{
			Registry: reg, Concurrency: *concurrency, Drain: *drain, PollWait: *pollWait, Name: *name,
		})
		check(err)
		fmt.Println("ready")
		check(w.Run(ctx))
		st, _ := json.Marshal(w.Stats())
		fmt.Println(string(st))
	case "submit":
		var p testscen.Plan
		check(json.Unmarshal([]byte(*plan), &p))
		rc, policies, err := p.Config(reg)
		check(err)
		x, err := client.Start(ctx, *run, rc, natsrun.Spec{Policies: policies})
		check(err)
		defer x.Close()
		f, err := os.Create(*out)
		check(err)
		out, err := p.Output(trajectories.NewJSONLWriter(f, trajectories.Flat))
		check(err)
		if *progress {
			// The output file is written in large blocks; this says how
			// far the run is as it goes.
			out.Observe = func(ep *trajectories.Episode) { fmt.Println("episode", ep.Index) }
		}
		fmt.Println("ready")
		_, err = x.Run(ctx, out)
		check(err)
		check(f.Close())
	default:
		fmt.Fprintf(os.Stderr, "testworker: unknown mode %q\n", mode)
		os.Exit(2)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}
