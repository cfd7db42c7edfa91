package envserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/internal/cputime"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
)

// The cost of a step through the server on loopback, against its
// yardsticks measured in the same run: the same tic-tac-toe episodes
// (every move the first legal cell, both seats held by one controller)
// stepped on an env.Episode directly, and on a table in process. Each
// reports ns and allocations per step (per move) and episodes per second:
//
//	go test -run '^$' -bench Step -benchmem ./envserver

func tttSetup(b *testing.B) env.Setup {
	b.Helper()
	res, err := (&runspec.Spec{Scenario: "tictactoe", Episodes: 1}).Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	if err != nil {
		b.Fatal(err)
	}
	return env.Setup{Play: res.Config.Play}
}

// report reports wall and CPU time (user+sys, the process's: client and
// server together) per step, from cpu0, the CPU seconds at the start.
func report(b *testing.B, cpu0 float64, steps, episodes int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	if cpu := cputime.Seconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu*1e9/float64(steps), "cpu-ns/step")
	}
	b.ReportMetric(float64(episodes)/b.Elapsed().Seconds(), "episodes/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStepEpisode is the yardstick: the stepped episode itself.
func BenchmarkStepEpisode(b *testing.B) {
	setup := tttSetup(b)
	steps, eps, cpu0 := 0, 0, cputime.Seconds()
	for b.Loop() {
		ep, err := env.NewEpisode(setup)
		if err != nil {
			b.Fatal(err)
		}
		for !ep.Done() {
			o := ep.Pending()[0]
			if err := ep.Act(o.Seat, agents.Action{Text: o.Legal[0]}); err != nil {
				b.Fatal(err)
			}
			steps++
		}
		eps++
	}
	report(b, cpu0, steps, eps)
}

// BenchmarkStepTable steps the same episodes on a table, in process.
func BenchmarkStepTable(b *testing.B) {
	setup := tttSetup(b)
	ctx := context.Background()
	steps, eps, cpu0 := 0, 0, cputime.Seconds()
	for b.Loop() {
		tb, err := table.New(ctx, table.Config{Setup: setup})
		if err != nil {
			b.Fatal(err)
		}
		s, err := tb.Join()
		if err != nil {
			b.Fatal(err)
		}
		for {
			obs, err := s.Observe(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(obs) == 0 {
				break
			}
			seat, _ := tb.SeatOf(obs[0].Agent)
			if err := s.Act(ctx, seat, agents.Action{Text: obs[0].Legal[0]}); err != nil {
				b.Fatal(err)
			}
			steps++
		}
		eps++
	}
	report(b, cpu0, steps, eps)
}

// benchServer is a server of the default config on loopback HTTP, until
// the benchmark ends, and a Go client of it (one keep-alive connection).
func benchServer(b *testing.B) *envclient.Client {
	s, err := envserver.New(envserver.Config{})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s)
	b.Cleanup(hs.Close)
	return envclient.New(hs.URL, "", &http.Client{})
}

// BenchmarkStepServer steps them through the server over loopback HTTP
// with the Go client (one keep-alive connection), the episode written
// through the output stage (no sink) at its end.
func BenchmarkStepServer(b *testing.B) {
	c := benchServer(b)
	ctx := context.Background()
	steps, eps, cpu0 := 0, 0, cputime.Seconds()
	for b.Loop() {
		sess, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe"})
		if err != nil {
			b.Fatal(err)
		}
		for !res.Done {
			p := res.Observation.Pending[0]
			if res, err = sess.Step(ctx, p.Agent, p.Legal[0]); err != nil {
				b.Fatal(err)
			}
			steps++
		}
		eps++
	}
	report(b, cpu0, steps, eps)
}

// BenchmarkResetSeats is the cost per seat of an El Farol episode through
// the server, reset and one step that names every seat's move, at 1,000
// and at 10,000 seats (the default --max-seats), and their ratio: about
// 1 when the cost is linear in the seats (it was quadratic: a step of
// 20,000 seats took minutes).
//
//	go test -run '^$' -bench ResetSeats -benchtime 5x ./envserver
func BenchmarkResetSeats(b *testing.B) {
	c := benchServer(b)
	ctx := context.Background()
	episode := func(n int) float64 {
		cpu0 := cputime.Seconds()
		sess, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": strconv.Itoa(n)}})
		if err != nil {
			b.Fatal(err)
		}
		moves := make(map[string]string, n)
		for _, p := range res.Observation.Pending {
			moves[p.Agent] = p.Legal[0]
		}
		if res, err = sess.StepAll(ctx, moves); err != nil || !res.Done {
			b.Fatal(err, res.Done)
		}
		return (cputime.Seconds() - cpu0) / float64(n)
	}
	var small, large float64
	for b.Loop() {
		small += episode(1_000)
		large += episode(10_000)
	}
	k := float64(b.N)
	b.ReportMetric(small/k*1e9, "cpu-ns/seat@1k")
	b.ReportMetric(large/k*1e9, "cpu-ns/seat@10k")
	b.ReportMetric(large/small, "ratio-10k/1k")
	b.ReportMetric(0, "ns/op")
}
