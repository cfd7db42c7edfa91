// Package apicheck compares troupe's exported Go API with a snapshot taken
// at the last release, so that a change which breaks scenario modules built
// against that release cannot land unannounced: each incompatible change
// (as golang.org/x/exp/apidiff judges it) must be named in CHANGELOG.md's
// Unreleased section, with its migration note.
//
// The snapshot (api/troupe.apidata.gz, written by `make api-snapshot`)
// holds the export data of every importable, non-internal package of the
// module, in the indexed format that golang.org/x/tools/go/gcexportdata
// writes and reads, gzipped: a header line, then for each package in
// import-path order a line "package IMPORT_PATH SIZE" and SIZE bytes. It
// carries no file positions and no time, so that the same tree gives the
// same bytes in any clone.
package apicheck

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// Load type-checks the API packages of the module whose root is dir: every
// package of it that another module may import, that is every one but
// package main and those under an internal folder. Types come from the
// go command's export data (go list -export), so the packages compile
// through the build cache. Packages are in import-path order.
func Load(dir string) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Dir:  dir,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
	}
	loaded, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("loading the packages under %s: %w", dir, err)
	}
	mod := &apidiff.Module{}
	for _, p := range loaded {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("loading %s: %w", p.PkgPath, p.Errors[0])
		}
		if p.Module == nil {
			return nil, fmt.Errorf("loading %s: not in a module", p.PkgPath)
		}
		if mod.Path == "" {
			mod.Path = p.Module.Path
		}
		if p.Name == "main" || IsInternal(p.PkgPath, mod.Path) {
			continue
		}
		mod.Packages = append(mod.Packages, p.Types)
	}
	if mod.Path == "" {
		return nil, fmt.Errorf("no packages under %s", dir)
	}
	sortPackages(mod)
	return mod, nil
}

// IsInternal reports whether the package at pkgPath, in the module at
// modPath, lies under an internal folder, where the go command keeps other
// modules from importing it.
func IsInternal(pkgPath, modPath string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkgPath, modPath), "/")
	return rel == "internal" || strings.HasPrefix(rel, "internal/") ||
		strings.HasSuffix(rel, "/internal") || strings.Contains(rel, "/internal/")
}

func sortPackages(mod *apidiff.Module) {
	slices.SortFunc(mod.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
}

// snapshotHeader opens every snapshot: it names the format and the module.
const snapshotHeader = "troupe api snapshot v1"

// WriteSnapshot writes mod's packages to w in the snapshot format (see the
// package comment).
func WriteSnapshot(w io.Writer, mod *apidiff.Module) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(zw)
	fmt.Fprintf(bw, "%s module %s\n", snapshotHeader, mod.Path)
	pkgs := slices.Clone(mod.Packages)
	slices.SortFunc(pkgs, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	for _, p := range pkgs {
		var data bytes.Buffer
		// An empty file set: export data without positions, which would
		// name the folder of the clone that wrote it.
		if err := gcexportdata.Write(&data, token.NewFileSet(), p); err != nil {
			return fmt.Errorf("writing the export data of %s: %w", p.Path(), err)
		}
		fmt.Fprintf(bw, "package %s %d\n", p.Path(), data.Len())
		bw.Write(data.Bytes())
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// ReadSnapshot reads a snapshot that WriteSnapshot wrote.
func ReadSnapshot(r io.Reader) (*apidiff.Module, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	br := bufio.NewReader(zr)
	head, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot's header: %w", err)
	}
	modPath, ok := strings.CutPrefix(strings.TrimSuffix(head, "\n"), snapshotHeader+" module ")
	if !ok {
		return nil, fmt.Errorf("not a %q file (header %q): remake it with make api-snapshot at the release", snapshotHeader, strings.TrimSpace(head))
	}
	mod := &apidiff.Module{Path: modPath}
	fset := token.NewFileSet()
	// One map for all the packages, so that a type that one package's
	// export data refers to and another's declares is one type.
	imports := map[string]*types.Package{}
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the snapshot: %w", err)
		}
		var path string
		var size int
		if _, err := fmt.Sscanf(line, "package %s %d\n", &path, &size); err != nil {
			return nil, fmt.Errorf("reading the snapshot: bad package line %q: %w", strings.TrimSpace(line), err)
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("reading the snapshot's export data of %s: %w", path, err)
		}
		p, err := gcexportdata.Read(bytes.NewReader(data), fset, imports, path)
		if err != nil {
			return nil, fmt.Errorf("decoding the snapshot's export data of %s (written by another x/tools? remake the snapshot at the release): %w", path, err)
		}
		mod.Packages = append(mod.Packages, p)
	}
	return mod, nil
}

// A Change is one incompatible change between two versions of the API.
type Change struct {
	// Name is what the changelog must mention for the change to pass: the
	// module-relative package path and the identifier, dotted, as in
	// "env.PolicyMaker", "env.Registry.Register" (a method, whatever its
	// receiver), "env.Config.Seed" (a field); for a package removed, its
	// path alone ("env/seats").
	Name string
	// Message is apidiff's account of the change, as "./env.PolicyMaker:
	// changed from func(...) to func(...)".
	Message string
}

// Incompatible lists the changes from old to new that can break a module
// built against old, sorted by name.
func Incompatible(old, new *apidiff.Module) []Change {
	var out []Change
	for _, c := range apidiff.ModuleChanges(old, new).Changes {
		if c.Compatible {
			continue
		}
		out = append(out, Change{Name: changeName(c.Message, old.Path), Message: c.Message})
	}
	slices.SortFunc(out, func(a, b Change) int {
		return cmpOr(strings.Compare(a.Name, b.Name), strings.Compare(a.Message, b.Message))
	})
	return out
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// changeName derives a Change's Name from apidiff's message.
func changeName(msg, modPath string) string {
	if rest, ok := strings.CutPrefix(msg, "package "); ok {
		path, _, _ := strings.Cut(rest, ":")
		return strings.TrimPrefix(strings.TrimPrefix(path, modPath), "/")
	}
	obj, _, _ := strings.Cut(msg, ": ")
	obj = strings.TrimPrefix(obj, "./")
	obj = strings.TrimPrefix(obj, modPath+"/")
	// A method's receiver reads (*T) or T[P]: the name keeps T alone.
	obj = strings.NewReplacer("(*", "", ")", "").Replace(obj)
	obj = typeArgs.ReplaceAllString(obj, "")
	return obj
}

var typeArgs = regexp.MustCompile(`\[[^\]]*\]`)

// Unnamed returns the changes that the text (CHANGELOG.md's Unreleased
// section) does not name. A change is named by its Name or any dotted
// prefix of it longer than the package path, standing as a whole word:
// `env.Registry` names every change to Registry's methods and fields, and
// `env/seats` a removed package env/seats; `env` alone names nothing but a
// package env removed.
func Unnamed(changes []Change, text string) []Change {
	var out []Change
	for _, c := range changes {
		if !named(c.Name, text) {
			out = append(out, c)
		}
	}
	return out
}

func named(name, text string) bool {
	candidates := []string{name}
	if pkg, ident := splitName(name); ident != "" {
		candidates = candidates[:0]
		parts := strings.Split(ident, ".")
		for i := 1; i <= len(parts); i++ {
			candidates = append(candidates, pkg+"."+strings.Join(parts[:i], "."))
		}
	}
	for _, cand := range candidates {
		for i := 0; ; {
			j := strings.Index(text[i:], cand)
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(cand)
			if (start == 0 || !wordByte(text[start-1])) && wordEnd(text, end) {
				return true
			}
			i = start + 1
		}
	}
	return false
}

// splitName cuts a Change's Name into the package path and the dotted
// identifier (empty for a package): the path ends at the first dot after
// its last slash.
func splitName(name string) (pkg, ident string) {
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if dot < 0 {
		return name, ""
	}
	k := slash + 1 + dot
	return name[:k], name[k+1:]
}

// wordEnd reports whether a name that ends at text[end] ends a word there:
// the text ends, or goes on with a byte that no name holds, or with a dot
// that ends a sentence.
func wordEnd(text string, end int) bool {
	switch {
	case end == len(text):
		return true
	case text[end] == '.':
		return end+1 == len(text) || !wordByte(text[end+1])
	default:
		return !wordByte(text[end])
	}
}

// wordByte reports whether b may be part of a dotted Go name or package
// path, so that "env.Registry" does not match inside "env.RegistryOption"
// nor "xenv.Registry".
func wordByte(b byte) bool {
	return b == '_' || b == '/' || b == '.' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// Unreleased returns the body of the "## [Unreleased]" (or "## Unreleased")
// section of a Keep a Changelog file: the lines up to the next "## "
// heading.
func Unreleased(changelog string) (string, error) {
	lines := strings.SplitAfter(changelog, "\n")
	for i, l := range lines {
		h := strings.TrimSpace(l)
		if h != "## [Unreleased]" && h != "## Unreleased" {
			continue
		}
		var b strings.Builder
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "## ") {
				break
			}
			b.WriteString(l)
		}
		return b.String(), nil
	}
	return "", errors.New(`no "## [Unreleased]" section`)
}

// Report says what a tree with the unnamed changes must do; "" when there
// are none.
func Report(unnamed []Change) string {
	if len(unnamed) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d incompatible API change(s) since the last release, not named in CHANGELOG.md's Unreleased section:\n", len(unnamed))
	for _, c := range unnamed {
		fmt.Fprintf(&b, "  %s\n      %s\n", c.Name, c.Message)
	}
	b.WriteString(`Each breaks scenario modules built against the release. Either keep the old
API (add a new name beside it rather than change it), or name each change
above, as written (package path, then the identifier), under "## [Unreleased]"
in CHANGELOG.md, with a migration note: what changed, and what to write
instead. At a release, make api-snapshot takes the new API as the baseline
(docs/development.md).`)
	return b.String()
}
