// Package blotto is Colonel Blotto played by teams: two sides of soldiers
// who each, at once, pick one battlefield to fight on.
//
// Two teams, red and blue, of `n` soldiers each, and `fields`
// battlefields. In the one step of an episode every soldier sends itself to
// one battlefield (an answer 0..fields-1). A side wins a battlefield with
// strictly more soldiers there than the other side; a tie is half a
// battlefield to each, and so is a battlefield nobody reached. A side's
// reward is the share of the battlefields it won, so the two rewards sum to
// 1: the game is zero-sum (constant-sum). The soldiers of a side see nothing
// of the other side's choices: each soldier is a bandit over battlefields.
//
// A soldier's own score (the "local" reward, the individual allocator's) is
// the outcome of its battlefield for its side: 1 won, ½ tied, 0 lost; 0 for
// a soldier that stayed home. An answer that is not a battlefield counts as
// staying home and is noted "illegal".
//
// Counterfactuals: the null action "home" and absence both keep the soldier
// out of every battlefield, so a soldier's difference reward is its side's
// reward minus the side's reward with the soldier home, everybody else as
// played. It is non-zero only when the soldier is pivotal on its
// battlefield: its side's count there goes from a win to a tie or from a
// tie to a loss (±½ of a battlefield, 1/(2·fields) of the reward). A
// finished episode rescores frozen counterfactuals itself (env.Rescorer),
// in O(fields + soldiers named).
//
// The named policy "scripted" spreads a side evenly: soldier k goes to
// battlefield k mod fields, or with probability ¼ to one drawn at random
// from the turn's seed.
//
// The soldier's state machine:
//
//	stateDiagram-v2
//	    [*] --> choosing
//	    choosing --> deployed: deploy
//	    choosing --> home: stay_home
package blotto

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// The role, teams, states and events of the game.
const (
	RoleSoldier = "soldier"

	// Red and Blue index the declared teams.
	Red, Blue = 0, 1

	Choosing agents.State = "choosing"
	Deployed agents.State = "deployed"
	Home     agents.State = "home"

	Deploy   agents.Event = "deploy"
	StayHome agents.Event = "stay_home"

	// NullAction keeps a soldier home: the scenario's null action for
	// counterfactuals. Policies are never offered it.
	NullAction = "home"
)

var teamNames = []string{"red", "blue"}

var soldier = &agents.Role{
	Name:    RoleSoldier,
	Doc:     "sends itself to one battlefield",
	Initial: Choosing,
	Events: fsm.Events{
		agents.Edge(Choosing, Deploy, Deployed),
		agents.Edge(Choosing, StayHome, Home),
	},
	Terminal: []agents.State{Deployed, Home},
	Acting:   []agents.State{Choosing},
}

// Scenario is the team Colonel Blotto game. Its zero value is not usable;
// use New.
type Scenario struct {
	info *env.Info
}

// New returns the Blotto scenario.
func New() *Scenario {
	s := &Scenario{}
	s.info = &env.Info{
		Name:    "blotto",
		Summary: "Colonel Blotto by teams: red and blue soldiers each pick a battlefield; more soldiers win it (zero-sum)",
		Doc: "Simultaneous, one step per episode. Teams red and blue, `n` soldiers each; every soldier answers with a battlefield " +
			"0..fields-1. A side wins a battlefield with strictly more soldiers there; a tie (an empty battlefield too) is half to each. " +
			"A side's reward is the share of battlefields it won (the two sum to 1); a soldier's score is its battlefield's outcome " +
			"for its side (1, 1/2, 0), 0 at home. An answer that is not a battlefield stays home and is noted illegal. " +
			"Null action: \"home\"; an absent soldier stays home.",
		Schedule: env.Simultaneous,
		// Every soldier sees the same rules and nothing of the others.
		PublicView: true,
		Roles:      []*agents.Role{soldier},
		Teams:      teamNames,
		Params: []env.ParamSpec{
			env.Int("n", 6, 1, 100_000, "soldiers per side"),
			env.Int("fields", 3, 1, 1000, "battlefields"),
		},
		Policies: map[string]env.PolicyMaker{"scripted": scripted},
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleSoldier: NullAction},
			AbsentOK:   true,
			Doc:        `an absent soldier and one that plays "home" fight on no battlefield`,
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// MinTurns is the fewest turns an episode takes per role: every soldier
// picks once (rollout/server.MinTurnser).
func (s *Scenario) MinTurns(p env.Params) map[string]int {
	return map[string]int{RoleSoldier: 2 * p.Int("n")}
}

// New implements env.Scenario. The game draws nothing: the seed matters to
// the policies only.
func (s *Scenario) New(p env.Params, _ uint64) (env.Game, error) {
	n, k := p.Int("n"), p.Int("fields")
	g := &game{
		fields: agents.IntRange(0, k-1),
		choice: make([]int, 2*n),
		counts: [2][]int{make([]int, k), make([]int, k)},
	}
	width := len(strconv.Itoa(n - 1))
	for t, name := range teamNames {
		for i := range n {
			g.seats = append(g.seats, env.Seat{ID: fmt.Sprintf("%s-%0*d", name, width, i), Role: RoleSoldier, Team: t})
		}
	}
	g.view = env.View{Text: fmt.Sprintf("Colonel Blotto. Your side and the other side each have %d soldiers; there are %d battlefields. "+
		"Pick the battlefield you fight on: a number from 0 to %d. A side wins a battlefield with more soldiers there than the other; "+
		"your side's reward is the share of the battlefields it wins (a tie is half of one).", n, k, k-1), Legal: g.fields.Legal()}
	return g, nil
}

// Renew implements env.Renewer: a finished game of the same size starts
// again with its arrays, view and seats.
func (s *Scenario) Renew(old env.Game, p env.Params, seed uint64) (env.Game, error) {
	g, ok := old.(*game)
	if !ok || len(g.choice) != 2*p.Int("n") || g.fields.Len() != p.Int("fields") {
		return s.New(p, seed)
	}
	clear(g.counts[Red])
	clear(g.counts[Blue])
	g.scored = false
	return g, nil
}

type game struct {
	seats  []env.Seat
	fields *agents.Ints
	view   env.View
	choice []int    // per seat: its battlefield, -1 at home or absent
	counts [2][]int // per side and battlefield: soldiers there
	scored bool     // Score was called
}

func (g *game) Seats() []env.Seat { return g.seats }

func (g *game) Start(*env.Step) error {
	for i := range g.choice {
		g.choice[i] = -1
	}
	// Every soldier absent: the engine ends an episode nobody can act in,
	// and every battlefield is tied.
	return nil
}

func (g *game) Observe(int) env.View { return g.view }

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		f := g.fieldOf(m.Action.Text)
		if f < 0 {
			if m.Action.Text != NullAction {
				s.Note(m.Seat, "illegal", true)
			}
			if err := s.Fire(m.Seat, StayHome); err != nil {
				return err
			}
			continue
		}
		g.choice[m.Seat] = f
		g.counts[g.seats[m.Seat].Team][f]++
		if err := s.Fire(m.Seat, Deploy); err != nil {
			return err
		}
	}
	s.End()
	return nil
}

// fieldOf returns the battlefield an answer names, or -1 (home) for the
// null action and anything else that is not a battlefield as Legal writes
// it.
func (g *game) fieldOf(text string) int {
	if f, ok := g.fields.Digit(text); ok {
		return f
	}
	f, err := g.fields.Parse(text)
	if err != nil {
		return -1
	}
	return f
}

// Outcome is a battlefield's outcome for a side with mine soldiers there
// against theirs: 1 won, ½ tied, 0 lost.
func Outcome(mine, theirs int) float64 {
	switch {
	case mine > theirs:
		return 1
	case mine == theirs:
		return 0.5
	}
	return 0
}

// rewards are the two sides' rewards for the given counts: each the sum
// of its battlefields' outcomes over the number of battlefields, summed in
// battlefield order (the one order Score and Rescore share, so that they
// agree bit for bit).
func rewards(red, blue []int) []float64 {
	r := 0.0
	for f := range red {
		r += Outcome(red[f], blue[f])
	}
	k := float64(len(red))
	// Blue's share is counted, not 1 − red's, so that both are exact
	// multiples of 1/(2k) however they are rounded.
	b := 0.0
	for f := range blue {
		b += Outcome(blue[f], red[f])
	}
	return []float64{r / k, b / k}
}

// Score gives each side its share of the battlefields and each soldier its
// battlefield's outcome for its side.
func (g *game) Score() env.Score {
	g.scored = true
	return env.Score{Teams: rewards(g.counts[Red], g.counts[Blue]), Agents: g.agentScores(g.choice, g.counts)}
}

// agentScores are the soldiers' outcomes for choice and counts.
func (g *game) agentScores(choice []int, counts [2][]int) []float64 {
	out := make([]float64, len(choice))
	for i, f := range choice {
		if f >= 0 {
			t := g.seats[i].Team
			out[i] = Outcome(counts[t][f], counts[1-t][f])
		}
	}
	return out
}

// Rescore implements env.Rescorer: a frozen counterfactual moves the
// soldiers it names only (absent and null ones home, replaced ones to the
// battlefield their answer names), so the counts are the recorded ones with
// those moves, and the rewards are summed as Score sums them. As in a
// replay, a soldier named twice counts once, absence comes before the null
// action and the null action before a replacement.
func (g *game) Rescore(cf episode.Counterfactual) (env.Score, bool) {
	if !g.scored || cf.Resimulate || len(cf.Reseed) > 0 {
		return env.Score{}, false
	}
	n := len(g.choice)
	counts := [2][]int{append([]int(nil), g.counts[Red]...), append([]int(nil), g.counts[Blue]...)}
	var choice []int
	if !cf.TeamOnly {
		choice = append([]int(nil), g.choice...)
	}
	seen := make(map[int]bool, len(cf.Absent)+len(cf.Null)+len(cf.Replace))
	moveTo := func(i, f int) bool {
		if i < 0 || i >= n {
			return false
		}
		if seen[i] {
			return true
		}
		seen[i] = true
		t := g.seats[i].Team
		if c := g.choice[i]; c >= 0 {
			counts[t][c]--
		}
		if f >= 0 {
			counts[t][f]++
		}
		if choice != nil {
			choice[i] = f
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
	// The order of a map's keys does not matter: the counts are counts.
	for i, text := range cf.Replace {
		if !moveTo(i, g.fieldOf(text)) {
			return env.Score{}, false
		}
	}
	score := env.Score{Teams: rewards(counts[Red], counts[Blue])}
	if choice != nil {
		score.Agents = g.agentScores(choice, counts)
	}
	return score, true
}

// ActionSet implements env.ActionSets: the battlefields 0 to fields-1,
// every soldier's legal answers.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	if role != RoleSoldier {
		return nil
	}
	return agents.IntRange(0, p.Int("fields")-1).Legal()
}

// MetricNames implements env.EpisodeMetricer: each side's reward, so that
// an experiment reports the sides apart, and each side's concentration:
// the share of its soldiers on its most crowded battlefield (1/fields
// spread evenly, 1 all on one).
func (s *Scenario) MetricNames(env.Params) []string {
	return []string{"red_reward", "blue_reward", "red_top", "blue_top"}
}

// EpisodeMetrics implements env.EpisodeMetricer, from the record alone:
// the turns' actions and seats (a soldier at home counts in its side's
// size, not on a battlefield).
func (s *Scenario) EpisodeMetrics(p env.Params, rec *episode.Record, dst []float64) {
	dst[0], dst[1] = rec.Score.Of(Red), rec.Score.Of(Blue)
	k := p.Int("fields")
	var buf [2][16]int
	counts := [2][]int{buf[0][:0], buf[1][:0]}
	for t := range counts {
		if k <= len(buf[t]) {
			counts[t] = buf[t][:k]
		} else {
			counts[t] = make([]int, k)
		}
	}
	fields := agents.IntRange(0, k-1)
	var size [2]int
	for _, tr := range rec.Turns {
		t := rec.Seats[tr.Seat].Team
		size[t]++
		if f, err := fields.Parse(tr.Action); err == nil {
			counts[t][f]++
		}
	}
	for t := range counts {
		dst[2+t] = 0
		if size[t] > 0 {
			dst[2+t] = float64(slices.Max(counts[t])) / float64(size[t])
		}
	}
}

// policyStream is the second word of the PCG a scripted turn draws from.
const policyStream = 0x626c_6f74_746f_0000

// scripted spreads a side evenly: soldier k to battlefield k mod fields,
// or with probability ¼ to a battlefield drawn from the turn's seed.
func scripted(req env.PolicyRequest) (agents.Policy, error) {
	if req.Role != RoleSoldier {
		return nil, fmt.Errorf("blotto: no scripted policy for role %q", req.Role)
	}
	k := req.Params.Int("fields")
	return agents.Scripted(func(obs *agents.Observation) string {
		rng := rand.New(rand.NewPCG(obs.Seed, policyStream))
		if rng.IntN(4) == 0 {
			return strconv.Itoa(rng.IntN(k))
		}
		_, num, _ := strings.Cut(obs.Agent, "-")
		i, err := strconv.Atoi(num)
		if err != nil {
			i = 0 // a seat this scenario did not name: the first battlefield
		}
		return strconv.Itoa(i % k)
	}), nil
}

// ObservationSpace implements env.Features: 2+fields numbers, the
// soldier's side one-hot (red, blue), then the one-hot of the battlefield
// it went to (zeros before it chose, and at home). A soldier sees nothing
// of the other soldiers, of either side.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{2 + p.Int("fields")}, Low: 0, High: 1}
}

// StateSpace implements env.Features: 2×fields numbers, each side's
// soldiers on each battlefield as a share of the side (red's row first;
// zeros before the step is played).
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{2, p.Int("fields")}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	clear(dst)
	dst[g.seats[seat].Team] = 1
	if f := g.choice[seat]; f >= 0 {
		dst[2+f] = 1
	}
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	n := float32(len(g.seats) / 2)
	for side, counts := range g.counts {
		for f, x := range counts {
			dst[side*len(counts)+f] = float32(x) / n
		}
	}
}
