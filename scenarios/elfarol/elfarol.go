// Package elfarol is the multi-night El Farol bar problem of Wolpert,
// Wheeler & Tumer (2000) and Agogino & Tumer (2004), the classic testbed of
// credit assignment.
//
// N patrons each choose one of K nights of a week to go to the bar, all at
// once. Night k's attendance is x_k. The team reward is the world utility
//
//	G = Σ_k φ(x_k),  φ(x) = x·e^(-x/c),
//
// which peaks when every night holds c patrons. A patron's own score (the
// "local" reward of the literature) is φ(x_k) of the night it attended, 0
// if it stayed home. One episode is one week: a single simultaneous step.
//
// The patron's state machine:
//
//	stateDiagram-v2
//	    [*] --> deciding
//	    deciding --> attended: attend
//	    deciding --> home: stay_home
//
// Counterfactuals: an absent patron and a patron playing the null action
// "home" both leave every night's attendance untouched by it, so the
// difference reward of a patron at night k is φ(x_k) − φ(x_k − 1). A
// finished week rescores frozen counterfactuals itself (env.Rescorer):
// moving a few patrons changes a few x_k, so a counterfactual team reward
// costs O(K), not a replay of all N patrons.
package elfarol

import (
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// Role, states and events of a patron.
const (
	RolePatron = "patron"

	Deciding agents.State = "deciding"
	Attended agents.State = "attended"
	Home     agents.State = "home"

	Attend   agents.Event = "attend"
	StayHome agents.Event = "stay_home"

	// NullAction is the action that stays home: the scenario's null action
	// for counterfactuals. Policies are never offered it.
	NullAction = "home"
)

var patron = &agents.Role{
	Name:    RolePatron,
	Doc:     "chooses one night of the week to go to the bar",
	Initial: Deciding,
	Events: fsm.Events{
		agents.Edge(Deciding, Attend, Attended),
		agents.Edge(Deciding, StayHome, Home),
	},
	Terminal: []agents.State{Attended, Home},
	Acting:   []agents.State{Deciding},
}

// Scenario is the El Farol scenario. Its zero value is not usable; use New.
type Scenario struct {
	info *env.Info
	mu   sync.Mutex
	// seats and views are shared, read-only, by every episode of the same
	// size: they are the same for all of them. At most maxShared sizes
	// are kept: a server asked for every size up to its seat limit would
	// otherwise keep them all (10,000 sizes of 5,000 seats on average,
	// gigabytes).
	seats  map[int][]env.Seat
	nights map[int]*agents.Ints
}

// maxShared is how many sizes of seats (and of nights) Scenario keeps;
// past it the kept ones are dropped, and the games that hold them keep
// theirs. A run plays one size.
const maxShared = 8

// New returns the El Farol scenario.
func New() *Scenario {
	s := &Scenario{seats: map[int][]env.Seat{}, nights: map[int]*agents.Ints{}}
	s.info = &env.Info{
		Name:     "elfarol",
		Summary:  "N patrons pick one of K nights; G = Σ_k x_k·e^(-x_k/c) rewards spreading out to capacity c",
		Doc:      "Simultaneous, one step per episode (one week). Each patron answers with a night number 0..K-1. An answer that is not a night counts as staying home and is noted as illegal in the sample's metadata. Team reward G = Σ_k φ(x_k), φ(x) = x·e^(-x/c); each patron's score is φ of its night's attendance (0 at home).",
		Schedule: env.Simultaneous,
		// Every patron sees the same week: observed once per step.
		PublicView: true,
		Roles:      []*agents.Role{patron},
		Params: []env.ParamSpec{
			env.Int("agents", 60, 1, 1_000_000, "number of patrons N"),
			env.Int("nights", 7, 1, 1000, "nights in a week K"),
			env.Float("capacity", 6, 1e-9, 1e9, "capacity c: φ(x) = x·e^(-x/c) peaks at x = c"),
		},
		Policies: map[string]env.PolicyMaker{
			"first-night": func(env.PolicyRequest) (agents.Policy, error) {
				return agents.Scripted(func(*agents.Observation) string { return "0" }), nil
			},
		},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RolePatron: NullAction},
			AbsentOK:   true,
			Doc:        "an absent patron and one that plays \"home\" attend no night",
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// MinTurns is the fewest turns an episode takes per role: every patron
// picks once, whatever happens. A rollout service uses it to refuse a
// request whose answer would exceed its size limits before playing it
// (rollout/server.MinTurnser).
func (s *Scenario) MinTurns(p env.Params) map[string]int {
	return map[string]int{RolePatron: p.Int("agents")}
}

// SeatCount implements env.SeatCounter: one seat per patron.
func (s *Scenario) SeatCount(p env.Params) int { return p.Int("agents") }

// Utility is φ(x) = x·e^(-x/c), one night's contribution to G.
//
// The conversion forces the product to be rounded on its own, so that a
// compiler targeting an FMA instruction cannot fuse it into the caller's
// sum: results are bit-identical on every architecture.
func Utility(x, c float64) float64 { return float64(x * math.Exp(-x/c)) }

// New implements env.Scenario.
func (s *Scenario) New(p env.Params, _ uint64) (env.Game, error) {
	n, k := p.Int("agents"), p.Int("nights")
	seats, nights := s.shared(n, k)
	return &game{
		c:      p.Float("capacity"),
		seats:  seats,
		nights: nights,
		view:   env.View{Text: "El Farol bar. Pick the night of this week you go out: a number from 0 to " + nights.Text(k-1) + ". Every night is best with " + strconv.FormatFloat(p.Float("capacity"), 'g', -1, 64) + " patrons; crowds and empty bars are both worse.", Legal: nights.Legal()},
		choice: make([]int, n),
		counts: make([]int, k),
		phiOf:  unknown(n + 1),
	}, nil
}

// unknown returns n NaNs: a memo of n values not computed yet.
func unknown(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

func (s *Scenario) shared(n, k int) ([]env.Seat, *agents.Ints) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seats, ok := s.seats[n]
	if !ok {
		if len(s.seats) >= maxShared {
			clear(s.seats)
		}
		seats = make([]env.Seat, n)
		width := len(strconv.Itoa(n - 1))
		for i := range seats {
			seats[i] = env.Seat{ID: fmt.Sprintf("patron-%0*d", width, i), Role: RolePatron}
		}
		s.seats[n] = seats
	}
	nights, ok := s.nights[k]
	if !ok {
		if len(s.nights) >= maxShared {
			clear(s.nights)
		}
		nights = agents.IntRange(0, k-1)
		s.nights[k] = nights
	}
	return seats, nights
}

type game struct {
	c      float64
	seats  []env.Seat
	nights *agents.Ints // the nights 0..K-1, the legal answers
	view   env.View
	choice []int     // per seat: the night attended, -1 at home or absent
	counts []int     // per night: attendance
	phi    []float64 // per night: φ(x_k), set by Score for Rescore
	scored bool      // Score was called: phi is the episode's
	agents []float64 // Score's agent scores
	// phiOf[x] is φ(x) once computed, NaN before (φ never is): the
	// game's memo of Utility, which Score and Rescore ask for the same
	// few attendances episode after episode. It lives as long as the game
	// (Renew keeps it, for the same size and capacity).
	phiOf []float64
}

// utility is Utility(x, g.c), from the memo when it holds it (the same
// value, bit for bit), and memoised when not. Only Score, which the engine
// calls on its own goroutine during the episode, fills the memo.
func (g *game) utility(x int) float64 {
	if v := g.phiOf[x]; v == v {
		return v
	}
	v := Utility(float64(x), g.c)
	g.phiOf[x] = v
	return v
}

// utilityOf is utility that leaves the memo as it is: Rescore's, which the
// allocators call concurrently on the finished game.
func (g *game) utilityOf(x int) float64 {
	if v := g.phiOf[x]; v == v {
		return v
	}
	return Utility(float64(x), g.c)
}

// Renew implements env.Renewer: a finished game of the same size and
// capacity starts again with its arrays, view and seats.
func (s *Scenario) Renew(old env.Game, p env.Params, seed uint64) (env.Game, error) {
	g, ok := old.(*game)
	if !ok || len(g.choice) != p.Int("agents") || len(g.counts) != p.Int("nights") || g.c != p.Float("capacity") {
		return s.New(p, seed)
	}
	clear(g.counts)
	g.scored = false
	return g, nil
}

func (g *game) Seats() []env.Seat { return g.seats }

func (g *game) Start(*env.Step) error {
	for i := range g.choice {
		g.choice[i] = -1
	}
	// A counterfactual with every patron absent needs nothing here: the
	// engine ends an episode nobody can act in, and nobody came: G = 0.
	return nil
}

func (g *game) Observe(int) env.View { return g.view }

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		// Digit inlines where nightOf is a call: one digit is every
		// answer in a week of up to ten nights.
		night, ok := g.nights.Digit(m.Action.Text)
		if !ok {
			night = g.nightOf(m.Action.Text)
		}
		if night < 0 {
			if m.Action.Text != NullAction {
				s.Note(m.Seat, "illegal", true)
			}
			if err := s.Fire(m.Seat, StayHome); err != nil {
				return err
			}
			continue
		}
		g.choice[m.Seat] = night
		g.counts[night]++
		if err := s.Fire(m.Seat, Attend); err != nil {
			return err
		}
	}
	s.End()
	return nil
}

// nightOf returns the night an answer names, or -1 (home) for the null
// action and anything else that is not a night 0..K-1 as Legal writes it.
func (g *game) nightOf(text string) int {
	night, err := g.nights.Parse(text)
	if err != nil {
		return -1
	}
	return night
}

func (g *game) Score() env.Score {
	g.phi = resized(g.phi, len(g.counts))
	g.scored = true
	team := 0.0
	for k, x := range g.counts {
		g.phi[k] = g.utility(x)
		team += g.phi[k]
	}
	g.agents = resized(g.agents, len(g.seats))
	agents := g.agents
	for i, night := range g.choice {
		if night >= 0 {
			agents[i] = g.phi[night]
		}
	}
	return env.Score{Team: team, Agents: agents}
}

// resized returns s with length n and zero elements, its array reused when
// large enough.
func resized(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// teamWith is G with the attendance of night k (none when k < 0) moved by
// delta, summed over the nights as Rescore sums them.
func (g *game) teamWith(k, delta int) float64 {
	team := 0.0
	for night, phi := range g.phi {
		if night == k {
			phi = g.utilityOf(g.counts[k] + delta)
		}
		team += phi
	}
	return team
}

// RescoreOneOut implements env.OneOutRescorer: the team reward with each
// of seats sent home, absent or null alike. A patron's leaving changes its
// night's attendance only, so the value depends on the night alone: it is
// worked out once per night that some of seats attended (teamWith, as
// Rescore's one-patron path does, hence bit-identical), in O(K) each.
func (g *game) RescoreOneOut(_ bool, seats []int, team []float64) bool {
	if !g.scored {
		return false
	}
	n, k := len(g.choice), len(g.counts)
	// byNight[night] is the team reward without one patron of night, and
	// byNight[k] that without a patron at home; NaN until worked out.
	// Weeks of up to 63 nights need no allocation.
	var buf [64]float64
	var byNight []float64
	if k < len(buf) {
		byNight = buf[:k+1]
	} else {
		byNight = make([]float64, k+1)
	}
	for i := range byNight {
		byNight[i] = math.NaN()
	}
	for j, i := range seats {
		if i < 0 || i >= n {
			return false
		}
		night := g.choice[i]
		slot := night
		if night < 0 {
			slot = k
		}
		v := byNight[slot]
		if v != v {
			v = g.teamWith(night, -1)
			byNight[slot] = v
		}
		team[j] = v
	}
	return true
}

// Rescore implements env.Rescorer. Every patron acts once, all at the same
// step, so a frozen counterfactual moves only the patrons it names: the
// attendance is the recorded one with those patrons moved (absent and null
// ones home, replaced ones to the night their answer names), and G is
// summed over the nights in Score's order, which makes it bit-identical to
// a replay. It costs O(K + patrons named), plus O(N) when the per-agent
// scores are wanted (cf.TeamOnly false).
//
// As in a replay, a patron named twice counts once, absence comes before
// the null action and the null action before a replacement.
func (g *game) Rescore(cf episode.Counterfactual) (env.Score, bool) {
	if !g.scored || cf.Resimulate || len(cf.Reseed) > 0 {
		return env.Score{}, false
	}
	n := len(g.choice)
	if cf.TeamOnly && len(cf.Replace) == 0 && len(cf.Absent)+len(cf.Null) == 1 {
		// One patron sent home, the difference reward's counterfactual:
		// only its night's attendance changes.
		i := 0
		if len(cf.Absent) == 1 {
			i = cf.Absent[0]
		} else {
			i = cf.Null[0]
		}
		if i < 0 || i >= n {
			return env.Score{}, false
		}
		return env.Score{Team: g.teamWith(g.choice[i], -1)}, true
	}
	// Weeks of up to 16 nights and 1024 patrons need no allocation.
	var countBuf [16]int
	var seenBuf [16]uint64
	var phiBuf [16]float64
	counts := append(countBuf[:0], g.counts...)
	seen := seenBuf[:]
	if words := (n + 63) / 64; words > len(seen) {
		seen = make([]uint64, words)
	}
	type move struct{ seat, night int }
	var moves []move // kept for the per-agent scores only
	// moveTo moves seat i to night (-1: home); false for a bad seat.
	moveTo := func(i, night int) bool {
		if i < 0 || i >= n {
			return false
		}
		if seen[i/64]&(1<<(i%64)) != 0 {
			return true
		}
		seen[i/64] |= 1 << (i % 64)
		if c := g.choice[i]; c >= 0 {
			counts[c]--
		}
		if night >= 0 {
			counts[night]++
		}
		if !cf.TeamOnly {
			moves = append(moves, move{i, night})
		}
		return true
	}
	for _, out := range [...][]int{cf.Absent, cf.Null} {
		for _, i := range out {
			if !moveTo(i, -1) {
				return env.Score{}, false
			}
		}
	}
	// The order of a map's keys does not matter: attendance is a count.
	for i, text := range cf.Replace {
		if !moveTo(i, g.nightOf(text)) {
			return env.Score{}, false
		}
	}
	phi := append(phiBuf[:0], g.phi...)
	team := 0.0
	for night, x := range counts {
		if x != g.counts[night] {
			phi[night] = g.utilityOf(x)
		}
		team += phi[night]
	}
	if cf.TeamOnly {
		return env.Score{Team: team}, true
	}
	agents := make([]float64, n)
	for i, night := range g.choice {
		if night >= 0 {
			agents[i] = phi[night]
		}
	}
	for _, m := range moves {
		agents[m.seat] = 0
		if m.night >= 0 {
			agents[m.seat] = phi[m.night]
		}
	}
	return env.Score{Team: team, Agents: agents}, true
}

// ActionSet implements env.ActionSets: the nights 0 to K-1, every
// patron's legal answers at every turn.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	if role != RolePatron {
		return nil
	}
	return agents.IntRange(0, p.Int("nights")-1).Legal()
}

// ObservationSpace implements env.Features: K+1 numbers, the one-hot of
// the night the patron attended (zeros before it chose, and at home), then
// that night's attendance as a share of the N patrons, which its score
// reveals once the week is over (0 before). A patron sees no other night.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{p.Int("nights") + 1}, Low: 0, High: 1}
}

// StateSpace implements env.Features: each night's attendance as a share
// of the N patrons (zeros before the week is played).
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{p.Int("nights")}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	clear(dst)
	if night := g.choice[seat]; night >= 0 {
		dst[night] = 1
		dst[len(g.counts)] = float32(g.counts[night]) / float32(len(g.seats))
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	for k, x := range g.counts {
		dst[k] = float32(x) / float32(len(g.seats))
	}
}
