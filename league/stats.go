package league

import (
	"slices"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// Record counts one player's games against another (or against all):
// each match between them is one game, scored from the first player's
// side.
type Record struct {
	Games, Wins, Draws, Losses int
	// Score is the sum of the first player's results (its roles' mean
	// score) in those games.
	Score float64
}

// WinRate is (wins + draws/2 + prior/2) / (games + prior): the rate PFSP
// weighs opponents by, 0.5 before any game.
func (r Record) WinRate(prior float64) float64 {
	return (float64(r.Wins) + float64(r.Draws)/2 + prior/2) / (float64(r.Games) + prior)
}

// MeanScore is the first player's mean result in the games, 0 with none.
func (r Record) MeanScore() float64 {
	if r.Games == 0 {
		return 0
	}
	return r.Score / float64(r.Games)
}

func (r *Record) add(s, score float64) {
	r.Games++
	r.Score += score
	switch s {
	case 1:
		r.Wins++
	case 0:
		r.Losses++
	default:
		r.Draws++
	}
}

// ratings is everything a league derives from its results: the ratings
// and the pairwise records.
type ratings struct {
	elo    *Elo
	glicko *Glicko
	pairs  map[[2]string]*Record
	totals map[string]*Record
}

func newRatings(c *Config) *ratings {
	return &ratings{elo: NewElo(c.EloK), glicko: NewGlicko(c.GlickoTau, c.GlickoPeriod),
		pairs: map[[2]string]*Record{}, totals: map[string]*Record{}}
}

// outcomeOf is a result as the ratings read it: the players in the
// scenario's role order, each once, with the mean score of its roles.
func outcomeOf(info *env.Info, r *Result) Outcome {
	var o Outcome
	var n []int
	for _, role := range info.Roles {
		p, ok := r.Roles[role.Name]
		if !ok {
			continue
		}
		i := slices.Index(o.Players, p)
		if i < 0 {
			o.Players = append(o.Players, p)
			o.Results = append(o.Results, 0)
			n = append(n, 0)
			i = len(o.Players) - 1
		}
		o.Results[i] += r.Scores[role.Name]
		n[i]++
	}
	for i := range o.Results {
		o.Results[i] /= float64(n[i])
	}
	return o
}

func (rt *ratings) add(info *env.Info, r *Result) {
	if r.Status != protocol.StatusCompleted {
		return
	}
	o := outcomeOf(info, r)
	rt.elo.Add(o)
	rt.glicko.Add(o)
	o.pairs(func(a, b int, s float64) {
		pa, pb := o.Players[a], o.Players[b]
		recordOf(rt.pairs, [2]string{pa, pb}).add(s, o.Results[a])
		recordOf(rt.pairs, [2]string{pb, pa}).add(1-s, o.Results[b])
		recordOf(rt.totals, pa).add(s, o.Results[a])
		recordOf(rt.totals, pb).add(1-s, o.Results[b])
	})
}

// recordOf is m's record of k, added when it has none.
func recordOf[K comparable](m map[K]*Record, k K) *Record {
	r := m[k]
	if r == nil {
		r = &Record{}
		m[k] = r
	}
	return r
}

// Versus is a's record against b.
func (l *League) Versus(a, b string) Record {
	if r := l.ratings.pairs[[2]string{a, b}]; r != nil {
		return *r
	}
	return Record{}
}
