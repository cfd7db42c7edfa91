package llm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		change func(*Config)
		err    string
	}{
		{func(c *Config) { c.BaseURL = "" }, "base URL is empty"},
		{func(c *Config) { c.BaseURL = "127.0.0.1:8000" }, `base URL "127.0.0.1:8000"`},
		{func(c *Config) { c.BaseURL = "ftp://h/v1" }, "scheme must be http or https"},
		{func(c *Config) { c.BaseURL = "http:///v1" }, "has no host"},
		{func(c *Config) { c.Kind = "tgi" }, `kind "tgi": want one of vllm, sglang, llamacpp, openai`},
		{func(c *Config) { c.Model = "" }, "model is empty"},
		{func(c *Config) { c.Temperature = ptr(-0.1) }, "temperature -0.1"},
		{func(c *Config) { c.TopP = ptr(1.5) }, "top_p 1.5"},
		{func(c *Config) { c.TopK = ptr(-2) }, "top_k -2: want -1 or 0 (unset)"},
		{func(c *Config) { c.Kind, c.TopK = KindOpenAI, ptr(5) }, "kind openai has no top_k"},
		{func(c *Config) { c.MaxTokens = ptr(-2) }, "max tokens -2"},
		{func(c *Config) { c.RepetitionPenalty = ptr(-1.0) }, "repetition_penalty -1"},
		{func(c *Config) { c.MinTokens = ptr(-1) }, "min_tokens -1"},
		{func(c *Config) { c.MinTokens, c.MaxTokens = ptr(9), ptr(8) }, "min_tokens 9 is more than max tokens 8"},
		{func(c *Config) { c.StopTokenIDs = []int{-3} }, "stop_token_ids: -3 is not a token id"},
		{func(c *Config) { c.Kind, c.StopTokenIDs = KindLlamaCpp, []int{2} }, "stop_token_ids: kind llamacpp has no stop_token_ids"},
		{func(c *Config) { c.Kind, c.StopTokenIDs = KindOpenAI, []int{2} }, "stop_token_ids: kind openai has no stop_token_ids"},
		{func(c *Config) { c.Kind, c.SkipSpecialTokens = KindLlamaCpp, ptr(true) }, "skip_special_tokens true: kind llamacpp"},
		{func(c *Config) { c.Kind, c.SkipSpecialTokens = KindOpenAI, ptr(false) }, "skip_special_tokens false: kind openai"},
		{func(c *Config) { c.Kind, c.SpacesBetweenSpecialTokens = KindLlamaCpp, ptr(true) }, "spaces_between_special_tokens true: kind llamacpp"},
		{func(c *Config) { c.Kind, c.SpacesBetweenSpecialTokens = KindOpenAI, ptr(true) }, "spaces_between_special_tokens true: kind openai"},
		{func(c *Config) { c.Kind, c.NoStopTrim = KindLlamaCpp, ptr(false) }, "no_stop_trim false: kind llamacpp"},
		{func(c *Config) { c.Kind, c.NoStopTrim = KindOpenAI, ptr(true) }, "no_stop_trim true: kind openai"},
		{func(c *Config) { c.Kind, c.MinTokens = KindLlamaCpp, ptr(4) }, "min_tokens: kind llamacpp has no min_tokens"},
		{func(c *Config) { c.Kind, c.MinTokens = KindOpenAI, ptr(4) }, "min_tokens: kind openai has no min_tokens"},
		{func(c *Config) { c.Kind, c.RepetitionPenalty = KindOpenAI, ptr(1.1) }, "repetition_penalty: kind openai has no repetition_penalty"},
		{func(c *Config) { c.Format = "xml" }, `format "xml"`},
		{func(c *Config) { c.InvalidRetries = -1 }, "invalid retries -1"},
		{func(c *Config) { c.Timeout = 0 }, "timeout 0s"},
		{func(c *Config) { c.Retries = -2 }, "retries -2"},
		{func(c *Config) { c.BackoffBase = 2 * time.Second; c.BackoffMax = time.Second }, "want 0 < base <= max"},
		{func(c *Config) { c.MaxRetryWait = -time.Second }, "max retry wait"},
		{func(c *Config) { c.MaxInFlight = 0 }, "max in flight 0"},
		{func(c *Config) { c.Extra = map[string]json.RawMessage{"seed": json.RawMessage("1")} }, `extra field "seed" is written by troupe itself`},
		{func(c *Config) { c.Extra = map[string]json.RawMessage{"min_p": json.RawMessage("{")} }, `extra field "min_p"`},
	} {
		c := DefaultConfig()
		tc.change(&c)
		err := c.Validate()
		require.ErrorIs(t, err, ErrBadConfig, tc.err)
		assert.Contains(t, err.Error(), tc.err)
	}
}

// TestValidateAcceptsWhatTheServerDoesAnyway: slime's fields that a kind
// lacks pass when they ask for what that server does anyway, and -1 is
// "unset" for top_k and max tokens.
func TestValidateAcceptsWhatTheServerDoesAnyway(t *testing.T) {
	for _, change := range []func(*Config){
		func(c *Config) { c.TopK, c.MaxTokens = ptr(-1), ptr(-1) },
		func(c *Config) { c.Kind, c.TopK = KindOpenAI, ptr(-1) },
		func(c *Config) {
			c.Kind, c.SkipSpecialTokens, c.SpacesBetweenSpecialTokens, c.NoStopTrim = KindLlamaCpp, ptr(false), ptr(false), ptr(true)
			c.RepetitionPenalty = ptr(1.2)
		},
		func(c *Config) {
			c.Kind, c.SkipSpecialTokens, c.SpacesBetweenSpecialTokens, c.NoStopTrim = KindOpenAI, ptr(true), ptr(false), ptr(false)
			c.RepetitionPenalty = ptr(1.0)
		},
		func(c *Config) {
			c.Kind, c.StopTokenIDs, c.MinTokens, c.RepetitionPenalty = KindSGLang, []int{7}, ptr(3), ptr(1.1)
			c.SkipSpecialTokens, c.SpacesBetweenSpecialTokens, c.NoStopTrim = ptr(false), ptr(true), ptr(true)
		},
	} {
		c := DefaultConfig()
		change(&c)
		assert.NoError(t, c.Validate())
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		EnvBaseURL: "http://gpu:30000/v1", EnvAPIKey: "k", EnvModel: "qwen", EnvKind: "SGLang",
		EnvTemperature: "0", EnvTopP: "0.9", EnvTopK: "40", EnvMaxTokens: "128", EnvFormat: "tool",
		EnvTimeout: "90s", EnvRetries: "6", EnvMaxInFlight: "512", EnvExtra: `{"min_p":0.05}`,
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := ConfigFromEnv(lookup)
	require.NoError(t, err)
	want := DefaultConfig()
	want.BaseURL, want.APIKey, want.Model, want.Kind = "http://gpu:30000/v1", "k", "qwen", KindSGLang
	want.Temperature, want.TopP, want.TopK, want.MaxTokens, want.Format = ptr(0.0), ptr(0.9), ptr(40), ptr(128), FormatTool
	want.Timeout, want.Retries, want.MaxInFlight = 90*time.Second, 6, 512
	want.Extra = map[string]json.RawMessage{"min_p": json.RawMessage("0.05")}
	assert.Equal(t, want, c)
	require.NoError(t, c.Validate())

	env = map[string]string{EnvTemperature: "warm", EnvKind: "tgi", EnvTimeout: "10", EnvExtra: "[1]"}
	_, err = ConfigFromEnv(lookup)
	require.ErrorIs(t, err, ErrBadConfig)
	for _, name := range []string{EnvTemperature, EnvKind, EnvTimeout, EnvExtra} {
		assert.Contains(t, err.Error(), name)
	}
}

func TestBindFlags(t *testing.T) {
	c := DefaultConfig()
	c.Model = "from-env"
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.BindFlags(fs)
	require.NoError(t, fs.Parse([]string{
		"--llm-base-url", "http://h:1/v1", "--llm-kind", "llamacpp", "--llm-temperature", "0",
		"--llm-stop", "</s>", "--llm-stop", "\n\n", "--llm-extra", `min_p=0.1`, "--llm-extra", `chat_template_kwargs={"enable_thinking":false}`,
		"--llm-format", "text", "--llm-invalid-retries", "0", "--llm-feedback=false", "--llm-max-in-flight", "8", "--llm-tokenize=false",
		"--llm-top-k", "-1", "--llm-stop-token-id", "7", "--llm-stop-token-id", "9", "--llm-repetition-penalty", "1.1", "--llm-min-tokens", "2",
	}))
	assert.Equal(t, ptr(-1), c.TopK)
	assert.Equal(t, []int{7, 9}, c.StopTokenIDs)
	assert.Equal(t, ptr(1.1), c.RepetitionPenalty)
	assert.Equal(t, ptr(2), c.MinTokens)
	assert.Equal(t, "from-env", c.Model, "flags not given keep the earlier value")
	assert.Equal(t, "http://h:1/v1", c.BaseURL)
	assert.Equal(t, KindLlamaCpp, c.Kind)
	assert.Equal(t, ptr(0.0), c.Temperature, "0 is given: greedy")
	assert.Equal(t, []string{"</s>", "\n\n"}, c.Stop)
	assert.Equal(t, map[string]json.RawMessage{"min_p": json.RawMessage("0.1"), "chat_template_kwargs": json.RawMessage(`{"enable_thinking":false}`)}, c.Extra)
	assert.Equal(t, FormatText, c.Format)
	assert.Zero(t, c.InvalidRetries)
	assert.False(t, c.Feedback)
	assert.False(t, c.Tokenize)
	assert.Equal(t, 8, c.MaxInFlight)
	assert.Equal(t, "chat_template_kwargs={\"enable_thinking\":false},min_p=0.1", fs.Lookup("llm-extra").Value.String())
	assert.Nil(t, fs.Lookup("llm-api-key"), "the API key must not be a flag")

	for _, bad := range [][]string{{"--llm-kind", "tgi"}, {"--llm-format", "yaml"}, {"--llm-extra", "novalue"}, {"--llm-extra", "k=not json"}} {
		c := DefaultConfig()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.SetOutput(discard{})
		c.BindFlags(fs)
		assert.Error(t, fs.Parse(bad), "%v", bad)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestBodyFields(t *testing.T) {
	c := DefaultConfig()
	c.Temperature, c.TopP, c.TopK, c.MaxTokens, c.Stop = ptr(0.0), ptr(0.95), ptr(50), ptr(256), []string{"END"}
	c.Kind = KindSGLang
	c.Extra = map[string]json.RawMessage{"return_prompt_token_ids": json.RawMessage("false"), "min_p": json.RawMessage("0")}
	got := "{" + string(bodyFields(&c)) + "}"
	assert.Equal(t, `{"temperature":0,"top_p":0.95,"top_k":50,"max_tokens":256,"stop":["END"],"logprobs":true,"return_token_ids":true,"min_p":0,"return_prompt_token_ids":false}`, got)
	c = DefaultConfig()
	c.Kind = KindOpenAI
	assert.Equal(t, `"temperature":1`, string(bodyFields(&c)))
	c.TopK, c.MaxTokens = ptr(-1), ptr(-1)
	assert.Equal(t, `"temperature":1`, string(bodyFields(&c)), "-1 is unset: nothing is sent")
	c.Kind = KindVLLM
	assert.Equal(t, `"temperature":1,"logprobs":true,"return_token_ids":true,"return_tokens_as_token_ids":true`, string(bodyFields(&c)))
	c.Kind = KindLlamaCpp
	assert.Equal(t, `"temperature":1,"top_k":0,"min_p":0,"logprobs":true,"top_logprobs":1`, string(bodyFields(&c)),
		"llama.cpp's defaults are top_k 40 and min_p 0.05: slime's -1 (no top-k) turns both off")
	c.TopK = ptr(0)
	assert.Equal(t, `"temperature":1,"logprobs":true,"top_logprobs":1`, string(bodyFields(&c)))
}

// TestBodyFieldsSlimeSampling: slime's fields go out under each kind's own
// names, and not at all where the server does the same anyway.
func TestBodyFieldsSlimeSampling(t *testing.T) {
	slime := func(kind Kind) Config {
		c := DefaultConfig()
		c.Kind, c.Temperature = kind, ptr(1.0)
		c.SkipSpecialTokens, c.SpacesBetweenSpecialTokens, c.NoStopTrim = ptr(false), ptr(false), ptr(true)
		c.RepetitionPenalty = ptr(1.05)
		if kind == KindVLLM || kind == KindSGLang {
			c.StopTokenIDs, c.MinTokens = []int{151645}, ptr(2)
		}
		if kind == KindOpenAI {
			c.SkipSpecialTokens, c.NoStopTrim, c.RepetitionPenalty = ptr(true), ptr(false), ptr(1.0)
		}
		if kind == KindSGLang {
			c.SpacesBetweenSpecialTokens = ptr(true) // its chat endpoint's only value
		}
		require.NoError(t, c.Validate())
		return c
	}
	for kind, want := range map[Kind]string{
		KindVLLM: `{"temperature":1,"stop_token_ids":[151645],"skip_special_tokens":false,"spaces_between_special_tokens":false,` +
			`"include_stop_str_in_output":true,"repetition_penalty":1.05,"min_tokens":2,"logprobs":true,"return_token_ids":true,"return_tokens_as_token_ids":true}`,
		KindSGLang: `{"temperature":1,"stop_token_ids":[151645],"skip_special_tokens":false,` +
			`"no_stop_trim":true,"repetition_penalty":1.05,"min_tokens":2,"logprobs":true,"return_token_ids":true,"return_prompt_token_ids":true}`,
		KindLlamaCpp: `{"temperature":1,"repeat_penalty":1.05,"logprobs":true,"top_logprobs":1}`,
		KindOpenAI:   `{"temperature":1}`,
	} {
		c := slime(kind)
		assert.Equal(t, want, "{"+string(bodyFields(&c))+"}", kind)
	}
}
