package env

import "github.com/troupe-rl/troupe/episode"

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
	// with p, into dst, one per name. It must not keep rec.
	EpisodeMetrics(p Params, rec *episode.Record, dst []float64)
}
