// Package slime_test runs the Python tests of the slime adapter.
package slime_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/testbin"
)

// buildTroupe builds cmd/troupe into testbin's cache (where cli's tests
// build it too) and returns its path.
func buildTroupe(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Build("troupe", "../../cmd/troupe")
	require.NoError(t, err)
	return bin
}

// TestSlimeAdapter runs the Python tests of examples/slime (the slime
// adapter against a real rollout service, with a stand-in for slime's
// Sample), so that `go test ./...` covers them. The service is `troupe
// serve`, built from cmd/troupe, or $TROUPE_BIN when it is set.
func TestSlimeAdapter(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the slime adapter's Python tests are skipped")
	}
	bin := os.Getenv("TROUPE_BIN")
	if bin == "" {
		bin = buildTroupe(t)
	}
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), python, "-B", "-m", "unittest", "discover", "-s", dir, "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TROUPE_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	require.NoError(t, err, "the slime adapter's Python tests failed")
}
