package cli

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
)

// TestEnvServeOpenEnv runs OpenEnv's own code, openenv-core pinned from
// PyPI, against a real `troupe env-serve` started with a default episode
// (tic-tac-toe as x against minimax): `openenv validate --url` must pass,
// then python/tests/openenv_check.py plays with GenericEnvClient over the
// WebSocket (reset() with no arguments), over plain HTTP without a session
// id, and with MCPToolClient over the WebSocket and over HTTP /mcp.
func TestEnvServeOpenEnv(t *testing.T) {
	python := pyenv.Python(t, pyenv.E2E)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	dir := t.TempDir()
	served := filepath.Join(dir, "served.episodes.jsonl")
	base, stop := envServing(t, "--episodes-out", served, "--scenario", "tictactoe", "--open", "x", "--policy", "o=minimax")

	// openenv validate, the command: its JSON report, exit 0.
	b, err := exec.CommandContext(t.Context(), python, "-m", "openenv.cli", "validate", "--url", base, "--json").CombinedOutput()
	require.NoError(t, err, "openenv validate failed:\n%s", b)
	var report struct {
		Passed   bool   `json:"passed"`
		Profile  string `json:"standard_profile"`
		Mode     string `json:"mode"`
		Criteria []struct {
			ID     string `json:"id"`
			Passed bool   `json:"passed"`
		} `json:"criteria"`
	}
	require.NoError(t, json.Unmarshal(b, &report), "%s", b)
	assert.True(t, report.Passed)
	assert.Equal(t, "openenv-http/1.x", report.Profile)
	assert.Equal(t, "simulation", report.Mode)
	var ids []string
	for _, c := range report.Criteria {
		assert.True(t, c.Passed, c.ID)
		ids = append(ids, c.ID)
	}
	assert.Equal(t, []string{"openapi_version_available", "health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint", "mode_endpoint_consistency"}, ids)

	cmd := exec.CommandContext(t.Context(), python, filepath.Join(root, "python", "tests", "openenv_check.py"), base)
	b, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())
	var summary struct {
		Games []struct {
			Reward float64 `json:"reward"`
			Status string  `json:"status"`
		} `json:"ws_games"`
		Illegal string `json:"illegal"`
		HTTP    struct {
			Moves  []string `json:"moves"`
			Reward float64  `json:"reward"`
		} `json:"http"`
		MCPWS struct {
			Tools []string `json:"tools"`
		} `json:"mcp_ws"`
		MCPHTTP struct {
			Tools  []string `json:"tools"`
			Reward float64  `json:"reward"`
		} `json:"mcp_http"`
	}
	require.NoError(t, json.Unmarshal(b, &summary), "%s", b)
	require.Len(t, summary.Games, 3)
	for _, g := range summary.Games {
		assert.Equal(t, "completed", g.Status)
		assert.LessOrEqual(t, g.Reward, 0.0, "minimax never loses")
	}
	assert.Contains(t, summary.Illegal, "illegal_action")
	assert.NotEmpty(t, summary.HTTP.Moves)
	tools := []string{"scenarios", "new_episode", "observe", "act"}
	assert.Equal(t, tools, summary.MCPWS.Tools)
	assert.Equal(t, tools, summary.MCPHTTP.Tools)
	records := string(readFile(t, served))
	// 3 WebSocket games, 1 over HTTP, 2 over MCP.
	assert.Equal(t, 6, strings.Count(records, "\n"), "six episodes written")
}
