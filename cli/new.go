package cli

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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

// NewScenario writes a working, tested scenario called name into dir
// (created if need be; it must be empty): NAME.go (the scenario: one role
// in looplab/fsm's vocabulary, the game, two policies, the package doc),
// NAME_test.go (envtest.Check, agentstest.Check, the doc's diagram, a
// golden transcript), testdata/seed1.golden, and main.go, the full troupe
// command with the scenario registered (Main with WithScenarios). The
// package is a command: `go test` and `go run . run NAME` work in dir
// once it is in a module that requires troupe. It returns the paths
// written.
func NewScenario(dir, name string) ([]string, error) {
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
	return written, err
}

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
	var dir string
	sc := &cobra.Command{
		Use:   "scenario NAME",
		Short: "Write a working, tested scenario and its troupe command into a new directory",
		Long: `Write a scenario called NAME into DIR (default ./NAME): NAME.go (one role
in looplab/fsm's vocabulary, the game, two policies, the package doc),
NAME_test.go (envtest.Check, the role against looplab/fsm, a golden
transcript), testdata/seed1.golden, and main.go, which is the full troupe
command with the scenario registered:

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
			files, err := NewScenario(dir, name)
			if err != nil {
				fmt.Fprintf(a.Stderr, "troupe: new scenario: %v\n", err)
				return &exitError{code: ExitFailure, err: err}
			}
			fmt.Fprintf(a.Stdout, "wrote scenario %s:\n", name)
			for _, f := range files {
				fmt.Fprintf(a.Stdout, "  %s\n", f)
			}
			fmt.Fprintf(a.Stdout, "next:\n")
			if !requiresTroupe(dir) {
				fmt.Fprintf(a.Stdout, "  (cd %s && go mod init example.com/%s && go get github.com/troupe-rl/troupe && go mod tidy)\n", dir, name)
			}
			fmt.Fprintf(a.Stdout, "  (cd %s && go test && go run . run %s --episodes 3)\n", dir, name)
			return nil
		},
	}
	sc.Flags().StringVarP(&dir, "dir", "d", "", "directory to write into (default ./NAME); it must be empty or absent")
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
