package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// checkReport is one file's report, as --json writes it.
type checkReport struct {
	File string `json:"file"`
	OK   bool   `json:"ok"`
	trajectories.CheckReport
	// Complete: the progress file says the run wrote all of it (null
	// without a progress file).
	Complete *bool `json:"complete"`
	// Error: the file could not be read at all.
	Error string `json:"error,omitempty"`
}

func (a *App) checkCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate output files of troupe run with troupe's own readers",
		Long: `Read each FILE (slime samples, flat or nested, or --episodes-out records) with
troupe's readers and report what is wrong with it: a last line cut short (a
run killed while writing), lines that do not parse, invalid samples, sample
indexes or rollout ids that skip or repeat, groups out of order, missing or
partial. When the run's progress file (FILE` + durable.Suffix + `) is beside a
samples file, the group size and episode count come from its run spec, and
the report says whether the run is complete.

One line per file; --json writes one JSON object per file instead. The exit
status is 0 when every file is whole, 1 when one is not.`,
		Example: `  troupe check out/elfarol.jsonl
  troupe check --json out/*.jsonl`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("check needs at least one file")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, path := range args {
				rep := checkFile(path)
				if !rep.OK {
					bad++
				}
				if asJSON {
					b, err := json.Marshal(rep)
					if err != nil {
						return err
					}
					fmt.Fprintf(a.Stdout, "%s\n", b)
				} else {
					fmt.Fprintln(a.Stdout, rep.line())
				}
			}
			if bad > 0 {
				return &exitError{code: ExitFailure, err: fmt.Errorf("check: %d of %d files have problems", bad, len(args))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per file: its counts, its problems, whether the run is complete")
	return cmd
}

// checkFile checks path, with what its progress file says of the run.
func checkFile(path string) *checkReport {
	rep := &checkReport{File: path}
	f, err := os.Open(path)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer f.Close()
	var opt trajectories.CheckOptions
	prog, perr := durable.Read(durable.PathOf(path))
	if perr == nil {
		if spec, err := runspec.DecodeBytes(prog.Spec); err == nil {
			opt.GroupSize, opt.Episodes = spec.GroupSize, int64(spec.Episodes)
		}
	}
	rep.CheckReport = trajectories.Check(f, opt)
	if perr == nil {
		complete := prog.Complete && rep.Episodes == int64(opt.Episodes)
		rep.Complete = &complete
	} else if !errors.Is(perr, durable.ErrNoProgress) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("progress file: %v", perr))
	}
	rep.OK = rep.CheckReport.OK()
	return rep
}

// line is the report in one line.
func (r *checkReport) line() string {
	if r.Error != "" {
		return fmt.Sprintf("%s: error: %s", r.File, r.Error)
	}
	what := fmt.Sprintf("%d episodes in %d groups, %d samples", r.Episodes, r.Groups, r.Samples)
	if r.Kind == "samples" {
		if r.Placeholders > 0 {
			what += fmt.Sprintf(" (%d placeholders)", r.Placeholders)
		}
		if r.Layout != "" {
			what += ", " + r.Layout
		}
	} else {
		what += " (episode records)"
	}
	if r.Complete != nil {
		if *r.Complete {
			what += ", complete"
		} else {
			what += ", incomplete (troupe run --resume continues it)"
		}
	}
	if len(r.Notes) > 0 {
		what += "; note: " + strings.Join(r.Notes, "; ")
	}
	if r.OK {
		return fmt.Sprintf("%s: ok: %s", r.File, what)
	}
	n := len(r.Problems) + r.More
	s := fmt.Sprintf("%s: %d problem", r.File, n)
	if n != 1 {
		s += "s"
	}
	return fmt.Sprintf("%s: %s; %s", s, what, strings.Join(r.Problems, "; "))
}
