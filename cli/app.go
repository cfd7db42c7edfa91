// Package cli is the troupe command line: its commands (run, scenarios,
// allocators, experiment, serve, worker, runs, new, view, check, league),
// flags, progress display and summaries. It is a package of its own so that tests drive it with their
// own arguments, writers, registries and context, and so that a program
// with scenarios of its own is the full troupe command in a few lines:
//
//	package main
//
//	import (
//		"os"
//
//		"github.com/troupe-rl/troupe/cli"
//	)
//
//	func main() { os.Exit(cli.Main(cli.WithScenarios(Scenario()))) }
//
// `go run . run myscenario -n 100` then plays it, `go run . scenarios`
// lists it beside the built-in ones (WithoutBuiltins leaves those out),
// and every other command works on it as on a built-in scenario.
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Exit codes of troupe.
const (
	ExitOK      = 0
	ExitFailure = 1 // the run failed: its output could not be written, or an episode failed under --fail-fast
	ExitUsage   = 2 // a bad command line: unknown command, scenario, flag, parameter, policy or allocator, or a bad value
	// ExitUnproven is troupe check's status when no file has a problem
	// but a flat file's last episode cannot be proven whole.
	ExitUnproven = 3
	// ExitInterrupted is the exit code of a run stopped by cancellation
	// without a signal; a signal n gives 128+n (130 for SIGINT, 143 for
	// SIGTERM).
	ExitInterrupted = 130
)

// App is the troupe command line with its environment: the streams it
// writes to and the scenarios and allocators it knows.
type App struct {
	// Stdout receives listings and, with --out -, the samples.
	Stdout io.Writer
	// Stderr receives progress, summaries and errors.
	Stderr io.Writer
	// Scenarios and Allocators are the names the command line accepts.
	Scenarios  *env.Registry
	Allocators *credit.Registry
	// Terminal reports whether w is an interactive terminal: a run then
	// draws a progress bar on Stderr instead of printing periodic lines.
	Terminal func(w io.Writer) bool
	// LookupEnv reads the environment (TROUPE_LLM_* settings); nil means
	// os.LookupEnv.
	LookupEnv func(key string) (string, bool)

	// fs is the file system the durable outputs (a run's files and its
	// progress) are written on: nil is the operating system's; the fault
	// tests give their own.
	fs vfs.FS

	// err is why New could not build the registry (two scenarios of one
	// name, a bad definition); Main reports it and runs nothing.
	err error
}

// Option configures the command line that New and Main build.
type Option func(*options)

type options struct {
	scenarios  []env.Scenario
	noBuiltins bool
	allocators *credit.Registry
}

// WithScenarios registers scenarios beside troupe's built-in ones (or
// instead of them, with WithoutBuiltins). A name given twice, or a
// definition that does not validate, makes Main fail with the reason.
func WithScenarios(sc ...env.Scenario) Option {
	return func(o *options) { o.scenarios = append(o.scenarios, sc...) }
}

// WithoutBuiltins leaves troupe's built-in scenarios out: the command
// offers only those of WithScenarios.
func WithoutBuiltins() Option { return func(o *options) { o.noBuiltins = true } }

// WithAllocators replaces the credit-assignment allocators the command
// accepts (credit.Builtin() by default).
func WithAllocators(r *credit.Registry) Option { return func(o *options) { o.allocators = r } }

// fsys is the file system the durable outputs are written on.
func (a *App) fsys() vfs.FS { return vfs.Or(a.fs) }

func (a *App) lookupEnv() func(string) (string, bool) {
	if a.LookupEnv != nil {
		return a.LookupEnv
	}
	return os.LookupEnv
}

// New returns the command line with troupe's built-in scenarios and
// allocators, and those the options add, writing to stdout and stderr.
func New(stdout, stderr io.Writer, opts ...Option) *App {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a := &App{
		Stdout:     stdout,
		Stderr:     stderr,
		Allocators: cmp.Or(o.allocators, credit.Builtin()),
		Terminal:   isTerminal,
	}
	list := o.scenarios
	if !o.noBuiltins {
		list = append(scenarios.List(), o.scenarios...)
	}
	a.Scenarios, a.err = env.NewRegistry(list...)
	if a.err != nil && !o.noBuiltins {
		a.err = clashWithBuiltin(a.err, o.scenarios)
	}
	return a
}

// clashWithBuiltin says what to do when a scenario of WithScenarios is
// refused because a built-in one has its name: a name free today may be
// taken by the scenario a later troupe adds.
func clashWithBuiltin(err error, own []env.Scenario) error {
	builtin := make(map[string]bool)
	for _, s := range scenarios.List() {
		builtin[s.Info().Name] = true
	}
	for _, s := range own {
		if name := s.Info().Name; builtin[name] {
			return fmt.Errorf("%w; %q is the name of one of troupe's built-in scenarios, which WithScenarios adds to: rename yours (its Info.Name), or pass cli.WithoutBuiltins() to offer only your own", err, name)
		}
	}
	return err
}

// Main is the whole troupe command as a process runs it: it reads os.Args,
// writes to os.Stdout and os.Stderr, turns the first SIGINT or SIGTERM into
// a graceful stop (NotifyContext), and returns the exit code for os.Exit.
func Main(opts ...Option) int {
	ctx, stop := NotifyContext(context.Background())
	defer stop()
	return New(os.Stdout, os.Stderr, opts...).Main(ctx, os.Args[1:])
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// UsageError is a bad command line. Main prints it with a pointer to the
// command's help and exits with ExitUsage.
type UsageError struct {
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usagef returns a *UsageError; %w in format wraps as fmt.Errorf does.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// exitError is an error of a command that ran: it carries its exit code.
// The command has already reported it in full on Stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// failure is a command's error for err: nil for nil, a *UsageError when
// err is one of refused (a configuration or input the command refuses),
// else an *exitError of ExitFailure, printed on Stderr after "troupe: "
// and prefix.
func (a *App) failure(prefix string, err error, refused ...error) error {
	if err == nil {
		return nil
	}
	for _, r := range refused {
		if errors.Is(err, r) {
			return &UsageError{Err: err}
		}
	}
	fmt.Fprintf(a.Stderr, "troupe: %s%v\n", prefix, err)
	return &exitError{code: ExitFailure, err: err}
}

// ErrInterrupted is wrapped by the error of a run whose context was
// cancelled (Ctrl-C): what finished was written, the rest was not.
var ErrInterrupted = errors.New("run interrupted")

// Main runs the command line args (without the program name) and returns
// the process's exit code. Cancelling ctx interrupts a run the way Ctrl-C
// does.
func (a *App) Main(ctx context.Context, args []string) int {
	if a.err != nil {
		fmt.Fprintf(a.Stderr, "troupe: the scenarios cannot be registered: %v\n", a.err)
		return ExitFailure
	}
	root := a.root()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	// Every error a command returns after it started is an *exitError, so
	// anything else comes from the command line itself: cobra's unknown
	// commands and flags, argument counts, or our own *UsageError.
	path := root.Name()
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(a.Stderr, "%s: %v\nRun '%s --help' for usage.\n", root.Name(), err, path)
	return ExitUsage
}

func (a *App) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "troupe",
		Short: "Run multi-agent scenarios and write their turns as slime training samples",
		Long: `troupe runs multi-agent scenarios (games, negotiations, coordination
problems) as deterministic episodes and writes every agent turn as one
THUDM/slime training Sample, one JSON object per line.

  troupe scenarios              list the built-in scenarios
  troupe scenarios elfarol      describe one: rules, roles, parameters, policies
  troupe allocators             list the credit-assignment allocators
  troupe run elfarol -n 1000    play 1000 episodes, write troupe-elfarol.jsonl
  troupe view FILE              see the episodes of a file in a browser
  troupe new scenario NAME      write a working, tested scenario of your own`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(a.runCommand(), a.scenariosCommand(), a.allocatorsCommand(), a.experimentCommand(), a.serveCommand(), a.envServeCommand(), a.workerCommand(), a.runsCommand(), a.newCommand(), a.viewCommand(), a.checkCommand(), a.exportCommand(), a.leagueCommand())
	return root
}

// knownScenarios is the list of scenario names for error messages.
func (a *App) knownScenarios() string { return strings.Join(a.Scenarios.Names(), ", ") }

// oneScenario accepts one argument, the scenario of command, or none when
// spec is not nil and names a --spec file.
func (a *App) oneScenario(command string, spec *string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 1 || len(args) == 0 && spec != nil && *spec != "":
			return nil
		case len(args) == 0:
			return usagef("%s needs a scenario name (known: %s)", command, a.knownScenarios())
		}
		return usagef("%s takes one scenario, got %d arguments: %s", command, len(args), strings.Join(args, " "))
	}
}

// needsArgs accepts one argument or more, and refuses none with msg.
func needsArgs(msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("%s", msg)
		}
		return nil
	}
}
