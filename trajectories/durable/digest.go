package durable

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/minio/highwayhash"

	"github.com/troupe-rl/troupe/internal/vfs"
)

// DigestPrefix names the digest's algorithm in File.Digest: HighwayHash-256
// under digestKey. Not a cryptographic hash, but a 256-bit one that
// catches any accidental change (a flipped byte, a cut, other bytes), and
// at several GB/s on one core, where SHA-256 without CPU support runs at
// a tenth of that: as fast as the run writes, it cost a large run half its
// speed.
const DigestPrefix = "highwayhash256:"

// digestKey is HighwayHash's key: fixed, so a digest is a function of the
// bytes alone.
var digestKey = []byte("troupe.progress/v2: output bytes")

// ErrDamaged is wrapped by Verify's error: an output file is not what the
// run wrote up to its checkpoint (missing, shorter, or other bytes).
var ErrDamaged = errors.New("output file changed after the run wrote it")

// ErrUnverifiable is wrapped by Verify's error for a checkpoint without a
// digest (a troupe.progress/v1 file): its files cannot be verified.
var ErrUnverifiable = errors.New("checkpoint without a digest")

// Digest is the running digest (HighwayHash-256) of a file's first Len bytes: Output extends
// it at each checkpoint with the bytes written since (read back from the
// file, from the page cache), so a checkpoint costs a hash of what the run
// wrote since the last one, never of the whole file.
type Digest struct {
	h   *highwayhash.Digest // a value: copied whole, it is the state of then (Writer.Mark)
	n   int64
	buf []byte
}

// NewDigest returns the digest of no bytes.
func NewDigest() *Digest {
	h, err := highwayhash.NewDigest(digestKey)
	if err != nil {
		panic(err) // the key is 32 bytes
	}
	return &Digest{h: h}
}

// Len is how many bytes the digest covers.
func (d *Digest) Len() int64 { return d.n }

// String is the digest of the bytes covered, as File.Digest holds it:
// DigestPrefix and hex.
func (d *Digest) String() string { return DigestPrefix + hex.EncodeToString(d.h.Sum(nil)) }

// Extend hashes bytes [Len, end) of r.
func (d *Digest) Extend(r io.ReaderAt, end int64) error {
	if end < d.n {
		return fmt.Errorf("digest: the file went back from %d to %d bytes", d.n, end)
	}
	if end == d.n {
		return nil
	}
	if d.buf == nil {
		d.buf = make([]byte, 1<<20)
	}
	n, err := io.CopyBuffer(d.h, io.NewSectionReader(r, d.n, end-d.n), d.buf)
	d.n += n
	if err == nil && d.n < end {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	return nil
}

// damageError is Verify's error: its message, wrapping ErrDamaged (and
// ErrShortFile for a short file) without naming them.
type damageError struct {
	msg  string
	errs []error
}

func (e *damageError) Error() string   { return e.msg }
func (e *damageError) Unwrap() []error { return e.errs }

func damaged(format string, args ...any) error {
	return &damageError{msg: fmt.Sprintf(format, args...), errs: []error{ErrDamaged}}
}

// short abbreviates a digest in messages.
func short(digest string) string {
	if len(digest) > len(DigestPrefix)+16 {
		return digest[:len(DigestPrefix)+16] + "…"
	}
	return digest
}

// Verify checks that f's file on fsys (nil: the operating system's) holds,
// up to its checkpoint length, the bytes
// the run wrote: it reads them once (hashing runs at about a gigabyte a
// second, more on a fast core) and returns their digest, for the resumed run to extend. A
// missing file, a file shorter than its checkpoint, and other bytes are
// errors wrapping ErrDamaged that name the file, the offset and the
// damage; a checkpoint without a digest (troupe.progress/v1) is
// ErrUnverifiable.
func Verify(fsys vfs.FS, f File) (*Digest, error) {
	if f.Digest == "" {
		return nil, &damageError{msg: fmt.Sprintf("%s: its checkpoint (%d bytes) has no digest (a %s progress file, written by an older troupe): the file cannot be verified", f.Path, f.Bytes, FormatV1), errs: []error{ErrUnverifiable}}
	}
	d := NewDigest()
	fh, err := vfs.Open(vfs.Or(fsys), f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		if f.Bytes == 0 {
			return d, nil // killed before the file was created
		}
		return nil, damaged("%s: the file is missing, but its checkpoint vouches for its first %d bytes: it was deleted or moved after the run wrote it", f.Path, f.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if fi.Size() < f.Bytes {
		return nil, &damageError{msg: fmt.Sprintf("%s: the file has %d bytes, shorter than its checkpoint (%d bytes): it was emptied or cut after the run wrote it", f.Path, fi.Size(), f.Bytes), errs: []error{ErrDamaged, ErrShortFile}}
	}
	if err := d.Extend(fh, f.Bytes); err != nil {
		return nil, fmt.Errorf("output: %s: %w", f.Path, err)
	}
	if got := d.String(); got != f.Digest {
		return nil, damaged("%s: the bytes up to offset %d do not match the checkpoint (%s, the file's %s): the file was changed after it was written", f.Path, f.Bytes, short(f.Digest), short(got))
	}
	return d, nil
}

// Writer writes an output file and keeps the running digest of the bytes
// written through it, from the bytes in memory: a checkpoint takes the
// file's length and digest from it, reading nothing back. It passes Seek,
// Truncate and Stat on (trajectories.RegularFile), so the writers can cut
// a failed write back; a cut below what it hashed spoils the digest, and
// the next checkpoint fails (a failed write stops the run anyway), unless
// the cut is back to where it was when Mark was called last (a group the
// writers wrote part of, then dropped: trajectories.Marker).
type Writer struct {
	f      vfs.File
	d      *Digest
	spoilt bool
	// mark is the digest when Mark was called last (marked): a cut back
	// to its length restores it.
	mark   highwayhash.Digest
	markN  int64
	marked bool
}

// Mark implements trajectories.Marker: it notes the digest of the bytes
// written so far, so that a Truncate back to their length (a group the
// writers wrote part of, dropped) restores it rather than spoiling it.
func (w *Writer) Mark() {
	w.mark, w.markN, w.marked = *w.d.h, w.d.n, true
}

// NewWriter returns a writer to f, positioned at its end, whose bytes up to
// there d is the digest of (nil: f is empty).
func NewWriter(f vfs.File, d *Digest) *Writer {
	if d == nil {
		d = NewDigest()
	}
	return &Writer{f: f, d: d}
}

// File is the file written.
func (w *Writer) File() vfs.File { return w.f }

// Write implements io.Writer: it writes p to the file and hashes what was
// written.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.d.h.Write(p[:n])
	w.d.n += int64(n)
	return n, err
}

// Seek implements trajectories.RegularFile.
func (w *Writer) Seek(offset int64, whence int) (int64, error) { return w.f.Seek(offset, whence) }

// Stat implements trajectories.RegularFile.
func (w *Writer) Stat() (fs.FileInfo, error) { return w.f.Stat() }

// Truncate implements trajectories.RegularFile.
func (w *Writer) Truncate(size int64) error {
	if err := w.f.Truncate(size); err != nil {
		w.spoilt = true // what the file holds is not known
		return err
	}
	switch {
	case size >= w.d.n:
	case w.marked && size == w.markN:
		// The bytes up to the mark are the ones it hashed: the file
		// was only ever appended to since.
		*w.d.h, w.d.n = w.mark, w.markN
	default:
		w.spoilt = true
	}
	if size < w.markN {
		w.marked = false
	}
	return nil
}

// Sync makes the bytes written durable (fsync).
func (w *Writer) Sync() error { return w.f.Sync() }

// Digest returns the file's length and digest, checked against its offset.
func (w *Writer) Digest() (int64, string, error) {
	end, err := w.f.Seek(0, io.SeekCurrent)
	switch {
	case err != nil:
		return 0, "", err
	case w.spoilt:
		return 0, "", errors.New("digest: the file was cut back after a failed write")
	case end != w.d.n:
		return 0, "", fmt.Errorf("digest: the file is at byte %d, its digest covers %d", end, w.d.n)
	}
	return end, w.d.String(), nil
}
