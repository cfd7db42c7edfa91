// Package pyenv is a test helper: it finds the Python interpreters of the
// virtual environments that hold troupe's Python counterparts, installed
// by name and pinned from PyPI (tools/python/install.sh, cached outside
// the clone), so that a test can run PettingZoo's own conformance tests,
// OpenEnv's validator, verifiers' client or the Agents SDK against troupe.
//
// Each environment has a variable naming its interpreter; unset, the
// interpreter of the cached environment is used when it exists. A test
// that finds none skips, saying how to install it, unless
// TROUPE_REQUIRE_PYTHON=1 (set by make test under CI) and the environment
// is one make test installs there (E2E, Agents: make python-e2e), where it
// fails. The trainers' (MARL, LLM: make trainers, gigabytes of torch) are
// never part of make test: their tests always skip without them.
package pyenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
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
}

// The environments. Their pins are python/requirements/<name>.txt.
var (
	// E2E holds pettingzoo, gymnasium, numpy, openenv-core, verifiers and
	// websockets: the conformance tests make test runs.
	E2E = Env{"TROUPE_PYTHON_E2E", "pyenv-e2e", "pettingzoo, gymnasium, openenv-core and verifiers", "python-e2e"}
	// Agents holds openai-agents (its openai pin conflicts with
	// verifiers', hence an environment of its own).
	Agents = Env{"TROUPE_PYTHON_AGENTS", "pyenv-agents", "the OpenAI Agents SDK for Python", "python-e2e"}
	// MARL holds torch and the MARL trainers (make trainers).
	MARL = Env{"TROUPE_PYTHON_MARL", "pyenv-marl", "torch and the MARL trainers", "trainers"}
	// LLM holds torch, transformers and TRL (make trainers).
	LLM = Env{"TROUPE_PYTHON_LLM", "pyenv-llm", "torch, transformers and TRL", "trainers"}
)

// RequireVar set to 1 turns a missing environment that make test installs
// into a failure.
const RequireVar = "TROUPE_REQUIRE_PYTHON"

// Required reports whether a missing e fails a test under RequireVar=1:
// whether make test installs it under CI (make python-e2e).
func (e Env) Required() bool { return e.Target == "python-e2e" }

// Python returns the interpreter of e, or skips t when there is none
// (fails it under RequireVar=1 when e is Required).
func Python(t testing.TB, e Env) string {
	t.Helper()
	py, err := Find(e)
	if err == nil {
		return py
	}
	if os.Getenv(RequireVar) == "1" && e.Required() {
		t.Fatalf("%s is required (%s=1) but not found: %v (make %s installs it)", e.Holds, RequireVar, err, e.Target)
	}
	if !e.Required() {
		t.Skipf("%s not found: %v (make %s installs it)", e.Holds, err, e.Target)
	}
	t.Skipf("%s not found: %v (make %s installs it; %s=1 makes this a failure)", e.Holds, err, e.Target, RequireVar)
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
