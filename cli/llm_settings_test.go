package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// TestServedLLMSettings: a rollout request's sampling becomes the "llm"
// policy's settings in its run spec, and the policy made from them has
// the request's sampling over the service's flags, with slime's meanings.
func TestServedLLMSettings(t *testing.T) {
	base := llm.DefaultConfig()
	base.Model, base.Temperature, base.TopK, base.MaxTokens, base.TopP = "m", ptr(0.7), ptr(40), ptr(48), ptr(0.9)
	base.Extra = map[string]json.RawMessage{"min_p": json.RawMessage(`0.1`)}
	settings := servedLLMSettings(&llmEndpoints{base: base})

	// Names other than llm get none; no sampling leaves the flags'.
	got, err := settings("scripted", "x", &rollout.Request{})
	require.NoError(t, err)
	assert.Nil(t, got)
	got, err = settings(llmPolicyName, "x", &rollout.Request{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","temperature":0.7,"top_p":0.9,"top_k":40,"max_tokens":48,"extra":{"min_p":0.1}}`, string(got))
	cfg := base
	require.NoError(t, applyLLMSettings(&cfg, got))
	assert.Equal(t, base, cfg)

	// Explicit zeros are kept apart from "not given": temperature 0 is
	// greedy, top_p 0 and top_k 0 unset the flags'; max_tokens -1 leaves
	// the flags'.
	req := &rollout.Request{Sampling: &protocol.Sampling{
		Temperature: ptr(0.0), TopP: ptr(0.0), TopK: ptr(0), MaxTokens: ptr(-1), SamplingSeed: ptr(int64(5)),
		Stop: []string{"\n"}, StopTokenIDs: []int{2}, SkipSpecialTokens: ptr(false), NoStopTrim: ptr(true),
		SpacesBetweenSpecialTokens: ptr(false), RepetitionPenalty: ptr(1.1), MinTokens: ptr(1),
		Extra: map[string]json.RawMessage{"top_a": json.RawMessage(`1`)},
	}}
	got, err = settings(llmPolicyName, "x", req)
	require.NoError(t, err)
	cfg = base
	require.NoError(t, applyLLMSettings(&cfg, got))
	want := base
	want.Temperature, want.TopP, want.TopK, want.MaxTokens = ptr(0.0), ptr(0.0), ptr(0), ptr(48)
	want.SamplingSeed, want.Stop, want.StopTokenIDs = ptr(int64(5)), []string{"\n"}, []int{2}
	want.SkipSpecialTokens, want.NoStopTrim, want.SpacesBetweenSpecialTokens = ptr(false), ptr(true), ptr(false)
	want.RepetitionPenalty, want.MinTokens = ptr(1.1), ptr(1)
	want.Extra = map[string]json.RawMessage{"min_p": json.RawMessage(`0.1`), "top_a": json.RawMessage(`1`)}
	assert.Equal(t, want, cfg)
	assert.Equal(t, json.RawMessage(`0.1`), base.Extra["min_p"], "the flags' extra is not written to")
	assert.Len(t, base.Extra, 1)

	// A sampling seed roots every call's seed: one episode per request.
	req.N = 2
	_, err = settings(llmPolicyName, "x", req)
	assert.ErrorContains(t, err, "sampling seed with n 2")

	// A spec's settings are read strictly.
	assert.ErrorContains(t, applyLLMSettings(&cfg, json.RawMessage(`{"temprature":1}`)), `"temprature"`)
}

// applyLLMSettings sets cfg's model and sampling from a spec's settings,
// as llmPool does.
func applyLLMSettings(cfg *llm.Config, settings json.RawMessage) error {
	st, err := decodeLLMSettings(settings)
	if err != nil {
		return err
	}
	st.applyTo(cfg)
	return nil
}

// TestServedLLMBudgetsAndEndpoints: a request's max_context (slime's
// --rollout-max-context-len) is every llm role's context budget, a role's
// own wins; a role on another endpoint records that endpoint's kind and
// token-in; the policy made from the settings has the budget, and an
// endpoint unlike the one recorded is refused naming the setting.
func TestServedLLMBudgetsAndEndpoints(t *testing.T) {
	base := llm.DefaultConfig()
	base.Model, base.MaxContext = "m", 8192
	eps, err := parseEndpoints(base, []string{"sg=http://127.0.0.1:9/v1,kind=sglang"}, noEnv, false)
	require.NoError(t, err)
	settings := servedLLMSettings(eps)

	got, err := settings(llmPolicyName, "x", &rollout.Request{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","temperature":1,"max_context":8192}`, string(got), "the flags' budget")

	req := &rollout.Request{MaxContext: 4096, Roles: map[string]rollout.RoleSettings{"o": {Endpoint: "sg", MaxContext: 2048}}}
	got, err = settings(llmPolicyName, "x", req)
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","temperature":1,"max_context":4096}`, string(got), "the request's")
	cfg := base
	require.NoError(t, applyLLMSettings(&cfg, got))
	assert.Equal(t, 4096, cfg.MaxContext)

	got, err = settings(llmPolicyName, "o", req)
	require.NoError(t, err)
	assert.JSONEq(t, `{"endpoint":"sg","model":"m","temperature":1,"max_context":2048,"kind":"sglang","token_in":true}`, string(got), "the role's, on its endpoint")
	st, err := decodeLLMSettings(got)
	require.NoError(t, err)
	sg, err := eps.config("sg")
	require.NoError(t, err)
	require.NoError(t, st.checkEndpoint(&sg))
	assert.ErrorContains(t, st.checkEndpoint(&eps.base), "kind: the run's is sglang, the endpoint's vllm (--llm-kind")
	sg.TokenIn = false
	assert.ErrorContains(t, st.checkEndpoint(&sg), "token_in: the run's is true, the endpoint's false (--llm-token-in")
}

// TestLLMShapeRoundTrip: every policy setting a config sets away from its
// default survives settingsOf, the spec's JSON and applyTo; the defaults
// write nothing.
func TestLLMShapeRoundTrip(t *testing.T) {
	d := llm.DefaultConfig()
	assert.Equal(t, llmShape{}, shapeOf(&d), "the defaults write nothing")
	c := d
	c.NoMemory, c.MaxContext, c.Format, c.InvalidRetries, c.Feedback = true, 1000, llm.FormatTool, 0, false
	st := settingsOf(&c)
	got := d
	require.NoError(t, applyLLMSettings(&got, st.encode()))
	assert.Equal(t, c, got)
	// Left out, a policy setting is its default, whatever it is laid on.
	got = c
	require.NoError(t, applyLLMSettings(&got, json.RawMessage(`{"model":"default"}`)))
	assert.Equal(t, d, got)
}
