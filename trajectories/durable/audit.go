package durable

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// ErrInconsistent is wrapped by Audit's error: a field of the progress
// file disagrees with its run spec, with another of its fields, or with the
// bytes of the files it vouches for. Such a file was edited (or written by
// something other than a run), and nothing in it can be believed.
var ErrInconsistent = errors.New("the progress file disagrees with its run and its files")

// InconsistentError is Audit's error: every disagreement found, each naming
// the progress file's field ("complete", "episodes", "files[0].bytes") and
// what it disagrees with. It wraps ErrInconsistent and ErrBadProgress.
type InconsistentError struct {
	Disagreements []string
}

func (e *InconsistentError) Error() string {
	return ErrInconsistent.Error() + ": " + strings.Join(e.Disagreements, "; ")
}

// Unwrap returns ErrInconsistent and ErrBadProgress.
func (e *InconsistentError) Unwrap() []error { return []error{ErrInconsistent, ErrBadProgress} }

// AuditOptions are what Audit needs beyond the progress file.
type AuditOptions struct {
	// Paths, when set, are where p.Files are read (troupe check's paths
	// may name them otherwise than the run did), in p.Files' order; an
	// empty path: the file is not there, and is not audited.
	Paths []string
	// Allocators, when set, are the run's allocators: p.States must hold
	// the state of each stateful one, by name, in order, and no other.
	Allocators []trajectories.Allocator
}

// Audit cross-checks every field of p that Verify does not: the spec
// against its hash; the counts against the spec
// (groups of the run's group size, no more than the run's, "complete"
// exactly when they are all written); and the bytes each file's checkpoint
// vouches for against the counts: they must read, with troupe's checker,
// as exactly p.Groups whole groups, p.Episodes episodes and p.Samples
// samples, numbered from the spec's bases on (sample index 0, rollout_id
// and group_index bases, episode index 0) up to the last one the counts
// give, with the episode file's records proving each episode's sample
// count. Verify must have vouched for those bytes first: Audit reads them
// as they are.
//
// A progress file the run wrote passes; one whose fields were edited,
// alone or consistently with each other, fails with an *InconsistentError
// naming every field that disagrees, unless the edit describes another
// checkpoint of the same bytes exactly: an earlier group boundary, its
// digests recomputed. A resume from there writes the same bytes again
// when the run's allocators are stateless; the values of a stateful
// allocator's state are not derivable from the files (RAE's baselines are
// not in them), and Audit checks only their names.
func (p *Progress) Audit(opt AuditOptions) error {
	a := &auditor{p: p}
	spec := a.spec()
	a.states(opt.Allocators)
	if spec == nil {
		return a.err()
	}
	a.counts(spec)
	// pathOf is where file i is read; "" when it is not audited.
	pathOf := func(i int) string {
		if opt.Paths == nil {
			return p.Files[i].Path
		}
		if i < len(opt.Paths) {
			return opt.Paths[i]
		}
		return ""
	}
	for i, f := range p.Files {
		path := pathOf(i)
		if path == "" {
			continue
		}
		var err error
		switch f.Kind {
		case KindSamples:
			var records io.Reader
			if j := a.episodeFile(); j > 0 && pathOf(j) != "" {
				fh, err := os.Open(pathOf(j))
				switch {
				case err == nil:
					defer fh.Close()
					records = io.NewSectionReader(fh, 0, p.Files[j].Bytes)
				case !errors.Is(err, os.ErrNotExist) || p.Files[j].Bytes > 0:
					return fmt.Errorf("audit: %w", err)
				}
			}
			err = a.samples(i, path, spec, records)
		case KindEpisodes:
			err = a.episodes(i, path, spec)
		}
		if err != nil {
			return err
		}
	}
	return a.err()
}

// auditor collects the disagreements of one progress file.
type auditor struct {
	p     *Progress
	found []string
}

func (a *auditor) disagree(format string, args ...any) {
	a.found = append(a.found, fmt.Sprintf(format, args...))
}

// err is the *InconsistentError of the disagreements found, nil for none.
func (a *auditor) err() error {
	if len(a.found) == 0 {
		return nil
	}
	return &InconsistentError{Disagreements: a.found}
}

// spec decodes the progress file's spec and checks it against its hash;
// nil when it cannot be decoded.
func (a *auditor) spec() *runspec.Spec {
	p := a.p
	spec, err := runspec.DecodeBytes(p.Spec)
	if err != nil {
		a.disagree(`"spec" is not a run spec: %v`, err)
		return nil
	}
	if h := spec.Hash(); h != p.SpecHash {
		a.disagree(`"spec_hash" is %s, the hash of "spec" %s`, p.SpecHash, h)
	}
	return spec
}

// counts checks the counts against the spec and each other.
func (a *auditor) counts(spec *runspec.Spec) {
	p := a.p
	n, g := int64(spec.Episodes), int64(max(spec.GroupSize, 1))
	total := (n + g - 1) / g
	groups := int64(p.Groups)
	if groups > total {
		a.disagree(`"groups" is %d, more than the %d of the run (%d episodes in groups of %d)`, p.Groups, total, n, g)
	}
	if want := min(groups*g, n); p.Episodes != want {
		a.disagree(`"episodes" is %d, but %d groups of %d make %d of the run's %d`, p.Episodes, p.Groups, g, want, n)
	}
	if p.Samples < p.Episodes {
		a.disagree(`"samples" is %d, fewer than the %d episodes (each is written as one sample at least)`, p.Samples, p.Episodes)
	}
	if done := groups == total; p.Complete != done {
		a.disagree(`"complete" is %v, but %d of the run's %d groups (%d of its %d episodes) were written`, p.Complete, p.Groups, total, p.Episodes, n)
	}
}

// states checks that the states are those of the run's stateful
// allocators.
func (a *auditor) states(allocs []trajectories.Allocator) {
	if allocs == nil {
		return
	}
	want, err := SaveStates(allocs)
	if err != nil {
		a.disagree("allocator states: %v", err)
		return
	}
	names := func(sts []State) string {
		out := make([]string, len(sts))
		for i, s := range sts {
			out[i] = s.Allocator
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	if had, now := names(a.p.States), names(want); had != now {
		a.disagree(`"allocator_states" holds the states of %s, the run's stateful allocators are %s`, had, now)
	}
}

// episodeFile is the index of the episode file in p.Files, or -1.
func (a *auditor) episodeFile() int {
	for i, f := range a.p.Files {
		if f.Kind == KindEpisodes {
			return i
		}
	}
	return -1
}

// samples audits the samples file i, at path, up to its checkpoint, with
// the episode file's records up to theirs.
func (a *auditor) samples(i int, path string, spec *runspec.Spec, records io.Reader) error {
	p, f := a.p, a.p.Files[i]
	field := fmt.Sprintf("files[%d]", i)
	fh, err := os.Open(path)
	var rep trajectories.CheckReport // a file not there holds nothing
	switch {
	case err == nil:
		defer fh.Close()
		rep = trajectories.CheckAt(fh, f.Bytes, trajectories.CheckOptions{
			GroupSize: spec.GroupSize, Episodes: int64(spec.Episodes), MaxProblems: 3, Records: records,
			Checkpoint: &trajectories.Checkpoint{Bytes: f.Bytes, Episodes: p.Episodes, Samples: p.Samples},
		})
		a.report(field, rep)
	case f.Bytes > 0 || !errors.Is(err, os.ErrNotExist):
		// Missing with a checkpoint at 0 (killed before it was created),
		// it holds nothing; else Verify refused it first.
		return fmt.Errorf("audit: %w", err)
	}
	if rep.Samples != p.Samples {
		a.disagree(`"samples" is %d, the %d bytes %s.bytes vouches for hold %d`, p.Samples, f.Bytes, field, rep.Samples)
	}
	if rep.Episodes != p.Episodes {
		a.disagree(`"episodes" is %d, the %d bytes %s.bytes vouches for hold %d`, p.Episodes, f.Bytes, field, rep.Episodes)
	}
	if rep.Groups != int64(p.Groups) {
		a.disagree(`"groups" is %d, the %d bytes %s.bytes vouches for hold %d`, p.Groups, f.Bytes, field, rep.Groups)
	}
	if rep.Layout != "" && !strings.HasPrefix(f.Layout, rep.Layout) {
		a.disagree(`%s.layout is %q, the file is %s`, field, f.Layout, rep.Layout)
	}
	if f.Bytes == 0 {
		return nil
	}
	a.ends(field, "sample", fh, f.Bytes, spec, p.Samples-1, func(line []byte, last bool) (position, error) {
		samples, err := trajectories.NewReader(bytes.NewReader(append(line, '\n'))).Next()
		if err == nil && len(samples) == 0 {
			err = errors.New("no sample")
		}
		if err != nil {
			return position{}, err
		}
		s := samples[0]
		if last {
			s = samples[len(samples)-1]
		}
		return position{s.Index, s.RolloutID, s.GroupIndex}, nil
	})
	return nil
}

// episodes audits the episode file i, at path, up to its checkpoint.
func (a *auditor) episodes(i int, path string, spec *runspec.Spec) error {
	p, f := a.p, a.p.Files[i]
	field := fmt.Sprintf("files[%d]", i)
	fh, err := os.Open(path)
	var records int64 // a file not there holds none
	switch {
	case err == nil:
		defer fh.Close()
		// The records are read by the samples' audit, each against its
		// episode's samples (rollout_id, group_index, sample count), as
		// far as they go; here they are counted, and the first and the
		// last decoded whole: decoding every record would cost ten times
		// the rest.
		if records, err = countLines(fh, f.Bytes); err != nil {
			return fmt.Errorf("audit: %s: %w", path, err)
		}
	case f.Bytes > 0 || !errors.Is(err, os.ErrNotExist):
		// Missing with a checkpoint at 0 (killed before it was created),
		// it holds nothing; else Verify refused it first.
		return fmt.Errorf("audit: %w", err)
	}
	if records != p.Episodes {
		a.disagree(`"episodes" is %d, the %d bytes %s.bytes vouches for hold %d records`, p.Episodes, f.Bytes, field, records)
	}
	if f.Bytes == 0 {
		return nil
	}
	a.ends(field, "episode record", fh, f.Bytes, spec, p.Episodes-1, func(line []byte, _ bool) (position, error) {
		rec, _, err := trajectories.DecodeEpisode(line)
		if err != nil {
			return position{}, err
		}
		return position{rec.Index, rec.RolloutID, rec.GroupIndex}, nil
	})
	return nil
}

// position is where a sample or an episode record stands in its run: its
// index, rollout_id and group_index.
type position struct{ index, rollout, group int64 }

// ends checks the first and the last what (a sample, an episode record)
// of the n bytes of f that field vouches for: they must stand at index 0
// and lastIndex, at the spec's bases and the last episode and group the
// counts give. read reads a line's first (or last) one.
func (a *auditor) ends(field, what string, f *os.File, n int64, spec *runspec.Spec, lastIndex int64, read func(line []byte, last bool) (position, error)) {
	p := a.p
	first, last, err := endLines(f, n)
	if err != nil {
		a.disagree("%s.bytes: %v", field, err)
		return
	}
	for _, end := range []struct {
		which string
		line  []byte
		want  position
	}{
		{"first", first, position{0, spec.RolloutIDBase, spec.GroupIndexBase}},
		{"last", last, position{lastIndex, spec.RolloutIDBase + p.Episodes - 1, spec.GroupIndexBase + int64(p.Groups) - 1}},
	} {
		got, err := read(end.line, end.which == "last")
		if err != nil {
			a.disagree("%s.bytes: the %s line before the checkpoint is not a %s: %v", field, end.which, what, err)
			continue
		}
		if got != end.want {
			a.disagree(`the %s %s before the checkpoint is index %d, rollout_id %d, group_index %d; the spec's bases and "samples", "episodes", "groups" make it index %d, rollout_id %d, group_index %d`,
				end.which, what, got.index, got.rollout, got.group, end.want.index, end.want.rollout, end.want.group)
		}
	}
}

// report takes what the checker found wrong in a file's checkpointed bytes.
func (a *auditor) report(field string, rep trajectories.CheckReport) {
	for _, pr := range rep.Problems {
		a.disagree("%s: the bytes its checkpoint vouches for: %s", field, pr)
	}
	if rep.More > 0 {
		a.disagree("%s: %d problems more", field, rep.More)
	}
	if rep.Ending != trajectories.EndWhole && rep.Episodes > 0 && len(rep.Problems) == 0 {
		a.disagree("%s.bytes: the bytes its checkpoint vouches for end %s, not with a whole group", field, rep.Ending)
	}
}

// countLines counts the newlines in the first n bytes of r.
func countLines(r io.ReaderAt, n int64) (int64, error) {
	buf := make([]byte, 1<<20)
	var lines int64
	for off := int64(0); off < n; {
		k, err := r.ReadAt(buf[:min(int64(len(buf)), n-off)], off)
		lines += int64(bytes.Count(buf[:k], []byte{'\n'}))
		off += int64(k)
		if err != nil && (!errors.Is(err, io.EOF) || off < n) {
			return 0, err
		}
	}
	return lines, nil
}

// endLines returns the first line of f and the line that ends at byte end
// (a newline), both without their newline.
func endLines(f *os.File, end int64) (first, last []byte, err error) {
	br := bufio.NewReader(io.NewSectionReader(f, 0, end))
	first, err = br.ReadBytes('\n')
	if err != nil {
		return nil, nil, errors.New("the checkpoint is not at the end of a line")
	}
	last, err = lastLine(f, end)
	if err != nil {
		return nil, nil, err
	}
	return first[:len(first)-1], last, nil
}
