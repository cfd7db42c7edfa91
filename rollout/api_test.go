package rollout_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

func TestParamsTakeScalars(t *testing.T) {
	var p rollout.Params
	require.NoError(t, json.Unmarshal([]byte(`{"agents":30,"rate":-0.25,"big":1e3,"vocab":"symbols","noisy":true,"quiet":false}`), &p))
	assert.Equal(t, rollout.Params{"agents": "30", "rate": "-0.25", "big": "1e3", "vocab": "symbols", "noisy": "true", "quiet": "false"}, p)

	for _, bad := range []string{`{"a":null}`, `{"a":[1]}`, `{"a":{"b":1}}`} {
		err := json.Unmarshal([]byte(bad), &p)
		require.ErrorIs(t, err, rollout.ErrBadParamValue, bad)
		assert.Contains(t, err.Error(), "params.a")
	}
	require.NoError(t, json.Unmarshal([]byte(`null`), &p))
	assert.Nil(t, p)

	// Params encode as strings, which decode back unchanged.
	b, err := json.Marshal(rollout.Params{"n": "3"})
	require.NoError(t, err)
	var back rollout.Params
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rollout.Params{"n": "3"}, back)
}

func TestPromptIsTextOrChat(t *testing.T) {
	var p rollout.Prompt
	require.NoError(t, json.Unmarshal([]byte(`"hello"`), &p))
	assert.Equal(t, rollout.Prompt{Text: "hello"}, p)
	assert.Equal(t, "hello", p.ParamText())

	require.NoError(t, json.Unmarshal([]byte(`[{"role":"user","content":"hi \"you\""}]`), &p))
	assert.Equal(t, []protocol.ChatMessage{{Role: "user", Content: `hi "you"`}}, p.Messages)
	assert.JSONEq(t, `[{"role":"user","content":"hi \"you\""}]`, p.ParamText())
	b, err := json.Marshal(p)
	require.NoError(t, err)
	assert.JSONEq(t, p.ParamText(), string(b))

	for _, bad := range []string{`3`, `{"role":"user"}`, `[{"role":"user","text":"x"}]`, `true`} {
		require.ErrorIs(t, json.Unmarshal([]byte(bad), &p), rollout.ErrBadPrompt, bad)
	}
}

func TestErrorCodesAreErrorsIsTargets(t *testing.T) {
	var err error = &rollout.Error{Status: 400, Code: rollout.CodeBadParams, Message: "agents: 0 is outside [1, 100]"}
	wrapped := fmt.Errorf("episode batch: %w", err)
	assert.ErrorIs(t, wrapped, rollout.CodeBadParams)
	assert.NotErrorIs(t, wrapped, rollout.CodeBadPolicy)
	var e *rollout.Error
	require.True(t, errors.As(wrapped, &e))
	assert.Contains(t, e.Error(), "400 bad_params: agents: 0 is outside")
}

func TestServerTimingRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 1234567 * time.Nanosecond, 90 * time.Second} {
		got, ok := rollout.ParseServerTiming(rollout.FormatServerTiming(d))
		require.True(t, ok)
		assert.InDelta(t, float64(d), float64(got), 1, "%v", d)
	}
	got, ok := rollout.ParseServerTiming(`db;dur=3, episodes;desc="run";dur=2.5`)
	require.True(t, ok)
	assert.Equal(t, 2500*time.Microsecond, got)
	for _, bad := range []string{"", "db;dur=3", "episodes", "episodes;dur=x", "episodes;dur=-1"} {
		_, ok := rollout.ParseServerTiming(bad)
		assert.False(t, ok, bad)
	}
}

func FuzzParseServerTiming(f *testing.F) {
	f.Add("episodes;dur=1.5")
	f.Add("a;dur=1, episodes;dur=NaN")
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := rollout.ParseServerTiming(v)
		if ok && d < 0 {
			t.Fatalf("%q parsed to a negative duration %v", v, d)
		}
	})
}
