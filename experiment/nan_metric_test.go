package experiment_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/experiment"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// undefinedMetric is El Farol with one more episode metric, NaN from
// episode from on: a rate of nothing, say, that its author left undefined.
type undefinedMetric struct {
	*elfarol.Scenario
	from int64
}

func (s undefinedMetric) MetricNames(p env.Params) []string {
	return append(s.Scenario.MetricNames(p), "rate")
}

func (s undefinedMetric) EpisodeMetrics(p env.Params, rec *episode.Record, dst []float64) {
	s.Scenario.EpisodeMetrics(p, rec, dst[:len(dst)-1])
	dst[len(dst)-1] = 0.5
	if rec.Index >= s.from {
		dst[len(dst)-1] = math.NaN()
	}
}

// TestAMetricThatIsNotANumberNamesItself checks that an episode metric
// that is NaN stops its cell at that episode with an error naming the
// metric and the episode, rather than a JSON encoder's complaint about a
// cell file after the whole cell was played.
func TestAMetricThatIsNotANumberNamesItself(t *testing.T) {
	t.Parallel() // independent; drawing its plots keeps one core busy
	cfg := smallBar(t, t.TempDir())
	cfg.Scenario = undefinedMetric{elfarol.New(), 30}
	_, err := experiment.Run(context.Background(), cfg)
	require.ErrorIs(t, err, env.ErrMetric)
	assert.Regexp(t, `episode 30: .*rate is NaN`, err.Error())

	cfg = smallBar(t, t.TempDir())
	cfg.Scenario = undefinedMetric{elfarol.New(), math.MaxInt64}
	_, err = experiment.Run(context.Background(), cfg)
	require.NoError(t, err, "the same scenario with a finite metric")
}
