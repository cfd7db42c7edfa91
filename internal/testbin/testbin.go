// Package testbin builds the commands that tests run as processes (the
// troupe command, natsrun's test worker, nats-server) into a cache outside
// the clone, where they stay between test runs: go build leaves a binary
// that is up to date as it is, so a run whose sources did not change spends
// no link on it (6 CPU-seconds for troupe, against 0.6 for the check), and
// the packages that run the same command (cli and examples/slime both run
// troupe) share one link.
//
// The cache is $TROUPE_CACHE/testbin, else $HOME/.cache/troupe/testbin,
// as for tools/llama's build (llamatest), with a directory per module
// checkout, so that two clones (worktrees) never overwrite each other's
// binaries. Builds of one binary are serialised by a lock file beside it,
// so that concurrent test processes (go test runs packages in parallel)
// link it once.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvCache names the cache's root directory; it defaults to
// $HOME/.cache/troupe.
const EnvCache = "TROUPE_CACHE"

// ErrNoGo: the go command is not on PATH, so nothing can be built.
var ErrNoGo = errors.New("testbin: the go command is not on PATH")

// Build builds the main package pkg (an import path, or a directory
// relative to the working directory) as name into the cache, and returns
// the binary's path. go build runs in the working directory, whose
// module's checkout the cache directory belongs to, with the environment's
// GOFLAGS. name must be a plain file name.
func Build(name, pkg string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("testbin: binary name %q is not a plain file name", name)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoGo, err)
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testbin: %w", err)
	}
	bin := filepath.Join(dir, name)
	unlock, err := lock(bin + ".lock")
	if err != nil {
		return "", fmt.Errorf("testbin: locking %s: %w", bin, err)
	}
	defer unlock()
	out, err := exec.Command(goBin, "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testbin: go build -o %s %s: %w\n%s", bin, pkg, err, out)
	}
	return bin, nil
}

// Dir is the cache directory of the working directory's module checkout:
// the cache's root, testbin, and a digest of the checkout's path.
func Dir() (string, error) {
	root := os.Getenv(EnvCache)
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("testbin: no %s or home directory: %w", EnvCache, err)
		}
		root = filepath.Join(home, ".cache", "troupe")
	}
	mod, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(mod))
	return filepath.Join(root, "testbin", hex.EncodeToString(sum[:8])), nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testbin: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("testbin: no go.mod in %s or above", wd)
		}
	}
}
