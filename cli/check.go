package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
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
	// Proof names the companion files the check used to prove the
	// episodes whole: the progress file, the episode file.
	Proof []string `json:"proof"`

	episodes string // the episode file used as proof, when there is one
}

// auditProblems are the disagreements of the progress file of path with
// its spec and the bytes its checkpoint vouches for (durable.Audit), in
// path and in the episode file episodes (when not ""), and, when reg
// parses the spec's allocators, with their states.
func auditProblems(ctx context.Context, prog *durable.Progress, path, episodes string, reg *credit.Registry) (problems, notes []string) {
	paths := make([]string, len(prog.Files))
	paths[0] = path
	for i, f := range prog.Files {
		if i > 0 && f.Kind == durable.KindEpisodes {
			paths[i] = episodes
		}
	}
	err := prog.Audit(ctx, durable.AuditOptions{Paths: paths, Allocators: specAllocators(prog, reg), Spec: specShape})
	if ie, ok := errors.AsType[*durable.InconsistentError](err); ok {
		out := make([]string, len(ie.Disagreements))
		for i, d := range ie.Disagreements {
			out[i] = fmt.Sprintf("%s: %s (troupe run --resume refuses it)", durable.PathOf(path), d)
		}
		return out, nil
	}
	if errors.Is(err, durable.ErrUnverifiable) {
		return nil, []string{fmt.Sprintf("%s: not verified: %v", durable.PathOf(path), err)}
	}
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", durable.PathOf(path), err)}, nil
	}
	return nil, nil
}

func (a *App) checkCommand() *cobra.Command {
	var asJSON bool
	var episodes string
	cmd := &cobra.Command{
		Use:   "check FILE|DIR...",
		Short: "Validate output files of troupe run with troupe's own readers",
		Long: `Read each FILE (slime samples, flat or nested, or --episodes-out records) with
troupe's readers and report what is wrong with it: a last line cut short (a
run killed while writing), lines that do not parse, invalid samples, sample
indexes or rollout ids that skip or repeat, groups out of order, missing or
partial, and episodes with fewer samples than the run wrote. When the run's
progress file (FILE` + durable.Suffix + `) is beside a samples file, the group
size and episode count come from its run spec, its checkpoint proves the file
whole up to there, the episode file it names (--episodes-out) proves each
episode's sample count, both files' bytes up to the checkpoint are verified
against its digests, every field of the progress file is cross-checked
against those bytes and its spec (a forged "complete" or count is a
problem), and the report says whether the run is complete. An episode file
given beside its samples file is checked against the same progress file;
one that is not given is judged all the same, its problems in the samples
file's line. A directory stands for the runs in it: each file with a
progress file beside it, and the episode file that names.

A flat file's last episode cannot be proven whole from the file alone (a cut
at a line boundary inside it reads the same): without the episode file
(--episodes, or named by the progress file) or a checkpoint the file ends
at, such a file is reported "unproven".

One line per file; --json writes one JSON object per file instead. The exit
status is 0 when every file is whole, 1 when one has a problem, 3 when none
has a problem but a flat file's last episode is unproven.`,
		Example: `  troupe check out/elfarol.jsonl
  troupe check --json out/*.jsonl`,
		Args: needsArgs("check needs at least one file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if episodes != "" && len(args) != 1 {
				return usagef("--episodes goes with one samples file")
			}
			args = expandRuns(args)
			owners := episodeOwners(args)
			bad, unproven := 0, 0
			for _, path := range args {
				rep := checkFile(cmd.Context(), path, episodes, a.Allocators)
				if o, ok := owners[filepath.Clean(path)]; ok && rep.Error == "" && len(rep.Proof) == 0 {
					o.checkEpisodes(rep)
				}
				// The episode file that proves a samples file is judged
				// with it, unless it has a line of its own.
				if ep := rep.episodes; ep != "" && !slices.ContainsFunc(args, func(a string) bool { return filepath.Clean(a) == filepath.Clean(ep) }) {
					rep.judgeEpisodes(cmd.Context(), ep, path, a.Allocators)
				}
				switch {
				case !rep.OK:
					bad++
				case rep.Ending == trajectories.EndUnproven:
					unproven++
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
			if unproven > 0 {
				return &exitError{code: ExitUnproven, err: fmt.Errorf("check: %d of %d files end with an episode that cannot be proven whole (give the episode file: --episodes)", unproven, len(args))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per file: its counts, its problems, whether the run is complete")
	cmd.Flags().StringVar(&episodes, "episodes", "", "the run's episode file (--episodes-out), to prove each episode of the samples file whole or partial (default: the one its progress file names, when it is there)")
	return cmd
}

// checkFile checks path, with what its progress file says of the run and
// the episode file (episodes, else the progress file's, when it is there);
// reg parses the run's allocators, to know their states.
func checkFile(ctx context.Context, path, episodes string, reg *credit.Registry) *checkReport {
	rep := &checkReport{File: path, Proof: []string{}}
	f, err := os.Open(path)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	if fi.IsDir() {
		rep.Error = "a directory without a run in it (no FILE" + durable.Suffix + ")"
		return rep
	}
	var opt trajectories.CheckOptions
	// What the progress file finds wrong, and notes on it: added to the
	// report once the file is checked.
	var problems, notes []string
	inconsistent := false
	prog, perr := durable.Read(nil, durable.PathOf(path))
	if perr == nil {
		rep.Proof = append(rep.Proof, durable.PathOf(path))
		if spec, err := runspec.DecodeBytes(prog.Spec); err == nil {
			opt.GroupSize, opt.Episodes = spec.GroupSize, int64(spec.Episodes)
		}
		opt.Checkpoint = &trajectories.Checkpoint{Bytes: prog.Files[0].Bytes, Episodes: prog.Episodes, Samples: prog.Samples}
		if episodes == "" {
			episodes = progressEpisodes(path, prog)
			if episodes == "" && len(prog.Files) > 1 {
				problems = append(problems, fmt.Sprintf("the episode file %s its progress file names (--episodes-out) is missing: it was deleted or moved after the run wrote its first %d bytes", prog.Files[1].Path, prog.Files[1].Bytes))
			}
		}
		// The bytes the checkpoint vouches for, in both files, must be
		// the ones the run wrote.
		verified := []durable.File{prog.Files[0]}
		verified[0].Path = path
		if episodes != "" {
			if i := slices.IndexFunc(prog.Files, func(f durable.File) bool { return f.Kind == durable.KindEpisodes }); i > 0 {
				ef := prog.Files[i]
				ef.Path = episodes
				verified = append(verified, ef)
			}
		}
		damaged := false
		for _, vf := range verified {
			if _, err := durable.Verify(nil, vf); errors.Is(err, durable.ErrUnverifiable) {
				notes = append(notes, fmt.Sprintf("%s: not verified: its progress file is %s, without digests", vf.Path, durable.FormatV1))
			} else if err != nil {
				damaged = true
				problems = append(problems, fmt.Sprintf("%v (troupe run --resume refuses it)", err))
			}
		}
		// The bytes verified, every field of the progress file is checked
		// against them and the spec: a forged "complete" or count is a
		// problem, as troupe run --resume refuses it.
		if !damaged {
			ps, ns := auditProblems(ctx, prog, path, episodes, reg)
			problems, notes = append(problems, ps...), append(notes, ns...)
		}
		inconsistent = len(problems) > 0
	}
	if episodes != "" {
		ef, err := os.Open(episodes)
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		defer ef.Close()
		opt.Records = ef
		rep.Proof = append(rep.Proof, episodes)
		rep.episodes = episodes
	}
	if fi.Mode().IsRegular() {
		rep.CheckReport = trajectories.CheckAt(f, fi.Size(), opt)
	} else {
		rep.CheckReport = trajectories.Check(f, opt)
	}
	rep.Problems = append(rep.Problems, problems...)
	rep.Notes = append(rep.Notes, notes...)
	if perr == nil {
		complete := prog.Complete && !inconsistent && rep.Episodes == int64(opt.Episodes)
		rep.Complete = &complete
	} else if !errors.Is(perr, durable.ErrNoProgress) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("progress file: %v", perr))
	}
	rep.OK = rep.CheckReport.OK()
	return rep
}

// expandRuns replaces each directory among args with the runs it holds:
// every file with a progress file beside it, and the episode file its
// progress file names, when it is in the directory.
func expandRuns(args []string) []string {
	var out []string
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil || !fi.IsDir() {
			out = append(out, arg)
			continue
		}
		progs, _ := filepath.Glob(filepath.Join(arg, "*"+durable.Suffix))
		slices.Sort(progs)
		n := len(out)
		for _, pp := range progs {
			samples := strings.TrimSuffix(pp, durable.Suffix)
			if fi, err := os.Stat(samples); err != nil || !fi.Mode().IsRegular() {
				if errors.Is(err, os.ErrNotExist) {
					out = append(out, samples) // reported missing
				}
				continue
			}
			out = append(out, samples)
			if prog, err := durable.Read(nil, pp); err == nil {
				if ep := progressEpisodes(samples, prog); ep != "" {
					out = append(out, ep)
				}
			}
		}
		if len(out) == n {
			out = append(out, arg) // reported: not a run's directory
		}
	}
	return out
}

// episodeOwner is the samples file and progress file of an episode file.
type episodeOwner struct {
	samples string
	prog    *durable.Progress
	file    durable.File
}

// episodeOwners maps the episode files among args (cleaned paths) to the
// samples file among args whose progress file names them.
func episodeOwners(args []string) map[string]episodeOwner {
	owners := map[string]episodeOwner{}
	for _, path := range args {
		prog, err := durable.Read(nil, durable.PathOf(path))
		if err != nil {
			continue
		}
		ep := progressEpisodes(path, prog)
		if ep == "" {
			continue
		}
		for _, f := range prog.Files[1:] {
			if f.Kind == durable.KindEpisodes {
				owners[filepath.Clean(ep)] = episodeOwner{samples: path, prog: prog, file: f}
			}
		}
	}
	return owners
}

// checkEpisodes checks the report of an episode file against its samples
// file's progress file: its bytes up to the checkpoint, the episodes there,
// and, the run complete, that it holds no more.
func (o episodeOwner) checkEpisodes(rep *checkReport) {
	pp := durable.PathOf(o.samples)
	rep.Proof = append(rep.Proof, pp)
	vf := o.file
	vf.Path = rep.File
	if _, err := durable.Verify(nil, vf); errors.Is(err, durable.ErrUnverifiable) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("not verified: %s is %s, without digests", pp, durable.FormatV1))
	} else if err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%v (troupe run --resume refuses it)", err))
	}
	switch {
	case rep.Episodes < o.prog.Episodes:
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d episodes, fewer than the %d of the checkpoint in %s", rep.Episodes, o.prog.Episodes, pp))
	case o.prog.Complete && rep.Episodes > o.prog.Episodes:
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d episodes, more than the %d of the finished run in %s", rep.Episodes, o.prog.Episodes, pp))
	}
	complete := o.prog.Complete && rep.Episodes == o.prog.Episodes
	rep.Complete = &complete
	rep.OK = rep.CheckReport.OK()
}

// specAllocators are the allocators the spec of prog names, parsed by
// reg, never closed (a state file is read, not written); nil when one
// does not parse (a registry that lacks it): their states go unchecked.
func specAllocators(prog *durable.Progress, reg *credit.Registry) []trajectories.Allocator {
	spec, err := runspec.DecodeBytes(prog.Spec)
	if err != nil || reg == nil {
		return nil
	}
	allocs := []trajectories.Allocator{}
	for _, name := range spec.Allocators {
		a, err := reg.Parse(name)
		if err != nil {
			return nil
		}
		allocs = append(allocs, a)
	}
	return allocs
}

// judgeEpisodes adds the problems of the episode file ep, which proves
// the samples file path, to the samples file's report, each naming ep.
func (r *checkReport) judgeEpisodes(ctx context.Context, ep, path string, reg *credit.Registry) {
	er := checkFile(ctx, ep, "", reg)
	if o, ok := episodeOwners([]string{path})[filepath.Clean(ep)]; ok && er.Error == "" && len(er.Proof) == 0 {
		o.checkEpisodes(er)
	}
	if er.Error != "" {
		r.Problems = append(r.Problems, fmt.Sprintf("%s: %s", ep, er.Error))
	}
	for _, pr := range er.Problems {
		if !slices.Contains(r.Problems, pr) { // a damage both reports find
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s", ep, pr))
		}
	}
	r.More += er.More
	r.OK = r.CheckReport.OK()
	if er.Complete != nil && r.Complete != nil && !*er.Complete {
		f := false
		r.Complete = &f
	}
}

// progressEpisodes returns the episode file the progress file of path
// names, when it is there: as the run was given it, else beside path.
func progressEpisodes(path string, prog *durable.Progress) string {
	for _, pf := range prog.Files[1:] {
		if pf.Kind != durable.KindEpisodes {
			continue
		}
		for _, p := range []string{pf.Path, filepath.Join(filepath.Dir(path), filepath.Base(pf.Path))} {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p
			}
		}
	}
	return ""
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
		} else if !r.OK {
			what += ", incomplete"
		} else {
			what += ", incomplete (troupe run --resume continues it)"
		}
	}
	if len(r.Notes) > 0 {
		what += "; note: " + strings.Join(r.Notes, "; ")
	}
	if r.OK && r.Ending == trajectories.EndUnproven {
		return fmt.Sprintf("%s: unproven: %s", r.File, what)
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
