// Package layout holds the test that the import graph of troupe's packages
// keeps the layers that the README's architecture picture draws.
package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/troupe-rl/troupe/"

// A picture is the README's architecture picture: named layers, top to
// bottom, each a row of top-level folders.
type picture struct {
	layers []layer
	// at places each folder: its layer (0 at the bottom) and its
	// position in the layer's row.
	at map[string]place
}

type layer struct {
	name    string
	folders []string
}

type place struct{ layer, pos int }

// parsePicture reads a picture: the fenced block after text's
// "## Architecture" heading, whose lines are "NAME  folder · folder ...
// (what the layer holds)", the top layer first. A folder is a top-level
// folder of the module, and everything under it is on its layer.
func parsePicture(text []byte) (*picture, error) {
	_, after, ok := bytes.Cut(text, []byte("\n## Architecture\n"))
	if !ok {
		return nil, fmt.Errorf("no ## Architecture section")
	}
	_, block, ok := bytes.Cut(after, []byte("```\n"))
	if !ok {
		return nil, fmt.Errorf("the architecture section has no picture")
	}
	block, _, _ = bytes.Cut(block, []byte("```"))
	var layers []layer
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "(") // the layer's caption
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		l := layer{name: fields[0]}
		for _, f := range fields[1:] {
			if f != "·" {
				l.folders = append(l.folders, f)
			}
		}
		layers = append(layers, l)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("the architecture picture draws no layers")
	}
	slices.Reverse(layers) // bottom first
	p := &picture{layers: layers, at: map[string]place{}}
	for i, l := range layers {
		for k, f := range l.folders {
			if strings.Contains(f, "/") {
				return nil, fmt.Errorf("layer %s: %q is not a top-level folder: a folder sits on one layer, with everything under it", l.name, f)
			}
			if was, dup := p.at[f]; dup {
				return nil, fmt.Errorf("folder %s is drawn twice, on layers %s and %s", f, layers[was.layer].name, l.name)
			}
			p.at[f] = place{i, k}
		}
	}
	return p, nil
}

// pkg is a package of the module as go list describes it.
type pkg struct {
	ImportPath string
	Imports    []string
}

// folderOf is the top-level folder of the package at path p (relative to
// the module).
func folderOf(p string) string {
	f, _, _ := strings.Cut(p, "/")
	return f
}

// check returns every way pkgs break the picture: a package whose folder
// is on no layer, an import of a higher layer, and, within a layer, an
// import of a folder to the importer's left (a row lists its folders in
// the order of their imports: each imports only folders to its right, and
// packages of its own folder).
func (p *picture) check(pkgs []pkg) []string {
	var problems []string
	for _, pk := range pkgs {
		// A package built for a main package with a profile (PGO) is
		// listed as "path [main]": the same package.
		name, _, _ := strings.Cut(strings.TrimPrefix(pk.ImportPath, module), " ")
		from, ok := p.at[folderOf(name)]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: its folder %s is on no layer of the picture", name, folderOf(name)))
			continue
		}
		for _, imp := range pk.Imports {
			dep, found := strings.CutPrefix(imp, module)
			if !found {
				continue
			}
			dep, _, _ = strings.Cut(dep, " ")
			to, ok := p.at[folderOf(dep)]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s imports %s, whose folder is on no layer", name, dep))
			case to.layer < from.layer, to == from:
			case to.layer > from.layer:
				problems = append(problems, fmt.Sprintf("%s (layer %s) imports %s (layer %s): an import that points up",
					name, p.layers[from.layer].name, dep, p.layers[to.layer].name))
			case to.pos < from.pos:
				problems = append(problems, fmt.Sprintf("%s imports %s, drawn to its left on layer %s: a row lists folders in the order of their imports",
					name, dep, p.layers[from.layer].name))
			}
		}
	}
	return problems
}

// modulePackages lists the module's packages and their imports.
func modulePackages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-pgo=off", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// readPicture parses the README's picture.
func readPicture(t *testing.T, root string) (*picture, []byte) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePicture(readme)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	return p, readme
}

// Every import of every package of the module keeps the README's picture,
// and the picture has a few layers a newcomer can hold.
func TestImportsKeepTheLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := readPicture(t, root)
	if n := len(p.layers); n > 7 {
		t.Errorf("the picture draws %d layers; a newcomer holds about six", n)
	}
	for _, problem := range p.check(modulePackages(t, root)) {
		t.Error(problem)
	}
}

// The check fails a wrong picture: one whose layers are swapped, whose row
// lists folders against their imports, or that leaves a folder out, draws
// one twice or draws a folder below the top level.
func TestAWrongPictureFails(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	_, readme := readPicture(t, root)
	pkgs := modulePackages(t, root)
	line := func(name string) string {
		for _, l := range strings.Split(string(readme), "\n") {
			if strings.HasPrefix(l, name+" ") {
				return l
			}
		}
		t.Fatalf("the picture has no layer %s", name)
		return ""
	}
	contract, play := line("contract"), line("play")
	wrong := map[string]string{
		"contract above play": strings.NewReplacer(contract, play, play, contract).Replace(string(readme)),
		"a row out of order":  strings.Replace(string(readme), "env · episode", "episode · env", 1),
		"a folder left out":   strings.Replace(string(readme), " · viewer", "", 1),
	}
	for name, text := range wrong {
		t.Run(name, func(t *testing.T) {
			require(t, text != string(readme), "the mutation changed nothing")
			p, err := parsePicture([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			if problems := p.check(pkgs); len(problems) == 0 {
				t.Errorf("the check passed a wrong picture (%s)", name)
			} else {
				t.Logf("%d problems, the first: %s", len(problems), problems[0])
			}
		})
	}
	for name, text := range map[string]string{
		"a folder drawn twice":     strings.Replace(string(readme), "experiment · league", "experiment · league · viewer", 1),
		"a folder below top level": strings.Replace(string(readme), " · viewer", " · viewer/internal", 1),
	} {
		t.Run(name, func(t *testing.T) {
			require(t, text != string(readme), "the mutation changed nothing")
			if _, err := parsePicture([]byte(text)); err == nil {
				t.Errorf("a picture with %s parsed", name)
			}
		})
	}
}

func require(t *testing.T, ok bool, msg string) {
	t.Helper()
	if !ok {
		t.Fatal(msg)
	}
}
