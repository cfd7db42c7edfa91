package pyenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/runspec"
)

// TestPackageInstalls builds python/ (pyproject.toml) with pip, offline,
// installs it into a directory of its own and imports it from there: the
// package is pip-installable, its version is troupe's, and importing
// troupe_env loads no third-party package (the client is standard library
// only; PettingZoo and numpy come with the pettingzoo extra's modules).
func TestPackageInstalls(t *testing.T) {
	py := pyenv.Python(t, pyenv.E2E)
	dir := t.TempDir()
	// A copy: an in-tree build writes build/ and *.egg-info beside the
	// sources, which must not land in the checkout.
	src := filepath.Join(dir, "src")
	require.NoError(t, os.CopyFS(src, os.DirFS(pyenv.PythonPath())))
	site := filepath.Join(dir, "site")
	pip := exec.CommandContext(t.Context(), py, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
		"--no-deps", "--no-build-isolation", "-q", "--target", site, src)
	out, err := pip.CombinedOutput()
	require.NoError(t, err, "pip install: %s", out)

	check := `
import importlib.metadata, sys
import troupe_env
assert troupe_env.__file__.startswith(sys.argv[1]), troupe_env.__file__
third = sorted(m for m in ("numpy", "gymnasium", "pettingzoo", "torch") if m in sys.modules)
assert not third, "import troupe_env loaded " + ", ".join(third)
import troupe_env.pettingzoo, troupe_env.vector, troupe_env.wrappers
print(importlib.metadata.version("troupe-env"))
`
	cmd := exec.CommandContext(t.Context(), py, "-c", check, site)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, runspec.TroupeVersion, strings.TrimSpace(string(out)),
		"python/pyproject.toml's version is runspec.TroupeVersion")
}
