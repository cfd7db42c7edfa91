// Package outside is a test helper: a Go module of a user's own, outside
// the repository, that requires troupe replaced by this checkout, and the
// go commands a user runs in it, offline. What builds there uses troupe's
// public API alone: internal packages and unexported names are out of
// its reach, as they are of every user's.
package outside

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Module is a module in a temporary directory.
type Module struct {
	t   testing.TB
	gob string
	// Dir is the module's directory.
	Dir string
	// readOnly runs the go commands with -mod=readonly (At).
	readOnly bool
}

// New makes the module path in a temporary directory, with the files of
// fsys and a go.mod requiring troupe, replaced by the checkout at root,
// with troupe's go.sum. It skips t when
// there is no go command, or when -short is set: building a module
// compiles troupe again. Outside CI it skips t too when the module cache
// lacks the go.mod files of troupe's whole module graph, which resolving a
// module of one's own reads offline and a build of troupe alone does not
// fetch (go list -m all in the repository, which make test runs, fetches
// them); under CI=true that fails t.
func New(t testing.TB, root, path string, fsys fs.FS) *Module {
	t.Helper()
	gob := goCommand(t)
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	m := &Module{t: t, gob: gob, Dir: t.TempDir()}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module " + path + "\n\ngo 1.26\n\nrequire github.com/troupe-rl/troupe v0.0.0\n\nreplace github.com/troupe-rl/troupe => " + root + "\n"
	if err := os.CopyFS(m.Dir, fsys); err != nil {
		t.Fatal(err)
	}
	// Written after the copy, which refuses to overwrite a file: fsys
	// brings no go.mod or go.sum of its own.
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": gosum} {
		if err := os.WriteFile(filepath.Join(m.Dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.skipWithoutGraph()
	return m
}

// At is the module a user made in dir (its go.mod and go.sum are there),
// whose go commands run as the user types them: offline, but without
// -mod=mod, so that a go.mod that lacks a requirement fails rather than be
// filled in. It skips t as New does.
func At(t testing.TB, dir string) *Module {
	t.Helper()
	m := &Module{t: t, gob: goCommand(t), Dir: dir, readOnly: true}
	m.skipWithoutGraph()
	return m
}

// goCommand returns the go command's path, and skips t under -short or
// without one.
func goCommand(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a module of its own outside the repository (-short)")
	}
	gob, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	return gob
}

// skipWithoutGraph skips the test, outside CI, when the module cache
// lacks go.mod files of the module's graph (see New).
func (m *Module) skipWithoutGraph() {
	m.t.Helper()
	if msg, err := m.command("list", "-m", "all").CombinedOutput(); err != nil && bytes.Contains(msg, []byte("GOPROXY=off")) && os.Getenv("CI") == "" {
		m.t.Skipf("the module cache lacks go.mod files of troupe's module graph; go list -m all in the repository (or make test) fetches them:\n%s", msg)
	}
}

// Go runs the go command with args in the module, offline, and returns
// what it printed, stdout and stderr together. It fails the test when the
// command fails.
func (m *Module) Go(args ...string) string {
	m.t.Helper()
	var out bytes.Buffer
	cmd := m.command(args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		m.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// command is the go command with args in the module: offline (troupe's
// requirements come from the module cache), go.mod updated as need be, no
// workspace.
func (m *Module) command(args ...string) *exec.Cmd {
	cmd := exec.CommandContext(m.t.Context(), m.gob, args...)
	cmd.Dir = m.Dir
	flags := "GOFLAGS=-mod=mod"
	if m.readOnly {
		flags = "GOFLAGS=-mod=readonly"
	}
	cmd.Env = append(os.Environ(), "GOPROXY=off", flags, "GOWORK=off")
	return cmd
}
