package scenariotest

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/agents"
)

// ErrDocDrift is wrapped by DocDiagrams's errors.
var ErrDocDrift = errors.New("scenariotest: package doc does not show the role's diagram")

// DocDiagrams checks that the package doc of the Go package in dir (its
// non-test files' package comments) shows each role's state machine exactly
// as Role.Diagram(agents.Mermaid) draws it, as an indented code block:
//
//	// The patron's state machine:
//	//
//	//	stateDiagram-v2
//	//	    [*] --> deciding
//	//	    ...
//
// Run from a package's own test, dir is ".". The check keeps hand-written
// docs from drifting away from the roles they describe.
func DocDiagrams(dir string, roles ...*agents.Role) error {
	doc, err := packageDoc(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range roles {
		d, err := r.Diagram(agents.Mermaid)
		if err != nil {
			return fmt.Errorf("role %q: %w", r.Name, err)
		}
		block := "\t" + strings.ReplaceAll(strings.TrimRight(d, "\n"), "\n", "\n\t")
		if !strings.Contains(doc, block+"\n") {
			errs = append(errs, fmt.Errorf("%w: role %q; the doc should contain (each line after \"//\"):\n%s", ErrDocDrift, r.Name, block))
		}
	}
	return errors.Join(errs...)
}

// CheckDoc runs DocDiagrams for every role of the scenario and reports
// what it finds with t.Errorf.
func CheckDoc(t testing.TB, dir string, roles ...*agents.Role) {
	t.Helper()
	if err := DocDiagrams(dir, roles...); err != nil {
		t.Errorf("%v", err)
	}
}

// packageDoc returns the package comments of dir's non-test Go files.
func packageDoc(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("package doc: %w", err)
	}
	var b strings.Builder
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", fmt.Errorf("package doc: %w", err)
		}
		if f.Doc != nil {
			b.WriteString(f.Doc.Text())
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("%w: %s has no package doc", ErrDocDrift, dir)
	}
	return b.String(), nil
}
