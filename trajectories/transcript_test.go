package trajectories_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

func ptr(f float64) *float64 { return &f }

// demoEpisode is a small two-seat episode that exercises every part of the
// transcript: a message at time 0, turns and messages interleaved, a
// failed outcome, and samples of each shape.
func demoEpisode() *trajectories.Episode {
	md := func(agent, role string, turn, step int, state string) protocol.Metadata {
		return protocol.Metadata{
			Scenario: "demo", Seed: 7, Episode: 3, Agent: agent, Role: role,
			Turn: turn, Step: step, State: state, TeamReward: 0.5, End: "terminated",
		}
	}
	a := md("alice", "speaker", 0, 1, "briefed")
	a.AgentScore = ptr(0.25)
	a.TextOnly = true
	a.Allocator = "team"
	a.Extra = map[string]any{"word": "red", "illegal": false}
	b := md("bob", "listener", 0, 2, "choosing")
	b.AgentScore = ptr(0.25)
	b.Allocator = "team,equal-split"
	return &trajectories.Episode{
		Record: episode.Record{
			Scenario:   "demo",
			Params:     map[string]string{"zeta": "1", "alpha": "x y", "mid": ""},
			Seed:       7,
			PolicySeed: 11,
			Index:      3,
			RolloutID:  103,
			GroupIndex: 1,
			Status:     protocol.StatusCompleted,
			End:        "terminated",
			Steps:      2,
			Seats:      []episode.Seat{{ID: "alice", Role: "speaker"}, {ID: "bob", Role: "listener"}},
			Turns: []episode.Turn{
				{Step: 1, Seat: 0, Turn: 0, Action: "red"},
				{Step: 2, Seat: 1, Turn: 0, Action: " "},
			},
			Messages: []episode.Message{
				{Message: protocol.Message{From: "env", To: "alice", Kind: "target", Payload: "red\ncircle", Time: 0, Seq: 0}, Recipients: []int{0}},
				{Message: protocol.Message{From: "alice", To: "bob", Kind: "word", Payload: "red", Time: 1, Seq: 1}, Recipients: []int{1}},
				{Message: protocol.Message{From: "env", To: "*", Kind: "result", Payload: "", Time: 2, Seq: 2}, Recipients: []int{0, 1}},
			},
			Score: episode.Score{Team: 0.5, Agents: []float64{0.25, 0.25}},
		},
		Samples: []protocol.Sample{
			{
				Index: 40, RolloutID: 103, GroupIndex: 1,
				Prompt:   protocol.TextPrompt("You are the speaker.\n\nMessages:"),
				Response: "red", Reward: protocol.Scalar(0.5), Status: protocol.StatusCompleted, Metadata: a,
			},
			{
				Index: 41, RolloutID: 104, GroupIndex: 1, Label: protocol.TextLabel("gold"),
				Prompt: protocol.Prompt{Messages: []protocol.ChatMessage{{Role: "system", Content: "rules"}, {Role: "user", Content: "pick"}}},
				Tokens: []int{5, 6, 7}, ResponseLength: 1, LossMask: []int{1}, RolloutLogProbs: []float64{-0.125},
				Response: " ",
				Reward:   protocol.DictReward(map[string]float64{"team": 0.5, "equal-split": 0.25}),
				Status:   protocol.StatusCompleted,
				Metadata: b,
			},
		},
	}
}

// TestTranscriptLayout pins the format down: it is what golden files hold,
// so any change to it must be deliberate.
func TestTranscriptLayout(t *testing.T) {
	want := `scenario demo
params alpha=x y mid= zeta=1
seed 7  policy_seed 11
episode 3  rollout_id 103  group_index 1
seats  0:alice(speaker)  1:bob(listener)

t=0
  #0 env -> alice (target): "red\ncircle"

t=1
  alice turn 0: "red"
  #1 alice -> bob (word): "red"

t=2
  bob turn 0: " "
  #2 env -> * (result): ""

end completed (terminated) after 2 steps, 2 turns, 3 messages
team 0.5  alice 0.25  bob 0.25

sample 0  index 40  alice(speaker) turn 0 step 1 state briefed
  reward 0.5 (team)  agent_score 0.25  text_only
  extra illegal=false word="red"
  prompt
    | You are the speaker.
    |
    | Messages:
  response "red"

sample 1  index 41  bob(listener) turn 0 step 2 state choosing
  reward {equal-split=0.25 team=0.5} (team,equal-split)  agent_score 0.25
  DIFFERS FROM EPISODE: rollout_id 104
  label "gold"
  tokens [5 6 7]  response_length 1
  loss_mask [1]
  rollout_log_probs [-0.125]
  prompt (chat, 2 messages)
   [system]
    | rules
   [user]
    | pick
  response " "
`
	assert.Equal(t, want, trajectories.Transcript(demoEpisode()))
}

func TestTranscriptReportsErrorsAndOddValues(t *testing.T) {
	ep := demoEpisode()
	ep.Status, ep.End, ep.Err = protocol.StatusFailed, "game_error", "step 2: apply: boom"
	ep.Score = episode.Score{Team: math.Inf(-1)}
	ep.Seats = ep.Seats[:1] // bob's turn now names a seat the episode lacks
	ep.Samples = ep.Samples[:1]
	ep.Samples[0].Reward = protocol.Reward{}
	ep.Samples[0].Metadata.TeamReward = 1e-7

	got := trajectories.Transcript(ep)
	assert.Contains(t, got, "end failed (game_error) after 2 steps, 2 turns, 3 messages\nerror step 2: apply: boom\nteam -Inf\n")
	assert.Contains(t, got, "  seat#1 turn 0: \" \"\n")
	assert.Contains(t, got, "  reward null (team)")
	assert.Contains(t, got, "DIFFERS FROM EPISODE: status completed, end terminated, error \"\", team_reward 1e-07\n")
}

func TestTranscriptIsDeterministic(t *testing.T) {
	// Params and metadata extras are maps: their iteration order must not
	// leak into the output.
	ep := demoEpisode()
	for i := range 50 {
		ep.Params[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
		ep.Samples[0].Metadata.Extra[strings.Repeat("e", i+1)] = i
	}
	first := trajectories.Transcript(ep)
	for range 20 {
		require.Equal(t, first, trajectories.Transcript(ep))
	}
}

func TestTranscriptOrdersTurnsBeforeTheirMessages(t *testing.T) {
	ep := demoEpisode()
	got := trajectories.Transcript(ep)
	// Each turn precedes the messages sent at its step, and every time
	// heading appears once, in increasing order.
	assert.Less(t, strings.Index(got, `alice turn 0: "red"`), strings.Index(got, `#1 alice -> bob`))
	assert.Less(t, strings.Index(got, "\nt=0\n"), strings.Index(got, "\nt=1\n"))
	assert.Less(t, strings.Index(got, "\nt=1\n"), strings.Index(got, "\nt=2\n"))
	assert.Equal(t, 1, strings.Count(got, "\nt=1\n"))
}

type failingWriter struct{}

var errDisk = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriteTranscriptReturnsWriteErrors(t *testing.T) {
	err := trajectories.WriteTranscript(failingWriter{}, demoEpisode())
	require.ErrorIs(t, err, errDisk)

	var b strings.Builder
	require.NoError(t, trajectories.WriteTranscript(&b, demoEpisode()))
	assert.Equal(t, trajectories.Transcript(demoEpisode()), b.String())
}
