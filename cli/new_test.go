package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewScenarioCommandWritesTheSkeleton(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "colours")
	r := troupe(t, "new", "scenario", "colours", "--dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, f := range []string{"colours.go", "colours_test.go", "main.go", "testdata/seed1.golden"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.NotContains(t, string(data), skeletonName, f)
		assert.Contains(t, r.stdout, filepath.Join(dir, f))
	}
	assert.Contains(t, r.stdout, "go run . run colours --episodes 3")

	// A directory with files is refused, and so are bad names.
	r = troupe(t, "new", "scenario", "colours", "--dir", dir)
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, "directory is not empty")
	_, err := NewScenario(dir, "colours")
	assert.True(t, errors.Is(err, ErrNotEmpty), "%v", err)
	for _, bad := range []string{"Colours", "my game", "1st", "a_b", "-x", ""} {
		r = troupe(t, "new", "scenario", bad, "--dir", filepath.Join(t.TempDir(), "x"))
		assert.Equal(t, ExitUsage, r.code, bad)
	}
	r = troupe(t, "new", "game", "x")
	assert.Equal(t, ExitUsage, r.code)
}

// TestNewScenarioBuildsTestsAndRuns generates a scenario into a module of
// its own outside the repository (troupe replaced by this checkout, so
// nothing is downloaded) and runs what the command tells its user to run:
// go test, then go run . run NAME --episodes 3. It compiles a program, so
// -short skips it.
func TestNewScenarioBuildsTestsAndRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a generated module (-short)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = NewScenario(dir, "my-game")
	require.NoError(t, err)

	// The module: troupe alone, replaced by this checkout. Its own
	// requirements come from troupe's go.mod through the replacement;
	// resolving them reads the go.mod files of troupe's whole module
	// graph (below), not only those troupe's build read. Listing troupe's
	// requirements here would not spare that.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/mygame\n\ngo 1.26\n\nrequire github.com/troupe-rl/troupe v0.0.0\n\nreplace github.com/troupe-rl/troupe => "+root+"\n"), 0o644))
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644))

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), "go %s:\n%s", strings.Join(args, " "), out.String())
		return out.String()
	}
	// Offline, the module's graph is resolved from the module cache, which
	// must hold the go.mod files of troupe's whole module graph: a fresh
	// cache filled by building troupe alone does not (make test fetches
	// them first, with go list -m all).
	list := exec.CommandContext(t.Context(), gobin, "list", "-m", "all")
	list.Dir = dir
	list.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	if msg, err := list.CombinedOutput(); err != nil && bytes.Contains(msg, []byte("GOPROXY=off")) && os.Getenv("CI") == "" {
		t.Skipf("the module cache lacks go.mod files of troupe's module graph; go list -m all in the repository (or make test) fetches them:\n%s", msg)
	}
	out := run("test", "-count=1", ".")
	assert.Contains(t, out, "ok")
	out = run("run", ".", "run", "my-game", "--episodes", "3", "--out", "out.jsonl")
	assert.Contains(t, out, "my-game: 3 episodes, 27 samples written to out.jsonl")
	assert.Len(t, readRollouts(t, readFile(t, filepath.Join(dir, "out.jsonl"))), 3)
	out = run("run", ".", "scenarios")
	assert.Contains(t, out, "my-game")
	assert.Contains(t, out, "elfarol", "the built-in scenarios are there too")
}
