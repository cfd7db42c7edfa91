package league

import (
	"maps"
	"math"
	"slices"
)

// Outcome is one match as the ratings read it: the players that took part
// and each one's result (higher is better; the mean score of the roles it
// played). Players are ranked by result; equal results are a draw.
type Outcome struct {
	Players []string
	Results []float64
}

// pairs calls f for every pair of distinct players of o, a before b in o's
// order, with a's score against b: 1 a win, 0.5 a draw, 0 a loss. This is
// how an n-player match is rated: as the n(n-1)/2 two-player games its
// ranking implies, all played at once.
func (o Outcome) pairs(f func(a, b int, s float64)) {
	for a := range o.Players {
		for b := a + 1; b < len(o.Players); b++ {
			if o.Players[a] == o.Players[b] {
				continue
			}
			s := 0.5
			switch {
			case o.Results[a] > o.Results[b]:
				s = 1
			case o.Results[a] < o.Results[b]:
				s = 0
			}
			f(a, b, s)
		}
	}
}

// Defaults of the ratings.
const (
	DefaultEloK          = 32.0
	InitialRating        = 1500.0
	DefaultGlickoTau     = 0.5
	DefaultGlickoPeriod  = 10
	glickoInitialRD      = 350.0
	glickoInitialSigma   = 0.06
	glickoScale          = 173.7178 // 400 / ln 10
	glickoConvergence    = 1e-6
	glickoMaxRD          = 350.0
	glickoMaxIterations  = 100
	glickoMinDeviation   = 1e-9
	glickoMaxTotalWeight = 1e12
)

// Elo is the Elo rating of every player: R ← R + K (S − E) for each
// two-player game of a match (Outcome.pairs), E = 1 / (1 + 10^((R_b −
// R_a)/400)), all of a match's updates computed from the ratings before
// it. In an n-player match K is divided by n − 1, so that one match moves
// a rating by at most K, as one two-player game does. Ratings start at
// InitialRating.
type Elo struct {
	K      float64
	Rating map[string]float64
}

// NewElo returns Elo ratings with step k (0: DefaultEloK).
func NewElo(k float64) *Elo {
	if k <= 0 {
		k = DefaultEloK
	}
	return &Elo{K: k, Rating: map[string]float64{}}
}

// Of is p's rating.
func (e *Elo) Of(p string) float64 {
	if r, ok := e.Rating[p]; ok {
		return r
	}
	return InitialRating
}

// Expected is the probability Elo gives a beating b (a draw counting half).
func (e *Elo) Expected(a, b string) float64 { return eloExpected(e.Of(a), e.Of(b)) }

func eloExpected(ra, rb float64) float64 { return 1 / (1 + math.Pow(10, (rb-ra)/400)) }

// Add rates one match.
func (e *Elo) Add(o Outcome) {
	n := distinct(o.Players)
	if n < 2 {
		return
	}
	k := e.K / float64(n-1)
	delta := make([]float64, len(o.Players))
	o.pairs(func(a, b int, s float64) {
		d := k * (s - eloExpected(e.Of(o.Players[a]), e.Of(o.Players[b])))
		delta[a] += d
		delta[b] -= d
	})
	for i, p := range o.Players {
		e.Rating[p] = e.Of(p) + delta[i]
	}
}

func distinct(players []string) int {
	s := slices.Clone(players)
	slices.Sort(s)
	return len(slices.Compact(s))
}

// Glicko is the Glicko-2 rating of every player (Glickman, "Example of the
// Glicko-2 system"): a rating r, a deviation RD (one standard deviation of
// the belief about r) and a volatility σ. Matches are gathered into rating
// periods of Period matches; at the end of each, every player's rating is
// updated from all its games of the period against its opponents' pre-
// period ratings, and the RD of a player who did not play grows by its
// volatility. An n-player match counts as the two-player games its ranking
// implies (Outcome.pairs), each pair's game weighted 1/(n − 1) so that one
// match weighs as much as one two-player game; a player with several seats
// (a team of one policy) has the mean score of its seats. Ratings start at
// 1500, RD 350, σ 0.06; τ is the system constant.
type Glicko struct {
	Tau    float64
	Period int
	Player map[string]*GlickoRating
	// pending are the games of the current period, per player.
	pending map[string][]glickoGame
	played  int // matches in the current period
}

// GlickoRating is one player's Glicko-2 rating, on the Glicko scale.
type GlickoRating struct {
	R, RD, Sigma float64
}

type glickoGame struct {
	mu, phi float64 // the opponent's, before the period
	s, w    float64 // the score, and the game's weight
}

// NewGlicko returns Glicko-2 ratings with system constant tau (0:
// DefaultGlickoTau) and rating periods of period matches (0:
// DefaultGlickoPeriod).
func NewGlicko(tau float64, period int) *Glicko {
	if tau <= 0 {
		tau = DefaultGlickoTau
	}
	if period <= 0 {
		period = DefaultGlickoPeriod
	}
	return &Glicko{Tau: tau, Period: period, Player: map[string]*GlickoRating{}, pending: map[string][]glickoGame{}}
}

// Of is p's rating (the initial one for a player never rated).
func (g *Glicko) Of(p string) GlickoRating {
	if r, ok := g.Player[p]; ok {
		return *r
	}
	return GlickoRating{R: InitialRating, RD: glickoInitialRD, Sigma: glickoInitialSigma}
}

// Add rates one match; the ratings change at the end of its period.
func (g *Glicko) Add(o Outcome) {
	n := distinct(o.Players)
	if n >= 2 {
		w := 1 / float64(n-1)
		for _, p := range o.Players {
			if _, ok := g.Player[p]; !ok {
				r := g.Of(p)
				g.Player[p] = &r
			}
		}
		o.pairs(func(a, b int, s float64) {
			pa, pb := o.Players[a], o.Players[b]
			ra, rb := g.Player[pa], g.Player[pb]
			g.pending[pa] = append(g.pending[pa], glickoGame{mu: toMu(rb.R), phi: rb.RD / glickoScale, s: s, w: w})
			g.pending[pb] = append(g.pending[pb], glickoGame{mu: toMu(ra.R), phi: ra.RD / glickoScale, s: 1 - s, w: w})
		})
	}
	g.played++
	if g.played >= g.Period {
		g.EndPeriod()
	}
}

// EndPeriod closes the current rating period now: every rated player's
// rating is updated from the period's games.
func (g *Glicko) EndPeriod() {
	if g.played == 0 {
		return
	}
	// Sorted, so that the arithmetic is done in one order: the ratings are
	// the same bytes on every run.
	for _, name := range slices.Sorted(maps.Keys(g.Player)) {
		g.update(g.Player[name], g.pending[name])
	}
	clear(g.pending)
	g.played = 0
}

func toMu(r float64) float64 { return (r - InitialRating) / glickoScale }

func glickoG(phi float64) float64 { return 1 / math.Sqrt(1+3*phi*phi/(math.Pi*math.Pi)) }

func glickoE(mu, muj, phij float64) float64 { return 1 / (1 + math.Exp(-glickoG(phij)*(mu-muj))) }

// update is steps 3 to 8 of Glickman's example for one player's period.
func (g *Glicko) update(r *GlickoRating, games []glickoGame) {
	mu, phi, sigma := toMu(r.R), r.RD/glickoScale, r.Sigma
	if len(games) == 0 {
		phi = math.Sqrt(phi*phi + sigma*sigma)
		r.RD = min(phi*glickoScale, glickoMaxRD)
		return
	}
	var vinv, sum float64
	for _, gm := range games {
		gj := glickoG(gm.phi)
		e := glickoE(mu, gm.mu, gm.phi)
		vinv += gm.w * gj * gj * e * (1 - e)
		sum += gm.w * gj * (gm.s - e)
	}
	vinv = max(vinv, glickoMinDeviation)
	v := 1 / vinv
	delta := v * sum
	sigma = g.volatility(phi, sigma, v, delta)
	phiStar := math.Sqrt(phi*phi + sigma*sigma)
	phi = 1 / math.Sqrt(1/(phiStar*phiStar)+vinv)
	mu += phi * phi * sum
	r.R, r.RD, r.Sigma = mu*glickoScale+InitialRating, min(phi*glickoScale, glickoMaxRD), sigma
}

// volatility is step 5: the new σ, the root of f by the Illinois method.
func (g *Glicko) volatility(phi, sigma, v, delta float64) float64 {
	a := math.Log(sigma * sigma)
	tau2 := g.Tau * g.Tau
	f := func(x float64) float64 {
		ex := math.Exp(x)
		d := phi*phi + v + ex
		return ex*(delta*delta-phi*phi-v-ex)/(2*d*d) - (x-a)/tau2
	}
	A := a
	var B float64
	if delta*delta > phi*phi+v {
		B = math.Log(delta*delta - phi*phi - v)
	} else {
		k := 1.0
		for f(a-k*g.Tau) < 0 && k < glickoMaxIterations {
			k++
		}
		B = a - k*g.Tau
	}
	fA, fB := f(A), f(B)
	for i := 0; math.Abs(B-A) > glickoConvergence && i < glickoMaxIterations; i++ {
		C := A + (A-B)*fA/(fB-fA)
		fC := f(C)
		if fC*fB <= 0 {
			A, fA = B, fB
		} else {
			fA /= 2
		}
		B, fB = C, fC
	}
	return math.Exp(A / 2)
}
