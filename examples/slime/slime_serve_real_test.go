package slime_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// TestSlimeRealServeMerged is TestSlimeRealRollout through troupe serve,
// the way slime reaches troupe: LLM negotiations against the real
// llama-server, asked of `troupe serve` per turn and with merge_turns,
// the answers' rollouts written as nested-layout lines and handed to
// slime's own rollout code (slime_real_check.py). The merged answer has
// fewer samples, numbered contiguously from the request's index, and
// slime trains only the model's own tokens of it. A third request is tree
// sampled (AT-GRPO, two candidates per turn): slime takes its candidates as
// samples of the same rollout and trains every one.
func TestSlimeRealServeMerged(t *testing.T) {
	slime, python, llama, bin, grammar := realSetup(t)
	serve := exec.CommandContext(t.Context(), bin, "serve", "--addr", "127.0.0.1:0",
		"--llm-base-url", llama.URL+"/v1", "--llm-kind", "llamacpp", "--llm-model", llamatest.ModelAlias,
		"--llm-format", "text", "--llm-max-tokens", "40", "--llm-extra", "grammar="+grammar)
	stderr, err := serve.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	lines := bufio.NewScanner(stderr)
	url := ""
	for url == "" && lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), "troupe: serving on "); ok {
			url = u
		}
	}
	require.NotEmpty(t, url, "troupe serve did not say where it serves")
	go func() { _, _ = io.Copy(io.Discard, stderr) }() // its log, drained

	dir := t.TempDir()
	files := map[string]string{}
	answers := map[string]*rollout.Response{}
	for _, layout := range []string{"turns", "merged", "tree"} {
		body := `{"scenario":"negotiation","policy":"llm","n":2,"params":{"rounds":2,"max_count":1},"rollout_id":0,"group_index":0,"index":100`
		switch layout {
		case "merged":
			body += `,"merge_turns":true`
		case "tree":
			body += `,"tree":{"k":2,"alpha":0.5},"allocators":["at-grpo"]`
		}
		resp, err := http.Post(url+rollout.PathRollouts, "application/json", strings.NewReader(body+"}"))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		var r rollout.Response
		require.NoError(t, json.Unmarshal(b, &r))
		answers[layout] = &r
		var out bytes.Buffer
		for _, ro := range r.Rollouts {
			line, err := json.Marshal(ro.Samples)
			require.NoError(t, err)
			fmt.Fprintf(&out, "%s\n", line)
		}
		files[layout] = filepath.Join(dir, "serve-"+layout+".jsonl")
		require.NoError(t, os.WriteFile(files[layout], out.Bytes(), 0o644))
	}
	for layout, r := range answers {
		for i, sm := range r.Samples() {
			assert.Equal(t, int64(100+i), sm.Index, "%s: indexes contiguous from the request's", layout)
		}
	}
	merged := answers["merged"]
	for _, ro := range merged.Rollouts {
		assert.Len(t, ro.Samples, 2, "one sample per negotiator")
	}

	got := slimeCheck(t, slime, python, files["turns"], files["merged"], files["tree"])
	turns, m := checkLayouts(t, got[:2])
	assert.Equal(t, 4, m.Samples)
	// The two requests play the same episodes (the same ids and seeds):
	// merged, slime trains exactly the tokens it trains per turn.
	assert.Equal(t, turns.TrainedTokens, m.TrainedTokens)

	tree, mainLine := got[2], 0
	for _, ro := range answers["tree"].Rollouts {
		mainLine += ro.Turns
	}
	assert.Equal(t, 2, tree.Rollouts, "one rollout per episode, its candidates included")
	assert.Equal(t, 2*mainLine, tree.Samples, "two candidates per turn of the main line")
	assert.Equal(t, tree.Samples, tree.DPPartitionSizes[0]+tree.DPPartitionSizes[1], "the schedule places every candidate")
	assert.Equal(t, tree.TrainedTokens, tree.ResponseTokens, "every candidate's response is trained")
}
