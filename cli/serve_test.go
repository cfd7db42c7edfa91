package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/rollout"
)

// serving runs `troupe serve args...` on a free loopback port until the
// returned stop is called; stop returns the exit code.
func serving(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	return servingCommand(t, "serve", "troupe: serving on ", args...)
}

// servingCommand runs `troupe command --addr 127.0.0.1:0 args...` until
// stop is called, and returns the base URL it printed after ready.
func servingCommand(t *testing.T, command, ready string, args ...string) (base string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	app := New(io.Discard, pw)
	code := make(chan int, 1)
	go func() {
		code <- app.Main(ctx, append([]string{command, "--addr", "127.0.0.1:0"}, args...))
		_ = pw.Close()
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), ready); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	base, ok := <-addr
	require.True(t, ok, "troupe %s did not start", command)
	return base, func() int {
		cancel()
		return <-code
	}
}

func postRollout(t *testing.T, base, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(base+rollout.PathRollouts, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func errorCode(t *testing.T, body []byte) rollout.Code {
	t.Helper()
	var eb rollout.ErrorBody
	require.NoError(t, json.Unmarshal(body, &eb), "%s", body)
	require.NotNil(t, eb.Error)
	return eb.Error.Code
}

func TestServeAnswerLimitsAndAllocatorState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rae")
	base, stop := serving(t, "--allocator-state", dir, "--max-samples-per-answer", "4", "--max-answer-bytes", "20000")

	// Tic-tac-toe takes at least five turns: four samples cannot hold it.
	status, body := postRollout(t, base, `{"scenario":"tictactoe"}`)
	assert.Equal(t, http.StatusUnprocessableEntity, status, "%s", body)
	assert.Equal(t, rollout.CodeTooManySamples, errorCode(t, body))

	status, body = postRollout(t, base, `{"scenario":"elfarol","params":{"agents":3},"n":1,"allocators":["rae"]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body = postRollout(t, base, `{"scenario":"elfarol","params":{"agents":4},"n":1}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body = postRollout(t, base, `{"scenario":"elfarol","params":{"agents":2},"n":2,"limits":{"max_turns":2},"allocators":["rae"]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)

	status, body = postRollout(t, base, `{"scenario":"elfarol","params":{"agents":200000}}`)
	assert.Equal(t, http.StatusUnprocessableEntity, status)
	assert.Equal(t, rollout.CodeTooManySamples, errorCode(t, body))
	assert.Contains(t, string(body), "--max-samples-per-answer")

	// The bytes limit: four samples with their prompts pass 20,000 bytes
	// only when they are long; ask for a long prompt's worth.
	big := strings.Repeat("x", 6000)
	status, body = postRollout(t, base, `{"scenario":"elfarol","params":{"agents":4},"label":"`+big+`"}`)
	assert.Equal(t, http.StatusUnprocessableEntity, status)
	assert.Equal(t, rollout.CodeAnswerTooLarge, errorCode(t, body))
	assert.Contains(t, string(body), "--max-answer-bytes")

	assert.Equal(t, ExitOK, stop())
	files, err := filepath.Glob(filepath.Join(dir, "allocator-rae-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "the rae state is kept in --allocator-state")
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	assert.Contains(t, string(data), `"scenario": "elfarol"`)
	assert.Contains(t, string(data), `"updates": 3`, "one update per finished episode")
}

func TestServeFlagErrors(t *testing.T) {
	for _, tt := range []struct{ flag, want string }{
		{"--max-samples-per-answer", "MaxSamplesPerAnswer"},
		{"--max-answer-bytes", "MaxAnswerBytes"},
	} {
		r := troupe(t, "serve", "--addr", "127.0.0.1:0", tt.flag, "-1")
		assert.Equal(t, ExitUsage, r.code, "%s: %s", tt.flag, r.stderr)
		assert.Contains(t, r.stderr, tt.want)
	}
	// An allocator state directory that cannot be read is refused at
	// start-up, naming the file.
	dir := t.TempDir()
	bad := filepath.Join(dir, "allocator-rae-000000000000.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version":1,"allocator":"rae","state":{"version":1,"baselines":[]}}`), 0o600))
	r := troupe(t, "serve", "--addr", "127.0.0.1:0", "--allocator-state", dir)
	assert.Equal(t, ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, bad)
}

// The request of the issue: 51 bytes asking El Farol for 200,000 agents,
// whose answer would be 127 MiB. The service's default limits refuse it
// from its parameters alone, before a single turn is played.
func TestServeRefusesAHugeElFarolUpFront(t *testing.T) {
	base, stop := serving(t)
	defer stop()
	status, body := postRollout(t, base, `{"scenario":"elfarol","params":{"agents":200000}}`)
	assert.Equal(t, http.StatusUnprocessableEntity, status, "%s", body)
	assert.Equal(t, rollout.CodeTooManySamples, errorCode(t, body))
	assert.Contains(t, string(body), "at least 200000 emitted turns per episode")
	assert.Contains(t, string(body), "--max-samples-per-answer")
}
