// Package pyenv is a test helper: it finds the Python interpreters of the
// virtual environments that hold troupe's Python counterparts, installed
// by name and pinned from PyPI (tools/python/install.sh, cached outside
// the clone), so that a test can run PettingZoo's own conformance tests,
// OpenEnv's validator, verifiers' client or the Agents SDK against troupe.
//
// Each environment has a variable naming its interpreter; unset, the
// interpreter of the cached environment is used when it exists. A test
// that finds none skips, saying how to install it, unless its Require
// variable is 1, where it fails: TROUPE_REQUIRE_PYTHON for the
// conformance environments (set by make test under CI),
// TROUPE_REQUIRE_TRAINERS for the trainers' (torch: many minutes to
// install, so make test never requires them; make trainers-test does).
package pyenv

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Env names one of the cached virtual environments.
type Env struct {
	// Var is the environment variable naming its interpreter.
	Var string
	// Dir is its directory under the cache (TROUPE_CACHE, default
	// ~/.cache/troupe).
	Dir string
	// Holds says what it holds, for the skip message.
	Holds string
	// Target is the make target that installs it.
	Target string
	// Require is the variable that, set to 1, turns its absence into a
	// failure.
	Require string
}

// The environments. Their pins are python/requirements/<name>.txt.
var (
	// E2E holds pettingzoo, gymnasium, numpy, openenv-core, verifiers and
	// websockets: the conformance tests make test runs.
	E2E = Env{"TROUPE_PYTHON_E2E", "pyenv-e2e", "pettingzoo, gymnasium, openenv-core and verifiers", "python-e2e", RequireVar}
	// Agents holds openai-agents (its openai pin conflicts with
	// verifiers', hence an environment of its own).
	Agents = Env{"TROUPE_PYTHON_AGENTS", "pyenv-agents", "the OpenAI Agents SDK for Python", "python-e2e", RequireVar}
	// MARL holds torch and the MARL trainers (make trainers).
	MARL = Env{"TROUPE_PYTHON_MARL", "pyenv-marl", "torch and the MARL trainers", "trainers", RequireTrainersVar}
	// LLM holds torch, transformers and TRL (make trainers).
	LLM = Env{"TROUPE_PYTHON_LLM", "pyenv-llm", "torch, transformers and TRL", "trainers", RequireTrainersVar}
)

// The Require variables.
const (
	RequireVar         = "TROUPE_REQUIRE_PYTHON"
	RequireTrainersVar = "TROUPE_REQUIRE_TRAINERS"
)

// Python returns the interpreter of e, or skips t (fails it when e's
// Require variable is 1) when there is none.
func Python(t testing.TB, e Env) string {
	t.Helper()
	py, err := Find(e)
	if err == nil {
		return py
	}
	if os.Getenv(e.Require) == "1" {
		t.Fatalf("%s is required (%s=1) but not found: %v (make %s installs it)", e.Holds, e.Require, err, e.Target)
	}
	t.Skipf("%s not found: %v (make %s installs it; %s=1 makes this a failure)", e.Holds, err, e.Target, e.Require)
	return ""
}

// Find returns the interpreter of e: the variable's value, else the cached
// environment's bin/python.
func Find(e Env) (string, error) {
	if py := os.Getenv(e.Var); py != "" {
		return exec.LookPath(py)
	}
	cache := os.Getenv("TROUPE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "troupe")
	}
	py := filepath.Join(cache, e.Dir, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return "", err
	}
	return py, nil
}

// PythonPath is the directory that makes the repository's own Python
// package (troupe_env) importable: the repository's python/ folder.
func PythonPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(file))), "python")
}

// RunJSON runs script with e's interpreter (skipping or failing t as
// Python does when there is none) as `script IN OUT`: IN a JSON file
// holding in, OUT the JSON object the script writes, which RunJSON
// returns. The repository's own package is importable (PythonPath); the
// script is killed after timeout.
func RunJSON(t testing.TB, e Env, script string, in any, timeout time.Duration) map[string]any {
	t.Helper()
	py := Python(t, e)
	dir := t.TempDir()
	inPath, outPath := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("pyenv: %s's input: %v", script, err)
	}
	if err := os.WriteFile(inPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, inPath, outPath)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+PythonPath())
	if outb, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pyenv: %s: %v\n%s", script, err, outb)
	}
	b, err = os.ReadFile(outPath)
	if err != nil {
		t.Fatalf("pyenv: %s wrote no output: %v", script, err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("pyenv: %s's output: %v", script, err)
	}
	return out
}
