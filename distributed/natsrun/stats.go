package natsrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/troupe-rl/troupe/internal/promtext"
)

// Stats is a deployment's state, for the metrics endpoint.
type Stats struct {
	// The work counts are of work messages, over every run: each carries
	// the requests of up to its run's Config.Batch episodes (one by
	// default).
	Queued       uint64 // work messages no worker has taken yet
	InFlight     int    // work messages taken and not yet finished
	Redelivering int    // of the queued and in-flight, work messages handed out more than once
	Workers      int    // live workers
	Slots        int    // their concurrency, together
	Busy         int64  // episodes they hold, as of their last refresh (every 10s)
	Redeliveries int64  // redelivered requests live workers received since they started
	GivenUp      int64  // requests live workers recorded as failed after MaxDeliver
}

// Stats reads the deployment's state: the runs' consumers' counts and the
// live workers' presence keys.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	// Every run has a consumer of its own: the deployment's counts are
	// their sums.
	cons := c.work.ListConsumers(ctx)
	for info := range cons.Info() {
		if _, ok := c.n.runOfConsumer(info.Name); ok {
			s.Queued += info.NumPending
			s.InFlight += info.NumAckPending
			s.Redelivering += info.NumRedelivered
		}
	}
	if err := cons.Err(); err != nil {
		return s, fmt.Errorf("natsrun: stats: %w", err)
	}

	keys, err := c.alive.ListKeys(ctx)
	if err != nil {
		return s, fmt.Errorf("natsrun: stats: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	for key := range keys.Keys() {
		e, err := c.alive.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // left since the listing
		}
		if err != nil {
			return s, fmt.Errorf("natsrun: stats: %w", err)
		}
		var ws WorkerStats
		if json.Unmarshal(e.Value(), &ws) != nil {
			continue
		}
		s.Workers++
		s.Slots += ws.Slots
		s.Busy += ws.Busy
		s.Redeliveries += ws.Redelivered
		s.GivenUp += ws.GivenUp
	}
	return s, nil
}

// Metric is one value of Stats in Prometheus's terms.
type Metric struct {
	Name  string // troupe_nats_...
	Help  string
	Value float64
	// Counter marks a value that only grows while the workers live; the
	// others are gauges.
	Counter bool
}

// Metrics returns s as Prometheus metrics, for an endpoint that registers
// them (prometheus.NewGaugeFunc, or a custom Collector).
func (s Stats) Metrics() []Metric {
	return []Metric{
		{Name: "troupe_nats_queue_depth", Help: "Episode requests waiting for a worker.", Value: float64(s.Queued)},
		{Name: "troupe_nats_in_flight", Help: "Episodes handed to workers and not yet finished.", Value: float64(s.InFlight)},
		{Name: "troupe_nats_redelivering", Help: "Queued or in-flight episodes handed out more than once.", Value: float64(s.Redelivering)},
		{Name: "troupe_nats_redeliveries_total", Help: "Redelivered requests received by the live workers since they started.", Value: float64(s.Redeliveries), Counter: true},
		{Name: "troupe_nats_workers", Help: "Live workers.", Value: float64(s.Workers)},
		{Name: "troupe_nats_worker_slots", Help: "Episodes the live workers can play at once.", Value: float64(s.Slots)},
		{Name: "troupe_nats_worker_busy", Help: "Episodes the live workers hold.", Value: float64(s.Busy)},
		{Name: "troupe_nats_given_up_total", Help: "Episodes the live workers recorded as failed after MaxDeliver deliveries.", Value: float64(s.GivenUp), Counter: true},
	}
}

// MetricsHandler serves the deployment's Stats in the Prometheus text
// format, read afresh at every scrape; `troupe worker --metrics-addr` and
// the submitter mount it. A deployment that cannot be read answers 503.
func MetricsHandler(c *Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.Stats(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", promtext.ContentType)
		WriteMetrics(w, s.Metrics())
	})
}

// WriteMetrics writes ms in the Prometheus text exposition format.
func WriteMetrics(w io.Writer, ms []Metric) {
	var p promtext.Writer
	for _, m := range ms {
		typ := "gauge"
		if m.Counter {
			typ = "counter"
		}
		p.Metric(m.Name, typ, m.Help, m.Value)
	}
	_, _ = w.Write(p.B)
}
