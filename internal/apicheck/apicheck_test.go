package apicheck

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/exp/apidiff"
)

// TestTreeKeepsReleasedAPI is the check that make test runs: every change
// from the API of the last release (api/troupe.apidata.gz) to the tree's
// that can break a module built against the release must be named in
// CHANGELOG.md's Unreleased section, where its migration note is.
func TestTreeKeepsReleasedAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the API check loads every package of the module")
	}
	root := filepath.Join("..", "..")
	f, err := os.Open(filepath.Join(root, "api", "troupe.apidata.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old, err := ReadSnapshot(f)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	unreleased, err := Unreleased(string(changelog))
	if err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	if report := Report(Unnamed(Incompatible(old, cur), unreleased)); report != "" {
		t.Error(report)
	}
}

// The module of the tests below: two versions of one package, each
// type-checked from source.
const testModule = "example.com/m"

func module(t *testing.T, src string) *apidiff.Module {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check(testModule+"/env", fset, []*ast.File{file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &apidiff.Module{Path: testModule, Packages: []*types.Package{pkg}}
}

const (
	released = `package env
type PolicyMaker func(seat int) string
type Registry struct{}
func (r *Registry) Register(name string) error { return nil }
`
	// PolicyMaker's signature broken, Register's too, a function added.
	broken = `package env
type PolicyMaker func(seat int, seed int64) string
type Registry struct{}
func (r *Registry) Register(name string, opts ...int) error { return nil }
func (r *Registry) Names() []string { return nil }
`
)

func TestBreakIsCaughtAndNamed(t *testing.T) {
	changes := Incompatible(module(t, released), module(t, broken))
	var names []string
	for _, c := range changes {
		names = append(names, c.Name)
	}
	if got, want := strings.Join(names, " "), "env.PolicyMaker env.Registry.Register"; got != want {
		t.Fatalf("incompatible changes named %q, want %q (changes: %v)", got, want, changes)
	}
	report := Report(Unnamed(changes, "### Changed\n- nothing yet\n"))
	for _, want := range []string{
		"env.PolicyMaker",
		"changed from func(int) string to func(int, int64) string",
		"env.Registry.Register",
		"CHANGELOG.md",
		"make api-snapshot",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report does not say %q:\n%s", want, report)
		}
	}
}

func TestBreakNamedInChangelogPasses(t *testing.T) {
	changes := Incompatible(module(t, released), module(t, broken))
	for _, tc := range []struct {
		unreleased string
		unnamed    string // the names left unnamed, space-separated
	}{
		{"- `env.PolicyMaker` takes the seed.\n- `env.Registry.Register` takes options.\n", ""},
		// A type's name covers its methods and fields.
		{"- `env.Registry`'s methods and `env.PolicyMaker` changed.", ""},
		{"env.PolicyMaker.", "env.Registry.Register"},
		// Whole words only: neither a longer name nor another package.
		{"env.PolicyMakers, xenv.Registry.Register, env.Registry_Register", "env.PolicyMaker env.Registry.Register"},
		// The package alone names no identifier of it.
		{"env changed a lot", "env.PolicyMaker env.Registry.Register"},
	} {
		var got []string
		for _, c := range Unnamed(changes, tc.unreleased) {
			got = append(got, c.Name)
		}
		if strings.Join(got, " ") != tc.unnamed {
			t.Errorf("Unnamed with %q: %q, want %q", tc.unreleased, got, tc.unnamed)
		}
	}
}

func TestRemovedPackageIsNamedByItsPath(t *testing.T) {
	old := module(t, released)
	changes := Incompatible(old, &apidiff.Module{Path: testModule})
	if len(changes) != 1 || changes[0].Name != "env" {
		t.Fatalf("changes %v, want the one package env removed", changes)
	}
	if len(Unnamed(changes, "- `env` moved to `core/env`: import github.com/...")) != 0 {
		t.Error("a removed package named by its path is still reported")
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	mod := module(t, broken)
	var b bytes.Buffer
	if err := WriteSnapshot(&b, mod); err != nil {
		t.Fatal(err)
	}
	first := bytes.Clone(b.Bytes())
	back, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if r := apidiff.ModuleChanges(back, mod); len(r.Changes) != 0 {
		t.Errorf("the snapshot read back differs from what was written:\n%s", r)
	}
	// Against the released version, read back or not, the same breaks.
	if a, b := Incompatible(module(t, released), back), Incompatible(module(t, released), mod); len(a) != len(b) || len(a) != 2 {
		t.Errorf("breaks against the snapshot %v, against the source %v", a, b)
	}
	var again bytes.Buffer
	if err := WriteSnapshot(&again, mod); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again.Bytes()) {
		t.Error("two snapshots of one package differ: the snapshot is not reproducible")
	}
}

func TestUnreleased(t *testing.T) {
	const changelog = "# Changelog\n\n## [Unreleased]\n\n### Removed\n- `env.X`\n\n## [0.4.0] - 2026-01-01\n- `env.Y`\n"
	got, err := Unreleased(changelog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "env.X") || strings.Contains(got, "env.Y") {
		t.Errorf("Unreleased = %q: want the section up to the next release's heading", got)
	}
	if _, err := Unreleased("# Changelog\n## [0.4.0]\n"); err == nil {
		t.Error("a changelog without an Unreleased section is accepted")
	}
}
