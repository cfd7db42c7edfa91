package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// llmSettingFlags are, for every LLM setting that changes a prompt or the
// samples (issue 45), the flags that change it from a run of the defaults
// (an llm policy on a vllm server), and the spec field that records it.
var llmSettingFlags = []struct {
	flags []string
	field string // the resume's difference names it
	flag  string // and its flag
}{
	{[]string{"--llm-no-memory"}, "policies.x.settings.no_memory", "--llm-no-memory"},
	{[]string{"--llm-max-context", "4096"}, "policies.x.settings.max_context", "--llm-max-context"},
	{[]string{"--llm-format", "text"}, "policies.x.settings.format", "--llm-format"},
	{[]string{"--llm-format", "tool"}, "policies.x.settings.format", "--llm-format"},
	{[]string{"--llm-kind", "sglang"}, "policies.x.settings.kind", "--llm-kind"},
	{[]string{"--llm-kind", "sglang", "--llm-token-in=false"}, "policies.x.settings.kind", "--llm-kind"},
	{[]string{"--llm-kind", "llamacpp"}, "policies.x.settings.kind", "--llm-kind"},
	{[]string{"--llm-kind", "llamacpp", "--llm-tokenize=false"}, "policies.x.settings.kind", "--llm-kind"},
	{[]string{"--llm-token-in"}, "policies.x.settings.token_in", "--llm-token-in"},
	{[]string{"--llm-invalid-retries", "0"}, "policies.x.settings.invalid_retries", "--llm-invalid-retries"},
	{[]string{"--llm-feedback=false"}, "policies.x.settings.feedback", "--llm-feedback"},
	{[]string{"--llm-model", "other"}, "policies.x.settings.model", "--llm-model"},
	{[]string{"--llm-temperature", "0.5"}, "policies.x.settings.temperature", "--llm-temperature"},
	{[]string{"--merge-turns"}, "merge_turns", "--merge-turns"},
	{[]string{"--merge-turns", "--merge-reward", "sum"}, "merge_turns", "--merge-turns"},
	{[]string{"--merge-turns", "--merge-reward", "last"}, "merge_turns", "--merge-turns"},
}

// TestPrintSpecEveryLLMSetting: every LLM setting that changes a prompt
// or the samples changes the spec's hash, each to its own; the spec of the
// defaults is what it was before the settings were recorded (its hash
// kept); and a setting given as its default writes the defaults' spec.
func TestPrintSpecEveryLLMSetting(t *testing.T) {
	base := []string{"tictactoe", "-P", "x=llm", "--llm-base-url", "http://127.0.0.1:1/v1"}
	s0, r := printSpec(t, noEnv, base...)
	require.NotNil(t, s0, r.stderr)
	assert.JSONEq(t, `{"model":"default","temperature":1}`, string(s0.Policies["x"].Settings), "the defaults' settings, as before")
	hashes := map[string]string{s0.Hash(): "the defaults"}
	for _, c := range llmSettingFlags {
		s, r := printSpec(t, noEnv, append(base, c.flags...)...)
		require.NotNil(t, s, "%v: %s", c.flags, r.stderr)
		h := s.Hash()
		assert.NotContains(t, hashes, h, "%v has the hash of %s", c.flags, hashes[h])
		hashes[h] = strings.Join(c.flags, " ")
	}
	for _, same := range [][]string{
		{"--llm-format", "json"}, {"--llm-kind", "vllm"}, {"--llm-token-in=false"}, {"--llm-invalid-retries", "2"},
		{"--llm-feedback"}, {"--llm-max-context", "0"}, {"--merge-reward", "mean", "--merge-turns=false"},
	} {
		if same[0] == "--merge-reward" {
			continue // refused without --merge-turns: TestMergeRewardFlag
		}
		s, r := printSpec(t, noEnv, append(base, same...)...)
		require.NotNil(t, s, "%v: %s", same, r.stderr)
		assert.Equal(t, s0.Hash(), s.Hash(), "%v is the default", same)
	}
	// SGLang generates token in, token out by default, and says so.
	s, r := printSpec(t, noEnv, append(base, "--llm-kind", "sglang")...)
	require.NotNil(t, s, r.stderr)
	assert.JSONEq(t, `{"model":"default","temperature":1,"kind":"sglang","token_in":true}`, string(s.Policies["x"].Settings))
	// A role's own settings shape its prompts alone.
	s, r = printSpec(t, noEnv, append(base, "-P", "o=llm", "--role-llm", "o=max_context=2048,no_memory=true,format=text")...)
	require.NotNil(t, s, r.stderr)
	assert.JSONEq(t, `{"model":"default","temperature":1}`, string(s.Policies["x"].Settings))
	assert.JSONEq(t, `{"model":"default","temperature":1,"max_context":2048,"no_memory":true,"format":"text"}`, string(s.Policies["o"].Settings))
	// With --spec, the settings are the spec's: a flag that would shape
	// the prompts otherwise is refused, not ignored.
	file := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(file, []byte(r.stdout), 0o644))
	for _, flag := range []string{"--llm-no-memory", "--llm-max-context=9", "--llm-format=text", "--merge-turns", "--role-llm=x=model=m"} {
		r := invokeWithEnv(t, noEnv, "run", "--spec", file, flag, "--print-spec")
		assert.Equal(t, ExitUsage, r.code, flag)
		assert.Contains(t, r.stderr, "the run is described by --spec", flag)
	}
}

// TestMergeRewardFlag: --merge-reward names a choice, with --merge-turns.
func TestMergeRewardFlag(t *testing.T) {
	for args, want := range map[string]string{
		"--merge-reward mean":                 "without --merge-turns",
		"--merge-turns --merge-reward median": `--merge-reward "median"`,
	} {
		r := troupe(t, append([]string{"run", "elfarol", "-n", "1", "--print-spec"}, strings.Fields(args)...)...)
		assert.Equal(t, ExitUsage, r.code, args)
		assert.Contains(t, r.stderr, want, args)
	}
	s, r := printSpec(t, noEnv, "elfarol", "--merge-turns")
	require.NotNil(t, s, r.stderr)
	assert.True(t, s.MergeTurns)
	assert.Equal(t, "mean", s.MergeReward, "the default, written out")
}

// TestResumeRefusesOtherLLMSetting: a run played with the defaults against
// a model server, resumed with any other LLM setting, is refused, the
// message naming the spec's field and its flag; resumed with the same
// flags it is found complete.
func TestResumeRefusesOtherLLMSetting(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	out := filepath.Join(t.TempDir(), "out.jsonl")
	base := []string{"run", "tictactoe", "-n", "2", "-P", "x=llm", "--llm-base-url", srv.URL(), "-o", out}
	r := invokeWithEnv(t, noEnv, base...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r = invokeWithEnv(t, noEnv, append(base, "--resume")...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing to resume")
	for _, c := range llmSettingFlags {
		r := invokeWithEnv(t, noEnv, append(append(base, "--resume"), c.flags...)...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", c.flags, r.stderr)
		assert.Contains(t, r.stderr, "written by another run", c.flags)
		assert.Contains(t, r.stderr, c.field, c.flags)
		assert.Contains(t, r.stderr, "("+c.flag+")", c.flags)
	}
}

// TestSGLangExactMemoryByDefault: on an SGLang server (the fake, whose
// model samples one byte a token, as a real one may tokenize otherwise
// than its tokenizer), troupe run's agents generate token in, token out
// by default: no turn's prompt is rebuilt, and with --merge-turns every
// agent's game is one sample. --llm-token-in=false asks the chat endpoint,
// whose re-tokenized conversations do not extend the sampled ids.
func TestSGLangExactMemoryByDefault(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.SGLang, Brain: func(r *llmtest.Request) llmtest.Reply {
		rep := llmtest.DefaultBrain(r)
		rep.Bytewise = true
		return rep
	}})
	dir := t.TempDir()
	rebuilt := func(out string) (turns, rebuilt int) {
		for _, ro := range readRollouts(t, readFile(t, out)) {
			for _, s := range ro {
				turns++
				if _, ok := s.Metadata.Extra["llm_memory_rebuilt"]; ok {
					rebuilt++
				}
			}
		}
		return turns, rebuilt
	}
	args := []string{"run", "tictactoe", "-n", "3", "-P", "llm", "--llm-kind", "sglang", "--llm-base-url", srv.URL(), "-q"}
	exact, chat, merged := filepath.Join(dir, "exact.jsonl"), filepath.Join(dir, "chat.jsonl"), filepath.Join(dir, "merged.jsonl")
	r := invokeWithEnv(t, noEnv, append(args, "-o", exact)...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	turns, n := rebuilt(exact)
	require.Positive(t, turns)
	assert.Zero(t, n, "token in, token out: no prompt rebuilt of %d turns", turns)

	r = invokeWithEnv(t, noEnv, append(args, "--llm-token-in=false", "-o", chat)...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	turns, n = rebuilt(chat)
	assert.Positive(t, n, "the chat path rebuilds prompts (%d of %d turns)", n, turns)
	t.Logf("chat path: %d of %d turns rebuilt; token-in: none", n, turns)

	r = invokeWithEnv(t, noEnv, append(args, "--merge-turns", "-o", merged)...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, ro := range readRollouts(t, readFile(t, merged)) {
		assert.Len(t, ro, 2, "one sample per agent: x and o")
	}
}
