// Package slime_test runs the Python tests of the slime adapter.
package slime_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

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
		bin = filepath.Join(t.TempDir(), "troupe")
		build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../../cmd/troupe")
		out, err := build.CombinedOutput()
		require.NoError(t, err, "go build: %s", out)
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
