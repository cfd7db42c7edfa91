package pyenv_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/internal/pyenv"
)

// TestTrainersSkipUnderRequire: make test requires the end-to-end venvs
// under CI (TROUPE_REQUIRE_PYTHON=1), never the trainers' (torch), whose
// tests skip without them unless TROUPE_REQUIRE_TRAINERS=1.
func TestTrainersSkipUnderRequire(t *testing.T) {
	t.Setenv(pyenv.RequireVar, "1")
	t.Setenv(pyenv.RequireTrainersVar, "")
	for _, e := range []pyenv.Env{pyenv.MARL, pyenv.LLM} {
		t.Setenv(e.Var, "/nonexistent/python")
		ok := t.Run(e.Dir, func(t *testing.T) {
			pyenv.Python(t, e)
			t.Error("Python returned for a missing venv")
		})
		assert.True(t, ok, "%s: the subtest skipped rather than failed", e.Dir)
	}
	assert.Equal(t, pyenv.RequireVar, pyenv.E2E.Require)
	assert.Equal(t, pyenv.RequireVar, pyenv.Agents.Require)
}
