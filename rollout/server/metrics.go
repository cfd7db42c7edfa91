package server

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/internal/promtext"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// The metrics are written with promtext, by hand: the hot path (one update
// per episode) stays a few atomic adds.

// latencyBuckets are the upper bounds, in seconds, of the latency
// histograms: from 100µs (a scripted tic-tac-toe episode) to 10 minutes
// (a long LLM episode).
var latencyBuckets = [...]float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// histogram is a fixed-bucket latency histogram safe for concurrent use.
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Uint64 // the last one is +Inf
	sumNS  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i, _ := slices.BinarySearch(latencyBuckets[:], s)
	h.counts[i].Add(1)
	h.sumNS.Add(int64(d))
}

// statuses are the episode statuses counted, in output order.
var statuses = [...]protocol.Status{
	protocol.StatusCompleted, protocol.StatusTruncated, protocol.StatusAborted, protocol.StatusFailed,
}

// scenarioStats are one scenario's counters; the map holding them is built
// once, so updates need no lock.
type scenarioStats struct {
	episodes [len(statuses)]atomic.Uint64
	samples  atomic.Uint64
	turns    atomic.Uint64
	duration histogram
}

type metrics struct {
	scenarios map[string]*scenarioStats
	names     []string // sorted keys of scenarios

	requestDuration histogram    // POST /v1/rollouts, answered
	calls           *CallCounter // Config.Calls

	inflightRequests atomic.Int64
	inflightEpisodes atomic.Int64

	mu       sync.Mutex
	requests map[string]uint64       // by endpoint and HTTP status: "rollouts 200"
	errors   map[rollout.Code]uint64 // by error code
}

func newMetrics(scenarios []string, calls *CallCounter) *metrics {
	m := &metrics{
		calls:     calls,
		scenarios: make(map[string]*scenarioStats, len(scenarios)),
		names:     slices.Sorted(slices.Values(scenarios)),
		requests:  map[string]uint64{},
		errors:    map[rollout.Code]uint64{},
	}
	for _, name := range scenarios {
		m.scenarios[name] = &scenarioStats{}
	}
	return m
}

func (m *metrics) episode(scenario string, status protocol.Status, samples, turns int, d time.Duration) {
	st, ok := m.scenarios[scenario]
	if !ok {
		return // the registry is fixed at New, so this does not happen
	}
	for i, s := range statuses {
		if s == status {
			st.episodes[i].Add(1)
		}
	}
	st.samples.Add(uint64(samples))
	st.turns.Add(uint64(turns))
	st.duration.observe(d)
}

func (m *metrics) request(endpoint string, status int, code rollout.Code) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[endpoint+" "+strconv.Itoa(status)]++
	if code != "" {
		m.errors[code]++
	}
}

// write appends the exposition of every metric to b.
func (m *metrics) write(b *bytes.Buffer) {
	w := promtext.Writer{B: b.AvailableBuffer()}
	w.Header("troupe_episodes_total", "counter", "Episodes played, by scenario and final status.")
	for _, name := range m.names {
		for i, s := range statuses {
			w.Sample("troupe_episodes_total", float64(m.scenarios[name].episodes[i].Load()), "scenario", name, "status", string(s))
		}
	}
	w.Header("troupe_samples_total", "counter", "Samples returned, by scenario.")
	for _, name := range m.names {
		w.Sample("troupe_samples_total", float64(m.scenarios[name].samples.Load()), "scenario", name)
	}
	w.Header("troupe_turns_total", "counter", "Agent turns played, emitted or not, by scenario.")
	for _, name := range m.names {
		w.Sample("troupe_turns_total", float64(m.scenarios[name].turns.Load()), "scenario", name)
	}
	w.Header("troupe_episode_duration_seconds", "histogram", "Wall time of one episode, by scenario.")
	for _, name := range m.names {
		m.scenarios[name].duration.write(&w, "troupe_episode_duration_seconds", "scenario", name)
	}
	w.Header("troupe_rollout_request_duration_seconds", "histogram", "Wall time of answered POST /v1/rollouts requests, from decoding to the last byte written.")
	m.requestDuration.write(&w, "troupe_rollout_request_duration_seconds")

	w.Header("troupe_llm_calls_total", "counter", "Model calls made by policies, by result.")
	w.Sample("troupe_llm_calls_total", float64(m.calls.ok.Load()), "result", "ok")
	w.Sample("troupe_llm_calls_total", float64(m.calls.err.Load()), "result", "error")
	w.Header("troupe_llm_call_duration_seconds", "histogram", "Latency of the model calls made by policies.")
	m.calls.duration.write(&w, "troupe_llm_call_duration_seconds")

	w.Metric("troupe_inflight_requests", "gauge", "POST /v1/rollouts requests being answered.", float64(m.inflightRequests.Load()))
	w.Metric("troupe_inflight_episodes", "gauge", "Episodes being played.", float64(m.inflightEpisodes.Load()))

	m.mu.Lock()
	requests := maps.Clone(m.requests)
	errs := maps.Clone(m.errors)
	m.mu.Unlock()
	w.Header("troupe_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.")
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		endpoint, code, _ := strings.Cut(k, " ")
		w.Sample("troupe_http_requests_total", float64(requests[k]), "endpoint", endpoint, "code", code)
	}
	w.Header("troupe_errors_total", "counter", "Requests answered with an error, by error code.")
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		w.Sample("troupe_errors_total", float64(errs[k]), "code", string(k))
	}
	b.Write(w.B)
}

// write writes the histogram's series, labelled with labels.
func (h *histogram) write(w *promtext.Writer, name string, labels ...string) {
	var counts [len(latencyBuckets) + 1]uint64
	for i := range counts {
		counts[i] = h.counts[i].Load()
	}
	w.Histogram(name, latencyBuckets[:], counts[:], time.Duration(h.sumNS.Load()).Seconds(), labels...)
}
