package durable

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
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
	// Spec reads the progress file's spec (Progress.Spec): its hash, which
	// must be Progress.SpecHash, and the run's shape. Required: the spec's
	// format belongs to the layers above (runspec), which durable does not
	// import; the troupe command passes runspec's (cli).
	Spec func(spec []byte) (hash string, shape Shape, err error)
	// FS is the file system the files are read from, the one the run
	// writes them to (the one Verify checked them in); nil: the OS.
	FS vfs.FS
}

// Shape is what Audit reads of a run's spec: the episodes and group size
// that set the counts, and the bases of the rollout_id and group_index
// numbering.
type Shape struct {
	Episodes, GroupSize           int
	RolloutIDBase, GroupIndexBase int64
}

// Audit cross-checks every field of p that Verify does not: the spec
// against its hash; the counts against the spec (groups of the run's group
// size, no more than the run's, "complete" exactly when they are all
// written); the bytes each file's checkpoint vouches for against the
// counts: they must read, with troupe's checker, as exactly p.Groups whole
// groups, p.Episodes episodes and p.Samples samples, numbered from the
// spec's bases on (sample index 0, rollout_id and group_index bases,
// episode index 0) up to the last one the counts give, with the episode
// file's records proving each episode's sample count; and, given the
// run's allocators, the states: those of its stateful allocators by name,
// and, with an episode file, their values: replayed over its records from
// p.StartStates, the allocators must give each record's credit and end in
// p.States. Verify must have vouched for the bytes first: Audit reads
// them as they are.
//
// A progress file the run wrote passes; one whose fields were edited,
// alone or consistently with each other, fails with an *InconsistentError
// naming every field that disagrees, unless the edit describes another
// checkpoint of the same bytes exactly (an earlier group end, digests,
// counts and states recomputed), from which a resume writes the same
// bytes again. Without an episode file the states' values cannot be
// checked (the samples do not hold the scores they are made of); a v2
// progress file, which has no states at the start, of a run with a
// stateful allocator and an episode file gets an error wrapping
// ErrUnverifiable when nothing else disagrees.
func (p *Progress) Audit(ctx context.Context, opt AuditOptions) error {
	if opt.Spec == nil {
		return errors.New("durable: Audit: AuditOptions.Spec is nil")
	}
	a := &auditor{p: p, opts: &opt, fs: vfs.Or(opt.FS)}
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
	var unverified error // the states cannot be verified (v2)
	for i, f := range p.Files {
		path := pathOf(i)
		if path == "" {
			continue
		}
		var err error
		switch f.Kind {
		case KindSamples:
			var records io.Reader
			if j := a.episodeFile(); j >= 0 && pathOf(j) != "" {
				fh, err := vfs.Open(a.fs, pathOf(j))
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
			if err == nil && opt.Allocators != nil {
				unverified = a.replay(ctx, i, path, spec, opt.Allocators)
				if !errors.Is(unverified, ErrUnverifiable) {
					err, unverified = unverified, nil
				}
			}
		}
		if err != nil {
			return err
		}
	}
	if err := a.err(); err != nil {
		return err
	}
	return unverified
}

// auditor collects the disagreements of one progress file.
type auditor struct {
	p     *Progress
	opts  *AuditOptions
	fs    vfs.FS // opts.FS, or the OS
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
func (a *auditor) spec() *Shape {
	p := a.p
	h, shape, err := a.opts.Spec(p.Spec)
	if err != nil {
		a.disagree(`"spec" is not a run spec: %v`, err)
		return nil
	}
	if h != p.SpecHash {
		a.disagree(`"spec_hash" is %s, the hash of "spec" %s`, p.SpecHash, h)
	}
	return &shape
}

// counts checks the counts against the spec and each other.
func (a *auditor) counts(spec *Shape) {
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

// states checks that the states, at the checkpoint and at the start, are
// those of the run's stateful allocators.
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
	now := names(want)
	if had := names(a.p.States); had != now {
		a.disagree(`"allocator_states" holds the states of %s, the run's stateful allocators are %s`, had, now)
	}
	if a.p.Format != Format {
		return // no states at the start before v3
	}
	if had := names(a.p.StartStates); had != now {
		a.disagree(`"allocator_states_at_start" holds the states of %s, the run's stateful allocators are %s`, had, now)
	}
}

// replay plays the stateful allocators among allocs over the episode
// records of file i, at path, up to its checkpoint, from p.StartStates:
// each record's credit must be theirs, and their states at the end
// p.States. allocs are left in the state they were in. It is the one
// check of the states' values, which the output holds only through the
// credit they gave. Without states at the start (a v2 progress file) it
// returns an error wrapping ErrUnverifiable.
func (a *auditor) replay(ctx context.Context, i int, path string, spec *Shape, allocs []trajectories.Allocator) error {
	p, f := a.p, a.p.Files[i]
	var stateful []trajectories.Allocator
	for _, al := range allocs {
		if credit.StateOf(al) != nil {
			stateful = append(stateful, al)
		}
	}
	if len(stateful) == 0 || len(a.found) > 0 {
		return nil // nothing to replay, or the states' names disagree already
	}
	if p.Format != Format {
		return &damageError{msg: fmt.Sprintf("its allocator states cannot be verified: a %s progress file, written by an older troupe, has no states at the start to replay the episode file from", p.Format), errs: []error{ErrUnverifiable}}
	}
	before, err := SaveStates(stateful)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer func() { _ = RestoreStates(stateful, before) }()
	if err := RestoreStates(stateful, p.StartStates); err != nil {
		a.disagree(`"allocator_states_at_start": %v`, err)
		return nil
	}
	fh, err := vfs.Open(a.fs, path)
	if err != nil {
		if f.Bytes == 0 && errors.Is(err, os.ErrNotExist) {
			return a.compareStates(stateful)
		}
		return fmt.Errorf("audit: %w", err)
	}
	defer fh.Close()
	size := max(spec.GroupSize, 1)
	group := make([]*trajectories.Episode, 0, size)
	credits := make([]*trajectories.Credit, 0, size)
	play := func() error {
		if len(group) == 0 {
			return nil
		}
		if err := trajectories.Allocate(ctx, group, stateful, trajectories.RewardScalar); err != nil {
			return fmt.Errorf("audit: replaying the allocators: %w", err)
		}
		for e, ep := range group {
			if !sameCredit(ep.Credit, credits[e]) {
				a.disagree(`replayed from "allocator_states_at_start", the stateful allocators give episode %d (rollout_id %d) other credit than its record in %s`, ep.Index, ep.RolloutID, path)
				return errStopReplay
			}
		}
		group, credits = group[:0], credits[:0]
		return nil
	}
	err = eachRecord(io.NewSectionReader(fh, 0, f.Bytes), func(rec *episode.Record, cr *trajectories.Credit) error {
		group, credits = append(group, trajectories.RecordOnly(rec)), append(credits, cr)
		if len(group) < size {
			return nil
		}
		return play()
	})
	if err == nil {
		err = play()
	}
	var bad *recordError
	switch {
	case errors.As(err, &bad):
		a.disagree("files[%d].bytes: %v", i, err)
		return nil
	case err != nil:
		return ignoreStop(err)
	}
	return a.compareStates(stateful)
}

// recordError is eachRecord's error for a line that is not a record.
type recordError struct {
	line int
	err  error
}

func (e *recordError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *recordError) Unwrap() error { return e.err }

// eachRecord decodes the episode records of r on every CPU (decoding is
// most of a replay's cost) and hands them to each in the file's order; it
// returns each's first error, or a *recordError for the first line that is
// not a whole record.
func eachRecord(r io.Reader, each func(*episode.Record, *trajectories.Credit) error) error {
	type batch struct {
		first int // the number of its first line
		lines [][]byte
		recs  []*episode.Record
		crs   []*trajectories.Credit
		err   error // the first line that does not decode, or a read error
		done  chan struct{}
	}
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *batch)
	order := make(chan *batch, 2*workers)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(jobs)
		defer close(order)
		br := bufio.NewReaderSize(r, 1<<20)
		for n, end := 0, false; !end; {
			b := &batch{first: n + 1, done: make(chan struct{})}
			for len(b.lines) < 256 && !end {
				line, err := br.ReadBytes('\n')
				switch {
				case err == nil:
					b.lines = append(b.lines, line)
					n++
				case errors.Is(err, io.EOF) && len(line) == 0:
					end = true
				case errors.Is(err, io.EOF):
					b.err, end = &recordError{line: n + 1, err: errors.New("cut short: the checkpoint is not at the end of a line")}, true
				default:
					b.err, end = err, true
				}
			}
			for _, ch := range []chan *batch{order, jobs} {
				select {
				case ch <- b:
				case <-stop:
					return
				}
			}
		}
	}()
	for range workers {
		go func() {
			for b := range jobs {
				for k, line := range b.lines {
					rec, cr, err := trajectories.DecodeEpisode(bytes.TrimSpace(line))
					if err != nil {
						b.recs, b.crs, b.err = b.recs[:k], b.crs[:k], &recordError{line: b.first + k, err: err}
						break
					}
					b.recs, b.crs = append(b.recs, rec), append(b.crs, cr)
				}
				close(b.done)
			}
		}()
	}
	for b := range order {
		<-b.done
		for k, rec := range b.recs {
			if err := each(rec, b.crs[k]); err != nil {
				return err
			}
		}
		if b.err != nil {
			return b.err
		}
	}
	return nil
}

// errStopReplay ends a replay whose disagreement is recorded.
var errStopReplay = errors.New("replay stopped")

func ignoreStop(err error) error {
	if errors.Is(err, errStopReplay) {
		return nil
	}
	return err
}

// compareStates compares the states of the replayed allocators with
// p.States.
func (a *auditor) compareStates(stateful []trajectories.Allocator) error {
	got, err := SaveStates(stateful)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	for k, st := range got {
		if k >= len(a.p.States) || !sameJSON(st.State, a.p.States[k].State) {
			a.disagree(`"allocator_states": %s's state is not what replaying the episode file from "allocator_states_at_start" gives`, st.Allocator)
		}
	}
	return nil
}

// sameCredit reports whether the replayed credit got holds, for each of
// its allocators, the values of the record's credit rec.
func sameCredit(got, rec *trajectories.Credit) bool {
	if got == nil || rec == nil {
		return got == rec
	}
	for j, name := range got.Allocators {
		k := slices.Index(rec.Allocators, name)
		if k < 0 || !slices.Equal(got.Values[j], rec.Values[k]) {
			return false
		}
	}
	return true
}

// sameJSON reports whether a and b are the same JSON, whitespace aside.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
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
func (a *auditor) samples(i int, path string, spec *Shape, records io.Reader) error {
	p, f := a.p, a.p.Files[i]
	field := fmt.Sprintf("files[%d]", i)
	fh, err := vfs.Open(a.fs, path)
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
func (a *auditor) episodes(i int, path string, spec *Shape) error {
	p, f := a.p, a.p.Files[i]
	field := fmt.Sprintf("files[%d]", i)
	fh, err := vfs.Open(a.fs, path)
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
func (a *auditor) ends(field, what string, f io.ReaderAt, n int64, spec *Shape, lastIndex int64, read func(line []byte, last bool) (position, error)) {
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
func endLines(f io.ReaderAt, end int64) (first, last []byte, err error) {
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
