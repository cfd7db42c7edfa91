package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/client"
	"github.com/troupe-rl/troupe/rollout/server"
)

// benchRequests are the benchmarked requests: one episode each, scripted
// policies in every seat.
var benchRequests = []struct{ name, body string }{
	{"tictactoe", `{"scenario":"tictactoe","policy":"center-first"}`},
	{"signal", `{"scenario":"signal","policy":"scripted"}`},
}

// BenchmarkRollouts measures the service over loopback HTTP, as slime's
// adapter uses it: each of C clients posts one-episode rollout requests
// back to back and reads the whole answer. It reports throughput
// (req/s), latency percentiles, the time inside the episode (from
// Server-Timing) and troupe's overhead per request: latency minus episode
// time, i.e. HTTP, decoding and checking the request, allocation, encoding
// the samples, and waiting for a CPU.
func BenchmarkRollouts(b *testing.B) {
	for _, req := range benchRequests {
		for _, clients := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("scenario=%s/clients=%d", req.name, clients), func(b *testing.B) {
				benchHTTP(b, req.body, clients)
			})
		}
	}
}

func benchHTTP(b *testing.B, body string, clients int) {
	s, err := server.New(server.Config{Scenarios: registry(b)})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = clients, clients
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	url := ts.URL + rollout.PathRollouts
	payload := []byte(body)

	latency := make([]time.Duration, b.N)
	inside := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t0 := time.Now()
				resp, err := hc.Post(url, "application/json", bytes.NewReader(payload))
				if err != nil {
					failed.Store(err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				latency[i] = time.Since(t0)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Errorf("status %d, read error %v", resp.StatusCode, err))
					return
				}
				inside[i], _ = rollout.ParseServerTiming(resp.Header.Get(rollout.HeaderServerTiming))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	report(b, elapsed, latency, inside)
}

// BenchmarkClient measures the same requests through the Go client, which
// also decodes every sample.
func BenchmarkClient(b *testing.B) {
	for _, req := range benchRequests {
		b.Run("scenario="+req.name+"/clients=16", func(b *testing.B) {
			s, err := server.New(server.Config{Scenarios: registry(b)})
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(s)
			defer ts.Close()
			c, err := client.New(ts.URL)
			if err != nil {
				b.Fatal(err)
			}
			var r rollout.Request
			if err := jsonStrict([]byte(req.body), &r); err != nil {
				b.Fatal(err)
			}
			latency := make([]time.Duration, b.N)
			inside := make([]time.Duration, b.N)
			var next atomic.Int64
			var failed atomic.Value
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						t0 := time.Now()
						res, err := c.Rollouts(context.Background(), &r)
						if err != nil {
							failed.Store(err)
							return
						}
						latency[i], inside[i] = time.Since(t0), res.EpisodeTime
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, ok := failed.Load().(error); ok {
				b.Fatal(err)
			}
			report(b, elapsed, latency, inside)
		})
	}
}

// report adds throughput, latency percentiles, episode time and overhead
// to the benchmark's result line.
func report(b *testing.B, elapsed time.Duration, latency, inside []time.Duration) {
	var overhead, episode time.Duration
	for i := range latency {
		overhead += latency[i] - inside[i]
		episode += inside[i]
	}
	sorted := slices.Clone(latency)
	slices.Sort(sorted)
	pct := func(p float64) float64 {
		return float64(sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]) / float64(time.Microsecond)
	}
	n := float64(len(latency))
	b.ReportMetric(n/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.90), "p90-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(episode)/n/float64(time.Microsecond), "episode-µs/req")
	b.ReportMetric(float64(overhead)/n/float64(time.Microsecond), "overhead-µs/req")
}
