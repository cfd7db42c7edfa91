package cli

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents/llm/llmtest"
)

// TestRunOnEmbeddedNATSMatchesALocalRun plays a run through an embedded
// NATS JetStream server and its in-process workers: the output is the same
// bytes as a local run, and running it again re-attaches to the finished
// run instead of playing it twice.
func TestRunOnEmbeddedNATSMatchesALocalRun(t *testing.T) {
	dir := t.TempDir()
	args := []string{"run", "elfarol", "-n", "40", "-g", "2", "-p", "agents=6", "-a", "team,difference", "--reward-format", "dict"}
	local := troupe(t, append(args, "-o", filepath.Join(dir, "local.jsonl"))...)
	require.Equal(t, ExitOK, local.code, local.stderr)
	natsArgs := append(args, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"))
	remote := troupe(t, append(natsArgs, "-o", filepath.Join(dir, "nats.jsonl"))...)
	require.Equal(t, ExitOK, remote.code, remote.stderr)
	assert.Contains(t, remote.stderr, "troupe: run ")
	assert.Equal(t, string(readFile(t, filepath.Join(dir, "local.jsonl"))), string(readFile(t, filepath.Join(dir, "nats.jsonl"))))
}

func TestWorkerNeedsAServer(t *testing.T) {
	r := troupe(t, "worker")
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nats")
}

// TestLLMRunOnEmbeddedNATS plays LLM episodes through the embedded
// server's worker: it plays the run's own llm policy, and the samples
// carry the server's token ids as in a local run.
func TestLLMRunOnEmbeddedNATS(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	dir := t.TempDir()
	args := []string{"run", "tictactoe", "-n", "6", "--policy", "llm", "--llm-base-url", srv.URL()}
	r, local := llmRun(t, args...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r, remote := llmRun(t, append(args, "--nats", "embedded", "--nats-dir", filepath.Join(dir, "js"))...)
	require.Equal(t, ExitOK, r.code, r.stderr)
	require.Equal(t, local, remote)
	for _, ro := range remote {
		for _, s := range ro {
			assert.False(t, s.Metadata.TextOnly)
		}
	}
}
