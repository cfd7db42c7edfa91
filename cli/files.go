package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/durable"
)

// output is where samples (or episode records) go.
type output struct {
	w    io.Writer
	f    vfs.File        // nil for standard output
	dw   *durable.Writer // w, when the run is resumable: f's digest kept
	name string          // for messages
}

// digested makes o's writes keep its running digest, d up to where it is
// (nil: empty), for the checkpoints.
func (o *output) digested(d *durable.Digest) {
	o.dw = durable.NewWriter(o.f, d)
	o.w = o.dw
}

func (o *output) close() error {
	if o == nil || o.f == nil {
		return nil
	}
	if err := o.f.Close(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// runFiles are a run's output files and, when the run can be resumed (its
// outputs are files), their progress file.
type runFiles struct {
	out, episodes *output // episodes: nil without --episodes-out
	// progress is the progress the run starts from (nil: the run cannot
	// be resumed, an output is standard output); progressPath its file.
	progress     *durable.Progress
	progressPath string
	// fs is the file system the files are on.
	fs vfs.FS
}

// openFiles opens a run's outputs. They are written in place rather than
// renamed into place at the end, so that an interrupted run keeps what it
// wrote: the writers only ever write whole groups, a failed write is cut
// back to the last whole group, and the progress file beside the samples
// says how far the run got, for --resume. A fresh run writes its progress
// file (group 0) before it creates (empties) the outputs; a resumed one
// checks it against the run, restores the allocators' states and reopens
// the files cut back to its checkpoint.
func openFiles(ctx context.Context, fsys vfs.FS, p *plan, f *runFlags, stdout io.Writer) (*runFiles, error) {
	resumable := regularOrNew(fsys, p.out) && (p.episodes == "" || regularOrNew(fsys, p.episodes))
	switch {
	case f.resume && !resumable:
		return nil, usagef("--resume: standard output or a device cannot be resumed; give --out (and --episodes-out) a regular file")
	case f.resume && f.nats.Conn.URL != "":
		return nil, usagef("--resume: a --nats run resumes by itself: run the same command again (without --resume) and it re-attaches to its run")
	case f.resume:
		rf, err := reopenFiles(ctx, fsys, p)
		if !errors.Is(err, errNothingToResume) {
			return rf, err
		}
	}
	rf := &runFiles{fs: fsys}
	if resumable {
		prog, err := identity(p)
		if err != nil {
			return nil, err
		}
		for _, path := range []string{p.out, p.episodes} {
			if err := makeDir(fsys, path); err != nil {
				return nil, err
			}
		}
		rf.progressPath = durable.PathOf(p.out)
		if err := prog.Write(fsys, rf.progressPath); err != nil {
			return nil, err
		}
		rf.progress = prog
	}
	var err error
	if rf.out, err = createOutput(fsys, p.out, stdout); err != nil {
		return nil, err
	}
	if p.episodes != "" {
		if rf.episodes, err = createOutput(fsys, p.episodes, stdout); err != nil {
			return nil, errors.Join(fmt.Errorf("--episodes-out: %w", err), rf.close())
		}
	}
	if rf.progress != nil {
		rf.out.digested(nil)
		if rf.episodes != nil {
			rf.episodes.digested(nil)
		}
	}
	return rf, nil
}

// identity is the progress of p before anything is written: the run spec,
// the files and the allocators' states at the start.
func identity(p *plan) (*durable.Progress, error) {
	empty := durable.NewDigest().String()
	// The layout names --merge-turns too: a resume must write its samples
	// as the run began them.
	layout := layoutName(p.layout)
	if p.merge {
		layout += ", merged turns"
	}
	files := []durable.File{{Kind: durable.KindSamples, Path: p.out, Layout: layout, Digest: empty}}
	if p.episodes != "" {
		files = append(files, durable.File{Kind: durable.KindEpisodes, Path: p.episodes, Digest: empty})
	}
	states, err := durable.SaveStates(p.allocators)
	if err != nil {
		return nil, err
	}
	return &durable.Progress{Format: durable.Format, SpecHash: p.spec.Hash(), Spec: p.spec.Spec.Canonical(), Files: files, States: states, StartStates: states}, nil
}

// errNothingToResume: --resume found neither a progress file nor output.
var errNothingToResume = errors.New("nothing to resume")

// isEmpty reports whether path is missing or empty.
func isEmpty(fsys vfs.FS, path string) bool {
	fi, err := fsys.Stat(path)
	return err != nil && errors.Is(err, fs.ErrNotExist) || err == nil && fi.Size() == 0
}

// reopenFiles opens the outputs of the run --resume continues.
func reopenFiles(ctx context.Context, fsys vfs.FS, p *plan) (*runFiles, error) {
	path := durable.PathOf(p.out)
	prog, err := durable.Read(fsys, path)
	if errors.Is(err, durable.ErrNoProgress) && isEmpty(fsys, p.out) {
		// Killed before its first checkpoint, or never run: nothing was
		// written, so the run starts from the beginning.
		return nil, errNothingToResume
	}
	if errors.Is(err, durable.ErrNoProgress) {
		return nil, usagef("--resume: %s has no progress file (%s): it was not written by troupe run, or the run never started; run without --resume to start it", p.out, path)
	}
	if err != nil {
		return nil, usagef("--resume: %w", err)
	}
	want, err := identity(p)
	if err != nil {
		return nil, err
	}
	if err := prog.Check(want); err != nil {
		var me *durable.MismatchError
		if !errors.As(err, &me) {
			return nil, usagef("--resume: %w", err)
		}
		diffs := make([]string, len(me.Diffs))
		for i, d := range me.Diffs {
			diffs[i] = d.String()
			if flag := flagOf(d.Path); flag != "" {
				diffs[i] += " (" + flag + ")"
			}
		}
		return nil, usagef("--resume: %s was written by another run: %s; give the flags it was started with, or run without --resume to start over", p.out, strings.Join(diffs, "; "))
	}
	rf := &runFiles{progress: prog, progressPath: path, out: &output{name: p.out}, fs: fsys}
	// Every file is verified before any is touched: a refusal leaves them
	// as they were. A finished run's too: "nothing to resume" vouches for
	// its files.
	var digests []*durable.Digest
	for _, file := range prog.Files {
		d, err := durable.Verify(fsys, file)
		switch {
		case errors.Is(err, durable.ErrDamaged):
			return nil, fmt.Errorf("--resume: %w; restore it, or remove %s and %s to start the run again", err, p.out, path)
		case errors.Is(err, durable.ErrUnverifiable):
			return nil, fmt.Errorf("--resume: %w; finish the run with the troupe that started it, or remove %s and %s to start it again", err, p.out, path)
		case err != nil:
			return nil, fmt.Errorf("--resume: %w", err)
		}
		digests = append(digests, d)
	}
	// The digests vouch for the bytes, not for the fields that say what
	// they are: every field is checked against them and the spec, a
	// finished run's "complete" included, and the allocators' states
	// against the episode file's credit.
	if err := prog.Audit(ctx, durable.AuditOptions{Allocators: p.allocators, Spec: specShape, FS: fsys}); err != nil {
		switch {
		case errors.Is(err, durable.ErrInconsistent):
			return nil, fmt.Errorf("--resume: %s: %w; restore it, or remove %s and %s to start the run again", path, err, p.out, path)
		case errors.Is(err, durable.ErrUnverifiable):
			return nil, fmt.Errorf("--resume: %s: %w; finish the run with the troupe that started it, or remove %s and %s to start it again", path, err, p.out, path)
		}
		return nil, fmt.Errorf("--resume: %w", err)
	}
	if !prog.Complete {
		if err := durable.RestoreStates(p.allocators, prog.States); err != nil {
			return nil, fmt.Errorf("--resume: %s: %w", path, err)
		}
	}
	for i, file := range prog.Files {
		check := lastSampleCheck(prog.Samples-1, p.cfg.GroupIndexBase+int64(prog.Groups)-1)
		if file.Kind == durable.KindEpisodes {
			check = lastEpisodeCheck(prog.Episodes - 1)
		}
		fh, err := durable.Reopen(fsys, file, check)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("--resume: %w", err), rf.close())
		}
		o := &output{f: fh, name: file.Path}
		o.digested(digests[i])
		if file.Kind == durable.KindEpisodes {
			rf.episodes = o
		} else {
			rf.out = o
		}
	}
	return rf, nil
}

// lastSampleCheck checks that a line of samples ends with sample index of
// group group.
func lastSampleCheck(index, group int64) func([]byte) error {
	return func(line []byte) error {
		samples, err := trajectories.NewReader(bytes.NewReader(append(line, '\n'))).Next()
		if err != nil {
			return err
		}
		last := samples[len(samples)-1]
		if last.Index != index || last.GroupIndex != group {
			return fmt.Errorf("its last sample is index %d of group %d, the checkpoint's index %d of group %d", last.Index, last.GroupIndex, index, group)
		}
		return nil
	}
}

// lastEpisodeCheck checks that an episode line is episode index.
func lastEpisodeCheck(index int64) func([]byte) error {
	return func(line []byte) error {
		rec, _, err := trajectories.DecodeEpisode(line)
		if err != nil {
			return err
		}
		if rec.Index != index {
			return fmt.Errorf("its last episode is %d, the checkpoint's %d", rec.Index, index)
		}
		return nil
	}
}

func (rf *runFiles) close() error {
	return errors.Join(rf.out.close(), rf.episodes.close())
}

// writers are the files' writers, in the progress's order.
func (rf *runFiles) writers() []*durable.Writer {
	out := []*durable.Writer{rf.out.dw}
	if rf.episodes != nil {
		out = append(out, rf.episodes.dw)
	}
	return out
}

// resumeHint tells how to continue an interrupted run, when it can be.
func (rf *runFiles) resumeHint() string {
	if rf.progress == nil {
		return ""
	}
	return "; the same command with --resume continues it"
}

// regularOrNew reports whether an output path names a regular file or
// nothing yet: one that can be cut back and resumed (not standard output,
// not a device or a pipe).
func regularOrNew(fsys vfs.FS, path string) bool {
	if path == stdoutPath {
		return false
	}
	fi, err := fsys.Stat(path)
	return err != nil || fi.Mode().IsRegular()
}

// makeDir creates the directory of an output path, durably: a run's
// checkpoint syncs the files in it.
func makeDir(fsys vfs.FS, path string) error {
	if path == "" || path == stdoutPath {
		return nil
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := vfs.MkdirAllDurable(fsys, dir, 0o755); err != nil {
			return fmt.Errorf("output %s: %w", path, err)
		}
	}
	return nil
}

// createOutput creates (or empties) the output file path, and its
// directory; "-" is stdout.
func createOutput(fsys vfs.FS, path string, stdout io.Writer) (*output, error) {
	if path == stdoutPath {
		return &output{w: stdout, name: "standard output"}, nil
	}
	if err := makeDir(fsys, path); err != nil {
		return nil, err
	}
	f, err := vfs.Create(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	return &output{w: f, f: f, name: path}, nil
}

// specShape reads a progress file's spec for durable's Audit: its hash
// and the counts and numbering it sets.
func specShape(b []byte) (string, durable.Shape, error) {
	spec, err := runspec.DecodeBytes(b)
	if err != nil {
		return "", durable.Shape{}, err
	}
	return spec.Hash(), durable.Shape{Episodes: spec.Episodes, GroupSize: spec.GroupSize,
		RolloutIDBase: spec.RolloutIDBase, GroupIndexBase: spec.GroupIndexBase}, nil
}
