package trajectories

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/troupe-rl/troupe/protocol"
)

// Layout is the line layout of a JSONL file of samples.
type Layout int

const (
	// Flat writes one sample per line; the samples of an episode are on
	// consecutive lines and share their rollout_id.
	Flat Layout = iota
	// Nested writes one rollout per line: a JSON array of the episode's
	// samples, the shape slime's custom-generate path returns.
	Nested
)

// flushThreshold is how many encoded bytes JSONLWriter buffers before it
// writes them: large enough to make writes cheap, small enough to keep memory
// flat however long the run.
const flushThreshold = 1 << 20

// JSONLWriter is the streaming JSONL sink. It writes whole groups only
// (GroupSink): its buffer holds complete lines of complete episodes, and it
// hands whole groups to the underlying writer in one Write call once the
// buffer is large (and at Flush). If that write fails part way and the
// writer is a regular file (*os.File, or a RegularFile), it is truncated
// back to where the write began, so an interrupted or failed run leaves
// valid JSONL that holds only whole groups.
//
// A group larger than the buffer (an episode of thousands of agents) is
// the exception: to a regular file it is written in pieces as it is
// encoded, so that its bytes never all live in memory at once, and cut off
// the file again when the group is dropped or a write fails. Until
// EndGroup, then, a regular file may end with part of the open group: a
// reader that must see whole groups only reads up to the run's checkpoint
// (trajectories/durable), which counts whole groups, and a resumed run
// cuts the rest away. To any other writer (a pipe) a group goes whole,
// after EndGroup.
// An episode without samples is written as the one Placeholder sample
// Output gives it (an episode given with no samples at all writes nothing).
type JSONLWriter struct {
	lineWriter
	layout Layout
	// head is the start of a line up to its index, `{"group_index":G,
	// "index":`, for group index group; digits is the latest index
	// written, last, in decimal (empty before the first). The samples of
	// an episode share their group index and are numbered consecutively,
	// so WriteEpisode formats the head once an episode and counts the
	// digits up.
	head   []byte
	group  int64
	digits []byte
	last   int64
	// enc encodes the episodes WriteEpisode encodes itself (those Prepare
	// left alone), on the writing goroutine.
	enc protocol.Encoder
}

// NewJSONLWriter returns a writer of samples to w in the given layout.
func NewJSONLWriter(w io.Writer, layout Layout) *JSONLWriter {
	return &JSONLWriter{lineWriter: lineWriter{w: w, what: "samples"}, layout: layout}
}

// lineWriter buffers whole lines and writes them out in one Write call,
// truncating a regular file back to its last whole group when a write
// fails part way. The open group, once the buffer is large, it may write
// to a regular file in pieces (spill), which it cuts off the file again
// when the group is dropped.
type lineWriter struct {
	w     io.Writer
	what  string // what it writes, for errors
	buf   []byte
	ended int   // buf[:ended] holds the ended groups, buf[ended:] the open one
	err   error // sticky: after a failed write nothing more is written
	// spilled is how many bytes of the open group were written out
	// already (spill): the file ends with them.
	spilled int64
	// spills says whether w is a regular file, to which the open group
	// may be written in pieces: 0 not asked yet, 1 yes, -1 no.
	spills int8
}

// EndGroup implements GroupSink: the episodes written since the last
// EndGroup are a group, which is written out (with the groups before it)
// once the buffer is large.
func (lw *lineWriter) EndGroup() error {
	if lw.err != nil {
		return lw.err
	}
	lw.ended = len(lw.buf)
	var err error
	if len(lw.buf) >= flushThreshold || lw.spilled > 0 {
		// A group written in part (spill) goes out whole at once: a
		// later failed write then cuts back whole groups only.
		err = lw.Flush()
	}
	lw.spilled = 0 // the group is whole in the file: never cut off again
	return err
}

// DropGroup implements GroupSink: it forgets the episodes written since
// the last EndGroup, and cuts what it wrote of them (spill) off the file.
func (lw *lineWriter) DropGroup() {
	lw.buf = lw.buf[:lw.ended]
	if lw.spilled == 0 || lw.err != nil {
		return // nothing written, or cut off already by the failed write
	}
	n := lw.spilled
	lw.spilled = 0
	if err := cutBack(lw.w.(RegularFile), n); err != nil {
		lw.err = fmt.Errorf("dropping a group of %s: cutting it off the file: %w", lw.what, err)
	}
}

// Marker is implemented by a RegularFile that keeps a state of the bytes
// written through it (durable.Writer's digest): Mark notes the file's
// length, and a Truncate back to it restores the state of then, where a
// cut below what it saw otherwise spoils it. The writers mark where the
// open group begins before they write part of it (a group too large to
// hold whole), so that dropping the group keeps the file's state good.
type Marker interface {
	Mark()
}

// canSpill reports whether the open group may be written out in pieces:
// whether w is a regular file, which a dropped group can be cut off.
func (lw *lineWriter) canSpill() bool {
	if lw.spills == 0 {
		lw.spills = -1
		if f, ok := lw.w.(RegularFile); ok && isRegular(f) {
			lw.spills = 1
		}
	}
	return lw.spills > 0
}

// spill writes the buffer out, the open group's part of it too, once it
// is large and w is a regular file, so that the bytes of a group larger
// than the buffer never all live in memory at once. The ended groups go
// first, in a write of their own, so that the open group's pieces begin
// at a mark (Marker).
func (lw *lineWriter) spill() error {
	if lw.err != nil {
		return lw.err
	}
	if len(lw.buf) < flushThreshold || !lw.canSpill() {
		return nil
	}
	if lw.ended > 0 {
		if err := lw.writeOut(lw.buf[:lw.ended]); err != nil {
			return err
		}
	}
	if m, ok := lw.w.(Marker); ok && lw.spilled == 0 {
		m.Mark()
	}
	open := lw.buf[lw.ended:]
	if err := lw.writeOut(open); err != nil {
		return err
	}
	lw.spilled += int64(len(open))
	lw.buf, lw.ended = lw.buf[:0], 0
	return nil
}

// prepared is an episode's samples encoded without their leading
// group_index and index, as AppendJSONAfterIndex writes them.
//
// Prepared buffers are recycled (preparedPool) once WriteEpisode has copied
// them out, with the encoder whose memory (the last prompt, rewards, ...)
// spares re-encoding what the samples of one run share.
type prepared struct {
	bytes []byte
	ends  []int // ends[i] is the end of sample i in bytes
	enc   protocol.Encoder
}

// preparedPool holds the buffers of written episodes for the next ones.
var preparedPool = sync.Pool{New: func() any { return new(prepared) }}

// maxPooled is the largest prepared buffer always kept for reuse. A
// larger one is kept while the episodes fill at least a quarter of it
// (keep), so that a run of large episodes (thousands of agents) reuses
// their buffers where dropping them made an episode's worth of garbage
// each, and the collector's work and the zeroing of fresh memory grew
// with the episode; one huge episode among small ones does not pin its
// buffer past the next small episode that gets it.
const maxPooled = flushThreshold

// keep reports whether a buffer of capacity capacity, which held used
// bytes last, is worth keeping for the next: small, or well used.
func keep(used, capacity int) bool {
	return capacity <= maxPooled || used >= capacity/4
}

// Prepare encodes ep's samples, all but their indexes, so that WriteEpisode
// only has to stitch the indexes in. Safe to call concurrently for different
// episodes.
//
// An episode of streamSamples samples or more it leaves to WriteEpisode,
// which encodes it straight into the output, in pieces: its encoding
// whole, held from Prepare to WriteEpisode, was most of the memory of a
// run of large episodes, and the time went to faulting that memory in.
func (jw *JSONLWriter) Prepare(ep *Episode) {
	if len(ep.Samples) >= streamSamples {
		return
	}
	p := preparedPool.Get().(*prepared)
	p.bytes, p.ends = p.bytes[:0], p.ends[:0]
	for i := range ep.Samples {
		p.bytes = p.enc.AppendAfterIndex(p.bytes, &ep.Samples[i])
		p.ends = append(p.ends, len(p.bytes))
		if i == 0 {
			// The first sample's size, times the samples, is about the
			// episode's: grow to it at once rather than by doubling.
			size := len(p.bytes) * len(ep.Samples)
			p.bytes = slices.Grow(p.bytes, size+size/8-len(p.bytes))
		}
	}
	ep.prepared = p
}

// recycle hands p back to preparedPool.
func recycle(p *prepared) {
	if keep(len(p.bytes), cap(p.bytes)) {
		preparedPool.Put(p)
	}
}

// WriteEpisode appends ep's samples to the buffer and writes the buffer out
// once it is large. An episode with no samples writes nothing.
func (jw *JSONLWriter) WriteEpisode(ep *Episode) error {
	if jw.err != nil {
		return jw.err
	}
	if len(ep.Samples) == 0 {
		return nil
	}
	p := ep.prepared
	ep.prepared = nil
	if p == nil || len(p.ends) != len(ep.Samples) {
		return jw.encode(ep)
	}
	// Room for the whole episode at once: its encoded bytes and, per
	// sample, the head, the index and the punctuation around them. An
	// episode of thousands of samples otherwise grows the buffer by
	// doubling, a copy of all it holds each time.
	jw.buf = slices.Grow(jw.buf, len(p.bytes)+len(ep.Samples)*(len(`{"group_index":,"index":,`)+2*20+1)+3)
	if jw.layout == Nested {
		jw.buf = append(jw.buf, '[')
	}
	start := 0
	for i := range ep.Samples {
		s := &ep.Samples[i]
		if jw.layout == Nested && i > 0 {
			jw.buf = append(jw.buf, ',')
		}
		jw.appendHead(s)
		jw.buf = append(jw.buf, p.bytes[start:p.ends[i]]...)
		start = p.ends[i]
		if jw.layout == Flat {
			jw.buf = append(jw.buf, '\n')
		}
	}
	recycle(p)
	if jw.layout == Nested {
		jw.buf = append(jw.buf, ']', '\n')
	}
	return nil
}

// streamSamples is the number of samples from which an episode is
// encoded as it is written (Prepare leaves it alone) and, to a regular
// file, written in pieces: about a buffer's worth (flushThreshold) of
// samples of a few hundred bytes.
const streamSamples = 4096

// encode appends ep's samples to the buffer, encoding each as it goes,
// and writes the buffer out whenever it is large (spill): the episode's
// bytes are never all held at once when w is a regular file.
func (jw *JSONLWriter) encode(ep *Episode) error {
	if jw.layout == Nested {
		jw.buf = append(jw.buf, '[')
	}
	for i := range ep.Samples {
		s := &ep.Samples[i]
		if jw.layout == Nested && i > 0 {
			jw.buf = append(jw.buf, ',')
		}
		jw.appendHead(s)
		jw.buf = jw.enc.AppendAfterIndex(jw.buf, s)
		if jw.layout == Flat {
			jw.buf = append(jw.buf, '\n')
		}
		if len(jw.buf) >= flushThreshold {
			if err := jw.spill(); err != nil {
				return err
			}
		}
	}
	if jw.layout == Nested {
		jw.buf = append(jw.buf, ']', '\n')
	}
	return nil
}

// appendHead appends the start of s's line up to its encoding after the
// index: `{"group_index":G,"index":I,`.
func (jw *JSONLWriter) appendHead(s *protocol.Sample) {
	if len(jw.head) == 0 || s.GroupIndex != jw.group {
		jw.head = append(jw.head[:0], `{"group_index":`...)
		jw.head = strconv.AppendInt(jw.head, s.GroupIndex, 10)
		jw.head = append(jw.head, `,"index":`...)
		jw.group = s.GroupIndex
	}
	jw.buf = append(jw.buf, jw.head...)
	// Counted up only from a positive number's digits (last, once
	// written, and not a negative one, nor the wrap past MaxInt64).
	if len(jw.digits) > 0 && s.Index > 0 && s.Index == jw.last+1 {
		jw.digits = countUp(jw.digits)
	} else {
		jw.digits = strconv.AppendInt(jw.digits[:0], s.Index, 10)
	}
	jw.last = s.Index
	jw.buf = append(jw.buf, jw.digits...)
	jw.buf = append(jw.buf, ',')
}

// countUp returns d, the decimal digits of a positive number, counted up
// by one: in place, and a digit longer past a run of nines.
func countUp(d []byte) []byte {
	for k := len(d) - 1; k >= 0; k-- {
		if d[k] != '9' {
			d[k]++
			return d
		}
		d[k] = '0'
	}
	d[0] = '1'
	return append(d, '0')
}

// Forgets implements Forgetter: WriteEpisode copies the encoded bytes.
func (lw *lineWriter) Forgets() bool { return true }

// Flush writes the buffered episodes out, an open group's too: Output
// ends or drops every group before it flushes.
func (jw *lineWriter) Flush() error {
	if jw.err != nil {
		return jw.err
	}
	if len(jw.buf) == 0 {
		return nil
	}
	if err := jw.writeOut(jw.buf); err != nil {
		return err
	}
	// What it wrote stays, an open group's part too (the writers' callers
	// that use no groups flush without ending one): only a group spilled
	// and then dropped is cut off again.
	jw.spilled = 0
	// A buffer grown past four times the threshold for a large group is
	// kept while the groups fill a quarter of it: a run of large episodes
	// reuses it, where a fresh one for each, grown by doubling, was an
	// episode's worth of garbage and copies every time. One huge episode
	// does not pin its buffer for the rest of the run: the next flush of
	// a small group lets it go.
	if cap(jw.buf) > 4*flushThreshold && len(jw.buf) < cap(jw.buf)/4 {
		jw.buf, jw.ended = nil, 0
		return nil
	}
	jw.buf, jw.ended = jw.buf[:0], 0
	return nil
}

// writeOut writes b, a run of whole lines, to w. When the write fails, the
// error is sticky and, w being a regular file, what the write left of b
// is cut off the file again, and the open group's pieces written before
// (spilled) with it, so that the file stays whole-group JSONL.
func (lw *lineWriter) writeOut(b []byte) error {
	n, err := lw.w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err == nil {
		return nil
	}
	lw.err = fmt.Errorf("write %s: %w", lw.what, err)
	cut := int64(n) + lw.spilled
	lw.spilled = 0
	if f, ok := lw.w.(RegularFile); ok && cut > 0 && isRegular(f) {
		if terr := cutBack(f, cut); terr != nil {
			lw.err = fmt.Errorf("%w (and truncating back to the last whole group failed: %w)", lw.err, terr)
		}
	}
	return lw.err
}

// cutBack cuts the last n bytes off f, which end at its offset (also for
// a file opened with O_APPEND, whose offset is 0, not its size, until the
// first write), and leaves it positioned at its new end.
func cutBack(f RegularFile, n int64) error {
	end, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		err = f.Truncate(end - n)
	}
	if err == nil {
		_, err = f.Seek(end-n, io.SeekStart)
	}
	return err
}

// RegularFile is what the writers cut a failed write back with: an
// *os.File, or a writer over one (durable.Writer) that passes these on.
type RegularFile interface {
	io.Seeker
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
}

// isRegular reports whether f is a regular file: pipes and terminals
// (standard output, say) cannot be truncated.
func isRegular(f RegularFile) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// maxLine bounds one line of input, so a corrupt file cannot make the reader
// allocate without limit.
const maxLine = 256 << 20

// ErrTruncated is returned by Reader when the input ends in the middle of a
// line: the file was cut while being written.
var ErrTruncated = errors.New("input ends inside a line")

// Reader reads samples back from JSONL, in either layout (it tells them
// apart line by line).
type Reader struct {
	lineReader
	pending []protocol.Sample // a line read ahead by Rollout
	nested  bool              // pending came from a nested line
}

// NewReader returns a reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{lineReader: newLineReader(r)} }

// lineReader reads lines of at most maxLine bytes, counting them.
type lineReader struct {
	br   *bufio.Reader
	line int
}

func newLineReader(r io.Reader) lineReader {
	return lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the samples of the next non-empty line: one sample for the
// flat layout, a rollout's list for the nested one. At the end of input it
// returns io.EOF. Errors name the line.
func (r *Reader) Next() ([]protocol.Sample, error) {
	if r.pending != nil {
		out := r.pending
		r.pending = nil
		return out, nil
	}
	out, _, err := r.next()
	return out, err
}

func (r *Reader) next() ([]protocol.Sample, bool, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, false, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '[' {
			list := []protocol.Sample{}
			if err := json.Unmarshal(line, &list); err != nil {
				return nil, true, fmt.Errorf("line %d: %w", r.line, err)
			}
			return list, true, nil
		}
		var s protocol.Sample
		if err := s.UnmarshalJSON(line); err != nil {
			return nil, false, fmt.Errorf("line %d: %w", r.line, err)
		}
		return []protocol.Sample{s}, false, nil
	}
}

// readLine returns the next line; a last line without its newline is
// ErrTruncated.
func (r *lineReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("line %d: longer than %d bytes", r.line+1, maxLine)
		}
		switch {
		case err == nil:
			r.line++
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(bytes.TrimSpace(line)) == 0 {
				return nil, io.EOF
			}
			r.line++
			return nil, fmt.Errorf("line %d: %w", r.line, ErrTruncated)
		default:
			return nil, fmt.Errorf("line %d: %w", r.line+1, err)
		}
	}
}

// Rollout returns the next rollout: the samples of one line in the nested
// layout, or the run of consecutive lines that share a rollout_id in the flat
// layout. At the end of input it returns io.EOF.
func (r *Reader) Rollout() ([]protocol.Sample, error) {
	out, nested := r.pending, r.nested
	r.pending = nil
	if out == nil {
		var err error
		if out, nested, err = r.next(); err != nil {
			return nil, err
		}
	}
	if nested {
		return out, nil
	}
	for {
		next, nestedNext, err := r.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if nestedNext || next[0].RolloutID != out[0].RolloutID {
			r.pending, r.nested = next, nestedNext
			return out, nil
		}
		out = append(out, next[0])
	}
}

// ReadAll reads every sample of r, in either layout, flattened.
func ReadAll(r io.Reader) ([]protocol.Sample, error) {
	rd := NewReader(r)
	var out []protocol.Sample
	for {
		next, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, next...)
	}
}

// ReadRollouts reads r as a list of rollouts (see Reader.Rollout).
func ReadRollouts(r io.Reader) ([][]protocol.Sample, error) {
	rd := NewReader(r)
	var out [][]protocol.Sample
	for {
		next, err := rd.Rollout()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, next)
	}
}
