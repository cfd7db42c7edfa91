package scenariotest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden compares got with the golden file at path. With update it writes
// got to path instead (creating its directory), which is how golden files
// are made and how intended changes are accepted.
//
// scenariotest is not a test package, so it cannot own a flag; each test package
// declares its own and passes it in:
//
//	var update = flag.Bool("update", false, "rewrite golden files")
//	...
//	scenariotest.Golden(t, "testdata/seed1.golden", got, *update)
//
// `go test ./pkg/... -update` then fails in any package of the pattern that
// does not declare the flag, so declare it in every package that a pattern
// you use covers.
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (run the test with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("golden %s is out of date (run the test with -update to accept the change):\n%s", path, FirstDifference(string(want), got))
	}
}

// FirstDifference describes where two texts first differ, line by line:
// the lines that differ (at most a few of each side), after a few lines of
// common context. Long lines are cut to a window around the first
// differing byte. It returns "" when the texts are equal.
func FirstDifference(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	// Trim the common tail, so that only the differing region is shown.
	ew, eg := len(w), len(g)
	for ew > i && eg > i && w[ew-1] == g[eg-1] {
		ew--
		eg--
	}
	col := 0
	if i < len(w) && i < len(g) {
		for col < len(w[i]) && col < len(g[i]) && w[i][col] == g[i][col] {
			col++
		}
	}
	const context, window = 3, 80
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at line %d", i+1)
	if col > 0 {
		fmt.Fprintf(&b, ", byte %d", col+1)
	}
	b.WriteString("\n")
	line := func(prefix, text string) {
		if len(text) > 2*window {
			lo := max(0, min(col, len(text))-window)
			hi := min(len(text), lo+2*window)
			text = "..." + text[lo:hi] + "..."
		}
		b.WriteString(strings.TrimRight(prefix+text, " "))
		b.WriteString("\n")
	}
	for j := max(0, i-context); j < i; j++ {
		line("    ", w[j])
	}
	for j := i; j < min(ew, i+context); j++ {
		line("  - ", w[j])
	}
	for j := i; j < min(eg, i+context); j++ {
		line("  + ", g[j])
	}
	if len(w) != len(g) {
		fmt.Fprintf(&b, "(want %d lines, got %d)\n", len(w), len(g))
	}
	return b.String()
}
