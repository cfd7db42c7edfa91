package env_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

func params(t *testing.T, sc env.Scenario, kv map[string]string) env.Params {
	t.Helper()
	p, err := sc.Info().ParseParams(kv)
	require.NoError(t, err)
	return p
}

func runOne(t *testing.T, sc env.Scenario, pol agents.Policy, mod func(*env.Setup)) *trajectories.Episode {
	t.Helper()
	s := env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(pol)}, Seed: 7, PolicySeed: 11, RolloutID: 42, GroupIndex: 3}
	if mod != nil {
		mod(&s)
	}
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), s))
	require.NotNil(t, ep)
	for i := range ep.Samples {
		ep.Samples[i].Index = int64(i)
	}
	if len(ep.Samples) > 0 {
		require.NoError(t, protocol.ValidateRollout(ep.Samples))
	}
	return ep
}

func TestSequentialEpisodeCompletes(t *testing.T) {
	var log []string
	ep := runOne(t, relayScenario(env.Sequential, 6, relayHooks{}, &log), agents.Replay("2", "2"), nil)
	assert.Equal(t, protocol.StatusCompleted, ep.Status)
	assert.Equal(t, env.EndTerminated, ep.End)
	assert.Equal(t, 3, ep.Steps)
	assert.Equal(t, 6.0, ep.Score.Team)
	require.Len(t, ep.Samples, 3)
	for i, s := range ep.Samples {
		assert.Equal(t, int64(42), s.RolloutID)
		assert.Equal(t, int64(3), s.GroupIndex)
		assert.Equal(t, protocol.StatusCompleted, s.Status)
		assert.Equal(t, "2", s.Response)
		assert.Equal(t, i+1, s.Metadata.Step)
		assert.Equal(t, 0, s.Metadata.Turn)
		assert.Equal(t, "idle", s.Metadata.State)
		assert.True(t, s.Metadata.TextOnly)
		assert.Equal(t, 6.0, s.Metadata.TeamReward)
		require.NotNil(t, s.Metadata.AgentScore)
		assert.Equal(t, 2.0, *s.Metadata.AgentScore)
	}
	assert.Equal(t, []string{"a", "b", "c"}, []string{ep.Samples[0].Metadata.Agent, ep.Samples[1].Metadata.Agent, ep.Samples[2].Metadata.Agent})
	// Every move was broadcast; b saw a's move in its inbox, c saw a's and b's.
	require.Len(t, ep.Messages, 3)
	assert.Equal(t, "total 2\nMessages:\n[t=1] a -> * (add): 2", ep.Samples[1].Prompt.Text)
	assert.Contains(t, ep.Samples[2].Prompt.Text, "[t=1] a -> * (add): 2\n[t=2] b -> * (add): 2")
}

func TestSimultaneousActorsObserveBeforeAnyMove(t *testing.T) {
	var log []string
	sc := relayScenario(env.Simultaneous, 100, relayHooks{}, &log)
	ep := runOne(t, sc, agents.Replay("1", "1"), func(s *env.Setup) { s.Limits.MaxSteps = 2 })
	assert.Equal(t, protocol.StatusTruncated, ep.Status)
	assert.Equal(t, env.EndMaxSteps, ep.End)
	assert.Equal(t, []string{
		"observe a total=0", "observe b total=0", "observe c total=0",
		"apply a 1", "apply b 1", "apply c 1",
		"observe a total=3", "observe b total=3", "observe c total=3",
		"apply a 1", "apply b 1", "apply c 1",
	}, log)
	// Truncated episodes are still scored.
	assert.Equal(t, 6.0, ep.Score.Team)
	// Simultaneous actors see each other's messages only at the next step,
	// and never their own broadcasts.
	second := ep.Samples[3]
	assert.Equal(t, "a", second.Metadata.Agent)
	assert.Equal(t, "total 3\nMessages:\n[t=1] b -> * (add): 1\n[t=1] c -> * (add): 1", second.Prompt.Text)
}

// TestPublicViewObservesOncePerStep: a scenario whose view is public is
// observed once per step, for the first actor, and the episode is the one
// observed seat by seat (Setup.ObserveEachSeat).
func TestPublicViewObservesOncePerStep(t *testing.T) {
	var once, each []string
	public := relayScenario(env.Simultaneous, 100, relayHooks{public: true}, &once)
	got := runOne(t, public, agents.Replay("1", "1"), func(s *env.Setup) { s.Limits.MaxSteps = 2 })
	assert.Equal(t, []string{
		"observe a total=0", "apply a 1", "apply b 1", "apply c 1",
		"observe a total=3", "apply a 1", "apply b 1", "apply c 1",
	}, once)
	seatBySeat := relayScenario(env.Simultaneous, 100, relayHooks{public: true}, &each)
	want := runOne(t, seatBySeat, agents.Replay("1", "1"), func(s *env.Setup) {
		s.Limits.MaxSteps = 2
		s.ObserveEachSeat = true
	})
	assert.Len(t, each, 12, "every actor observed: %q", each)
	assert.Equal(t, trajectories.Transcript(want), trajectories.Transcript(got))
	assert.Equal(t, want.Score, got.Score)
}

func TestAsyncConversationEndsQuiescent(t *testing.T) {
	// a opens; every message gets one answer from each recipient until the
	// game stops sending.
	sent := 0
	hooks := relayHooks{
		next: func(s *env.Step) []int {
			if s.Time() == 1 {
				return []int{0}
			}
			return nil
		},
		apply: func(s *env.Step, moves []env.Move) error {
			for _, m := range moves {
				if sent >= 4 {
					continue
				}
				sent++
				other := "b"
				if s.Seats()[m.Seat].ID == "b" {
					other = "a"
				}
				if err := s.Send(s.Seats()[m.Seat].ID, protocol.To(other), "say", m.Action.Text); err != nil {
					return err
				}
			}
			return nil
		},
	}
	sc := relayScenario(env.Async, 0, hooks, nil)
	ep := runOne(t, sc, agents.Scripted(func(o *agents.Observation) string { return fmt.Sprint(len(o.Seen)) }),
		func(s *env.Setup) { s.Params = params(t, s.Scenario, map[string]string{"seats": "2"}) })
	assert.Equal(t, protocol.StatusCompleted, ep.Status)
	assert.Equal(t, env.EndQuiescent, ep.End)
	var who []string
	for _, a := range ep.Turns {
		who = append(who, fmt.Sprintf("%d:%s", a.Step, ep.Seats[a.Seat].ID))
	}
	assert.Equal(t, []string{"1:a", "2:b", "3:a", "4:b", "5:a"}, who)
	assert.Len(t, ep.Messages, 4)
}

func TestLimitsTruncate(t *testing.T) {
	never := relayHooks{noEnd: true}
	cases := []struct {
		name   string
		limits env.Limits
		end    string
		turns  int
	}{
		{"steps", env.Limits{MaxSteps: 5}, env.EndMaxSteps, 5},
		{"turns", env.Limits{MaxTurns: 4}, env.EndMaxTurns, 4},
		{"messages", env.Limits{MaxMessages: 2}, env.EndMaxMessages, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := runOne(t, relayScenario(env.Sequential, 0, never, nil), agents.Random(), func(s *env.Setup) { s.Limits = c.limits })
			assert.Equal(t, protocol.StatusTruncated, ep.Status)
			assert.Equal(t, c.end, ep.End)
			assert.Equal(t, c.turns, len(ep.Turns))
			for _, s := range ep.Samples {
				assert.Equal(t, protocol.StatusTruncated, s.Status)
				assert.Equal(t, c.end, s.Metadata.End)
			}
		})
	}
}

func TestTimeoutTruncatesAndInterruptAborts(t *testing.T) {
	blocking := agents.PolicyFunc(func(ctx context.Context, o *agents.Observation) (agents.Action, error) {
		if o.Step < 2 {
			return agents.Action{Text: "1"}, nil
		}
		<-ctx.Done()
		return agents.Action{}, ctx.Err()
	})
	sc := relayScenario(env.Sequential, 100, relayHooks{}, nil)
	ep := runOne(t, sc, blocking, func(s *env.Setup) { s.Timeout = 20 * time.Millisecond })
	assert.Equal(t, protocol.StatusTruncated, ep.Status)
	assert.Equal(t, env.EndDeadline, ep.End)
	assert.Len(t, ep.Samples, 1, "the turn cut short by the deadline is not a sample")

	ctx, cancel := context.WithCancel(context.Background())
	cancelling := agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
		if o.Step == 2 {
			cancel()
		}
		return agents.Action{Text: "1"}, nil
	})
	ep = trajectories.NewEpisode(env.RunEpisode(ctx, env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(cancelling)}}))
	assert.Equal(t, protocol.StatusAborted, ep.Status)
	assert.Equal(t, env.EndInterrupted, ep.End)
	assert.Contains(t, ep.Err, "context canceled")
}

func TestFailuresAreRecordedNotPanicked(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name   string
		hooks  relayHooks
		policy agents.Policy
		status protocol.Status
		end    string
		errHas string
	}{
		{"policy error", relayHooks{}, agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
			return agents.Action{}, boom
		}), protocol.StatusAborted, env.EndPolicyError, `agent "a" (role "p") turn 0: boom`},
		{"policy panic", relayHooks{}, agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
			panic("policy bug")
		}), protocol.StatusFailed, env.EndGameError, "policy panicked: policy bug"},
		{"replay exhausted", relayHooks{}, agents.Replay(), protocol.StatusAborted, env.EndPolicyError, "replay: no recorded action"},
		{"game panic", relayHooks{panicAt: 2}, agents.Random(), protocol.StatusFailed, env.EndGameError, "game panicked: relay: boom"},
		{"apply error", relayHooks{apply: func(*env.Step, []env.Move) error { return boom }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "step 1: apply: boom"},
		{"start error", relayHooks{start: func(*env.Step) error { return boom }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "start: boom"},
		{"impossible transition", relayHooks{badEvent: true}, agents.Random(), protocol.StatusFailed, env.EndGameError, `agent "a" (role "p"): event "nonsense" is impossible in state "idle"`},
		{"two actors in a sequential game", relayHooks{next: func(*env.Step) []int { return []int{0, 1} }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "sequential game named 2 agents"},
		{"no actor", relayHooks{next: func(*env.Step) []int { return []int{} }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "sequential game named 0 agents to act, want 1"},
		{"seat out of range", relayHooks{next: func(*env.Step) []int { return []int{9} }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "named seat 9 of 3"},
		{"team reward not a number", relayHooks{score: func() env.Score { return env.Score{Team: math.NaN()} }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "bad score: the team reward is NaN"},
		{"agent score infinite", relayHooks{score: func() env.Score { return env.Score{Team: 1, Agents: []float64{0, math.Inf(1), 0}} }}, agents.Random(), protocol.StatusFailed, env.EndGameError, "bad score: seat 1 (b) scored +Inf"},
		{"bad send", relayHooks{start: func(s *env.Step) error { return s.Send("a", "zed", "k", "") }}, agents.Random(), protocol.StatusFailed, env.EndGameError, `agent "a" sends to "zed", which is not an agent`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := runOne(t, relayScenario(env.Sequential, 5, c.hooks, nil), c.policy, nil)
			assert.Equal(t, c.status, ep.Status)
			assert.Equal(t, c.end, ep.End)
			assert.Contains(t, ep.Err, c.errHas)
			for _, s := range ep.Samples {
				assert.Equal(t, c.status, s.Status)
				assert.Equal(t, ep.Err, s.Metadata.Error)
			}
		})
	}
}

func TestBadSeatsFail(t *testing.T) {
	for name, seats := range map[string][]env.Seat{
		"none":         {},
		"duplicate":    {{ID: "a", Role: "p"}, {ID: "a", Role: "p"}},
		"reserved env": {{ID: "env", Role: "p"}},
		"channel-like": {{ID: "#x", Role: "p"}},
		"unknown role": {{ID: "a", Role: "ghost"}},
	} {
		t.Run(name, func(t *testing.T) {
			info := &env.Info{Name: "bad", Schedule: env.Sequential, Roles: []*agents.Role{relayRole}}
			sc := env.Define(info, func(env.Params, uint64) (env.Game, error) {
				return &relay{seats: seats, target: 1}, nil
			})
			ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Policy: env.SamePolicy(agents.Random())}}))
			assert.Equal(t, protocol.StatusFailed, ep.Status)
			assert.ErrorContains(t, errors.New(ep.Err), "bad seats")
		})
	}
}

func TestNotesAndEmitFilter(t *testing.T) {
	sc := relayScenario(env.Sequential, 3, relayHooks{}, nil)
	byStep := agents.Scripted(func(o *agents.Observation) string { return []string{"", "x", "3"}[o.Step] })
	ep := runOne(t, sc, byStep, func(s *env.Setup) {
		s.Emit = func(seat env.Seat) bool { return seat.ID != "b" }
	})
	assert.Equal(t, protocol.StatusCompleted, ep.Status)
	// a played "x" (noted illegal), b played "3" but is not emitted, c never played.
	require.Len(t, ep.Samples, 1)
	assert.Equal(t, map[string]any{"illegal": true}, ep.Samples[0].Metadata.Extra)
	assert.Len(t, ep.Turns, 2, "unemitted turns are still recorded for replay")
}

func TestTokensBecomeTrainedSample(t *testing.T) {
	pol := agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: "3", Generation: &agents.Generation{Tokens: &agents.Tokens{Prompt: []int{5, 6}, Response: []int{7, 8}, LogProbs: []float64{-0.5, -0.25}}}}, nil
	})
	ep := runOne(t, relayScenario(env.Sequential, 3, relayHooks{}, nil), pol, nil)
	require.Len(t, ep.Samples, 1)
	s := ep.Samples[0]
	assert.Equal(t, []int{5, 6, 7, 8}, s.Tokens)
	assert.Equal(t, 2, s.ResponseLength)
	assert.Equal(t, []int{1, 1}, s.LossMask)
	assert.Equal(t, []float64{-0.5, -0.25}, s.RolloutLogProbs)
	assert.False(t, s.Metadata.TextOnly)
}

func TestParallelPoliciesGiveTheSameEpisode(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 30, relayHooks{}, nil)
	slow := agents.PolicyFunc(func(ctx context.Context, o *agents.Observation) (agents.Action, error) {
		time.Sleep(time.Duration(3-len(o.Agent)) * time.Millisecond) // let answers arrive out of order
		return agents.Random().Act(ctx, o)
	})
	seq := runOne(t, sc, slow, nil)
	par := runOne(t, sc, slow, func(s *env.Setup) { s.ParallelPolicies = true })
	assert.Equal(t, seq.Turns, par.Turns)
	assert.Equal(t, trajectories.Transcript(seq), trajectories.Transcript(par))
}

func TestReplayReproducesAndCounterfactuals(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 12, relayHooks{}, nil)
	ep := runOne(t, sc, agents.Random(), nil)
	require.NotNil(t, ep.Replay)
	ctx := context.Background()

	same, err := ep.Replay.Replay(ctx, episode.Counterfactual{})
	require.NoError(t, err)
	assert.Equal(t, ep.Score, same)
	resim, err := ep.Replay.Replay(ctx, episode.Counterfactual{Resimulate: true})
	require.NoError(t, err)
	assert.Equal(t, ep.Score, resim, "policies asked again with the same seeds answer the same")

	// Seat 0 playing the null action "0": the total loses exactly its moves
	// while the episode lasts as long (the game is not over sooner).
	null, err := ep.Replay.Replay(ctx, episode.Counterfactual{Null: []int{0}, Resimulate: true})
	require.NoError(t, err)
	assert.Less(t, null.Team, ep.Score.Team)

	// Nobody left to act: the engine ends the replay by itself, and the
	// game scores no moves (v(∅) of Shapley).
	absent, err := ep.Replay.Replay(ctx, episode.Counterfactual{Absent: []int{0, 1, 2}})
	require.NoError(t, err)
	assert.Equal(t, env.Score{Team: 0, Agents: []float64{0, 0, 0}}, absent)

	_, err = ep.Replay.Replay(ctx, episode.Counterfactual{Null: []int{7}})
	assert.ErrorContains(t, err, "seat 7 of 3")
}

func TestCounterfactualNeedsDeclaration(t *testing.T) {
	info := &env.Info{Name: "plain", Schedule: env.Sequential, Roles: []*agents.Role{relayRole}}
	sc := env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return &relay{seats: []env.Seat{{ID: "a", Role: "p"}}, target: 2}, nil
	})
	ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Policy: env.SamePolicy(agents.Random())}}))
	_, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Absent: []int{0}})
	assert.ErrorIs(t, err, episode.ErrNoAbsence)
	_, err = ep.Replay.Replay(context.Background(), episode.Counterfactual{Null: []int{0}})
	assert.ErrorIs(t, err, episode.ErrNoNullAction)
	assert.ErrorContains(t, err, `scenario plain role "p"`)
}

func TestEngineReuseIsClean(t *testing.T) {
	sc := relayScenario(env.Sequential, 7, relayHooks{}, nil)
	eng := env.NewEngine()
	s := env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.Random())}}
	first := trajectories.NewEpisode(eng.Run(context.Background(), s))
	for range 3 {
		again := trajectories.NewEpisode(eng.Run(context.Background(), s))
		assert.Equal(t, trajectories.Transcript(first), trajectories.Transcript(again))
	}
	fresh := trajectories.NewEpisode(env.RunEpisode(context.Background(), s))
	assert.Equal(t, trajectories.Transcript(first), trajectories.Transcript(fresh))
}

func TestSimultaneousGameNamingNobodyFails(t *testing.T) {
	hooks := relayHooks{next: func(*env.Step) []int { return []int{} }}
	ep := runOne(t, relayScenario(env.Simultaneous, 5, hooks, nil), agents.Random(), nil)
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Contains(t, ep.Err, "step 1: the game named no agent to act and did not end the episode")
}

func TestInvalidAnswers(t *testing.T) {
	// b's answer is invalid at its first turn.
	pol := agents.PolicyFunc(func(_ context.Context, o *agents.Observation) (agents.Action, error) {
		if o.Agent == "b" {
			return agents.Action{Text: "{oops", Invalid: "not JSON"}, nil
		}
		return agents.Action{Text: "1"}, nil
	})
	sc := relayScenario(env.Sequential, 100, relayHooks{}, nil)

	passed := runOne(t, sc, pol, func(s *env.Setup) { s.Limits.MaxSteps = 3 })
	assert.Equal(t, protocol.StatusTruncated, passed.Status, "the game judged the move and went on")
	assert.Equal(t, map[string]any{"invalid": "not JSON", "illegal": true}, passed.Samples[1].Metadata.Extra)

	for name, rule := range map[string]env.InvalidRule{"forfeit": env.Forfeit, "spiral": env.SpiralPenalty} {
		t.Run(name, func(t *testing.T) {
			ep := runOne(t, sc, pol, func(s *env.Setup) { s.Invalid = rule })
			assert.Equal(t, protocol.StatusCompleted, ep.Status)
			assert.Equal(t, env.EndInvalid, ep.End)
			assert.Equal(t, []float64{rule.Bonus, rule.Penalty, rule.Bonus}, ep.Score.Agents)
			assert.Equal(t, 2*rule.Bonus+rule.Penalty, ep.Score.Team)
			require.Len(t, ep.Samples, 2, "the invalid turn is recorded")
			assert.Equal(t, "not JSON", ep.Samples[1].Metadata.Extra["invalid"])
			assert.Equal(t, rule.Penalty, *ep.Samples[1].Metadata.AgentScore)
		})
	}
}

type labelled struct{ *relay }

func (labelled) Label() string { return "42" }

func TestLabelerSetsEverySampleLabel(t *testing.T) {
	info := &env.Info{Name: "labelled", Schedule: env.Sequential, Roles: []*agents.Role{relayRole}}
	sc := env.Define(info, func(env.Params, uint64) (env.Game, error) {
		return labelled{&relay{seats: []env.Seat{{ID: "a", Role: "p"}, {ID: "b", Role: "p"}}, target: 4, sched: env.Sequential}}, nil
	})
	ep := runOne(t, sc, agents.Replay("2"), nil)
	require.Len(t, ep.Samples, 2)
	for _, s := range ep.Samples {
		assert.Equal(t, protocol.TextLabel("42"), s.Label)
	}
}

func TestReseedAsksOneSeatAgain(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 1000, relayHooks{}, nil)
	ep := runOne(t, sc, agents.Random(), func(s *env.Setup) { s.Limits.MaxSteps = 30 })
	moves := func(score env.Score) float64 { return score.Team }
	differs := 0
	for salt := range uint64(8) {
		got, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Reseed: map[int]uint64{1: salt + 1}})
		require.NoError(t, err)
		if moves(got) != moves(ep.Score) {
			differs++
		}
	}
	assert.Greater(t, differs, 4, "a reseeded seat plays other moves")
	same, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Reseed: map[int]uint64{1: 5}})
	require.NoError(t, err)
	again, err := ep.Replay.Replay(context.Background(), episode.Counterfactual{Reseed: map[int]uint64{1: 5}})
	require.NoError(t, err)
	assert.Equal(t, same, again, "the same salt gives the same moves")
}

func TestActionNotesReachTheSample(t *testing.T) {
	pol := agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: "3", Notes: map[string]any{"llm_attempts": 2}}, nil
	})
	ep := runOne(t, relayScenario(env.Sequential, 3, relayHooks{}, nil), pol, nil)
	require.Len(t, ep.Samples, 1)
	assert.Equal(t, map[string]any{"llm_attempts": 2}, ep.Samples[0].Metadata.Extra)
}

func TestCompletionIsTheResponseAndTheMoveIsKept(t *testing.T) {
	const wrote = "I will say three.\n```json\n{\"action\": \"3\"}\n```"
	pol := agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: "3", Generation: &agents.Generation{Completion: wrote}}, nil
	})
	ep := runOne(t, relayScenario(env.Sequential, 3, relayHooks{}, nil), pol, nil)
	require.Len(t, ep.Samples, 1)
	s := ep.Samples[0]
	assert.Equal(t, wrote, s.Response, "the response is what the model wrote")
	assert.Equal(t, "3", s.Metadata.Action, "the move the game read is kept in metadata")
	assert.Equal(t, "3", ep.Turns[0].Action, "the game and replays see the move, not the completion")

	plain := runOne(t, relayScenario(env.Sequential, 3, relayHooks{}, nil), agents.Replay("3"), nil)
	assert.Equal(t, "3", plain.Samples[0].Response)
	assert.Empty(t, plain.Samples[0].Metadata.Action, "no completion: the response is the move, written once")
}

// TestNoSeatLeftEndsTheEpisode: an episode in which no seat can act, every
// seat absent (the empty coalition) or terminal from the start, completes
// by itself with end env.EndNoSeats and the game's score of no moves, in every
// schedule, rather than failing because the game named nobody.
func TestNoSeatLeftEndsTheEpisode(t *testing.T) {
	finishAll := func(s *env.Step) error { return s.FireAll("finish") }
	for _, sched := range []env.Schedule{env.Sequential, env.Simultaneous, env.Async} {
		for _, tc := range []struct {
			name  string
			hooks relayHooks
			cf    *episode.Counterfactual
		}{
			{name: "all terminal at start", hooks: relayHooks{start: finishAll}},
			{name: "all absent", cf: &episode.Counterfactual{Absent: []int{0, 1, 2}}},
			{name: "all absent, resimulated", cf: &episode.Counterfactual{Absent: []int{0, 1, 2}, Resimulate: true}},
		} {
			t.Run(sched.String()+"/"+tc.name, func(t *testing.T) {
				sc := relayScenario(sched, 5, tc.hooks, nil)
				if sched == env.Async {
					// Async relay seats act on mail: open with seat 0.
					tc.hooks.next = func(s *env.Step) []int {
						if s.Time() == 1 && s.Active(0) {
							return []int{0}
						}
						return nil
					}
					sc = relayScenario(sched, 5, tc.hooks, nil)
				}
				if tc.cf == nil {
					ep := runOne(t, sc, agents.Random(), nil)
					assert.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
					assert.Equal(t, env.EndNoSeats, ep.End)
					assert.Empty(t, ep.Turns)
					assert.Equal(t, env.Score{Agents: []float64{0, 0, 0}}, ep.Score)
					return
				}
				ep := runOne(t, sc, agents.Random(), nil)
				require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
				score, err := ep.Replay.Replay(context.Background(), *tc.cf)
				require.NoError(t, err)
				assert.Equal(t, env.Score{Agents: []float64{0, 0, 0}}, score)
			})
		}
	}
}

// A Scheduler's list is checked as the game gave it, in every schedule:
// the async schedule, which merges in the agents that have mail, must not
// tidy a seat named twice into a valid list.
func TestSchedulerListIsCheckedAsGiven(t *testing.T) {
	for _, sched := range []env.Schedule{env.Simultaneous, env.Async} {
		for _, tc := range []struct {
			named []int
			want  string
		}{
			{[]int{0, 0}, "out of order or twice"},
			{[]int{1, 0}, "out of order or twice"},
			{[]int{5}, "named seat 5 of 3"},
		} {
			next := func(*env.Step) []int { return tc.named }
			ep := runOne(t, relayScenario(sched, 3, relayHooks{next: next}, nil), agents.Replay("1", "2", "3"), nil)
			assert.Equal(t, protocol.StatusFailed, ep.Status, "%v %v", sched, tc.named)
			assert.Contains(t, ep.Err, tc.want, "%v %v", sched, tc.named)
		}
	}
}

// An executor's engines keep the policies and emit filter they asked for
// its seats; a replay (which emits nothing) on an engine, even as the
// engine's first episode, must not change what the executor's episodes on
// it emit later, nor a counterfactual's policies leak into them.
func TestExecutorEnginesKeepPoliciesAcrossReplays(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 12, relayHooks{}, nil)
	executor := func() *env.LocalExecutor {
		return &env.LocalExecutor{
			Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.Random()), Emit: func(seat env.Seat) bool { return seat.ID != "b" }},
		}
	}
	ctx := context.Background()
	x := executor()
	first := trajectories.NewEpisode(x.Execute(ctx, env.Request{Seed: 7, PolicySeed: 11}))
	require.Equal(t, protocol.StatusCompleted, first.Status)
	// Concurrent replays borrow the executor's engine and make new ones,
	// whose first episode is a replay.
	const n = 8
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			cf := episode.Counterfactual{Null: []int{0}, Resimulate: true}
			if k%2 == 1 {
				cf = episode.Counterfactual{Replace: map[int]string{1: "0"}}
			}
			_, err := first.Replay.Replay(ctx, cf)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	got := make([]string, n)
	for k := range n {
		wg.Go(func() {
			got[k] = trajectories.Transcript(trajectories.NewEpisode(x.Execute(ctx, env.Request{Seed: uint64(k), PolicySeed: uint64(k)})))
		})
	}
	wg.Wait()
	for k := range n {
		want := trajectories.NewEpisode(executor().Execute(ctx, env.Request{Seed: uint64(k), PolicySeed: uint64(k)}))
		require.NotEmpty(t, want.Samples)
		assert.Equal(t, trajectories.Transcript(want), got[k], "episode %d", k)
	}
}

// The engine builds each Observation field by field, in place: a field
// added to Observation must be written there too (Engine.act).
func TestObservationFieldsAreAllWrittenByTheEngine(t *testing.T) {
	assert.Equal(t, 13, reflect.TypeFor[agents.Observation]().NumField(),
		"Observation changed: update Engine.act, which writes every field, and this count")
}

// A record given back to the executor that played it is written over by
// its next episode; one given to another executor is left alone.
func TestRecycleReusesOnlyItsOwnRecords(t *testing.T) {
	sc := relayScenario(env.Sequential, 6, relayHooks{}, nil)
	executor := func() *env.LocalExecutor {
		return &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.Replay("2", "2"))}}
	}
	ctx := context.Background()
	a, b := executor(), executor()
	first := a.Execute(ctx, env.Request{})
	require.NotEmpty(t, first.Turns)
	want := trajectories.Transcript(trajectories.NewEpisode(first))
	turns := &first.Turns[0]

	b.Recycle(first)
	require.NotNil(t, first.Replay, "another executor's record is left alone")
	again := b.Execute(ctx, env.Request{})
	assert.NotSame(t, turns, &again.Turns[0])

	a.Recycle(first)
	assert.Nil(t, first.Replay, "a record given back is zeroed")
	a.Recycle(first) // twice: harmless
	reused := a.Execute(ctx, env.Request{})
	assert.Same(t, turns, &reused.Turns[0], "the executor's next episode writes into the record given back")
	assert.Equal(t, want, trajectories.Transcript(trajectories.NewEpisode(reused)))
	other := a.Execute(ctx, env.Request{})
	assert.NotSame(t, turns, &other.Turns[0], "a record given back twice serves once")
}

// TestPolicyPanicLeavesTheEngineClean checks a simultaneous step in which
// one policy fails and a later one panics, asked in turn and in parallel:
// the episode fails naming the panicking agent, and the same engine then
// plays a clean episode with nothing of the failed step's left over.
func TestPolicyPanicLeavesTheEngineClean(t *testing.T) {
	sc := relayScenario(env.Simultaneous, 100, relayHooks{}, nil)
	faulty := agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		switch obs.Agent {
		case "a":
			return agents.Action{}, errors.New("a is broken")
		case "b":
			panic("b's bug")
		}
		return agents.Action{Text: "1"}, nil
	})
	for _, parallel := range []bool{false, true} {
		eng := env.NewEngine()
		setup := env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(faulty)}, Drive: env.Drive{ParallelPolicies: parallel}, Seed: 7, PolicySeed: 11}
		setup.Limits.MaxSteps = 2
		ep := eng.Run(context.Background(), setup)
		assert.Equal(t, protocol.StatusFailed, ep.Status, "parallel=%v", parallel)
		assert.Equal(t, env.EndGameError, ep.End)
		assert.Contains(t, ep.Err, `agent "b": policy panicked: b's bug`)

		setup.Policy = env.SamePolicy(agents.Replay("1", "1"))
		ep = eng.Run(context.Background(), setup)
		assert.Equal(t, protocol.StatusTruncated, ep.Status, "parallel=%v: %s", parallel, ep.Err)
		assert.Empty(t, ep.Err)
		assert.Len(t, ep.Turns, 6)
	}
}

// TestLonePolicyPanicLeavesTheEngineClean: in a sequential game a lone
// actor's policy is asked without a recover of its own (askOne), so that
// its panic reaches the episode's. It still fails the episode as a policy
// panic naming the agent, the same engine then plays a clean episode, and
// a panic of the game after it is the game's.
func TestLonePolicyPanicLeavesTheEngineClean(t *testing.T) {
	sc := relayScenario(env.Sequential, 3, relayHooks{}, nil)
	eng := env.NewEngine()
	setup := env.Setup{
		Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			if obs.Agent == "b" {
				panic("b's bug")
			}
			return agents.Action{Text: "1"}, nil
		}))},
		Seed:       7,
		PolicySeed: 11,
	}
	ep := eng.Run(context.Background(), setup)
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Equal(t, env.EndGameError, ep.End)
	assert.Regexp(t, `^agent "b": policy panicked: b's bug \(at engine_test\.go:\d+ in .*TestLonePolicyPanicLeavesTheEngineClean\.func1\)$`, ep.Err)
	assert.Len(t, ep.Turns, 1, "a's turn, not b's")

	setup.Policy = env.SamePolicy(agents.Random())
	ep = eng.Run(context.Background(), setup)
	assert.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)

	bad := relayScenario(env.Sequential, 3, relayHooks{panicAt: 2}, nil)
	setup.Scenario, setup.Params = bad, params(t, bad, nil)
	ep = eng.Run(context.Background(), setup)
	assert.Equal(t, protocol.StatusFailed, ep.Status)
	assert.Regexp(t, `^game panicked: relay: boom \(at testgame_test\.go:\d+ in .*\(\*relay\)\.Apply\)$`, ep.Err, "the game's panic, not a policy's, where the game panicked")
}

// TestPolicyGoexitLeavesNoPolicyBlame: a lone actor's policy that leaves
// by runtime.Goexit (a test's FailNow) does not leave the engine thinking
// it is still asking: a game panic of the next episode is the game's.
func TestPolicyGoexitLeavesNoPolicyBlame(t *testing.T) {
	sc := relayScenario(env.Sequential, 3, relayHooks{}, nil)
	eng := env.NewEngine()
	setup := env.Setup{
		Play: env.Play{Scenario: sc, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
			runtime.Goexit()
			return agents.Action{}, nil
		}))},
		Seed:       7,
		PolicySeed: 11,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		eng.Run(context.Background(), setup)
	}()
	<-done
	bad := relayScenario(env.Sequential, 3, relayHooks{start: func(*env.Step) error { panic("start boom") }}, nil)
	setup.Scenario, setup.Params, setup.Policy = bad, params(t, bad, nil), env.SamePolicy(agents.Random())
	ep := eng.Run(context.Background(), setup)
	assert.Equal(t, "game panicked: start boom", withoutSite(ep.Err))
}

// A game that never ends stops at its scenario's step bound, or the
// default one, when its run sets no limit: truncated, end "step_limit",
// with an error that says how to raise the bound; a run's own MaxSteps
// wins over it.
func TestARunawayEpisodeEndsAtTheStepBound(t *testing.T) {
	sc := relayScenario(env.Sequential, 1<<30, relayHooks{}, nil)
	bounded := limited{Scenario: sc, steps: 50}
	setup := env.Setup{Play: env.Play{Scenario: bounded, Params: params(t, sc, nil), Policy: env.SamePolicy(agents.Random())}, Seed: 3}
	rec := env.RunEpisode(t.Context(), setup)
	assert.Equal(t, protocol.StatusTruncated, rec.Status)
	assert.Equal(t, env.EndStepLimit, rec.End)
	assert.Equal(t, 50, rec.Steps)
	assert.Contains(t, rec.Err, env.ErrRunaway.Error())
	assert.Contains(t, rec.Err, "within 50 steps")
	assert.Contains(t, rec.Err, "--max-steps")

	setup.Limits.MaxSteps = 80 // the run's limit wins, whichever is larger
	rec = env.RunEpisode(t.Context(), setup)
	assert.Equal(t, env.EndMaxSteps, rec.End)
	assert.Equal(t, 80, rec.Steps)
	assert.Empty(t, rec.Err)

	setup.Scenario, setup.Limits.MaxSteps = sc, 0
	rec = env.RunEpisode(t.Context(), setup)
	assert.Equal(t, env.EndStepLimit, rec.End)
	assert.Equal(t, env.DefaultStepLimit, rec.Steps)
}

// A game that never ends and whose view grows every step (a transcript
// in the view) would hold text quadratic in its steps, gigabytes before
// the step bound ends it; its scenario's text bound ends it first,
// truncated, end "text_limit", with an error that names the bound, and
// what the finished record holds stays within a few times the bound.
func TestARunawayEpisodeEndsAtTheTextBound(t *testing.T) {
	const bound = 1 << 20
	observed := 0
	grow := func(int) env.View {
		observed++ // three seats, one view each a step: the view grows with the step
		return env.View{Text: strings.Repeat("transcript ", observed/3), Legal: []string{"1"}}
	}
	sc := limited{Scenario: relayScenario(env.Simultaneous, 1<<30, relayHooks{observe: grow}, nil), text: bound}
	setup := env.Setup{Play: env.Play{Scenario: sc, Params: params(t, sc.Scenario, nil), Policy: env.SamePolicy(agents.Random())}, Seed: 3}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := env.RunEpisode(t.Context(), setup)
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Equal(t, protocol.StatusTruncated, rec.Status)
	assert.Equal(t, env.EndTextLimit, rec.End)
	assert.ErrorContains(t, errors.New(rec.Err), env.ErrRunaway.Error())
	assert.Contains(t, rec.Err, fmt.Sprintf("passed %d bytes", bound))
	text := 0
	for _, turn := range rec.Turns {
		text += len(turn.View) + len(turn.Action)
	}
	for _, m := range rec.Messages {
		text += len(m.Payload)
	}
	assert.Greater(t, text, bound, "it ends once past the bound")
	assert.Less(t, text, bound+bound/4, "and no later than the step that passed it")
	assert.Less(t, rec.Steps, env.DefaultStepLimit/100, "long before the step bound")
	retained := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	assert.Less(t, retained, int64(8*bound), "the record holds its text and little more: %d bytes", retained)
	runtime.KeepAlive(rec)

	bad := limited{Scenario: sc.Scenario, text: -1}
	assert.ErrorContains(t, bad.Info().Validate(), "TextLimit -1 is negative")
}

// limited is a scenario with its Info's step and text bounds set.
type limited struct {
	env.Scenario
	steps int
	text  int64
}

func (s limited) Info() *env.Info {
	in := *s.Scenario.Info()
	in.StepLimit, in.TextLimit = s.steps, s.text
	return &in
}

// A panic's record keeps the panicking code's stack, innermost first, from
// the panic up to the engine, with no directories or addresses; it is the
// same whatever goroutine played the episode.
func TestAPanicsRecordKeepsItsStack(t *testing.T) {
	bad := relayScenario(env.Sequential, 3, relayHooks{panicAt: 2}, nil)
	setup := env.Setup{Play: env.Play{Scenario: bad, Params: params(t, bad, nil), Policy: env.SamePolicy(agents.Random())}, Seed: 7}
	rec := env.RunEpisode(context.Background(), setup)
	require.Equal(t, env.EndGameError, rec.End)
	lines := strings.Split(rec.Stack, "\n")
	require.NotEmpty(t, lines)
	assert.Regexp(t, `^github\.com/troupe-rl/troupe/env_test\.\(\*relay\)\.Apply \(testgame_test\.go:\d+\)$`, lines[0])
	assert.Contains(t, rec.Err, strings.Trim(strings.Fields(lines[0])[1], "()"), "the error names the stack's first frame")
	for _, l := range lines {
		assert.Regexp(t, `^\S+ \([^/()]+\.go:\d+\)$`, l, "a function and its file, with no directory")
		assert.NotContains(t, l, "runtime.", "the runtime's frames are left out")
		assert.NotContains(t, l, "(*Engine).play", "the stack ends at the engine")
	}
	var other *episode.Record
	done := make(chan struct{})
	go func() { defer close(done); other = env.RunEpisode(context.Background(), setup) }()
	<-done
	assert.Equal(t, rec.Stack, other.Stack, "the same on another goroutine")

	ok := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: bad, Params: params(t, bad, nil), Policy: env.SamePolicy(agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		panic("policy bug")
	}))}, Seed: 7})
	assert.Regexp(t, `TestAPanicsRecordKeepsItsStack\.func\d+ \(engine_test\.go:\d+\)`, strings.Split(ok.Stack, "\n")[0], "a policy's panic: the policy's frame first")
}
