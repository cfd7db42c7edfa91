package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/outside"
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
	_, err := NewScenario(dir, "colours", "")
	assert.True(t, errors.Is(err, ErrNotEmpty), "%v", err)
	for _, bad := range []string{"Colours", "my game", "1st", "a_b", "-x", ""} {
		r = troupe(t, "new", "scenario", bad, "--dir", filepath.Join(t.TempDir(), "x"))
		assert.Equal(t, ExitUsage, r.code, bad)
	}
	r = troupe(t, "new", "game", "x")
	assert.Equal(t, ExitUsage, r.code)
}

// TestNewScenarioBuildsTestsAndRuns generates a scenario outside the
// repository, where the command writes a module of its own (troupe
// replaced by this checkout, which it finds itself), and runs what the
// command tells its user to run, as the user types it, offline: go test,
// then go run . run NAME --episodes 3. It compiles a program, so -short
// skips it.
func TestNewScenarioBuildsTestsAndRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my-game")
	r := troupe(t, "new", "scenario", "my-game", "--dir", dir)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, filepath.Join(dir, "go.mod"))
	assert.NotContains(t, r.stdout, "go get", "troupe is not published: nothing to get")
	gomod := string(readFile(t, filepath.Join(dir, "go.mod")))
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	assert.Contains(t, gomod, "module example.com/my-game\n")
	assert.Contains(t, gomod, "replace github.com/troupe-rl/troupe => "+root+"\n")
	m := outside.At(t, dir)
	out := m.Go("test", "-count=1", ".")
	assert.Contains(t, out, "ok")
	out = m.Go("run", ".", "run", "my-game", "--episodes", "3", "--out", "out.jsonl")
	assert.Contains(t, out, "my-game: 3 episodes, 27 samples written to out.jsonl")
	assert.Len(t, readRollouts(t, readFile(t, filepath.Join(m.Dir, "out.jsonl"))), 3)
	// Its counterfactual declaration serves the counterfactual
	// allocators, re-simulating, under the key typed.
	out = m.Go("run", ".", "run", "my-game", "--episodes", "2", "-a", "team,leave-one-out", "--reward-format", "dict", "--out", "dict.jsonl")
	assert.Contains(t, out, "my-game: 2 episodes, 18 samples written to dict.jsonl")
	assert.Contains(t, string(readFile(t, filepath.Join(m.Dir, "dict.jsonl"))), `"reward":{"leave-one-out":`)
	out = m.Go("run", ".", "scenarios")
	assert.Contains(t, out, "my-game")
	assert.Contains(t, out, "elfarol", "the built-in scenarios are there too")

	// Outside any module, and with no checkout known, the command says
	// what it needs rather than write a module that cannot build.
	_, err = NewScenario(filepath.Join(t.TempDir(), "x"), "x", "")
	assert.ErrorIs(t, err, ErrNoTroupe)
}
