// Package layout holds one test: that the import graph of troupe's
// packages keeps the floors that the README's architecture picture draws,
// every import pointing down.
package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/troupe-rl/troupe/"

// floors reads the picture: the fenced block after the README's
// "## Architecture" heading, whose lines "N  pkg · pkg · ..." put packages
// on floor N (a pattern "dir/*" is every package below dir). It returns
// the patterns with their floors.
func floors(t *testing.T, readme string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(data, []byte("\n## Architecture\n"))
	if !ok {
		t.Fatalf("%s has no ## Architecture section", readme)
	}
	_, block, ok := bytes.Cut(after, []byte("```\n"))
	if !ok {
		t.Fatalf("%s: the architecture section has no picture", readme)
	}
	block, _, _ = bytes.Cut(block, []byte("```"))
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.Atoi(fields[0])
		if err != nil {
			continue // a caption
		}
		for _, f := range fields[1:] {
			if f == "·" {
				continue
			}
			if strings.HasPrefix(f, "(") {
				break // the floor's comment
			}
			out[f] = n
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: the architecture picture names no packages on numbered floors", readme)
	}
	return out
}

// floorOf is the floor of package p (relative to the module) and the
// pattern that puts it there: the pattern that names p itself, else the
// longest "dir/*" or "dir" above it (a package's subpackages are on its
// floor unless drawn elsewhere).
func floorOf(p string, fl map[string]int) (floor int, pattern string, ok bool) {
	best := -1.0
	for pat, n := range fl {
		base, star := strings.CutSuffix(pat, "/*")
		var score float64
		switch {
		case !star && p == base:
			score = float64(len(base)) + 0.9
		case star && strings.HasPrefix(p, base+"/"):
			score = float64(len(base)) + 0.5
		case !star && strings.HasPrefix(p, base+"/"):
			score = float64(len(base))
		default:
			continue
		}
		if score > best {
			best, floor, pattern = score, n, pat
		}
	}
	return floor, pattern, best >= 0
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// Every import of every package of the module points at a package drawn
// on a lower floor of the README's picture (or at its own family: a
// package's internal helpers), and every package is drawn.
func TestImportsPointDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fl := floors(t, filepath.Join(root, "README.md"))
	cmd := exec.Command("go", "list", "-pgo=off", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var problems []string
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		// A package built for a main package with a profile (PGO) is
		// listed as "path [main]": the same package.
		name, _, _ := strings.Cut(strings.TrimPrefix(p.ImportPath, module), " ")
		from, fromPat, ok := floorOf(name, fl)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is on no floor of the picture", name))
			continue
		}
		for _, imp := range p.Imports {
			dep, found := strings.CutPrefix(imp, module)
			if !found {
				continue
			}
			dep, _, _ = strings.Cut(dep, " ")
			to, toPat, ok := floorOf(dep, fl)
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s imports %s, which is on no floor", name, dep))
			case to < from:
			case toPat == fromPat && (strings.Contains(name, "/internal/") || strings.Contains(dep, "/internal/")):
				// a package and its own internal helpers
			default:
				problems = append(problems, fmt.Sprintf("%s (floor %d, %s) imports %s (floor %d, %s): an arrow that does not point down", name, from, fromPat, dep, to, toPat))
			}
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}
