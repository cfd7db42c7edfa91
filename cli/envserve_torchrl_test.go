package cli

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/pyenv"
)

// TestEnvServeTorchRL runs examples/torchrl/elfarol_ippo.py, TorchRL's PPO
// on El Farol through troupe_env, for a few batches of each reward against
// `troupe env-serve`, once through the PettingZoo environment under
// TorchRL's PettingZooWrapper and once through the vector environment under
// troupe_env.torchrl: the script checks, week
// by week, that the team reward in infos is G of the nights chosen and that
// the reward is the chosen allocator's credit there. How well it learns is
// make marl-train's to measure (docs/marl-training.md), not a test's.
//
// The trainers' venv (make trainers: torch) is never part of make test: the
// test skips without it, even under TROUPE_REQUIRE_PYTHON=1.
func TestEnvServeTorchRL(t *testing.T) {
	if testing.Short() {
		t.Skip("torch's import alone takes seconds")
	}
	python := pyenv.Python(t, pyenv.MARL)
	for _, envKind := range []string{"pettingzoo", "vector"} {
		t.Run(envKind, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(pyenv.PythonPath(), "troupe_env", envKind+".py")); err != nil {
				t.Skipf("no troupe_env.%s", envKind)
			}
			trainBriefly(t, python, envKind)
		})
	}
}

// trainBriefly runs elfarol_ippo.py on envKind for two batches of each
// reward and checks its summary.
func trainBriefly(t *testing.T, python, envKind string) {
	base, stop := envServing(t)
	out := t.TempDir()
	script := filepath.Join(filepath.Dir(pyenv.PythonPath()), "examples", "torchrl", "elfarol_ippo.py")
	cmd := exec.CommandContext(t.Context(), python, script, "--env", envKind, "--base-url", base, "--agents", "12",
		"--weeks", "40", "--batch", "20", "--seeds", "1", "--random-weeks", "20", "--final", "20",
		"--reward", "team", "--reward", "difference", "--reward", "score", "--out", out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyenv.PythonPath(), "CUDA_VISIBLE_DEVICES=", "PYTHONWARNINGS=ignore")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Equal(t, 0, stop())

	var summary struct {
		Env    string                      `json:"env"`
		CUDA   bool                        `json:"cuda_available"`
		GStar  float64                     `json:"G_star"`
		Final  map[string]map[string]any   `json:"final_G_over_opt"`
		Curve  map[string][]map[string]any `json:"curve"`
		Paired map[string]any              `json:"paired"`
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &summary))
	assert.Equal(t, envKind, summary.Env)
	assert.False(t, summary.CUDA, "the run is on CPU")
	// 12 patrons, 7 nights, c = 6: φ is concave below 2c, so the best week
	// spreads them, five nights of 2 and two of 1.
	assert.InDelta(t, 10*math.Exp(-1.0/3)+2*math.Exp(-1.0/6), summary.GStar, 1e-9, "G* by the script's dynamic programme")
	for _, r := range []string{"team", "difference", "score"} {
		assert.Contains(t, summary.Final, r)
		assert.Len(t, summary.Curve[r], 2, "%s: one curve point per batch of the two", r)
	}
	assert.Len(t, summary.Paired, 3)
	for _, f := range []string{"curves.csv", "finals.csv", "curves.svg"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
}
