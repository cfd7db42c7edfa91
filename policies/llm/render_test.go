package llm

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

func TestTranscript(t *testing.T) {
	seen := []protocol.Message{
		{From: "env", To: "*", Kind: "rules", Payload: "split 3 books", Time: 0},
		{From: "bob", To: "alice", Kind: "offer", Payload: "2 for me", Time: 1},
		{From: "alice", To: "bob", Kind: "offer", Payload: "1 for you", Time: 2},
		{From: "bob", To: "alice", Kind: "reject", Payload: "no", Time: 3},
		{From: "env", To: "*", Kind: "round", Payload: "last round", Time: 3},
	}
	obs := &agents.Observation{Agent: "alice", Role: "buyer", View: "You value books at 2.", Seen: seen, Inbox: seen[3:]}
	got := Transcript().Render(obs, "SYSTEM")
	assert.Equal(t, []protocol.ChatMessage{
		{Role: RoleSystem, Content: "SYSTEM"},
		{Role: RoleUser, Content: "[t=0] env -> * (rules): split 3 books\n[t=1] bob -> alice (offer): 2 for me"},
		{Role: RoleAssistant, Content: "1 for you"},
		{Role: RoleUser, Content: "[t=3] bob -> alice (reject): no\n[t=3] env -> * (round): last round\n\nYou value books at 2."},
	}, got)

	got = Transcript().Render(&agents.Observation{Agent: "a", View: "Your move."}, "S")
	assert.Equal(t, []protocol.ChatMessage{{Role: RoleSystem, Content: "S"}, {Role: RoleUser, Content: "Your move."}}, got)
}

func TestWithInstructions(t *testing.T) {
	chat := withInstructions([]protocol.ChatMessage{{Role: RoleSystem, Content: "S"}, {Role: RoleUser, Content: "U"}}, "I")
	assert.Equal(t, "U\n\nI", chat[1].Content)
	chat = withInstructions([]protocol.ChatMessage{{Role: RoleSystem, Content: "S"}, {Role: RoleAssistant, Content: "A"}}, "I")
	assert.Equal(t, protocol.ChatMessage{Role: RoleUser, Content: "I"}, chat[2])
}

func TestSystemPrompts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{})
		cfg := testConfig(KindVLLM)
		info := tictactoe.New().Info()
		o := &agents.Observation{Agent: "x", Role: "x", View: "board", Legal: []string{"a1"}}
		system := func(p *Policy) string {
			turn, err := p.Act(t.Context(), o)
			require.NoError(t, err)
			return turn.Generation.Prompt.Messages[0].Content
		}
		assert.Equal(t, "You are the agent x, in the role x.", system(inProcess(t, srv, cfg)))
		withScenario := system(inProcess(t, srv, cfg, WithScenario(info)))
		assert.Contains(t, withScenario, "You are playing tictactoe: "+info.Summary+".")
		assert.Contains(t, withScenario, "Rules: "+info.Doc)
		assert.Contains(t, withScenario, "Your role is x: it places X marks and moves first. You are the agent x.")
		assert.Equal(t, "every role", system(inProcess(t, srv, cfg, WithScenario(info), WithSystemPrompt("", "every role"))))
		assert.Equal(t, "just x", system(inProcess(t, srv, cfg, WithSystemPrompt("", "every role"), WithSystemPrompt("x", "just x"))))
	})
}

func TestPerRoleRendererAndAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := llmtest.NewServer(llmtest.Options{Record: true})
		fixed := RendererFunc(func(obs *agents.Observation, system string) []protocol.ChatMessage {
			return []protocol.ChatMessage{{Role: RoleSystem, Content: system}, {Role: RoleUser, Content: "custom " + obs.Agent}}
		})
		p := inProcess(t, srv, testConfig(KindVLLM), WithRenderer("o", fixed), WithAnswer("o", ObjectAnswer([]byte(`{"type":"object"}`), "any object", nil)))
		turn, err := p.Act(t.Context(), &agents.Observation{Agent: "o1", Role: "o", View: "v"})
		require.NoError(t, err)
		assert.Equal(t, "custom o1\n\nAnswer with any object, and nothing else.", turn.Generation.Prompt.Messages[1].Content)
		assert.Equal(t, "{}", turn.Text, "DefaultBrain answers a schema without an action field with {}")
		turn, err = p.Act(t.Context(), &agents.Observation{Agent: "x1", Role: "x", View: "v", Legal: []string{"a1"}})
		require.NoError(t, err)
		assert.Equal(t, "v\n\nAnswer with a JSON object {\"action\": A} where A is one of: a1, and nothing else.", turn.Generation.Prompt.Messages[1].Content)
		assert.Equal(t, "a1", turn.Text)
	})
}

func TestNilOptionsAreRejected(t *testing.T) {
	c, err := NewClient(testConfig(KindVLLM))
	require.NoError(t, err)
	_, err = NewPolicy(c, testConfig(KindVLLM), WithRenderer("x", nil))
	require.ErrorIs(t, err, ErrBadConfig)
	_, err = NewPolicy(c, testConfig(KindVLLM), WithAnswer("", nil))
	require.ErrorIs(t, err, ErrBadConfig)
}

func TestRequestSeed(t *testing.T) {
	seen := map[int]bool{}
	for turn := range uint64(100) {
		for attempt := range 3 {
			s := requestSeed(turn, attempt)
			assert.Equal(t, s, requestSeed(turn, attempt))
			assert.GreaterOrEqual(t, s, 0)
			assert.Less(t, s, 1<<31)
			seen[s] = true
		}
	}
	assert.Len(t, seen, 300)
}
