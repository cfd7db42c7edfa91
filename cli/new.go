package cli

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// skeleton is the scenario `troupe new scenario` writes: a package of this
// module (cli/internal/skeleton), built and tested with the rest, whose
// files are copied with its name replaced.
//
//go:embed internal/skeleton
var skeleton embed.FS

const (
	skeletonDir  = "internal/skeleton"
	skeletonName = "skeleton"
)

// scenarioName is what a new scenario may be called: a scenario name that
// is also a plain file and package-path element.
var scenarioName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// ErrNotEmpty is returned by NewScenario for a directory that holds files.
var ErrNotEmpty = errors.New("directory is not empty")

// troupeModule is troupe's module path.
const troupeModule = "github.com/troupe-rl/troupe"

// SourceRoot returns the directory of the troupe checkout this program was
// built from, when it is still there: the module a new scenario's go.mod
// replaces troupe with, since troupe is not published. It is found from
// this file's compile-time path, so it is empty for a program built with
// -trimpath, or moved to a machine without the checkout.
func SourceRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	root := filepath.Dir(filepath.Dir(file))
	if data, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(data, []byte("module "+troupeModule+"\n")) {
		return ""
	}
	return root
}

// moduleFiles returns the go.mod and go.sum of a module of its own, called
// path, that requires troupe replaced by the checkout at root: troupe's go
// directive, its requirements (every one, so that the go command needs no
// go.mod update, hence no network, to build and test the module) and its
// go.sum.
func moduleFiles(root, path string) (gomod, gosum []byte, err error) {
	own, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, nil, err
	}
	if gosum, err = os.ReadFile(filepath.Join(root, "go.sum")); err != nil {
		return nil, nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module %s\n\n", path)
	inRequire := false
	for line := range strings.Lines(string(own)) {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "go ") || strings.HasPrefix(t, "toolchain "):
			b.WriteString(t + "\n")
		case t == "require (":
			inRequire = true
		case inRequire && t == ")":
			inRequire = false
		case inRequire && t != "" && !strings.HasPrefix(t, "//"):
			mod, _, _ := strings.Cut(t, "//")
			fmt.Fprintf(&b, "require %s // indirect\n", strings.TrimSpace(mod))
		}
	}
	fmt.Fprintf(&b, "\nrequire %s v0.0.0\n\nreplace %s => %s\n", troupeModule, troupeModule, root)
	return []byte(b.String()), gosum, nil
}

// NewScenario writes a working, tested scenario called name into dir
// (created if need be; it must be empty): NAME.go (the scenario: one role
// in looplab/fsm's vocabulary, the game with a private message, a channel
// and a counterfactual declaration, two policies, the package doc),
// NAME_test.go (scenariotest.Check, agentstest.Check, the doc's diagram, a
// golden transcript), testdata/seed1.golden, and main.go, the full troupe
// command with the scenario registered (Main with WithScenarios). The
// package is a command: `go test` and `go run . run NAME` work in dir,
// offline. When dir is not inside a module that requires troupe, root
// names a troupe checkout: dir gets a go.mod of its own
// (example.com/NAME) that requires troupe replaced by it, with troupe's
// requirements and go.sum, whose modules building troupe put in the
// module cache. It returns the paths written.
func NewScenario(dir, name, root string) ([]string, error) {
	if !scenarioName.MatchString(name) {
		return nil, fmt.Errorf("scenario name %q: use lower-case letters and digits, starting with a letter (words may be joined by '-')", name)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s: %w", dir, ErrNotEmpty)
	}
	var written []string
	err := fs.WalkDir(skeleton, skeletonDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, skeletonDir), "/")
		target := filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(rel, skeletonName, name)))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := skeleton.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, []byte(strings.ReplaceAll(string(data), skeletonName, name)), 0o644); err != nil {
			return err
		}
		written = append(written, target)
		return nil
	})
	if err != nil || requiresTroupe(dir) {
		return written, err
	}
	if root == "" {
		return written, fmt.Errorf("%w: %s is in no module that requires troupe, and no troupe checkout is known to replace it with (troupe new scenario --troupe DIR)", ErrNoTroupe, dir)
	}
	gomod, gosum, err := moduleFiles(root, "example.com/"+name)
	if err != nil {
		return written, fmt.Errorf("the troupe checkout %s: %w", root, err)
	}
	for file, data := range map[string][]byte{"go.mod": gomod, "go.sum": gosum} {
		target := filepath.Join(dir, file)
		if err := os.WriteFile(target, data, 0o644); err != nil {
			return written, err
		}
		written = append(written, target)
	}
	slices.Sort(written)
	return written, nil
}

// ErrNoTroupe is returned by NewScenario for a directory outside any
// module that requires troupe when no checkout of troupe is given.
var ErrNoTroupe = errors.New("no troupe module to build against")

func (a *App) newCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Write the skeleton of a new scenario",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown kind %q: troupe new scenario NAME", args[0])
			}
			return usagef("troupe new scenario NAME")
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	var dir, troupeDir string
	sc := &cobra.Command{
		Use:   "scenario NAME",
		Short: "Write a working, tested scenario and its troupe command into a new directory",
		Long: `Write a scenario called NAME into DIR (default ./NAME): NAME.go (one role
in looplab/fsm's vocabulary, the game with a private message, a channel and
a counterfactual declaration, two policies, the package doc),
NAME_test.go (scenariotest.Check, the role against looplab/fsm, a golden
transcript), testdata/seed1.golden, and main.go, which is the full troupe
command with the scenario registered. Outside a module that requires
troupe it writes go.mod and go.sum too: a module of its own that requires
troupe replaced by the checkout this troupe was built from (or --troupe
DIR), so that it builds offline:

  troupe new scenario colours --dir ./colours
  cd colours && go test && go run . run colours --episodes 3`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("new scenario takes one name, got %d arguments", len(args))
			}
			if !scenarioName.MatchString(args[0]) {
				return usagef("scenario name %q: use lower-case letters and digits, starting with a letter (words may be joined by '-')", args[0])
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			name := args[0]
			if dir == "" {
				dir = name
			}
			if troupeDir != "" {
				abs, err := filepath.Abs(troupeDir)
				if err != nil {
					return err
				}
				troupeDir = abs
			} else {
				troupeDir = SourceRoot()
			}
			files, err := NewScenario(dir, name, troupeDir)
			if err != nil {
				return a.failure("new scenario: ", err)
			}
			fmt.Fprintf(a.Stdout, "wrote scenario %s:\n", name)
			for _, f := range files {
				fmt.Fprintf(a.Stdout, "  %s\n", f)
			}
			fmt.Fprintf(a.Stdout, "next:\n")
			fmt.Fprintf(a.Stdout, "  (cd %s && go test && go run . run %s --episodes 3)\n", dir, name)
			return nil
		},
	}
	sc.Flags().StringVarP(&dir, "dir", "d", "", "directory to write into (default ./NAME); it must be empty or absent")
	sc.Flags().StringVar(&troupeDir, "troupe", "", "troupe checkout the new module's go.mod replaces troupe with (default the one this troupe was built from); unused inside a module that requires troupe")
	cmd.AddCommand(sc)
	return cmd
}

// requiresTroupe reports whether dir is inside a module that is troupe or
// names it in its go.mod.
func requiresTroupe(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for d := abs; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			return strings.Contains(string(data), "github.com/troupe-rl/troupe")
		}
		if filepath.Dir(d) == d {
			return false
		}
	}
}
