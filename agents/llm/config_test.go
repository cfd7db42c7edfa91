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
		{func(c *Config) { c.Temperature = -0.1 }, "temperature -0.1"},
		{func(c *Config) { c.TopP = 1.5 }, "top_p 1.5"},
		{func(c *Config) { c.TopK = -1 }, "top_k -1"},
		{func(c *Config) { c.Kind, c.TopK = KindOpenAI, 5 }, "kind openai has no top_k"},
		{func(c *Config) { c.MaxTokens = -1 }, "max tokens -1"},
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
	want.Temperature, want.TopP, want.TopK, want.MaxTokens, want.Format = 0, 0.9, 40, 128, FormatTool
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
	}))
	assert.Equal(t, "from-env", c.Model, "flags not given keep the earlier value")
	assert.Equal(t, "http://h:1/v1", c.BaseURL)
	assert.Equal(t, KindLlamaCpp, c.Kind)
	assert.Zero(t, c.Temperature)
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
	c.Temperature, c.TopP, c.TopK, c.MaxTokens, c.Stop = 0, 0.95, 50, 256, []string{"END"}
	c.Kind = KindSGLang
	c.Extra = map[string]json.RawMessage{"return_prompt_token_ids": json.RawMessage("false"), "min_p": json.RawMessage("0")}
	got := "{" + string(bodyFields(&c)) + "}"
	assert.Equal(t, `{"temperature":0,"top_p":0.95,"top_k":50,"max_tokens":256,"stop":["END"],"logprobs":true,"return_token_ids":true,"min_p":0,"return_prompt_token_ids":false}`, got)
	c = DefaultConfig()
	c.Kind = KindOpenAI
	assert.Equal(t, `"temperature":1`, string(bodyFields(&c)))
}
