package protocol_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
)

func TestStatusValid(t *testing.T) {
	for _, s := range []protocol.Status{
		protocol.StatusPending, protocol.StatusCompleted, protocol.StatusTruncated,
		protocol.StatusAborted, protocol.StatusFailed,
	} {
		assert.True(t, s.Valid(), "%q", s)
	}
	for _, s := range []protocol.Status{"", "COMPLETED", "Completed", "done", " completed", "completed "} {
		assert.False(t, s.Valid(), "%q", s)
	}
}

func TestPromptString(t *testing.T) {
	assert.Equal(t, "", protocol.Prompt{}.String())
	assert.Equal(t, "hello\nworld", protocol.TextPrompt("hello\nworld").String())
	chat := protocol.Prompt{Text: "ignored", Messages: []protocol.ChatMessage{
		{Role: "system", Content: "rules"},
		{Role: "user", Content: "go?"},
	}}
	assert.Equal(t, "system: rules\nuser: go?", chat.String())
	assert.Equal(t, "", protocol.Prompt{Text: "ignored", Messages: []protocol.ChatMessage{}}.String(),
		"non-nil Messages win over Text even when empty")
}

func TestReward(t *testing.T) {
	var null protocol.Reward
	assert.Equal(t, protocol.RewardNull, null.Kind)
	_, ok := null.Get("team")
	assert.False(t, ok)

	sc := protocol.Scalar(-0.5)
	assert.Equal(t, protocol.RewardScalar, sc.Kind)
	v, ok := sc.Get("any key")
	assert.True(t, ok)
	assert.Equal(t, -0.5, v)

	src := map[string]float64{"team": 1, "equal_split": 0.25}
	d := protocol.DictReward(src)
	assert.Equal(t, protocol.RewardDict, d.Kind)
	src["team"] = 99 // DictReward copies
	v, ok = d.Get("team")
	assert.True(t, ok)
	assert.Equal(t, 1.0, v)
	_, ok = d.Get("missing")
	assert.False(t, ok)
}

// validText and validTokens return a valid sample of each kind: the starting
// points of the Validate cases.
func validText() protocol.Sample   { return textOnlySample() }
func validTokens() protocol.Sample { return tokenSample() }

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		base   func() protocol.Sample
		change func(s *protocol.Sample)
		reason string // "" when the sample is valid; else part of the error
	}{
		// Status.
		{"completed", validText, func(s *protocol.Sample) {}, ""},
		{"every status", validText, func(s *protocol.Sample) { s.Status = protocol.StatusPending }, ""},
		{"empty status", validText, func(s *protocol.Sample) { s.Status = "" }, `status ""`},
		{"upper-case status", validText, func(s *protocol.Sample) { s.Status = "COMPLETED" }, `status "COMPLETED"`},

		// Text-only samples.
		{"text-only with response_length", validText, func(s *protocol.Sample) { s.ResponseLength = 1 }, "response_length 1 without tokens"},
		{"text-only with loss_mask", validText, func(s *protocol.Sample) { s.LossMask = []int{} }, "loss_mask or rollout_log_probs without tokens"},
		{"text-only with log-probs", validText, func(s *protocol.Sample) { s.RolloutLogProbs = []float64{} }, "loss_mask or rollout_log_probs without tokens"},
		{"text-only not marked", validText, func(s *protocol.Sample) { s.Metadata.TextOnly = false }, "must be marked text_only"},
		{"empty non-nil tokens count as none", validText, func(s *protocol.Sample) { s.Tokens = []int{} }, ""},

		// Samples with tokens.
		{"tokens", validTokens, func(s *protocol.Sample) {}, ""},
		{"tokens marked text-only", validTokens, func(s *protocol.Sample) { s.Metadata.TextOnly = true }, "marked text_only"},
		{"tokens without response", validTokens, func(s *protocol.Sample) {
			s.ResponseLength, s.LossMask, s.RolloutLogProbs = 0, nil, nil
		}, "response_length 0"},
		{"negative response_length", validTokens, func(s *protocol.Sample) {
			s.ResponseLength, s.LossMask, s.RolloutLogProbs = -1, nil, nil
		}, "response_length -1"},
		{"no prompt token", validTokens, func(s *protocol.Sample) {
			s.Tokens = s.Tokens[:4]
		}, "4 tokens cannot hold a prompt token and 4 response tokens"},
		{"one prompt token is enough", validTokens, func(s *protocol.Sample) { s.Tokens = s.Tokens[:5] }, ""},
		{"no loss_mask nor log-probs", validTokens, func(s *protocol.Sample) { s.LossMask, s.RolloutLogProbs = nil, nil }, ""},
		{"log-probs without loss_mask", validTokens, func(s *protocol.Sample) { s.LossMask = nil }, ""},
		{"loss_mask without log-probs", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs = nil }, ""},
		{"short loss_mask", validTokens, func(s *protocol.Sample) { s.LossMask = s.LossMask[:3] }, "loss_mask has 3 entries, response_length is 4"},
		{"long loss_mask", validTokens, func(s *protocol.Sample) { s.LossMask = append(s.LossMask, 1) }, "loss_mask has 5 entries"},
		{"loss_mask of 2", validTokens, func(s *protocol.Sample) { s.LossMask[1] = 2 }, "loss_mask[1] = 2, want 0 or 1"},
		{"loss_mask of -1", validTokens, func(s *protocol.Sample) { s.LossMask[3] = -1 }, "loss_mask[3] = -1"},
		{"short log-probs", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs = s.RolloutLogProbs[:2] }, "rollout_log_probs has 2 entries, response_length is 4"},
		{"positive log-prob", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs[0] = 0.5 }, "rollout_log_probs[0] = 0.5 is not a log-probability"},
		{"NaN log-prob", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs[1] = math.NaN() }, "rollout_log_probs[1] = NaN"},
		{"-Inf log-prob", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs[3] = math.Inf(-1) }, "rollout_log_probs[3] = -Inf"},
		{"log-prob 0 is a certainty", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs[0] = 0 }, ""},
		{"log-prob at a masked position", validTokens, func(s *protocol.Sample) { s.RolloutLogProbs[2] = -0.1 }, "rollout_log_probs[2] = -0.1 at a masked position"},

		// Rewards.
		{"null reward", validText, func(s *protocol.Sample) { s.Reward = protocol.Reward{} }, ""},
		{"NaN reward", validText, func(s *protocol.Sample) { s.Reward = protocol.Scalar(math.NaN()) }, "reward NaN is not finite"},
		{"+Inf reward", validText, func(s *protocol.Sample) { s.Reward = protocol.Scalar(math.Inf(1)) }, "reward +Inf is not finite"},
		{"dict reward", validText, func(s *protocol.Sample) { s.Reward = protocol.DictReward(map[string]float64{"a": 1, "b": -2}) }, ""},
		{"dict reward with -Inf", validText, func(s *protocol.Sample) {
			s.Reward = protocol.DictReward(map[string]float64{"a": 1, "b": math.Inf(-1)})
		}, `reward["b"] = -Inf is not finite`},
		{"NaN team reward", validText, func(s *protocol.Sample) { s.Metadata.TeamReward = math.NaN() }, "team_reward NaN"},

		// Metadata extras.
		{"own extra key", validText, func(s *protocol.Sample) { s.Metadata.Extra = map[string]any{"night": 3} }, ""},
		{"extra shadows seed", validText, func(s *protocol.Sample) { s.Metadata.Extra = map[string]any{"seed": 3} }, `extra key "seed" shadows`},
		{"extra shadows raw_reward", validText, func(s *protocol.Sample) { s.Metadata.Extra = map[string]any{"raw_reward": 3} }, `extra key "raw_reward" shadows`},
		{"extra shadows an optional key", validText, func(s *protocol.Sample) { s.Metadata.Extra = map[string]any{"agent_score": 3} }, `extra key "agent_score" shadows`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.base()
			tt.change(&s)
			err := s.Validate()
			if tt.reason == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, protocol.ErrInvalidSample)
			assert.Contains(t, err.Error(), tt.reason)
			assert.Contains(t, err.Error(), "rollout 3 index 7", "the error must say which sample")
		})
	}
}

func TestValidateFixtures(t *testing.T) {
	for _, f := range fixtures() {
		assert.NoError(t, f.sample.Validate(), f.name)
	}
}

func TestValidateRollout(t *testing.T) {
	rollout := func() []protocol.Sample {
		a, b, c := textOnlySample(), tokenSample(), chatSample()
		a.Index, b.Index, c.Index = 10, 11, 12
		return []protocol.Sample{a, b, c}
	}
	t.Run("valid", func(t *testing.T) {
		assert.NoError(t, protocol.ValidateRollout(rollout()))
	})
	t.Run("empty", func(t *testing.T) {
		assert.NoError(t, protocol.ValidateRollout(nil))
	})
	t.Run("mixed rollout ids", func(t *testing.T) {
		r := rollout()
		r[2].RolloutID = 4
		err := protocol.ValidateRollout(r)
		require.ErrorIs(t, err, protocol.ErrRolloutMixed)
		assert.Contains(t, err.Error(), "sample 2 has rollout_id 4, sample 0 has 3")
		assert.NotErrorIs(t, err, protocol.ErrInvalidSample)
	})
	t.Run("duplicate index", func(t *testing.T) {
		r := rollout()
		r[2].Index = 10
		err := protocol.ValidateRollout(r)
		require.ErrorIs(t, err, protocol.ErrDuplicateIndex)
		assert.Contains(t, err.Error(), "index 10 appears twice in rollout 3")
	})
	t.Run("invalid sample", func(t *testing.T) {
		r := rollout()
		r[1].Status = "DONE"
		err := protocol.ValidateRollout(r)
		require.ErrorIs(t, err, protocol.ErrInvalidSample)
		assert.Contains(t, err.Error(), "index 11")
	})
}
