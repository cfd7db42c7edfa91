package elfarol

import (
	"fmt"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// MetricNames implements env.EpisodeMetricer: the attendance of each
// night, attendance_0 to attendance_(K-1), and the patrons at home.
func (s *Scenario) MetricNames(p env.Params) []string {
	k := p.Int("nights")
	names := make([]string, 0, k+1)
	for night := range k {
		names = append(names, fmt.Sprintf("attendance_%d", night))
	}
	return append(names, "home")
}

// EpisodeMetrics implements env.EpisodeMetricer: it counts the patrons
// whose answer named each night, the others staying home, as the game
// does.
func (s *Scenario) EpisodeMetrics(p env.Params, rec *episode.Record, dst []float64) {
	_, nights := s.shared(p.Int("agents"), p.Int("nights"))
	clear(dst)
	home := len(dst) - 1
	for i := range rec.Turns {
		night, err := nights.Parse(rec.Turns[i].Action)
		if err != nil || night < 0 || night >= home {
			dst[home]++
			continue
		}
		dst[night]++
	}
}
