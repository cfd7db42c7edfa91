package signal_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/scenariotest"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/trajectories"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

func params(t *testing.T, sc *signal.Scenario, given map[string]string) env.Params {
	t.Helper()
	p, err := sc.Info().ParseParams(given)
	require.NoError(t, err)
	return p
}

// named builds the scenario's policy called name for role.
func named(t *testing.T, sc *signal.Scenario, p env.Params, name, role string) agents.Policy {
	t.Helper()
	if name == "random" {
		return agents.Random()
	}
	pol, err := sc.Info().Policies[name](env.PolicyRequest{Params: p, Role: role})
	require.NoError(t, err)
	return pol
}

// pair assigns the speaker and the listener their policies.
func pair(speaker, listener agents.Policy) env.PolicyFor {
	return env.ByRole(map[string]agents.Policy{signal.RoleSpeaker: speaker}, listener)
}

func playEpisode(t *testing.T, given map[string]string, seed uint64, speaker, listener agents.Policy) *trajectories.Episode {
	t.Helper()
	sc := signal.New()
	return trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
		Play:       env.Play{Scenario: sc, Params: params(t, sc, given), Policy: pair(speaker, listener)},
		Seed:       seed,
		PolicySeed: seed + 100,
	}))
}

func TestHarness(t *testing.T) {
	scenariotest.Check(t, signal.New(), scenariotest.Options{
		Params: []map[string]string{
			{},
			{"vocab": signal.Symbols},
			{"candidates": "8", "attributes": "3", "values": "3"},
			{"candidates": "2", "attributes": "1", "values": "2"},
		},
	})
}

func TestDocShowsTheRoles(t *testing.T) {
	scenariotest.CheckDoc(t, ".", signal.New().Info().Roles...)
}

func TestGolden(t *testing.T) {
	sc := signal.New()
	words, symbols := params(t, sc, nil), params(t, sc, map[string]string{"vocab": signal.Symbols})
	for _, tc := range []struct {
		name              string
		given             map[string]string
		seed              uint64
		speaker, listener agents.Policy
		success           bool // what the transcript shows: one of each is kept
	}{
		{"scripted-success", nil, 1, named(t, sc, words, "scripted", signal.RoleSpeaker), named(t, sc, words, "scripted", signal.RoleListener), true},
		{"random-failure", nil, 1, agents.Random(), agents.Random(), false},
		{"symbols-scripted", map[string]string{"vocab": signal.Symbols}, 2,
			named(t, sc, symbols, "scripted", signal.RoleSpeaker), named(t, sc, symbols, "scripted", signal.RoleListener), true},
		{"silent-speaker", nil, 3, agents.Replay(signal.Silence), named(t, sc, words, "scripted", signal.RoleListener), false},
		{"illegal-word", nil, 5, agents.Replay("the red one"), agents.Random(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := playEpisode(t, tc.given, tc.seed, tc.speaker, tc.listener)
			require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
			assert.Equal(t, tc.success, ep.Score.Team == 1)
			scenariotest.Golden(t, "testdata/"+tc.name+".golden", trajectories.Transcript(ep), *update)
		})
	}
}

// briefing records what each role saw: the speaker's private messages and
// the listener's candidates, copied out of the observation.
type briefing struct {
	policy     agents.Policy
	target     string
	candidates []string
	legal      []string
	inbox      []protocol.Message
	view       string
	state      agents.State
	step       int
}

func (b *briefing) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	for _, m := range obs.Seen {
		switch m.Kind {
		case signal.KindTarget:
			b.target = m.Payload
		case signal.KindCandidates:
			b.candidates = strings.Split(m.Payload, ", ")
		}
	}
	b.legal = slices.Clone(obs.Legal)
	b.inbox = slices.Clone(obs.Inbox)
	b.view, b.state, b.step = obs.View, obs.State, obs.Step
	return b.policy.Act(ctx, obs)
}

func TestEpisodeShape(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, nil)
	speaker := &briefing{policy: named(t, sc, p, "scripted", signal.RoleSpeaker)}
	listener := &briefing{policy: named(t, sc, p, "scripted", signal.RoleListener)}
	ep := playEpisode(t, nil, 7, speaker, listener)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, env.EndTerminated, ep.End)

	// The speaker acts at step 1, on its briefing; the listener at step 2,
	// on the word.
	assert.Equal(t, 2, ep.Steps)
	require.Len(t, ep.Turns, 2)
	for i, want := range []struct{ step, seat int }{{1, 0}, {2, 1}} {
		got := ep.Turns[i]
		assert.Equal(t, want, struct{ step, seat int }{got.Step, got.Seat}, "turn %d", i)
		assert.Equal(t, 0, got.Turn)
	}
	// The speaker saw its briefing, the listener the word.
	assert.Equal(t, signal.KindWord, ep.Messages[ep.Turns[1].Inbox[0]].Kind)
	assert.Equal(t, []int{1}, ep.Messages[ep.Turns[1].Inbox[0]].Recipients)
	assert.Equal(t, signal.Briefed, speaker.state)
	assert.Equal(t, signal.Choosing, listener.state)

	// Four distinct candidates, one of them the target; the listener sees
	// the same ones and they are its legal actions; the vocabulary is the
	// speaker's.
	require.Len(t, speaker.candidates, 4)
	assert.Contains(t, speaker.candidates, speaker.target)
	assert.ElementsMatch(t, speaker.candidates, listener.legal)
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(speaker.candidates))), 4)
	assert.Equal(t, []string{"red", "green", "blue", "yellow", "circle", "square", "triangle", "star"}, speaker.legal)

	kinds := make([]string, len(ep.Messages))
	for i, m := range ep.Messages {
		kinds[i] = fmt.Sprintf("%d %s->%s %s", m.Time, m.From, m.To, m.Kind)
	}
	assert.Equal(t, []string{
		"0 env->speaker target", "0 env->speaker candidates", "1 speaker->listener word", "2 env->* result",
	}, kinds)
	require.Len(t, listener.inbox, 1)
	assert.Equal(t, ep.Turns[0].Action, listener.inbox[0].Payload)

	// The listener's sample notes the target.
	assert.Equal(t, speaker.target, ep.Samples[1].Metadata.Extra["target"])
	assert.Equal(t, ep.Score.Team, ep.Score.Agents[0])
	assert.Equal(t, ep.Score.Team, ep.Score.Agents[1])
}

func TestSeedsDrawDifferentGames(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, map[string]string{"candidates": "3", "attributes": "3", "values": "6"})
	seen := map[string]bool{}
	targets := map[int]int{} // position of the target in the listener's list
	for seed := range uint64(300) {
		speaker := &briefing{policy: agents.Random()}
		listener := &briefing{policy: agents.Random()}
		ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: pair(speaker, listener)}, Seed: seed}))
		require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
		for _, c := range speaker.candidates {
			require.Len(t, strings.Fields(c), 3, c)
		}
		seen[strings.Join(speaker.candidates, ",")] = true
		targets[slices.Index(listener.legal, speaker.target)]++
	}
	assert.Greater(t, len(seen), 290, "candidates are drawn from the seed")
	// The target's position in the listener's list is uniform: each of the
	// three positions near 100 of 300.
	for pos := range 3 {
		assert.InDelta(t, 100, targets[pos], 30, "position %d", pos)
	}
}

// successRate plays n episodes of a run and returns the mean team reward.
func successRate(t *testing.T, given map[string]string, policy func(sc *signal.Scenario, p env.Params) env.PolicyFor, n int) float64 {
	t.Helper()
	sc := signal.New()
	p := params(t, sc, given)
	sum, err := play.Run(context.Background(), play.Config{
		Play:        env.Play{Scenario: sc, Params: p, Policy: policy(sc, p)},
		Episodes:    n,
		Concurrency: 4,
		Seed:        2024,
		FailFast:    true,
	}, &trajectories.Output{Sink: trajectories.Discard})
	require.NoError(t, err)
	require.Equal(t, n, sum.ByStatus[protocol.StatusCompleted])
	return sum.MeanTeamReward()
}

// TestCommunicationIsNeeded measures the success rate of policy pairs over
// 2,000 episodes: only a speaker whose word depends on the target lifts the
// listener above chance (1/4 with the defaults). The bounds are ±5 standard
// deviations of a binomial proportion around 1/4.
func TestCommunicationIsNeeded(t *testing.T) {
	const n = 2000
	scripted := func(role string) func(*signal.Scenario, env.Params) agents.Policy {
		return func(sc *signal.Scenario, p env.Params) agents.Policy { return named(t, sc, p, "scripted", role) }
	}
	random := func(*signal.Scenario, env.Params) agents.Policy { return agents.Random() }
	silent := func(*signal.Scenario, env.Params) agents.Policy { return agents.Replay(signal.Silence) }
	for _, tc := range []struct {
		name              string
		vocab             string
		speaker, listener func(*signal.Scenario, env.Params) agents.Policy
		lo, hi            float64
	}{
		{"random pair", signal.Words, random, random, 0.2, 0.3},
		{"random speaker, scripted listener", signal.Words, random, scripted(signal.RoleListener), 0.2, 0.3},
		{"silent speaker, scripted listener", signal.Words, silent, scripted(signal.RoleListener), 0.2, 0.3},
		{"scripted speaker, random listener", signal.Words, scripted(signal.RoleSpeaker), random, 0.2, 0.3},
		{"random symbols, scripted listener", signal.Symbols, random, scripted(signal.RoleListener), 0.2, 0.3},
		{"scripted pair", signal.Words, scripted(signal.RoleSpeaker), scripted(signal.RoleListener), 0.85, 1},
		{"scripted pair, symbols", signal.Symbols, scripted(signal.RoleSpeaker), scripted(signal.RoleListener), 0.85, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate := successRate(t, map[string]string{"vocab": tc.vocab}, func(sc *signal.Scenario, p env.Params) env.PolicyFor {
				return pair(tc.speaker(sc, p), tc.listener(sc, p))
			}, n)
			t.Logf("success rate %.4f", rate)
			assert.GreaterOrEqual(t, rate, tc.lo)
			assert.LessOrEqual(t, rate, tc.hi)
		})
	}
}

func TestIllegalAnswers(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, nil)

	// An illegal word is silence: nothing reaches the listener.
	listener := &briefing{policy: agents.Random()}
	ep := playEpisode(t, nil, 1, agents.Replay("reddish"), listener)
	require.Equal(t, protocol.StatusCompleted, ep.Status, ep.Err)
	assert.Equal(t, map[string]any{"illegal": true}, ep.Samples[0].Metadata.Extra)
	assert.Empty(t, listener.inbox)
	assert.Contains(t, listener.view, "The speaker said nothing.")
	for _, m := range ep.Messages {
		assert.NotEqual(t, signal.KindWord, m.Kind)
	}

	// An illegal pick fails.
	ep = playEpisode(t, nil, 1, named(t, sc, p, "scripted", signal.RoleSpeaker), agents.Replay("the blue thing"))
	assert.Equal(t, 0.0, ep.Score.Team)
	assert.Equal(t, true, ep.Samples[1].Metadata.Extra["illegal"])
	assert.Contains(t, ep.Messages[len(ep.Messages)-1].Payload, "failure")
}

func TestAnswersAreNormalised(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, nil)
	speaker := &briefing{policy: named(t, sc, p, "scripted", signal.RoleSpeaker)}
	ep := playEpisode(t, nil, 5, speaker, named(t, sc, p, "scripted", signal.RoleListener))
	require.Equal(t, 1.0, ep.Score.Team, "seed 5 is a success for the scripted pair")

	shout := strings.ToUpper(ep.Turns[0].Action) + " "
	pick := "  " + strings.ToUpper(strings.ReplaceAll(speaker.target, " ", "   "))
	ep = playEpisode(t, nil, 5, agents.Replay(shout), agents.Replay(pick))
	assert.Equal(t, 1.0, ep.Score.Team)
	assert.Nil(t, ep.Samples[0].Metadata.Extra, "the word was legal")
	assert.Equal(t, strings.TrimSpace(strings.ToLower(shout)), ep.Messages[2].Payload, "the word is passed on normalised")
}

// TestCounterfactuals checks what the scenario declares: a silent speaker
// and an absent one are the same, and without a listener nobody picks. The
// listener's pick depends on the word, so a counterfactual must re-simulate
// it; replayed frozen, it repeats its recorded pick.
func TestCounterfactuals(t *testing.T) {
	ctx := context.Background()
	sc := signal.New()
	p := params(t, sc, nil)
	speaker, listener := named(t, sc, p, "scripted", signal.RoleSpeaker), named(t, sc, p, "scripted", signal.RoleListener)
	replay := func(ep *trajectories.Episode, cf episode.Counterfactual) env.Score {
		t.Helper()
		score, err := ep.Replay.Replay(ctx, cf)
		require.NoError(t, err)
		return score
	}
	differs := 0
	for seed := range uint64(40) {
		ep := playEpisode(t, nil, seed, speaker, listener)
		silent := replay(ep, episode.Counterfactual{Replace: map[int]string{0: signal.Silence}, Resimulate: true})
		assert.Equal(t, silent, replay(ep, episode.Counterfactual{Absent: []int{0}, Resimulate: true}), "seed %d: an absent speaker is a silent one", seed)
		assert.Equal(t, playEpisode(t, nil, seed, agents.Replay(signal.Silence), listener).Score, silent, "seed %d", seed)
		if silent.Team != ep.Score.Team {
			differs++
		}

		frozen := replay(ep, episode.Counterfactual{Replace: map[int]string{0: signal.Silence}})
		assert.Equal(t, ep.Score, frozen, "seed %d: a frozen listener repeats its pick", seed)

		assert.Equal(t, 0.0, replay(ep, episode.Counterfactual{Absent: []int{1}}).Team, "seed %d: nobody picks", seed)
		assert.Equal(t, 0.0, replay(ep, episode.Counterfactual{Absent: []int{0, 1}}).Team)
	}
	assert.Greater(t, differs, 20, "silencing the scripted speaker changes most outcomes")
}

func TestParameterConflicts(t *testing.T) {
	sc := signal.New()
	// The combination is rejected when the parameters are parsed, before
	// any episode runs.
	_, err := sc.Info().ParseParams(map[string]string{"candidates": "5", "attributes": "2", "values": "2"})
	require.ErrorIs(t, err, env.ErrBadParam)
	assert.EqualError(t, err, "bad scenario parameter: signal: candidates=5, but attributes=2 with values=2 make only 4 distinct objects")
	_, err = sc.Info().ParseParams(map[string]string{"candidates": "4", "attributes": "2", "values": "2"})
	require.NoError(t, err)
}

func TestScriptedPolicyErrors(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, nil)
	ctx := context.Background()

	_, err := named(t, sc, p, "scripted", signal.RoleSpeaker).Act(ctx, &agents.Observation{Agent: "speaker", Legal: []string{"red"}})
	require.ErrorIs(t, err, signal.ErrUnbriefed)
	_, err = named(t, sc, p, "scripted", signal.RoleSpeaker).Act(ctx, &agents.Observation{
		Agent: "speaker", Seen: []protocol.Message{{Kind: signal.KindTarget, Payload: "mauve blob"}},
	})
	require.ErrorIs(t, err, signal.ErrUnbriefed)
	_, err = named(t, sc, p, "scripted", signal.RoleListener).Act(ctx, &agents.Observation{Agent: "listener"})
	require.ErrorIs(t, err, agents.ErrNoLegalActions)
	_, err = sc.Info().Policies["scripted"](env.PolicyRequest{Params: p, Role: "referee"})
	require.ErrorContains(t, err, `role "referee"`)
}

func TestSymbolsAreAConvention(t *testing.T) {
	sc := signal.New()
	p := params(t, sc, map[string]string{"vocab": signal.Symbols})
	speaker := &briefing{policy: named(t, sc, p, "scripted", signal.RoleSpeaker)}
	ep := playEpisode(t, map[string]string{"vocab": signal.Symbols}, 3, speaker, named(t, sc, p, "scripted", signal.RoleListener))
	assert.Equal(t, []string{"w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"}, speaker.legal)
	assert.Contains(t, speaker.view, "no given meaning")
	assert.Contains(t, speaker.legal, ep.Turns[0].Action)
}
