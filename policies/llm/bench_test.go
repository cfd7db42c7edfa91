package llm_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
	"github.com/troupe-rl/troupe/trajectories"
)

// serveEnv, when set in the environment of this test binary, makes it a
// test server instead of running tests: the benchmarks start it as a child
// process, so that the CPU the server burns is not counted as troupe's.
// Its value is the server kind and latency, "vllm 20ms".
const serveEnv = "TROUPE_LLMTEST_SERVE"

// sharedLlama is the real llama-server of the memory tests, one for the
// package (memory_real_test.go).
var sharedLlama llamatest.Shared

func TestMain(m *testing.M) {
	if spec := os.Getenv(serveEnv); spec != "" {
		os.Exit(serve(spec))
	}
	code := m.Run()
	sharedLlama.Close()
	os.Exit(code)
}

// serve runs a test server until standard input closes; it prints the
// server's base URL on the first line of standard output.
func serve(spec string) int {
	kind, lat, _ := strings.Cut(spec, " ")
	latency, err := time.ParseDuration(lat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: want KIND LATENCY: %v\n", serveEnv, spec, err)
		return 2
	}
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.Kind(kind), Latency: latency, Brain: llmtest.First})
	fmt.Println(srv.Listen())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// child is a test server running in a child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
}

func startChild(b *testing.B, kind llmtest.Kind, latency time.Duration) *child {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+string(kind)+" "+latency.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("test server: %v", err)
	}
	return &child{cmd: cmd, stdin: stdin, url: strings.TrimSpace(line)}
}

// stop ends the server and returns the CPU time it used.
func (c *child) stop(b *testing.B) time.Duration {
	b.Helper()
	_ = c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("test server: %v", err)
	}
	ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapAllocs returns the bytes and objects allocated on the heap so far.
func heapAllocs() (bytes, objects uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// benchLatency is the test server's latency L: TROUPE_BENCH_LATENCY, or
// 20 ms.
func benchLatency(b *testing.B) time.Duration {
	v := os.Getenv("TROUPE_BENCH_LATENCY")
	if v == "" {
		return 20 * time.Millisecond
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("TROUPE_BENCH_LATENCY=%q: want a positive duration", v)
	}
	return d
}

// BenchmarkThroughput measures how close troupe comes to the ideal rate of
// LLM turns, in-flight calls / L, against a test server that answers every
// request after exactly L with no capacity limit: tic-tac-toe self-play
// with an LLM policy (vLLM answer shape, token ids and log-probs), one
// episode per in-flight slot, each worker playing 8 episodes of seven turns
// back to back, samples encoded to JSONL.
//
// With a fixed L, workers that start together stay in lockstep: every L,
// all of them call at once, and each call waits for the CPU to get through
// the whole wave. Real servers' latencies vary, which spreads the calls
// out. The "staggered" runs spread the first turns of the first episodes
// over one L, once, and %ideal is then the steady rate, counted from 2 L
// after the start to 2 L before the ideal end; the "lockstep" runs do not,
// and report the whole run's rate. Both report the whole-run rate as
// run%ideal.
//
// The server runs in a child process, so troupe's CPU time and allocations
// per turn exclude it; the server's own CPU per turn is reported apart.
//
//	go test ./policies/llm -run '^$' -bench Throughput -benchtime 1x
//	TROUPE_BENCH_LATENCY=100ms go test ./policies/llm -run '^$' -bench Throughput -benchtime 1x
func BenchmarkThroughput(b *testing.B) {
	latency := benchLatency(b)
	for _, inflight := range []int{256, 1024} {
		for _, staggered := range []bool{true, false} {
			mode := "lockstep"
			if staggered {
				mode = "staggered"
			}
			b.Run(fmt.Sprintf("inflight=%d/L=%v/%s", inflight, latency, mode), func(b *testing.B) {
				throughput(b, inflight, latency, 8, staggered)
			})
		}
	}
}

// counting wraps a policy: it counts the turns it answers and, when
// stagger is set, delays each of the first n first turns (the first
// episode of every worker) by a spread of up to stagger.
type counting struct {
	p       agents.Policy
	turns   atomic.Int64
	firsts  atomic.Int64
	n       int64
	stagger time.Duration
}

func (c *counting) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	if c.stagger > 0 && obs.Step == 1 && c.firsts.Add(1) <= c.n {
		t := time.NewTimer(time.Duration(obs.Seed % uint64(c.stagger)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	a, err := c.p.Act(ctx, obs)
	c.turns.Add(1)
	return a, err
}

func throughput(b *testing.B, inflight int, latency time.Duration, rounds int, staggered bool) {
	srv := startChild(b, llmtest.VLLM, latency)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.Temperature = srv.url, "bench", ptr(0.0)
	cfg.MaxInFlight = inflight
	p, err := llm.New(cfg, llm.WithScenario(tictactoe.New().Info()))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Client().Close()
	sc := tictactoe.New()
	params, err := sc.Info().ParseParams(nil)
	if err != nil {
		b.Fatal(err)
	}
	run := play.Config{
		Play:        env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(p)},
		Episodes:    inflight * rounds,
		Concurrency: inflight,
		Seed:        1,
	}
	// Warm up: open the connections, grow the pools.
	warm := run
	warm.Episodes = inflight
	if _, err := play.Run(context.Background(), warm, &trajectories.Output{Sink: trajectories.Discard}); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	const turnsPerEpisode = 7 // llmtest.First's games
	var turns, steadyTurns int64
	var wall, cpu, steadyWall time.Duration
	bytes0, objects0 := heapAllocs()
	b.ResetTimer()
	for range b.N {
		c := &counting{p: p, n: int64(inflight)}
		if staggered {
			c.stagger = latency
		}
		run.Policy = env.SamePolicy(c)
		// The steady window: from 2 L after the start to 2 L before the
		// ideal end of the run.
		from, to := 2*latency, time.Duration(turnsPerEpisode*rounds-2)*latency
		var mu sync.Mutex
		var n0, n1 int64
		var t0, t1 time.Time
		start, cpu0 := time.Now(), selfCPU()
		open := time.AfterFunc(from, func() { mu.Lock(); t0, n0 = time.Now(), c.turns.Load(); mu.Unlock() })
		shut := time.AfterFunc(to, func() { mu.Lock(); t1, n1 = time.Now(), c.turns.Load(); mu.Unlock() })
		sum, err := play.Run(context.Background(), run, &trajectories.Output{Sink: trajectories.NewJSONLWriter(io.Discard, trajectories.Flat)})
		wall += time.Since(start)
		cpu += selfCPU() - cpu0
		open.Stop()
		shut.Stop()
		if err != nil {
			b.Fatal(err)
		}
		if sum.ByStatus["completed"] != run.Episodes {
			b.Fatalf("%d of %d episodes completed: %v", sum.ByStatus["completed"], run.Episodes, sum.FirstFailure)
		}
		if int(sum.Turns) != turnsPerEpisode*run.Episodes {
			b.Fatalf("%d turns, want %d", sum.Turns, turnsPerEpisode*run.Episodes)
		}
		turns += sum.Turns
		mu.Lock()
		if !t0.IsZero() && !t1.IsZero() {
			steadyTurns += n1 - n0
			steadyWall += t1.Sub(t0)
		}
		mu.Unlock()
	}
	b.StopTimer()
	bytes1, objects1 := heapAllocs()
	serverCPU := srv.stop(b)
	ideal := float64(inflight) / latency.Seconds()
	rate := float64(turns) / wall.Seconds()
	if staggered && steadyWall > 0 {
		rate = float64(steadyTurns) / steadyWall.Seconds()
	}
	b.ReportMetric(rate, "turns/s")
	b.ReportMetric(ideal, "ideal-turns/s")
	b.ReportMetric(100*rate/ideal, "%ideal")
	b.ReportMetric(100*float64(turns)/wall.Seconds()/ideal, "run%ideal")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(turns), "cpu-ns/turn")
	b.ReportMetric(float64(serverCPU.Nanoseconds())/float64(turns+int64(turnsPerEpisode*inflight)), "server-cpu-ns/turn")
	b.ReportMetric(float64(bytes1-bytes0)/float64(turns), "B/turn")
	b.ReportMetric(float64(objects1-objects0)/float64(turns), "allocs/turn")
	b.ReportMetric(float64(runtime.NumCPU()), "cpus")
}

// BenchmarkTurn measures one LLM turn's client-side cost without waiting:
// the test server answers at once, in process, so this is troupe's CPU per
// turn plus the in-process server's.
func BenchmarkTurn(b *testing.B) {
	srv := llmtest.NewServer(llmtest.Options{Brain: llmtest.First})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model = "http://in-process/v1", "bench"
	c, err := llm.NewClient(cfg, llm.WithRoundTripper(srv.Transport()))
	if err != nil {
		b.Fatal(err)
	}
	p, err := llm.NewPolicy(c, cfg)
	if err != nil {
		b.Fatal(err)
	}
	obs := board(1, "a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Act(context.Background(), obs); err != nil {
			b.Fatal(err)
		}
	}
}

func board(seed uint64, legal ...string) *agents.Observation {
	return &agents.Observation{Agent: "x", Role: "x", View: "Tic-tac-toe. " + strconv.Itoa(len(legal)) + " cells are free.", Legal: legal, Seed: seed}
}

// BenchmarkMemoryTurn measures what an LLM turn costs troupe as the
// conversation grows: one agent plays turns conversations of `turns`
// turns against a test server in a child process (2 ms latency), each
// turn delivering two messages of 120 bytes and a view of 200: without
// memory (the stateless prompts of before), with memory on vLLM's chat
// endpoint (the prompt holds the whole conversation), and with memory
// token in, token out on vLLM and SGLang (TokenIn: four or five small
// calls a turn besides the generation). It reports troupe's CPU and heap
// bytes per turn, and the bytes of the chat sent per turn (hist-B/turn):
// with memory the cost per turn may grow with the conversation by about
// what the chat itself grows, not more.
//
//	go test ./policies/llm -run '^$' -bench MemoryTurn -benchtime 20x
func BenchmarkMemoryTurn(b *testing.B) {
	servers := map[llmtest.Kind]*child{}
	for _, kind := range []llmtest.Kind{llmtest.VLLM, llmtest.SGLang} {
		servers[kind] = startChild(b, kind, 2*time.Millisecond)
		defer servers[kind].stop(b)
	}
	for _, mode := range []struct {
		name            string
		kind            llmtest.Kind
		memory, tokenIn bool
	}{
		{"memory=false", llmtest.VLLM, false, false},
		{"memory=true", llmtest.VLLM, true, false},
		{"memory=token-in-vllm", llmtest.VLLM, true, true},
		{"memory=token-in-sglang", llmtest.SGLang, true, true},
	} {
		for _, turns := range []int{10, 40} {
			b.Run(fmt.Sprintf("%s/turns=%d", mode.name, turns), func(b *testing.B) {
				cfg := llm.DefaultConfig()
				cfg.BaseURL, cfg.Model, cfg.Format, cfg.NoMemory = servers[mode.kind].url, "bench", llm.FormatText, !mode.memory
				cfg.Kind, cfg.TokenIn = llm.Kind(mode.kind), mode.tokenIn
				p, err := llm.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Client().Close()
				ctx := context.Background()
				converse := func() int {
					var hist []agents.Turn
					var seen []protocol.Message
					sent := 0
					for k := range turns {
						inbox := []protocol.Message{
							{From: "env", To: "a", Kind: "news", Payload: strings.Repeat("n", 100), Time: k},
							{From: "b", To: "a", Kind: "say", Payload: strings.Repeat("s", 100), Time: k},
						}
						seen = append(seen, inbox...)
						obs := &agents.Observation{Agent: "a", Role: "r", Turn: k, Step: k, View: strings.Repeat("v", 200),
							Inbox: inbox, Seen: seen, Seed: uint64(k), History: hist}
						a, err := p.Act(ctx, obs)
						if err != nil {
							b.Fatal(err)
						}
						for _, m := range a.Generation.Prompt.Messages {
							sent += len(m.Content)
						}
						hist = append(hist, agents.Turn{Step: k, View: obs.View, Inbox: inbox, Action: a})
					}
					return sent
				}
				converse() // warm up: connections, pools
				runtime.GC()
				sent := 0
				bytes0, _ := heapAllocs()
				cpu0 := selfCPU()
				b.ResetTimer()
				for range b.N {
					sent += converse()
				}
				b.StopTimer()
				cpu := selfCPU() - cpu0
				bytes1, _ := heapAllocs()
				n := float64(b.N * turns)
				b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-us/turn")
				b.ReportMetric(float64(bytes1-bytes0)/n, "B/turn")
				b.ReportMetric(float64(sent)/n, "hist-B/turn")
			})
		}
	}
}

// BenchmarkLlamaTurn weighs what one turn costs troupe on llama.cpp token
// in, token out (the default with memory: /apply-template, /tokenize,
// /detokenize and /completion with the prompt's ids) against the chat path
// on the same conversation (the chat endpoint, then /apply-template and
// /tokenize of the body sent for the prompt ids, /detokenize for the
// response's text): the turn'th turn of an agent whose earlier turns were
// played on the same path, each delivering two messages of 100 bytes and a
// view of 200, against llmtest's llama.cpp in a child process; path
// vllm-chat is the chat path on vLLM, whose chat answer carries the prompt
// ids itself (one call a turn), for reference. Every
// iteration asks for the same turn; cpu-us/turn is troupe's CPU (user and
// system) per turn, which is what the ratio token/chat is taken of. Turn 1
// has no memory yet; turn 2 is the first whose prompt extends an earlier
// one's ids. (The chat path's prompt ids do not extend the previous turn's
// where the model sampled an end token the template writes otherwise: it
// tokenizes the chat anew, as it does against the real server.)
//
//	go test ./policies/llm -run '^$' -bench LlamaTurn -benchtime 200x -count 3
func BenchmarkLlamaTurn(b *testing.B) {
	llama := startChild(b, llmtest.LlamaCpp, 0)
	defer llama.stop(b)
	vllm := startChild(b, llmtest.VLLM, 0)
	defer vllm.stop(b)
	for _, turn := range []int{1, 2, 40} {
		for _, path := range []string{"chat", "token", "vllm-chat"} {
			b.Run(fmt.Sprintf("turn=%d/path=%s", turn, path), func(b *testing.B) {
				cfg := llm.DefaultConfig()
				cfg.BaseURL, cfg.Model, cfg.Format, cfg.Kind = llama.url, "bench", llm.FormatText, llm.KindLlamaCpp
				if path == "vllm-chat" {
					cfg.BaseURL, cfg.Kind = vllm.url, llm.KindVLLM
				}
				p, err := llm.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Client().Close()
				if path == "chat" {
					llm.UseChatPath(p)
				}
				ctx := context.Background()
				var hist []agents.Turn
				var seen []protocol.Message
				var obs *agents.Observation
				for k := range turn {
					inbox := []protocol.Message{
						{From: "env", To: "a", Kind: "news", Payload: strings.Repeat("n", 100), Time: k},
						{From: "b", To: "a", Kind: "say", Payload: strings.Repeat("s", 100), Time: k},
					}
					seen = append(seen, inbox...)
					obs = &agents.Observation{Agent: "a", Role: "r", Turn: k, Step: k, View: strings.Repeat("v", 200),
						Inbox: inbox, Seen: slices.Clip(seen), Seed: uint64(k), History: slices.Clip(hist)}
					if k == turn-1 {
						break
					}
					a, err := p.Act(ctx, obs)
					if err != nil {
						b.Fatal(err)
					}
					hist = append(hist, agents.Turn{Step: k, View: obs.View, Inbox: inbox, Action: a})
				}
				a, err := p.Act(ctx, obs) // warm up: connections, pools
				switch {
				case err != nil:
					b.Fatal(err)
				case a.Generation == nil || a.Generation.Tokens == nil:
					b.Fatalf("turn %d has no token ids: %v", turn, a.Notes)
				case path == "token" && turn > 1 && a.Notes["llm_memory_rebuilt"] != nil:
					b.Fatalf("turn %d was tokenized anew: %v", turn, a.Notes["llm_memory_rebuilt"])
				}
				runtime.GC()
				bytes0, objects0 := heapAllocs()
				cpu0 := selfCPU()
				b.ResetTimer()
				for range b.N {
					if _, err := p.Act(ctx, obs); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu := selfCPU() - cpu0
				bytes1, objects1 := heapAllocs()
				n := float64(b.N)
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/n, "cpu-us/turn")
				b.ReportMetric(float64(bytes1-bytes0)/n, "B/turn")
				b.ReportMetric(float64(objects1-objects0)/n, "allocs/turn")
				b.ReportMetric(float64(len(a.Generation.Tokens.Prompt)), "prompt-ids")
			})
		}
	}
}
