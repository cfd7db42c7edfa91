package viewer

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExternalTestsAreLeftOutOfFuzzBuilds: every file of package
// viewer_test carries the constraint !fuzzing, so that make fuzz (-tags
// fuzzing) builds the fuzz targets without their imports: instrumented,
// those cost the targets 97% of their executions (FuzzScanSample: 7,000
// a minute with them, 255,000 without).
func TestExternalTestsAreLeftOutOfFuzzBuilds(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "viewer_test" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), "//go:build !fuzzing\n") {
			t.Errorf("%s (package viewer_test) does not begin with //go:build !fuzzing", name)
		}
	}
}
