package env

import (
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
)

// EpisodeMetricer is implemented by scenarios that describe a finished
// episode by numbers of their own, beyond its rewards: El Farol's
// attendance of each night, say. Experiments record them per episode and
// report their final values, so that a reader sees what the agents
// learned to do, not only how well it scored.
type EpisodeMetricer interface {
	// MetricNames returns the names of the metrics of an episode played
	// with p, in snake_case, the same for every episode with p.
	MetricNames(p Params) []string
	// EpisodeMetrics writes the metrics of rec, a finished episode played
	// with p, into dst, one per name: finite numbers (a metric that an
	// episode leaves undefined, a rate of nothing, needs a value of its
	// own, 0 say, and a doc that says so). It must not keep rec.
	EpisodeMetrics(p Params, rec *episode.Record, dst []float64)
}

// ErrMetric reports an episode metric that is not a finite number.
var ErrMetric = errors.New("episode metric is not a finite number")

// CheckMetrics returns an error wrapping ErrMetric and naming the metric
// when a value of metrics, an episode's EpisodeMetrics named by names, is
// NaN or infinite: averaged with the others, it would make every mean it
// enters meaningless, and JSON has no such number.
func CheckMetrics(names []string, metrics []float64) error {
	if finite.All(metrics) {
		return nil
	}
	for m, v := range metrics {
		if !finite.Is(v) {
			return fmt.Errorf("%w: %s is %v", ErrMetric, names[m], v)
		}
	}
	return nil
}
