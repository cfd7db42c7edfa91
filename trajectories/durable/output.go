package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/troupe-rl/troupe/internal/vfs"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// DefaultEvery is how often, at most, Output takes a checkpoint while a run
// goes on: what a SIGKILL can cost is the groups written since.
const DefaultEvery = 250 * time.Millisecond

// Stage is the output stage Output wraps: an play.Output.
type Stage interface {
	Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error)
	Flush() error
}

// Output is an play.Output that takes a run's checkpoints: it passes every
// group to Stage and, after the last episode of a group, when Every has
// passed since the last checkpoint, flushes Sink (the files' writers:
// whole groups only), syncs the files, and writes the progress (the
// files' lengths, the counts, the allocators' states) to Path on FS,
// durably. Its Flush flushes Stage and takes the last checkpoint. Progress holds the run's identity and the
// progress before this run (its groups from an earlier, resumed run), and
// is updated at every checkpoint.
type Output struct {
	Stage Stage
	// Sink flushes the writers of Files (Stage's sink).
	Sink trajectories.Flusher
	// Files are the writers of the output files, in Progress.Files order:
	// their lengths and digests are taken at each checkpoint.
	Files []*Writer
	// Allocators are the run's allocators: the state of the stateful ones
	// (credit.StateOf) is saved at each checkpoint.
	Allocators []trajectories.Allocator
	// FS is the file system Path is written on (nil: the operating
	// system's).
	FS       vfs.FS
	Path     string
	Progress Progress
	Groups   int           // groups in the whole run
	Every    time.Duration // 0: DefaultEvery
	Now      func() time.Time

	groups, episodes, samples int64 // written since the last checkpoint
	last                      time.Time
	err                       error // a failed checkpoint: the run stops
	dirsSynced                bool  // the files' directories were synced
}

// Recycles implements play.RecyclingOutput when Stage does.
func (o *Output) Recycles() bool {
	r, ok := o.Stage.(interface{ Recycles() bool })
	return ok && r.Recycles()
}

func (o *Output) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Finish implements play.Output.
func (o *Output) Finish(ctx context.Context, group []*episode.Record) (func(k int) (int, error), error) {
	write, err := o.Stage.Finish(ctx, group)
	if err != nil {
		return nil, err
	}
	last := len(group) - 1
	return func(k int) (int, error) {
		n, err := write(k)
		if err != nil {
			return n, err
		}
		o.samples += int64(n)
		if k < last {
			return n, nil
		}
		o.groups++
		o.episodes += int64(len(group))
		every := o.Every
		if every <= 0 {
			every = DefaultEvery
		}
		if now := o.now(); now.Sub(o.last) >= every {
			o.last = now
			if err := o.checkpoint(true); err != nil {
				return n, err
			}
		}
		return n, nil
	}, nil
}

// Flush implements play.Output: it flushes Stage and, when that worked,
// takes the run's last checkpoint.
func (o *Output) Flush() error {
	if err := o.Stage.Flush(); err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	return o.checkpoint(false)
}

// checkpoint writes the files out (flush: Sink is flushed first), syncs
// them (and, the first time, their directories), and writes the progress
// they hold, durably.
func (o *Output) checkpoint(flush bool) error {
	if o.err != nil {
		return o.err
	}
	if flush && o.Sink != nil {
		if err := o.Sink.Flush(); err != nil {
			o.err = err
			return err
		}
	}
	p := o.Progress
	p.Files = append([]File(nil), p.Files...)
	for i, w := range o.Files {
		end, digest, err := w.Digest()
		if err == nil {
			// The files' bytes are durable before the progress that
			// vouches for them is: a power loss leaves a progress file
			// whose files hold at least what it says.
			err = w.Sync()
		}
		if err == nil && !o.dirsSynced {
			// And their names: a file created by this run (or the resumed
			// one) is reachable after a power loss.
			err = vfs.Or(o.FS).SyncDir(filepath.Dir(w.File().Name()))
		}
		if err != nil {
			o.err = fmt.Errorf("output %s: %w", w.File().Name(), err)
			return o.err
		}
		p.Files[i].Bytes, p.Files[i].Digest = end, digest
	}
	o.dirsSynced = true
	// A run resumed from v2 stays v2: it has no states at the start to
	// give.
	if p.Format != FormatV2 {
		p.Format = Format
	}
	p.Groups += int(o.groups)
	p.Episodes += o.episodes
	p.Samples += o.samples
	p.Complete = p.Groups >= o.Groups
	states, err := SaveStates(o.Allocators)
	if err != nil {
		o.err = err
		return err
	}
	p.States = states
	if err := p.Write(o.FS, o.Path); err != nil {
		o.err = err
		return err
	}
	o.Progress = p
	o.groups, o.episodes, o.samples = 0, 0, 0
	return nil
}

// SaveStates returns the states of the stateful allocators among allocs.
func SaveStates(allocs []trajectories.Allocator) ([]State, error) {
	var out []State
	for _, a := range allocs {
		st := credit.StateOf(a)
		if st == nil {
			continue
		}
		data, err := st.MarshalState()
		if err != nil {
			return nil, fmt.Errorf("allocator %s: %w", a.Name(), err)
		}
		out = append(out, State{Allocator: a.Name(), State: data})
	}
	return out, nil
}

// RestoreStates gives the stateful allocators among allocs the states of
// a checkpoint, which must hold one for each of them, by name.
func RestoreStates(allocs []trajectories.Allocator, states []State) error {
	used := 0
	for _, a := range allocs {
		st := credit.StateOf(a)
		if st == nil {
			continue
		}
		i := indexOf(states, a.Name())
		if i < 0 {
			return fmt.Errorf("%w: no state for allocator %s", ErrBadProgress, a.Name())
		}
		if err := st.UnmarshalState(states[i].State); err != nil {
			return fmt.Errorf("%w: allocator %s: %w", ErrBadProgress, a.Name(), err)
		}
		used++
	}
	if used != len(states) {
		return fmt.Errorf("%w: it holds the state of %d allocators, the run has %d stateful ones", ErrBadProgress, len(states), used)
	}
	return nil
}

func indexOf(states []State, name string) int {
	for i, s := range states {
		if s.Allocator == name {
			return i
		}
	}
	return -1
}

// ErrShortFile is wrapped by Reopen's error when a file is shorter than its
// checkpoint says: something other than the run cut it (or a power loss
// lost what the system had not yet stored).
var ErrShortFile = errors.New("output file shorter than its checkpoint")

// Reopen opens the output file f of a checkpoint, on fsys (nil: the
// operating system's), for the resumed run to
// write on: it checks that the file holds at least f.Bytes and that they
// end a line, cuts it back to f.Bytes (what a kill left after the
// checkpoint goes, a cut line included), and returns it positioned there.
// last, when not nil, is given the file's last line before that point
// (without its newline), to check that it is the line the checkpoint
// counts.
func Reopen(fsys vfs.FS, f File, last func(line []byte) error) (vfs.File, error) {
	flags := os.O_RDWR
	if f.Bytes == 0 {
		flags |= os.O_CREATE // killed before the file was created
	}
	fh, err := vfs.Or(fsys).OpenFile(f.Path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	fail := func(err error) (vfs.File, error) {
		fh.Close()
		return nil, err
	}
	fi, err := fh.Stat()
	if err != nil {
		return fail(fmt.Errorf("output: %w", err))
	}
	if fi.Size() < f.Bytes {
		return fail(fmt.Errorf("%w: %s has %d bytes, its checkpoint %d", ErrShortFile, f.Path, fi.Size(), f.Bytes))
	}
	if f.Bytes > 0 {
		line, err := lastLine(fh, f.Bytes)
		if err != nil {
			return fail(fmt.Errorf("%w: %s: %w", ErrBadProgress, f.Path, err))
		}
		if last != nil {
			if err := last(line); err != nil {
				return fail(fmt.Errorf("%w: %s: the last line before its checkpoint (byte %d): %w", ErrBadProgress, f.Path, f.Bytes, err))
			}
		}
	}
	if err := fh.Truncate(f.Bytes); err != nil {
		return fail(fmt.Errorf("output: %w", err))
	}
	if _, err := fh.Seek(f.Bytes, io.SeekStart); err != nil {
		return fail(fmt.Errorf("output: %w", err))
	}
	return fh, nil
}

// maxLastLine bounds the line lastLine reads back: the longest line a
// reader accepts.
const maxLastLine = 256 << 20

// lastLine returns the line that ends at byte end of f (which must be a
// newline), without the newline.
func lastLine(f io.ReaderAt, end int64) ([]byte, error) {
	var one [1]byte
	if _, err := f.ReadAt(one[:], end-1); err != nil {
		return nil, err
	}
	if one[0] != '\n' {
		return nil, errors.New("the checkpoint is not at the end of a line")
	}
	// Read backwards in chunks to the newline before.
	const chunk = 64 << 10
	var line []byte
	pos := end - 1
	for pos > 0 {
		n := min(int64(chunk), pos)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, pos-n); err != nil {
			return nil, err
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			return append(buf[i+1:], line...), nil
		}
		line = append(buf, line...)
		pos -= n
		if int64(len(line)) > maxLastLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLastLine)
		}
	}
	return line, nil
}
