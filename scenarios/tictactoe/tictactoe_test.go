package tictactoe_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

// play runs one episode with x and o playing the given policies.
func play(t *testing.T, params map[string]string, policySeed uint64, x, o agents.Policy, limits env.Limits) *trajectories.Episode {
	t.Helper()
	sc := tictactoe.New()
	p, err := sc.Info().ParseParams(params)
	require.NoError(t, err)
	return trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: sc, Params: p, Limits: limits, Policy: env.ByRole(map[string]agents.Policy{tictactoe.RoleX: x}, o)},
		PolicySeed: policySeed,
	}))
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, tictactoe.New(), scenariotest.Options{
		Params: []map[string]string{{}, {"illegal": tictactoe.Penalty}},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", tictactoe.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	minimax, center := tictactoe.Minimax(), tictactoe.CenterFirst()
	for _, tc := range []struct {
		name   string
		params map[string]string
		seed   uint64
		x, o   agents.Policy
	}{
		{name: "random-seed1", seed: 1, x: agents.Random(), o: agents.Random()},
		{name: "random-seed2", seed: 2, x: agents.Random(), o: agents.Random()},
		{name: "minimax-vs-minimax", x: minimax, o: minimax},
		{name: "center-first-vs-random", seed: 3, x: center, o: agents.Random()},
		// o answers a1, which x holds already.
		{name: "illegal-forfeit", x: agents.Replay("a1", "b2"), o: agents.Replay("a1")},
		{name: "illegal-penalty", params: map[string]string{"illegal": tictactoe.Penalty},
			x: agents.Replay("b2", "I take the top left corner"), o: agents.Replay("a1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := play(t, tc.params, tc.seed, tc.x, tc.o, env.Limits{})
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

func TestRowWins(t *testing.T) {
	ep := play(t, nil, 0, agents.Replay("a1", "b1", "c1"), agents.Replay("a2", "b2"), env.Limits{})
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, env.EndTerminated, ep.End)
	assert.Equal(t, env.Score{Team: 0, Agents: []float64{1, -1}}, ep.Score)
	assert.Equal(t, 5, ep.Steps)
	last := ep.Messages[len(ep.Messages)-1]
	assert.Equal(t, protocol.Message{From: protocol.EnvSender, To: protocol.Broadcast, Kind: tictactoe.KindResult, Payload: "x wins", Time: 5, Seq: 5}, last.Message)
	assert.Equal(t, []int{0, 1}, last.Recipients, "the last step's message is in the log, with who received it")
}

func TestColumnAndDiagonalWinsForO(t *testing.T) {
	// o completes the a column, then (another game) the a3-c1 diagonal.
	ep := play(t, nil, 0, agents.Replay("b2", "c3", "b3"), agents.Replay("a1", "a2", "a3"), env.Limits{})
	assert.Equal(t, []float64{-1, 1}, ep.Score.Agents)
	ep = play(t, nil, 0, agents.Replay("a1", "b1", "c2"), agents.Replay("c1", "b2", "a3"), env.Limits{})
	assert.Equal(t, []float64{-1, 1}, ep.Score.Agents)
}

func TestDraw(t *testing.T) {
	ep := play(t, nil, 0, agents.Replay("a1", "c1", "b2", "c2", "b3"), agents.Replay("b1", "a2", "c3", "a3"), env.Limits{})
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, env.Score{Team: 0, Agents: []float64{0, 0}}, ep.Score)
	assert.Equal(t, 9, ep.Steps)
	assert.Equal(t, "draw", ep.Messages[len(ep.Messages)-1].Payload)
}

func TestIllegalMoves(t *testing.T) {
	for _, tc := range []struct {
		name, illegal, answer string
		want                  []float64
	}{
		{"occupied, forfeit", tictactoe.Forfeit, "b2", []float64{1, -1}},
		{"occupied, penalty", tictactoe.Penalty, "b2", []float64{0, tictactoe.PenaltyScore}},
		{"not a cell, forfeit", tictactoe.Forfeit, "d4", []float64{1, -1}},
		{"prose, penalty", tictactoe.Penalty, "the centre", []float64{0, tictactoe.PenaltyScore}},
		{"empty, forfeit", tictactoe.Forfeit, "", []float64{1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := play(t, map[string]string{"illegal": tc.illegal}, 0, agents.Replay("b2"), agents.Replay(tc.answer), env.Limits{})
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			assert.Equal(t, tc.want, ep.Score.Agents)
			assert.Equal(t, tc.want[0]+tc.want[1], ep.Score.Team)
			require.Len(t, ep.Samples, 2)
			assert.Equal(t, map[string]any{"illegal": true}, ep.Samples[1].Metadata.Extra)
			assert.Nil(t, ep.Samples[0].Metadata.Extra)
			kinds := []string{}
			for _, m := range ep.Messages {
				kinds = append(kinds, m.Kind)
			}
			assert.Equal(t, []string{tictactoe.KindMove, tictactoe.KindIllegal, tictactoe.KindResult}, kinds)
		})
	}
}

func TestAnswersAreNormalised(t *testing.T) {
	ep := play(t, nil, 0, agents.Replay(" B2\n", "A1", "c3 "), agents.Replay("b1", "c1"), env.Limits{})
	assert.Equal(t, []float64{1, -1}, ep.Score.Agents)
	assert.Equal(t, "b2", ep.Messages[0].Payload, "the broadcast names the cell canonically")
}

// observer records what a seat saw at each turn, copying it, since an
// observation must not be kept after Act.
type observer struct {
	policy agents.Policy
	seen   []agents.Observation
}

func (o *observer) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	c := *obs
	c.Inbox = append([]protocol.Message(nil), obs.Inbox...)
	c.Seen = nil
	c.Legal = append([]string(nil), obs.Legal...)
	o.seen = append(o.seen, c)
	return o.policy.Act(ctx, obs)
}

func TestObservations(t *testing.T) {
	x := &observer{policy: agents.Replay("b2", "a1")}
	o := &observer{policy: agents.Replay("c3")}
	play(t, nil, 0, x, o, env.Limits{MaxSteps: 3})

	require.Len(t, o.seen, 1)
	first := o.seen[0]
	assert.Equal(t, tictactoe.ToMove, first.State)
	assert.Equal(t, []string{"a1", "b1", "c1", "a2", "c2", "a3", "b3", "c3"}, first.Legal)
	require.Len(t, first.Inbox, 1, "o hears x's move")
	assert.Equal(t, "b2", first.Inbox[0].Payload)
	assert.Equal(t, "x", first.Inbox[0].From)
	assert.Contains(t, first.View, "You play O")
	assert.Contains(t, first.View, "   a b c\n1  . . .\n2  . X .\n3  . . .\n")

	require.Len(t, x.seen, 2)
	assert.Empty(t, x.seen[0].Inbox)
	assert.Contains(t, x.seen[1].View, "2  . X .\n3  . . O\n")
	assert.Equal(t, "c3", x.seen[1].Inbox[0].Payload)
}

func TestTruncatedGameScoresZero(t *testing.T) {
	ep := play(t, nil, 0, agents.Replay("a1", "b1", "c1"), agents.Replay("a2", "b2"), env.Limits{MaxSteps: 4})
	assert.Equal(t, protocol.StatusTruncated, ep.Status)
	assert.Equal(t, env.Score{Team: 0, Agents: []float64{0, 0}}, ep.Score)
}

func TestMinimaxIsPerfect(t *testing.T) {
	minimax := tictactoe.Minimax()
	ep := play(t, nil, 0, minimax, minimax, env.Limits{})
	assert.Equal(t, []float64{0, 0}, ep.Score.Agents, "perfect play draws")
	assert.Len(t, ep.Turns, 9)

	// Against every opponent tried, minimax never loses, in either seat.
	opponents := map[string]agents.Policy{"random": agents.Random(), "center-first": tictactoe.CenterFirst()}
	for name, opp := range opponents {
		for seed := range uint64(200) {
			asX := play(t, nil, seed, minimax, opp, env.Limits{})
			asO := play(t, nil, seed, opp, minimax, env.Limits{})
			require.GreaterOrEqual(t, asX.Score.Agents[0], 0.0, "minimax as x lost to %s, seed %d:\n%s", name, seed, trajectories.Transcript(asX))
			require.GreaterOrEqual(t, asO.Score.Agents[1], 0.0, "minimax as o lost to %s, seed %d:\n%s", name, seed, trajectories.Transcript(asO))
		}
	}
}

// position builds the observation of role to move on a board given as
// nine characters, X, O or '.', with the opponent's marks announced as
// move messages.
func position(t *testing.T, role, cells string) *agents.Observation {
	t.Helper()
	require.Len(t, cells, 9)
	obs := &agents.Observation{Agent: role, Role: role}
	opp := byte('O')
	if role == tictactoe.RoleO {
		opp = 'X'
	}
	for i := range 9 {
		switch cells[i] {
		case '.':
			obs.Legal = append(obs.Legal, tictactoe.CellName(i))
		case opp:
			obs.Seen = append(obs.Seen, protocol.Message{From: "them", Kind: tictactoe.KindMove, Payload: tictactoe.CellName(i)})
		}
	}
	return obs
}

func act(t *testing.T, p agents.Policy, obs *agents.Observation) string {
	t.Helper()
	a, err := p.Act(context.Background(), obs)
	require.NoError(t, err)
	return a.Text
}

func TestPolicyChoices(t *testing.T) {
	minimax, center := tictactoe.Minimax(), tictactoe.CenterFirst()
	for _, tc := range []struct {
		name, role, board string
		minimax, center   string
	}{
		// X can win at c1 now, or set up a later win; both take c1.
		{"win now", "x", "XX.OO....", "c1", "c1"},
		// O must block c1.
		{"block", "o", "XX..O....", "c1", "c1"},
		// Nothing urgent: center-first takes the centre; minimax's
		// tie-break among drawing moves is the first cell.
		{"opening", "x", ".........", "a1", "b2"},
		// The centre is taken: center-first takes a corner, and so must
		// minimax (o on an edge loses).
		{"answer the centre", "o", "....X....", "a1", "a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.minimax, act(t, minimax, position(t, tc.role, tc.board)))
			assert.Equal(t, tc.center, act(t, center, position(t, tc.role, tc.board)))
		})
	}
}

func TestPoliciesRejectImpossibleObservations(t *testing.T) {
	for name, obs := range map[string]*agents.Observation{
		"unknown role":                {Role: "referee", Legal: []string{"a1"}},
		"no legal cells":              {Role: "x"},
		"legal action not cell":       {Role: "x", Legal: []string{"z9"}},
		"o to move on an empty board": position(t, "o", "........."),
		"opponent moved on an empty cell": {Role: "x", Legal: []string{"a1", "b1"},
			Seen: []protocol.Message{{From: "o", Kind: tictactoe.KindMove, Payload: "a1"}}},
		"game already won": position(t, "x", "XXXOO.O.."),
	} {
		for pname, p := range map[string]agents.Policy{"minimax": tictactoe.Minimax(), "center-first": tictactoe.CenterFirst()} {
			_, err := p.Act(context.Background(), obs)
			assert.ErrorIs(t, err, tictactoe.ErrUnreadable, "%s: %s", pname, name)
		}
	}
}

func TestCells(t *testing.T) {
	for i := range 9 {
		got, ok := tictactoe.ParseCell(tictactoe.CellName(i))
		require.True(t, ok)
		assert.Equal(t, i, got)
	}
	for _, bad := range []string{"", "a", "a0", "a4", "d1", "11", "a1a"} {
		_, ok := tictactoe.ParseCell(bad)
		assert.False(t, ok, bad)
	}
}

func ExampleMinimax() {
	sc := tictactoe.New()
	p, _ := sc.Info().ParseParams(nil)
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(tictactoe.Minimax())},
	}))
	moves := make([]string, len(ep.Turns))
	for i, a := range ep.Turns {
		moves[i] = ep.Seats[a.Seat].ID + ":" + a.Action
	}
	fmt.Println(strings.Join(moves, " "))
	fmt.Println(ep.Status, ep.Score.Agents)
	// Output:
	// x:a1 o:b2 x:b1 o:c1 x:a3 o:a2 x:c2 o:b3 x:c3
	// completed [0 0]
}
