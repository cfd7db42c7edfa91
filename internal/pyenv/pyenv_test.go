package pyenv_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/internal/pyenv"
)

// TestRequired: make test installs and requires the end-to-end venvs only;
// the trainers' are never required.
func TestRequired(t *testing.T) {
	assert.True(t, pyenv.E2E.Required())
	assert.True(t, pyenv.Agents.Required())
	assert.False(t, pyenv.MARL.Required())
	assert.False(t, pyenv.LLM.Required())
}

// TestTrainersSkipUnderRequire: a missing trainers' venv skips, whatever
// TROUPE_REQUIRE_PYTHON says.
func TestTrainersSkipUnderRequire(t *testing.T) {
	t.Setenv(pyenv.RequireVar, "1")
	t.Setenv(pyenv.MARL.Var, "/nonexistent/python")
	ok := t.Run("missing", func(t *testing.T) {
		pyenv.Python(t, pyenv.MARL)
		t.Error("Python returned for a missing venv")
	})
	assert.True(t, ok, "the subtest skipped rather than failed")
}
