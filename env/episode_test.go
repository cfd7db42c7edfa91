package env_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// chooser picks a move for one pending observation, by hand: a legal
// action when the scenario lists them, else a move in the scenario's own
// format, sometimes a broken one (the rules judge it).
func chooser(scenario string, rng *rand.Rand) func(o agents.Observation) agents.Action {
	return func(o agents.Observation) agents.Action {
		if len(o.Legal) > 0 {
			return agents.Action{Text: o.Legal[rng.IntN(len(o.Legal))]}
		}
		var text string
		switch scenario {
		case "negotiation":
			switch rng.IntN(6) {
			case 0:
				text = `{"type":"accept"}`
			case 1:
				text = `{"type":"walk"}`
			case 2:
				text = `not json`
			default:
				text = fmt.Sprintf(`{"type":"propose","take":{"book":%d,"hat":%d,"ball":%d},"say":"how about it"}`, rng.IntN(3), rng.IntN(3), rng.IntN(3))
			}
		case "debate":
			if o.Role == "critic" {
				if rng.IntN(2) == 0 {
					text = `{"verdict":"accept"}`
				} else {
					text = `{"verdict":"object","message":"check again"}`
				}
			} else {
				text = fmt.Sprintf(`{"answer":%d,"explanation":"by hand"}`, rng.IntN(41)-20)
			}
		default:
			text = fmt.Sprintf("free move %d", rng.IntN(10))
		}
		return agents.Action{Text: text}
	}
}

// setupOf is episode k of a run of the scenario with its default
// policies, resolved from a run spec as every run's are.
func setupOf(t testing.TB, name string, k int) env.Setup {
	t.Helper()
	spec := runspec.Spec{Scenario: name, Episodes: k + 1, Seed: 11}
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	require.NoError(t, err)
	req := res.Config.Request(k)
	return env.Setup{Play: res.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed, Index: req.Index, RolloutID: req.RolloutID, GroupIndex: req.GroupIndex}
}

// encode is the record as an episode file holds it: what must be equal
// byte for byte.
func encode(t *testing.T, rec *episode.Record) string {
	t.Helper()
	b, err := trajectories.AppendEpisodeJSON(nil, rec, nil)
	require.NoError(t, err)
	return string(b)
}

// replayed plays setup on the engine with every seat replaying the given
// actions (by seat id, in its turn order): the standard driver given the
// answers a stepped episode was given.
func replayed(t *testing.T, setup env.Setup, moves map[string][]string) *episode.Record {
	t.Helper()
	setup.Policy = func(s env.Seat) agents.Policy { return agents.Replay(moves[s.ID]...) }
	return env.NewEngine().Run(t.Context(), setup)
}

// driveByHand plays an episode to its end through its pending
// observations, choosing each move with choose, and returns the moves by
// seat.
func driveByHand(t *testing.T, ep *env.Episode, choose func(agents.Observation) agents.Action, moves map[string][]string) {
	t.Helper()
	for steps := 0; !ep.Done(); steps++ {
		require.Less(t, steps, 10000, "the episode does not end")
		pending := ep.Pending()
		require.NotEmpty(t, pending, "an episode that is not over waits for someone")
		actions := make([]agents.Action, len(pending))
		for k, o := range pending {
			assert.Equal(t, ep.Time(), o.Step)
			actions[k] = choose(o.Observation)
			moves[o.Agent] = append(moves[o.Agent], actions[k].Text)
		}
		require.NoError(t, ep.Step(actions...))
	}
	assert.Empty(t, ep.Pending())
}

// Every built-in scenario, driven by hand through its stepped episode with
// no policy, gives the record the engine writes when its policies answer
// the same moves, byte for byte.
func TestEveryScenarioDrivenByHand(t *testing.T) {
	for _, sc := range scenarios.List() {
		name := sc.Info().Name
		t.Run(name, func(t *testing.T) {
			statuses := map[string]int{}
			for k := range 6 {
				setup := setupOf(t, name, k)
				stepped := setup
				stepped.Policy = nil
				ep, err := env.NewEpisode(stepped)
				require.NoError(t, err)
				moves := map[string][]string{}
				driveByHand(t, ep, chooser(name, rand.New(rand.NewPCG(uint64(k), 7))), moves)
				rec := ep.Record()
				require.NotNil(t, rec)
				statuses[string(rec.Status)+"/"+rec.End]++
				assert.NotEqual(t, protocol.StatusFailed, rec.Status, "episode %d: %s", k, rec.Err)
				assert.NotEmpty(t, rec.Turns)
				assert.Equal(t, encode(t, replayed(t, setup, moves)), encode(t, rec), "episode %d", k)
			}
			t.Log(statuses)
		})
	}
}

// A recorded episode, played by the scenario's own policies, replays
// through the stepped episode into the same record: the recorded moves
// are all it needs.
func TestARecordedEpisodeReplaysThroughTheSteppedEpisode(t *testing.T) {
	for _, sc := range scenarios.List() {
		name := sc.Info().Name
		t.Run(name, func(t *testing.T) {
			for k := range 4 {
				setup := setupOf(t, name, k)
				played := env.NewEngine().Run(t.Context(), setup)
				require.NotEqual(t, protocol.StatusFailed, played.Status, played.Err)
				want := encode(t, played)

				ep, err := env.NewEpisode(setup)
				require.NoError(t, err)
				for _, turn := range played.Turns {
					require.False(t, ep.Done(), "the episode ended before turn %+v", turn)
					require.NoError(t, ep.Act(turn.Seat, agents.Action{Text: turn.Action, Invalid: turn.Invalid, Generation: generationOf(turn)}))
				}
				require.True(t, ep.Done())
				assert.Equal(t, want, encode(t, ep.Record()), "episode %d", k)
			}
		})
	}
}

func generationOf(t episode.Turn) *agents.Generation {
	if g := t.Generated(); g != (agents.Generation{}) {
		return &g
	}
	return nil
}

// forkAndCheck plays the scenario by hand to step at, forks it into
// continuations (each with its own moves) and checks that each ends with
// the record of a fresh episode given the same moves, and that the
// original goes on as if never forked.
func forkAndCheck(t *testing.T, name string, at, continuations int) {
	setup := setupOf(t, name, 1)
	setup.Policy = nil
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 3))
	choose := chooser(name, rng)
	if name == "negotiation" {
		// Offers only, so that the game is still on at the fork.
		choose = func(agents.Observation) agents.Action {
			return agents.Action{Text: fmt.Sprintf(`{"type":"propose","take":{"book":%d,"hat":%d,"ball":%d}}`, rng.IntN(3), rng.IntN(3), rng.IntN(3))}
		}
	}
	var prefix []env.Move // seat and action of every move so far
	for !ep.Done() && ep.Time() < at {
		pending := ep.Pending()
		for _, o := range pending {
			a := choose(o.Observation)
			prefix = append(prefix, env.Move{Seat: o.Seat, Action: &a})
			require.NoError(t, ep.Act(o.Seat, a))
		}
	}
	require.False(t, ep.Done(), "the episode ended before step %d", at)

	type branch struct {
		ep    *env.Episode
		moves []env.Move
	}
	branches := []branch{{ep: ep, moves: prefix}}
	for range continuations {
		f, err := ep.Fork()
		require.NoError(t, err)
		assert.Equal(t, ep.Time(), f.Time())
		assert.Equal(t, ep.Pending(), f.Pending(), "a fork waits for what its original waits for")
		branches = append(branches, branch{ep: f, moves: append([]env.Move(nil), prefix...)})
	}
	// Each branch goes on with moves of its own, the original last, so
	// that playing the forks first shows that they share nothing with it.
	records := map[string]bool{}
	for b := len(branches) - 1; b >= 0; b-- {
		br := &branches[b]
		choose := chooser(name, rand.New(rand.NewPCG(uint64(b), 99)))
		for !br.ep.Done() {
			for _, o := range br.ep.Pending() {
				a := choose(o.Observation)
				br.moves = append(br.moves, env.Move{Seat: o.Seat, Action: &a})
				require.NoError(t, br.ep.Act(o.Seat, a))
			}
		}
		fresh, err := env.NewEpisode(setup)
		require.NoError(t, err)
		for _, m := range br.moves {
			require.NoError(t, fresh.Act(m.Seat, *m.Action))
		}
		require.True(t, fresh.Done())
		got := encode(t, br.ep.Record())
		assert.Equal(t, encode(t, fresh.Record()), got, "branch %d", b)
		records[got] = true
	}
	assert.Greater(t, len(records), 1, "the continuations should differ")
}

// Tic-tac-toe and a negotiation, forked mid-game into continuations: each
// matches a fresh episode given the same moves.
func TestForkedEpisodesMatchFreshOnes(t *testing.T) {
	t.Run("tictactoe", func(t *testing.T) { forkAndCheck(t, "tictactoe", 4, 4) })
	t.Run("negotiation", func(t *testing.T) { forkAndCheck(t, "negotiation", 3, 4) })
}

// A fork taken in the middle of a simultaneous step, some of its seats
// moved, takes the rest of the step's moves as its original does.
func TestAForkMidStepKeepsTheMovesGiven(t *testing.T) {
	setup := setupOf(t, "elfarol", 0)
	setup.Policy = nil
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	pending := ep.Pending()
	require.Greater(t, len(pending), 2)
	require.NoError(t, ep.Act(0, agents.Action{Text: "1"}))
	require.NoError(t, ep.Act(2, agents.Action{Text: "0"}))
	f, err := ep.Fork()
	require.NoError(t, err)
	assert.Len(t, f.Pending(), len(pending)-2)
	assert.ErrorIs(t, f.Act(2, agents.Action{Text: "0"}), env.ErrNotPending, "seat 2 has moved in the fork too")
	playOut(t, ep, "0")
	playOut(t, f, "0")
	assert.Equal(t, encode(t, ep.Record()), encode(t, f.Record()))
}

// Bad moves are refused with errors naming them, and change nothing.
func TestSteppedEpisodeRefusesBadMoves(t *testing.T) {
	setup := setupOf(t, "tictactoe", 0)
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	p := ep.Pending()
	require.Len(t, p, 1)
	mover := p[0].Seat
	assert.Equal(t, ep.Seats()[mover].ID, p[0].Agent, "a pending seat carries its index and its id")
	other := 1 - mover
	err = ep.Act(other, agents.Action{Text: "4"})
	require.ErrorIs(t, err, env.ErrNotPending)
	assert.Contains(t, err.Error(), ep.Seats()[other].ID)
	assert.ErrorIs(t, ep.Act(7, agents.Action{Text: "4"}), env.ErrNotPending)
	assert.ErrorIs(t, ep.Step(), env.ErrNotPending, "no action for the pending seat")
	assert.Equal(t, p, ep.Pending(), "refused moves change nothing")
	require.NoError(t, ep.Step(agents.Action{Text: p[0].Legal[0]}))

	ep.Stop(protocol.StatusTruncated, env.EndDeadline, nil)
	assert.True(t, ep.Done())
	rec := ep.Record()
	assert.Equal(t, protocol.StatusTruncated, rec.Status)
	assert.Equal(t, env.EndDeadline, rec.End)
	assert.Len(t, rec.Turns, 1)
	assert.ErrorIs(t, ep.Act(other, agents.Action{Text: "0"}), env.ErrEpisodeOver)

	_, err = env.NewEpisode(env.Setup{})
	assert.ErrorIs(t, err, env.ErrBadConfig)
}

// A game that panics fails its stepped episode, as it fails a run.
func TestSteppedEpisodeRecoversAGamePanic(t *testing.T) {
	setup := setupOf(t, "tictactoe", 0)
	setup.Scenario = panicking{setup.Scenario}
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	require.NoError(t, ep.Step(agents.Action{Text: "4"}))
	require.True(t, ep.Done())
	rec := ep.Record()
	assert.Equal(t, protocol.StatusFailed, rec.Status)
	assert.Equal(t, env.EndGameError, rec.End)
	assert.True(t, strings.Contains(rec.Err, env.ErrGamePanic.Error()), rec.Err)
}

type panicking struct{ env.Scenario }

func (p panicking) New(params env.Params, seed uint64) (env.Game, error) {
	g, err := p.Scenario.New(params, seed)
	return panickingGame{g}, err
}

type panickingGame struct{ env.Game }

func (panickingGame) Apply(*env.Step, []env.Move) error { panic("the rules broke") }

// An episode whose counterfactuals its record's Replay answers: the
// stepped episode's record is a record like any other.
func TestSteppedRecordReplaysCounterfactuals(t *testing.T) {
	setup := setupOf(t, "elfarol", 0)
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	playOut(t, ep, "0")
	rec := ep.Record()
	score, err := rec.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}})
	require.NoError(t, err)
	assert.NotEqual(t, rec.Score.Team, score.Team, "patron 0 at home changes G")

	// Played afresh, the seats need policies, which the setup gave.
	_, err = rec.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}, Resimulate: true})
	require.NoError(t, err)

	// Without a Policy, what the record does not hold is refused by name.
	setup.Policy = nil
	ep, err = env.NewEpisode(setup)
	require.NoError(t, err)
	playOut(t, ep, "0")
	rec = ep.Record()
	_, err = rec.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}})
	require.NoError(t, err, "frozen: the record holds every move")
	_, err = rec.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}, Resimulate: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), env.ErrNoLivePolicy.Error())
}

// playOut plays ep to its end, every pending seat answering text.
func playOut(t *testing.T, ep *env.Episode, text string) {
	t.Helper()
	for !ep.Done() {
		actions := make([]agents.Action, len(ep.Pending()))
		for k := range actions {
			actions[k] = agents.Action{Text: text}
		}
		require.NoError(t, ep.Step(actions...))
	}
}

// Each observation carries the agent's own earlier turns (its memory):
// what it observed at each and the action it played, in order, also in a
// fork, which replays them.
func TestObservationsCarryTheAgentsOwnTurns(t *testing.T) {
	setup := setupOf(t, "negotiation", 0)
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	type seen struct {
		view, action string
		inbox        []protocol.Message
	}
	mine := map[string][]seen{}
	check := func(o agents.Observation) {
		t.Helper()
		want := mine[o.Agent]
		require.Len(t, o.History, o.Turn, "%s turn %d", o.Agent, o.Turn)
		for k, h := range o.History {
			assert.Equal(t, want[k].view, h.View, "%s turn %d: turn %d's view", o.Agent, o.Turn, k)
			assert.Equal(t, want[k].action, h.Action.Text)
			assert.Equal(t, want[k].inbox, h.Inbox)
		}
	}
	for n := 0; !ep.Done(); n++ {
		for _, o := range ep.Pending() {
			check(o.Observation)
			if n == 4 {
				f, err := ep.Fork()
				require.NoError(t, err)
				for _, fo := range f.Pending() {
					check(fo.Observation)
				}
			}
			text := fmt.Sprintf(`{"type":"propose","take":{"book":%d,"hat":0,"ball":0}}`, n%2)
			mine[o.Agent] = append(mine[o.Agent], seen{o.View, text, append([]protocol.Message(nil), o.Inbox...)})
			require.NoError(t, ep.Act(o.Seat, agents.Action{Text: text}))
		}
	}
	assert.Len(t, mine["alice"], 5, "the default five rounds were played")
}

// Observation is one seat's entry of Pending, found without copying the
// others'; Decision changes when a step is applied, not while its moves
// come in.
func TestObservationIsPendingsEntry(t *testing.T) {
	setup := setupOf(t, "elfarol", 0)
	ep, err := env.NewEpisode(setup)
	require.NoError(t, err)
	p := ep.Pending()
	require.Greater(t, len(p), 2)
	d := ep.Decision()
	for _, ps := range p {
		o, ok := ep.Observation(ps.Seat)
		require.True(t, ok, ps.Agent)
		assert.Equal(t, ps.Observation, o)
	}
	require.NoError(t, ep.Act(p[1].Seat, agents.Action{Text: p[1].Legal[0]}))
	_, ok := ep.Observation(p[1].Seat)
	assert.False(t, ok, "a seat that moved observes nothing pending")
	_, ok = ep.Observation(len(ep.Seats()))
	assert.False(t, ok, "no such seat")
	assert.Equal(t, d, ep.Decision(), "the step is not applied yet")
	for _, ps := range p {
		if ps.Seat != p[1].Seat {
			require.NoError(t, ep.Act(ps.Seat, agents.Action{Text: ps.Legal[0]}))
		}
	}
	assert.True(t, ep.Done(), "El Farol is one step")

	ttt, err := env.NewEpisode(setupOf(t, "tictactoe", 0))
	require.NoError(t, err)
	d = ttt.Decision()
	require.NoError(t, ttt.Step(agents.Action{Text: ttt.Pending()[0].Legal[0]}))
	assert.Equal(t, d+1, ttt.Decision(), "the next step is readied")
}
