package env_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

var puller = &agents.Role{Name: "puller", Initial: "pulling", Acting: []agents.State{"pulling"},
	Terminal: []agents.State{"done"}, Events: fsm.Events{agents.Edge("pulling", "stop", "done")}}

// tug is a one-step tug of war of two teams of two: each puller pulls 0 to
// 2, and a side's reward is how much more it pulled than the other.
type tug struct {
	seats   []env.Seat
	pulled  [2]float64
	score   func(env.Score) env.Score // changes the score, when set
	present []bool
}

func (g *tug) Seats() []env.Seat { return g.seats }
func (g *tug) Start(s *env.Step) error {
	g.present = make([]bool, len(g.seats))
	for i := range g.seats {
		g.present[i] = !s.Absent(i)
	}
	return nil
}
func (g *tug) Observe(int) env.View { return env.View{Text: "pull", Legal: []string{"0", "1", "2"}} }
func (g *tug) Apply(s *env.Step, moves []env.Move) error {
	for _, m := range moves {
		n, _ := strconv.Atoi(m.Action.Text)
		g.pulled[g.seats[m.Seat].Team] += float64(n)
	}
	s.End()
	return s.FireAll("stop")
}
func (g *tug) Score() env.Score {
	d := g.pulled[0] - g.pulled[1]
	sc := env.Score{Teams: []float64{d, -d}}
	if g.score != nil {
		return g.score(sc)
	}
	return sc
}

func tugScenario(teams []string, seats []env.Seat, score func(env.Score) env.Score) env.Scenario {
	info := &env.Info{Name: "tug", Schedule: env.Simultaneous, Roles: []*agents.Role{puller}, Teams: teams,
		Counterfactual: &env.CounterfactualSpec{AbsentOK: true, NullAction: map[string]string{"puller": "0"}}}
	return env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return &tug{seats: seats, score: score}, nil
	})
}

var tugSeats = []env.Seat{{ID: "a0", Role: "puller", Team: 0}, {ID: "b0", Role: "puller", Team: 1}, {ID: "a1", Role: "puller", Team: 0}, {ID: "b1", Role: "puller", Team: 1}}

func pulls(n ...string) env.PolicyFor {
	return func(s env.Seat) agents.Policy {
		i := map[string]int{"a0": 0, "b0": 1, "a1": 2, "b1": 3}[s.ID]
		return agents.Replay(n[i])
	}
}

// A scenario's teams reach the record: the teams' names, every seat's,
// each side's reward and their sum as Score.Team; a replay scores each
// side.
func TestTeamsReachTheRecord(t *testing.T) {
	sc := tugScenario([]string{"red", "blue"}, tugSeats, nil)
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Policy: pulls("2", "1", "1", "0")}})
	require.Equal(t, protocol.StatusCompleted, rec.Status, rec.Err)
	assert.Equal(t, []string{"red", "blue"}, rec.Teams)
	assert.Equal(t, []float64{2, -2}, rec.Score.Teams)
	assert.Equal(t, 0.0, rec.Score.Team, "the sum of the sides'")
	assert.Equal(t, 2, rec.TeamCount())
	assert.Equal(t, []float64{2, -2, 2, -2}, []float64{rec.SeatReward(0), rec.SeatReward(1), rec.SeatReward(2), rec.SeatReward(3)})
	assert.Equal(t, []int{1, 3}, rec.Members(nil, 1))
	score, err := rec.Replay.Replay(t.Context(), episode.Counterfactual{Absent: []int{0}})
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0}, score.Teams, "red without a0 pulls 1, as blue does")

	// The samples carry the seat's side and its reward.
	ep := trajectories.NewEpisode(rec)
	require.Len(t, ep.Samples, 4)
	assert.Equal(t, "blue", ep.Samples[1].Metadata.Team)
	assert.Equal(t, -2.0, ep.Samples[1].Metadata.TeamReward)
	assert.Equal(t, "red", ep.Samples[2].Metadata.Team)
	assert.Equal(t, 2.0, ep.Samples[2].Metadata.TeamReward)
}

func TestBadTeamsFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		teams  []string
		seats  []env.Seat
		score  func(env.Score) env.Score
		errHas string
	}{
		{"seat on no declared team", nil, tugSeats, nil, "bad seats: seat \"b0\" is on team 1; scenario tug declares no teams"},
		{"seat on a team out of range", []string{"red", "blue"}, []env.Seat{{ID: "a", Role: "puller", Team: 2}}, nil, "bad seats: seat \"a\" is on team 2; scenario tug declares the teams [red blue] (0 to 1)"},
		{"negative team", []string{"red", "blue"}, []env.Seat{{ID: "a", Role: "puller", Team: -1}}, nil, "is on team -1"},
		{"a reward short", []string{"red", "blue"}, tugSeats, func(s env.Score) env.Score { return env.Score{Teams: s.Teams[:1]} }, "bad score: Score has 1 team rewards for the 2 teams [red blue]"},
		{"no team rewards", []string{"red", "blue"}, tugSeats, func(env.Score) env.Score { return env.Score{Team: 1} }, "bad score: Score has 0 team rewards for the 2 teams"},
		{"a reward not a number", []string{"red", "blue"}, tugSeats, func(env.Score) env.Score { return env.Score{Teams: []float64{math.NaN(), 0}} }, "bad score: team red scored NaN"},
		{"team rewards without teams", nil, []env.Seat{{ID: "a", Role: "puller"}}, func(env.Score) env.Score { return env.Score{Teams: []float64{1, 2}} }, "bad score: Score has 2 team rewards; scenario tug declares no teams"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tugScenario(tc.teams, tc.seats, tc.score)
			rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Policy: env.SamePolicy(agents.Replay("1"))}})
			assert.Equal(t, protocol.StatusFailed, rec.Status)
			assert.ErrorContains(t, errors.New(rec.Err), tc.errHas)
		})
	}
}

func TestInfoValidatesTeams(t *testing.T) {
	for teams, errHas := range map[string]string{
		"red":        `one team "red" declared: a scenario with one team declares none`,
		"red,red":    `two teams are called "red"`,
		"red,":       `team 1 is called "": a team name is not empty`,
		"red,a team": `team 1 is called "a team"`,
	} {
		info := &env.Info{Name: "tug", Schedule: env.Simultaneous, Roles: []*agents.Role{puller}, Teams: splitComma(teams)}
		assert.ErrorContains(t, info.Validate(), errHas, teams)
	}
	ok := &env.Info{Name: "tug", Schedule: env.Simultaneous, Roles: []*agents.Role{puller}, Teams: []string{"red", "blue", "green"}}
	assert.NoError(t, ok.Validate())
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
