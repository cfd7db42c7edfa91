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

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// The metrics are written by hand in the Prometheus text exposition format
// (version 0.0.4): a dozen counters and histograms do not justify the
// client library's dependency tree, and the hot path (one update per
// episode) stays a few atomic adds.

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
	header := func(name, typ, help string) {
		b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
	}
	line := func(name, labels string, v float64) {
		b.WriteString(name)
		if labels != "" {
			b.WriteString("{" + labels + "}")
		}
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		b.WriteByte('\n')
	}

	header("troupe_episodes_total", "counter", "Episodes played, by scenario and final status.")
	for _, name := range m.names {
		for i, s := range statuses {
			line("troupe_episodes_total", label("scenario", name)+","+label("status", string(s)), float64(m.scenarios[name].episodes[i].Load()))
		}
	}
	header("troupe_samples_total", "counter", "Samples returned, by scenario.")
	for _, name := range m.names {
		line("troupe_samples_total", label("scenario", name), float64(m.scenarios[name].samples.Load()))
	}
	header("troupe_turns_total", "counter", "Agent turns played, emitted or not, by scenario.")
	for _, name := range m.names {
		line("troupe_turns_total", label("scenario", name), float64(m.scenarios[name].turns.Load()))
	}
	header("troupe_episode_duration_seconds", "histogram", "Wall time of one episode, by scenario.")
	for _, name := range m.names {
		writeHistogram(b, "troupe_episode_duration_seconds", label("scenario", name), &m.scenarios[name].duration)
	}
	header("troupe_rollout_request_duration_seconds", "histogram", "Wall time of answered POST /v1/rollouts requests, from decoding to the last byte written.")
	writeHistogram(b, "troupe_rollout_request_duration_seconds", "", &m.requestDuration)

	header("troupe_llm_calls_total", "counter", "Model calls made by policies, by result.")
	line("troupe_llm_calls_total", label("result", "ok"), float64(m.calls.ok.Load()))
	line("troupe_llm_calls_total", label("result", "error"), float64(m.calls.err.Load()))
	header("troupe_llm_call_duration_seconds", "histogram", "Latency of the model calls made by policies.")
	writeHistogram(b, "troupe_llm_call_duration_seconds", "", &m.calls.duration)

	header("troupe_inflight_requests", "gauge", "POST /v1/rollouts requests being answered.")
	line("troupe_inflight_requests", "", float64(m.inflightRequests.Load()))
	header("troupe_inflight_episodes", "gauge", "Episodes being played.")
	line("troupe_inflight_episodes", "", float64(m.inflightEpisodes.Load()))

	m.mu.Lock()
	requests := make(map[string]uint64, len(m.requests))
	for k, v := range m.requests {
		requests[k] = v
	}
	errs := make(map[string]uint64, len(m.errors))
	for k, v := range m.errors {
		errs[string(k)] = v
	}
	m.mu.Unlock()
	header("troupe_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.")
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		endpoint, code, _ := strings.Cut(k, " ")
		line("troupe_http_requests_total", label("endpoint", endpoint)+","+label("code", code), float64(requests[k]))
	}
	header("troupe_errors_total", "counter", "Requests answered with an error, by error code.")
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		line("troupe_errors_total", label("code", k), float64(errs[k]))
	}
}

func writeHistogram(b *bytes.Buffer, name, labels string, h *histogram) {
	sep := ""
	if labels != "" {
		sep = ","
	}
	var cum uint64
	for i, le := range latencyBuckets {
		cum += h.counts[i].Load()
		b.WriteString(name + "_bucket{" + labels + sep + `le="` + strconv.FormatFloat(le, 'g', -1, 64) + `"} ` + strconv.FormatUint(cum, 10) + "\n")
	}
	cum += h.counts[len(latencyBuckets)].Load()
	b.WriteString(name + "_bucket{" + labels + sep + `le="+Inf"} ` + strconv.FormatUint(cum, 10) + "\n")
	braced := ""
	if labels != "" {
		braced = "{" + labels + "}"
	}
	b.WriteString(name + "_sum" + braced + " " + strconv.FormatFloat(time.Duration(h.sumNS.Load()).Seconds(), 'g', -1, 64) + "\n")
	b.WriteString(name + "_count" + braced + " " + strconv.FormatUint(cum, 10) + "\n")
}

// label renders name="value" with the exposition format's escapes.
func label(name, value string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return name + `="` + r.Replace(value) + `"`
}
