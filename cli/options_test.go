package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

func TestOptionsRegisterScenarios(t *testing.T) {
	run := func(args []string, opts ...Option) result {
		var stdout, stderr bytes.Buffer
		code := New(&stdout, &stderr, opts...).Main(t.Context(), args)
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	// Beside the built-ins: a relay scenario is listed and runs.
	r := run([]string{"scenarios"}, WithScenarios(newRelay(nil)))
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "relay")
	for _, name := range scenarios.Builtin().Names() {
		assert.Contains(t, r.stdout, name)
	}
	r = run([]string{"run", "relay", "-n", "2", "-o", "-", "-q"}, WithScenarios(newRelay(nil)))
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Len(t, readRollouts(t, []byte(r.stdout)), 2)

	// Instead of them.
	r = run([]string{"scenarios"}, WithoutBuiltins(), WithScenarios(tictactoe.New()))
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stdout, "sequential")+strings.Count(r.stdout, "simultaneous")+strings.Count(r.stdout, "async"), r.stdout)
	assert.Contains(t, r.stdout, "tictactoe")
	r = run([]string{"run", "elfarol", "-n", "1"}, WithoutBuiltins(), WithScenarios(tictactoe.New()))
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, `unknown scenario "elfarol"`)

	// A name taken twice fails before any command runs.
	r = run([]string{"scenarios"}, WithScenarios(elfarol.New()))
	assert.Equal(t, ExitFailure, r.code)
	assert.Contains(t, r.stderr, `two scenarios are called "elfarol"`)
	assert.Contains(t, r.stderr, "rename yours")
	assert.Contains(t, r.stderr, "cli.WithoutBuiltins()")
	assert.Empty(t, r.stdout)
}
