package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/troupe-rl/troupe/internal/outside"
	"github.com/troupe-rl/troupe/trajectories"
)

// TestBuildsOutsideTheRepository is the promise this example keeps: the
// whole game, with five rounds and broadcasts, and the full troupe command
// in one main.go of at most 100 lines, which builds, passes its tests and
// runs in a module of its own outside troupe's repository.
func TestBuildsOutsideTheRepository(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(src, []byte("\n")); n > 100 {
		t.Errorf("main.go has %d lines, more than 100", n)
	}
	tests, err := os.ReadFile("publicgoods_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := outside.New(t, "../..", "example.com/publicgoods", fstest.MapFS{
		"main.go":             {Data: src},
		"publicgoods_test.go": {Data: tests},
	})
	if out := m.Go("test", "-count=1", "."); !strings.Contains(out, "ok") {
		t.Errorf("go test: %s", out)
	}
	out := m.Go("run", ".", "run", "publicgoods", "--episodes", "3", "--policy", "reciprocator", "--out", "pg.jsonl")
	if !strings.Contains(out, "publicgoods: 3 episodes, 60 samples") {
		t.Errorf("go run: %s", out)
	}
	f, err := os.Open(filepath.Join(m.Dir, "pg.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rollouts, err := trajectories.ReadRollouts(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rollouts) != 3 {
		t.Fatalf("%d rollouts, want 3", len(rollouts))
	}
	for i, r := range rollouts {
		if len(r) != 20 { // four citizens, five rounds
			t.Errorf("rollout %d: %d samples, want 20", i, len(r))
		}
	}
}
