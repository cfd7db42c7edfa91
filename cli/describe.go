package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

func (a *App) scenariosCommand() *cobra.Command {
	diagram := "mermaid"
	cmd := &cobra.Command{
		Use:   "scenarios [NAME]",
		Short: "List the scenarios, or describe one",
		Long: `Without NAME, list the built-in scenarios with a one-line summary.
With NAME, describe that scenario: its rules, schedule, roles with their
state machines, parameters (for --param), policies (for --policy) and what
it declares for counterfactual credit assignment.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("scenarios takes at most one scenario name, got %d arguments: %s", len(args), strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			var kind agents.DiagramKind
			switch diagram {
			case "mermaid":
				kind = agents.Mermaid
			case "graphviz":
				kind = agents.Graphviz
			default:
				return usagef("--diagram %q: want mermaid or graphviz", diagram)
			}
			if len(args) == 0 {
				return a.listScenarios()
			}
			sc, err := a.Scenarios.Lookup(args[0])
			if err != nil {
				return &UsageError{Err: err}
			}
			if err := describeScenario(a.Stdout, sc.Info(), kind); err != nil {
				return a.failure("", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&diagram, "diagram", diagram, "notation of the roles' state diagrams: mermaid or graphviz")
	return cmd
}

func (a *App) listScenarios() error {
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	for _, name := range a.Scenarios.Names() {
		sc, err := a.Scenarios.Lookup(name)
		if err != nil {
			return &exitError{code: ExitFailure, err: err} // Names and Lookup disagree: cannot happen
		}
		info := sc.Info()
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, info.Schedule, info.Summary)
	}
	if err := tw.Flush(); err != nil {
		return &exitError{code: ExitFailure, err: err}
	}
	fmt.Fprintln(a.Stdout, "\nDescribe one with: troupe scenarios NAME")
	return nil
}

// describeScenario writes everything a user needs to run the scenario.
func describeScenario(w io.Writer, info *env.Info, kind agents.DiagramKind) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\n", info.Name, info.Summary)
	if info.Doc != "" {
		b.WriteString(wrap(info.Doc, 78, ""))
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Schedule: %s\n", info.Schedule)
	if len(info.Teams) > 0 {
		// Each seat is on one; every allocator credits it out of its
		// team's reward.
		fmt.Fprintf(&b, "Teams: %s (credit per team: docs/credit.md#teams)\n", strings.Join(info.Teams, ", "))
	}
	b.WriteString("\n")

	b.WriteString("Roles:\n")
	for _, r := range info.Roles {
		fmt.Fprintf(&b, "  %s", r.Name)
		if r.Doc != "" {
			fmt.Fprintf(&b, ": %s", r.Doc)
		}
		b.WriteString("\n")
		terminal := make([]string, len(r.Terminal))
		for i, s := range r.Terminal {
			terminal[i] = string(s)
		}
		var acting []string
		for _, s := range r.States() {
			if r.ActsIn(s) {
				acting = append(acting, string(s))
			}
		}
		fmt.Fprintf(&b, "    initial state %s; acts in: %s; terminal states: %s\n", r.Initial, cmp.Or(strings.Join(acting, ", "), "none"), cmp.Or(strings.Join(terminal, ", "), "none"))
		d, err := r.Diagram(kind)
		if err != nil {
			return fmt.Errorf("scenario %s role %s: diagram: %w", info.Name, r.Name, err)
		}
		for line := range strings.Lines(d) {
			b.WriteString("    ")
			b.WriteString(line)
		}
		if !strings.HasSuffix(d, "\n") {
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")

	b.WriteString("Parameters (--param key=value):\n")
	if len(info.Params) == 0 {
		b.WriteString("  none\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tKIND\tDEFAULT\tALLOWED\tMEANING")
		for _, p := range info.Params {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, cmp.Or(p.Default, `""`), allowed(p), p.Doc)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	b.WriteString("\n")

	fmt.Fprintf(&b, "Policies (--policy NAME or ROLE=NAME): %s (default: %s)\n\n", strings.Join(info.PolicyNames(), ", "), info.DefaultPolicyName())

	b.WriteString("Counterfactuals: ")
	if cf := info.Counterfactual; cf == nil {
		b.WriteString("not declared: allocators that re-simulate an episode without an agent, or with its null action, cannot run on this scenario\n")
	} else {
		b.WriteString("declared\n")
		if cf.AbsentOK {
			b.WriteString("  absent agents: allowed\n")
		} else {
			b.WriteString("  absent agents: not allowed\n")
		}
		if len(cf.NullAction) == 0 && len(cf.NullActionIn) == 0 {
			b.WriteString("  null actions: none\n")
		}
		for _, role := range slices.Sorted(maps.Keys(cf.NullAction)) {
			fmt.Fprintf(&b, "  null action of %s: %q\n", role, cf.NullAction[role])
		}
		for _, role := range slices.Sorted(maps.Keys(cf.NullActionIn)) {
			for _, st := range slices.Sorted(maps.Keys(cf.NullActionIn[role])) {
				fmt.Fprintf(&b, "  null action of %s in state %s: %q\n", role, st, cf.NullActionIn[role][st])
			}
		}
		if cf.Doc != "" {
			b.WriteString(wrap(cf.Doc, 78, "  "))
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// allowed renders a parameter's allowed values.
func allowed(p env.ParamSpec) string {
	switch {
	case len(p.Choices) > 0:
		return "one of " + strings.Join(p.Choices, "|")
	case p.Kind == env.BoolParam:
		return "true|false"
	case p.Bounded && p.Kind == env.IntParam:
		return "[" + strconv.FormatFloat(p.Min, 'f', -1, 64) + ", " + strconv.FormatFloat(p.Max, 'f', -1, 64) + "]"
	case p.Bounded:
		return "[" + strconv.FormatFloat(p.Min, 'g', -1, 64) + ", " + strconv.FormatFloat(p.Max, 'g', -1, 64) + "]"
	}
	return "any"
}

// wrap fills text's paragraphs (separated by blank lines) to width
// columns, each line starting with indent. Lines that start with a space
// or a tab (code, formulas) are kept as they are.
func wrap(text string, width int, indent string) string {
	var out []string
	for para := range strings.SplitSeq(strings.TrimSpace(text), "\n\n") {
		var lines []string
		line := ""
		flush := func() {
			if line != "" {
				lines = append(lines, indent+line)
				line = ""
			}
		}
		for raw := range strings.SplitSeq(para, "\n") {
			if strings.HasPrefix(raw, " ") || strings.HasPrefix(raw, "\t") {
				flush()
				lines = append(lines, indent+raw)
				continue
			}
			for _, word := range strings.Fields(raw) {
				if line != "" && len(indent)+len(line)+1+len(word) > width {
					flush()
				}
				if line == "" {
					line = word
				} else {
					line += " " + word
				}
			}
		}
		flush()
		out = append(out, strings.Join(lines, "\n"))
	}
	return strings.Join(out, "\n\n")
}

func (a *App) allocatorsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "allocators",
		Short: "List the reward allocators (credit assignment)",
		Long: `List the allocators that split an episode's team reward among its samples.
Choose them with troupe run --allocator; several at once with
--reward-format dict write every allocator's value under its name.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("allocators takes no arguments, got %s", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			if err := a.Allocators.Usage(a.Stdout); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}
}
