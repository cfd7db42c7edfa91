package elfarol

import (
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// MetricNames implements env.EpisodeMetricer: the nights' attendances
// ranked from the busiest, attendance_rank_1 to attendance_rank_K, and the
// patrons at home. Nights are interchangeable (any of them can end up the
// crowded one), so ranked attendances average meaningfully across seeds
// where night-by-night ones would not: the optimum above N ≈ 65 is one
// crowded night and K−1 nights at capacity.
func (s *Scenario) MetricNames(p env.Params) []string {
	k := p.Int("nights")
	names := make([]string, 0, k+1)
	for rank := range k {
		names = append(names, fmt.Sprintf("attendance_rank_%d", rank+1))
	}
	return append(names, "home")
}

// EpisodeMetrics implements env.EpisodeMetricer: it counts the patrons
// whose answer named each night, the others staying home, as the game
// does, and ranks the nights.
func (s *Scenario) EpisodeMetrics(p env.Params, rec *episode.Record, dst []float64) {
	_, nights := s.shared(p.Int("agents"), p.Int("nights"))
	clear(dst)
	home := len(dst) - 1
	for i := range rec.Turns {
		// As Apply reads an answer: Digit first, which inlines.
		night, ok := nights.Digit(rec.Turns[i].Action)
		if !ok {
			var err error
			if night, err = nights.Parse(rec.Turns[i].Action); err != nil {
				night = -1
			}
		}
		if night < 0 || night >= home {
			dst[home]++
			continue
		}
		dst[night]++
	}
	// Busiest first: sorted, then reversed, which for counts is the same
	// order as a descending sort and, without a comparison function, the
	// cheaper one.
	slices.Sort(dst[:home])
	slices.Reverse(dst[:home])
}
