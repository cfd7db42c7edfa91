// Package bargain is a two-team bargaining game, general-sum: Nash's demand
// game played by two teams of bargainers over a pie.
//
// Two teams, east and west, of `members` bargainers each share a pie of
// `pie` coins. In each round every bargainer demands, at once, a whole
// number of coins from 0 to the pie. When the demands add up to the pie or
// less, the deal is struck: each bargainer takes what it demanded, times
// `discount` to the power of the round (from 0), and the game ends. When
// they add up to more, nobody gets anything this round; the round's
// demands are announced to all, and the next round begins. After `rounds`
// rounds without a deal nobody gets anything.
//
// A team's reward is what its members take; a bargainer's own score is its
// own take. The game is general-sum: a deal is worth up to the whole pie
// to the two teams together, no deal nothing, so the teams share an
// interest in agreeing and are opposed over the split. Inside a team, a
// member who demands too much costs its team the deal.
//
// An answer that is not a number from 0 to the pie breaks the round's
// deal, whatever the others demand, and is noted "illegal".
//
// Counterfactuals: the null action is "0", a demand of nothing; an absent
// bargainer demands nothing too. Bargainers answer the demands of the
// rounds before, so counterfactuals re-simulate by default.
//
// The named policy "scripted" (the default) demands a fair share, the pie
// divided by the number of bargainers (rounded down), or one coin more with
// probability 1/2 in the first round, 1/4 in the second, and so on.
//
// The bargainer's state machine:
//
//	stateDiagram-v2
//	    [*] --> demanding
//	    demanding --> settled: settle
package bargain

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
)

// The role, teams, states, events and message kinds of the game.
const (
	RoleBargainer = "bargainer"

	// East and West index the declared teams.
	East, West = 0, 1

	Demanding agents.State = "demanding"
	Settled   agents.State = "settled"

	Settle agents.Event = "settle"

	// KindRound announces a round's demands, "east-0=4, east-1=3, ..."
	// and whether they made a deal.
	KindRound = "round"

	// Nothing is the null action: a demand of nothing.
	Nothing = "0"
)

var teamNames = []string{"east", "west"}

// Scenario is the bargaining game. Its zero value is not usable; use New.
type Scenario struct {
	info *env.Info
}

// New returns the bargaining scenario.
func New() *Scenario {
	s := &Scenario{}
	s.info = &env.Info{
		Name:    "bargain",
		Summary: "two teams bargain over a pie (Nash's demand game, general-sum): demands that fit the pie are a deal",
		Doc: "Simultaneous. Teams east and west, `members` bargainers each. Each round every bargainer demands 0 to `pie` " +
			"coins; if the demands fit the pie each takes its demand times discount^round and the game ends, else the demands " +
			"are announced and the next round begins; after `rounds` rounds nobody gets anything. A team's reward is its " +
			"members' take, a bargainer's score its own. Null action: \"0\"; an absent bargainer demands nothing.",
		Schedule: env.Simultaneous,
		Roles: []*agents.Role{{
			Name: RoleBargainer, Doc: "demands a share of the pie each round, until the demands fit it",
			Initial: Demanding, Acting: []agents.State{Demanding}, Terminal: []agents.State{Settled},
			Events: fsm.Events{agents.Edge(Demanding, Settle, Settled)},
		}},
		Teams: teamNames,
		Params: []env.ParamSpec{
			env.Int("members", 2, 1, 6, "bargainers per team"),
			env.Int("pie", 12, 1, 1000, "coins to share"),
			env.Int("rounds", 3, 1, 20, "rounds before the talks fail"),
			env.Float("discount", 0.9, 0, 1, "a deal struck in round r (from 0) is worth discount^r of the demands"),
		},
		Policies:      map[string]env.PolicyMaker{"scripted": scripted},
		DefaultPolicy: "scripted",
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleBargainer: Nothing},
			AbsentOK:   true,
			Doc:        `"0" demands nothing; an absent bargainer demands nothing and takes nothing`,
			Resimulate: true,
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// New implements env.Scenario. The game draws nothing: the seed matters
// to the policies only.
func (s *Scenario) New(p env.Params, _ uint64) (env.Game, error) {
	m := p.Int("members")
	g := &game{pie: p.Int("pie"), rounds: p.Int("rounds"), discount: p.Float("discount"), take: make([]float64, 2*m)}
	for t, name := range teamNames {
		for k := range m {
			g.seats = append(g.seats, env.Seat{ID: name + "-" + strconv.Itoa(k), Role: RoleBargainer, Team: t})
		}
	}
	g.legal = make([]string, g.pie+1)
	for i := range g.legal {
		g.legal[i] = strconv.Itoa(i)
	}
	return g, nil
}

type game struct {
	seats    []env.Seat
	pie      int
	rounds   int
	discount float64
	legal    []string
	round    int
	take     []float64 // per seat, once a deal is struck
	// last are the demands of the round before, as announced (pie+1 for
	// an illegal one); nil before the first round ends.
	last []int
}

func (g *game) Seats() []env.Seat { return g.seats }

func (g *game) Start(s *env.Step) error {
	present := 0
	for i := range g.seats {
		if !s.Absent(i) {
			present++
		}
	}
	if present == 0 {
		s.End()
	}
	return nil
}

func (g *game) Observe(seat int) env.View {
	return env.View{Text: fmt.Sprintf("Bargaining, round %d of %d. You are %s, of team %s; %d bargainers in two teams share a pie "+
		"of %d coins. Demand a number of coins: if all the demands add up to %d or less, each gets its demand times %g, "+
		"and your team's reward is what its members get; if not, nobody gets anything this round.",
		g.round+1, g.rounds, g.seats[seat].ID, teamNames[g.seats[seat].Team], len(g.seats), g.pie, g.pie,
		math.Pow(g.discount, float64(g.round))), Legal: g.legal}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	demand := make([]int, len(g.seats))
	total := 0
	for _, m := range moves {
		d, err := strconv.Atoi(strings.TrimSpace(m.Action.Text))
		if err != nil || d < 0 || d > g.pie {
			// More than the pie: no deal this round.
			s.Note(m.Seat, "illegal", true)
			d = g.pie + 1
		}
		demand[m.Seat] = d
		total += d
	}
	var parts []string
	for _, m := range moves {
		d := strconv.Itoa(demand[m.Seat])
		if demand[m.Seat] > g.pie {
			d = "illegal"
		}
		parts = append(parts, g.seats[m.Seat].ID+"="+d)
	}
	g.last = demand
	deal := total <= g.pie
	verdict := fmt.Sprintf("; total %d of %d: no deal", total, g.pie)
	if deal {
		verdict = fmt.Sprintf("; total %d of %d: deal", total, g.pie)
		w := math.Pow(g.discount, float64(g.round))
		for i, d := range demand {
			g.take[i] = float64(d) * w
		}
	}
	if err := s.Announce(KindRound, strings.Join(parts, ", ")+verdict); err != nil {
		return err
	}
	g.round++
	if deal || g.round == g.rounds {
		s.End()
		return s.FireAll(Settle)
	}
	return nil
}

// MetricNames implements env.EpisodeMetricer: each team's reward, so that
// an experiment reports the sides apart, and the rounds played.
func (s *Scenario) MetricNames(env.Params) []string {
	return []string{"east_reward", "west_reward", "rounds"}
}

// EpisodeMetrics implements env.EpisodeMetricer.
func (s *Scenario) EpisodeMetrics(_ env.Params, rec *episode.Record, dst []float64) {
	dst[0], dst[1], dst[2] = rec.Score.Of(East), rec.Score.Of(West), float64(rec.Steps)
}

// Score gives each team its members' takes, each bargainer its own.
func (g *game) Score() env.Score {
	teams := make([]float64, 2)
	for i, v := range g.take {
		teams[g.seats[i].Team] += v
	}
	return env.Score{Teams: teams, Agents: g.take}
}

// policyStream is the second word of the PCG a scripted turn draws from.
const policyStream = 0x6261_7267_6169_6e00

// scripted demands a fair share, or one coin more with probability
// 2^-(round+1).
func scripted(req env.PolicyRequest) (agents.Policy, error) {
	if req.Role != RoleBargainer {
		return nil, fmt.Errorf("bargain: no scripted policy for role %q", req.Role)
	}
	fair := req.Params.Int("pie") / (2 * req.Params.Int("members"))
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		rng := rand.New(rand.NewPCG(obs.Seed, policyStream))
		d := fair
		if rng.IntN(1<<min(obs.Turn+1, 30)) == 0 {
			d++
		}
		return agents.Action{Text: strconv.Itoa(d)}, nil
	}), nil
}

// ObservationSpace implements env.Features: 3+N numbers for N bargainers,
// the bargainer's team one-hot (east, west), the share of the rounds
// played, then the demands of the round before, each as a share of
// pie+1 (1 for an illegal one; zeros before the first round ends): what
// every bargainer was told.
func (s *Scenario) ObservationSpace(p env.Params, _ string) env.Space {
	return env.Space{Shape: []int{3 + 2*p.Int("members")}, Low: 0, High: 1}
}

// StateSpace implements env.Features: the public state, 1+N numbers (the
// share of the rounds played, then the last round's demands as the
// observations give them): bargaining hides nothing.
func (s *Scenario) StateSpace(p env.Params) env.Space {
	return env.Space{Shape: []int{1 + 2*p.Int("members")}, Low: 0, High: 1}
}

// ObserveFeatures implements env.FeatureGame.
func (g *game) ObserveFeatures(seat int, dst []float32) {
	dst[0], dst[1] = 0, 0
	dst[g.seats[seat].Team] = 1
	g.WriteState(dst[2:])
}

// WriteState implements env.FeatureGame.
func (g *game) WriteState(dst []float32) {
	dst[0] = float32(g.round) / float32(g.rounds)
	clear(dst[1:])
	for i, d := range g.last {
		dst[1+i] = float32(d) / float32(g.pie+1)
	}
}

// ActionSet implements env.ActionSets: the demands 0 to pie, every turn's
// legal answers.
func (s *Scenario) ActionSet(p env.Params, role string) []string {
	if role != RoleBargainer {
		return nil
	}
	out := make([]string, p.Int("pie")+1)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}
