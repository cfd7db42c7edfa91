package trajectories

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/troupe-rl/troupe/protocol"
)

// Check reads a file that troupe wrote (slime samples, flat or nested, or
// troupe.episode/v2 records, told apart by the first line) and reports
// what is wrong with it: a line cut short, lines that do not parse,
// invalid samples (protocol.Sample.Validate), sample indexes and rollout
// ids that skip or repeat, the samples of one episode split up, groups out
// of order, missing or partial, and, with opt.Records or opt.Checkpoint,
// episodes with fewer samples than the run wrote. It never stops at the
// first problem. Report.Ending says how the file ends.
//
// Sample lines are read by a strict one-pass scanner that builds nothing
// (fastScan); a line it refuses is decoded by troupe's reader, whose error
// the report names. CheckAt does the same on every CPU.
func Check(r io.Reader, opt CheckOptions) CheckReport {
	c := newChecker(opt)
	defer c.close()
	br := bufio.NewReaderSize(r, 64<<10)
	if c.kind(br) {
		c.checkEpisodes(br)
		return c.finish()
	}
	var fs fastScan
	var lr chunkLines
	lr.br = br
	for {
		line, kind, ok := lr.next()
		if !ok {
			break
		}
		var lf lineFacts
		lf.no, lf.end = lr.lines, lr.off
		switch kind {
		case lineLong, lineCut:
			lf.kind = uint8(kind)
		default:
			fs.scanLine(line, &lf)
		}
		c.take(&lf)
		if lr.err != nil {
			c.problem(lr.lines+1, "%v (reading stopped here)", lr.err)
			break
		}
	}
	c.bytes = lr.off
	return c.finish()
}

// CheckAt checks the size bytes of r as Check does, its sample lines read
// in chunks on every CPU, merged in order; memory stays flat in the size.
func CheckAt(r io.ReaderAt, size int64, opt CheckOptions) CheckReport {
	return checkAt(r, size, opt, runtime.GOMAXPROCS(0), 8<<20)
}

func checkAt(r io.ReaderAt, size int64, opt CheckOptions, workers int, chunk int64) CheckReport {
	c := newChecker(opt)
	defer c.close()
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10)
	if c.kind(br) {
		c.checkEpisodes(br)
		return c.finish()
	}
	type job struct {
		from, to int64
		out      chan chunkFacts
	}
	jobs := make(chan *job)
	order := make(chan *job, 2*workers)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(jobs)
		defer close(order)
		for from := int64(0); from < size; {
			to, err := nextLineEnd(r, size, min(from+chunk, size))
			if err != nil {
				to = size
			}
			j := &job{from: from, to: to, out: make(chan chunkFacts, 1)}
			select {
			case order <- j:
			case <-done:
				return
			}
			select {
			case jobs <- j:
			case <-done:
				return
			}
			from = to
		}
	}()
	for range workers {
		go func() {
			for j := range jobs {
				j.out <- scanChunk(r, j.from, j.to, j.to == size)
			}
		}()
	}
	lines := 0
	for j := range order {
		cf := <-j.out
		for k := range cf.lines {
			lf := &cf.lines[k]
			lf.no += lines
			c.take(lf)
		}
		lines += cf.n
		if cf.err != nil {
			c.problem(lines+1, "%v (reading stopped here)", cf.err)
			break
		}
	}
	c.bytes = size
	return c.finish()
}

// nextLineEnd returns the offset after the newline at or after off-1.
func nextLineEnd(r io.ReaderAt, size, off int64) (int64, error) {
	if off >= size || off == 0 {
		return off, nil
	}
	buf := make([]byte, 64<<10)
	for pos := off - 1; pos < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-pos)], pos)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return pos + int64(i) + 1, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		pos += int64(n)
		if n == 0 {
			break
		}
	}
	return size, nil
}

// chunkFacts are the lines of one chunk.
type chunkFacts struct {
	lines []lineFacts
	n     int // lines, blank ones included
	err   error
}

func scanChunk(r io.ReaderAt, from, to int64, last bool) chunkFacts {
	var cf chunkFacts
	var lr chunkLines
	lr.br = bufio.NewReaderSize(io.NewSectionReader(r, from, to-from), 1<<20)
	lr.off = from
	var fs fastScan
	for {
		line, kind, ok := lr.next()
		if !ok {
			break
		}
		lf := lineFacts{no: lr.lines, end: lr.off}
		switch {
		case kind == lineCut && !last: // cannot be: chunks end at newlines
			lf.kind = lineCut
		case kind == lineLong || kind == lineCut:
			lf.kind = uint8(kind)
		default:
			fs.scanLine(line, &lf)
			if lf.kind == lineBlank {
				continue
			}
		}
		cf.lines = append(cf.lines, lf)
	}
	cf.n, cf.err = lr.lines, lr.err
	return cf
}

// chunkLines splits a reader into lines of at most maxLine bytes.
type chunkLines struct {
	br    *bufio.Reader
	long  []byte
	lines int
	off   int64
	err   error
}

// next returns the next line and lineFlat, or lineLong or lineCut; false
// at the end.
func (l *chunkLines) next() ([]byte, int, bool) {
	l.long = l.long[:0]
	tooLong := false
	for {
		chunk, err := l.br.ReadSlice('\n')
		l.off += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong && len(l.long)+len(chunk) > maxLine {
				tooLong, l.long = true, l.long[:0]
			} else if !tooLong {
				l.long = append(l.long, chunk...)
			}
			continue
		}
		line := chunk
		if len(l.long) > 0 {
			line = append(l.long, chunk...)
			l.long = line
		}
		switch {
		case err == nil:
			l.lines++
			if tooLong {
				return nil, lineLong, true
			}
			return line, lineFlat, true
		case errors.Is(err, io.EOF):
			if tooLong {
				l.lines++
				return nil, lineLong, true
			}
			if len(bytes.TrimSpace(line)) == 0 {
				return nil, 0, false
			}
			l.lines++
			return line, lineCut, true
		default:
			l.err = err
			return nil, 0, false
		}
	}
}

func newChecker(opt CheckOptions) *checker {
	c := &checker{max: opt.MaxProblems, opt: opt, nextIndex: -1}
	if c.max <= 0 {
		c.max = 20
	}
	if opt.Records != nil {
		c.records = newRecordStream(opt.Records)
	}
	return c
}

func (c *checker) close() {
	if c.records != nil {
		c.records.stop()
	}
}

// kind tells samples from episode records by the first line.
func (c *checker) kind(br *bufio.Reader) bool {
	head, _ := br.Peek(64)
	if bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte(`{"format":"`+EpisodeFormat+`"`)) {
		c.r.Kind = "episodes"
		return true
	}
	c.r.Kind = "samples"
	return false
}

// take checks the next line of samples.
func (c *checker) take(lf *lineFacts) {
	line := lf.no
	switch lf.kind {
	case lineBlank:
		return
	case lineCut:
		c.flush()
		c.r.Truncated = true
		c.problem(line, "cut short: the file ends inside this line (a run killed while writing; troupe run --resume drops it)")
		c.r.Lines = line
		return
	case lineLong:
		c.flush()
		c.problem(line, "longer than %d bytes", maxLine)
	case lineBad:
		// The episode goes on: the line's sample is missing from it, which
		// the indexes (and the episode file) say.
		c.problem(line, "%v", lf.err)
	case lineFlat, lineNested, lineSlow:
		nested := lf.kind == lineNested || lf.kind == lineSlow && lf.nested
		layout := "flat"
		if nested {
			layout = "nested"
		}
		if c.r.Layout == "" {
			c.r.Layout = layout
		} else if c.r.Layout != layout {
			c.problem(line, "a %s line in a %s file", layout, c.r.Layout)
		}
		switch {
		case lf.kind == lineNested:
			c.flush()
			for k := range int64(lf.count) {
				c.sampleIndex(line, lf.index+k, false)
			}
			c.r.Placeholders += int64(lf.placeholders)
			c.episode(line, lf.rollout, lf.group, int64(lf.count))
			c.lastNested = true
		case nested:
			c.flush()
			samples := lf.samples
			for i := range samples {
				c.sample(line, &samples[i])
			}
			if len(samples) == 0 {
				c.problem(line, "an episode with no sample")
				break
			}
			if err := protocol.ValidateRollout(samples); err != nil {
				c.problem(line, "%v", err)
			}
			c.episode(line, samples[0].RolloutID, samples[0].GroupIndex, int64(len(samples)))
			c.lastNested = true
		default:
			rollout, group, placeholder := lf.rollout, lf.group, lf.placeholders > 0
			if lf.kind == lineSlow {
				s := &lf.samples[0]
				c.sample(line, s)
				rollout, group, placeholder = s.RolloutID, s.GroupIndex, IsPlaceholder(s)
			} else {
				c.sampleIndex(line, lf.index, placeholder)
			}
			if c.open && rollout != c.cur.rollout {
				c.flush()
			}
			if !c.open {
				c.open = true
				c.cur = episodeSoFar{rollout: rollout, group: group, line: line}
			} else if group != c.cur.group {
				c.problem(line, "rollout %d has samples of groups %d and %d", rollout, c.cur.group, group)
			}
			c.cur.samples++
			if placeholder {
				c.cur.placeholders++
			}
		}
	}
	c.r.Lines = line
	if cp := c.opt.Checkpoint; cp != nil && lf.end == cp.Bytes && !c.atCheckpoint {
		c.atCheckpoint = true
		episodes := c.r.Episodes
		if c.open {
			episodes++
		}
		c.ckptAgree = episodes == cp.Episodes && c.r.Samples == cp.Samples
		if !c.ckptAgree {
			c.problem(line, "the progress file's checkpoint ends here with %d episodes and %d samples; the file has %d and %d", cp.Episodes, cp.Samples, episodes, c.r.Samples)
		}
	}
}

// flush ends the flat episode being read.
func (c *checker) flush() {
	if !c.open {
		return
	}
	c.open = false
	c.lastNested = false
	c.episode(c.cur.line, c.cur.rollout, c.cur.group, c.cur.samples)
	c.lastPlaceholder = c.cur.samples == 1 && c.cur.placeholders == 1
}

// prove compares an episode of samples with its record in the episode
// file, when there is one.
func (c *checker) prove(line int, rollout, group, samples int64) {
	c.lastProven, c.lastPartial = false, false
	if c.records == nil {
		return
	}
	rec, ok := c.records.next()
	if !ok {
		return
	}
	if rec.rollout != rollout || rec.group != group {
		c.problem(line, "rollout_id %d of group %d, where the episode file's next record is rollout_id %d of group %d: not the same run, or episodes missing from one file (the episode file is not used past here)", rollout, group, rec.rollout, rec.group)
		c.records.stop()
		c.records = nil
		return
	}
	want := int64(max(rec.emitted, 1)) // an episode without samples is one placeholder
	switch {
	case samples == want:
		c.lastProven = true
	case samples < want:
		c.lastPartial = true
		c.problem(line, "rollout %d has %d of its %d samples (its record in the episode file): a partial episode", rollout, samples, want)
	default:
		c.problem(line, "rollout %d has %d samples, its record in the episode file %d", rollout, samples, want)
	}
}

// finish ends the report.
func (c *checker) finish() CheckReport {
	c.flush()
	c.endGroup(true)
	if c.r.Kind == "samples" {
		c.ending()
	} else if c.r.Truncated {
		c.r.Ending = EndCutLine
	} else {
		c.r.Ending = EndWhole
	}
	if c.r.Problems == nil {
		c.r.Problems = []string{}
	}
	if c.r.Notes == nil {
		c.r.Notes = []string{}
	}
	return c.r
}

// ending judges how a samples file ends.
func (c *checker) ending() {
	cp := c.opt.Checkpoint
	if cp != nil && c.bytes < cp.Bytes {
		c.problem(c.r.Lines, "the file has %d bytes, fewer than the %d of the progress file's checkpoint: it was cut after the run wrote it (troupe run --resume refuses it)", c.bytes, cp.Bytes)
	}
	if cp != nil && c.bytes > cp.Bytes && !c.atCheckpoint {
		c.problem(c.r.Lines, "no line ends at the progress file's checkpoint (byte %d): not the file the run wrote", cp.Bytes)
	}
	switch {
	case c.r.Truncated:
		c.r.Ending = EndCutLine
	case c.lastPartial:
		c.r.Ending = EndPartialEpisode
	case c.r.Episodes == 0 || c.lastNested || c.lastProven || c.lastPlaceholder ||
		cp != nil && c.bytes == cp.Bytes && c.ckptAgree:
		c.r.Ending = EndWhole
	default:
		c.r.Ending = EndUnproven
		c.r.Notes = append(c.r.Notes, fmt.Sprintf("line %d: the last episode (rollout_id %d, %d samples) cannot be proven whole without the episode file or a progress file whose checkpoint the file ends at: a cut at a line boundary inside it would read the same", c.cur.line, c.cur.rollout, c.cur.samples))
	}
	if c.r.Ending == EndWhole && c.partialGroup {
		c.r.Ending = EndPartialGroup
	}
}

// stop records the error that ended reading, unless it is the end.
func (c *checker) stop(err error, line int) {
	switch {
	case errors.Is(err, io.EOF):
	case errors.Is(err, ErrTruncated):
		c.r.Truncated = true
		c.problem(line, "cut short: the file ends inside this line (a run killed while writing; troupe run --resume drops it)")
	default:
		c.problem(line, "%v (reading stopped here)", err)
	}
}

func (c *checker) checkEpisodes(br *bufio.Reader) {
	rd := &EpisodeReader{r: lineReader{br: br}}
	for {
		rec, _, err := rd.Next()
		line := rd.r.line
		if err != nil {
			c.stop(err, line)
			c.r.Lines = line
			return
		}
		c.r.Samples += int64(rec.Emitted())
		if c.nextIndex >= 0 && rec.Index != c.nextIndex {
			c.problem(line, "episode index %d after %d", rec.Index, c.nextIndex-1)
		}
		c.episode(line, rec.RolloutID, rec.GroupIndex, 0)
		c.nextIndex = rec.Index + 1
	}
}

// recordStream reads an episode file's records ahead, in batches, on a
// goroutine of its own.
type recordStream struct {
	ch    chan []recordFacts
	done  chan struct{}
	batch []recordFacts
	ended bool
}

func newRecordStream(r io.Reader) *recordStream {
	rs := &recordStream{ch: make(chan []recordFacts, 8), done: make(chan struct{})}
	go func() {
		defer close(rs.ch)
		lr := chunkLines{br: bufio.NewReaderSize(r, 1<<20)}
		var fs fastScan
		var batch []recordFacts
		for {
			line, kind, ok := lr.next()
			if !ok || kind != lineFlat {
				break
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			rec, ok := fs.record(line)
			if !ok {
				break // the records end here: the episodes after are not proven
			}
			if batch = append(batch, rec); len(batch) == 1024 {
				select {
				case rs.ch <- batch:
				case <-rs.done:
					return
				}
				batch = nil
			}
		}
		if len(batch) > 0 {
			select {
			case rs.ch <- batch:
			case <-rs.done:
			}
		}
	}()
	return rs
}

// next returns the next record; false past the last readable one.
func (rs *recordStream) next() (recordFacts, bool) {
	for len(rs.batch) == 0 {
		if rs.ended {
			return recordFacts{}, false
		}
		b, ok := <-rs.ch
		if !ok {
			rs.ended = true
			return recordFacts{}, false
		}
		rs.batch = b
	}
	r := rs.batch[0]
	rs.batch = rs.batch[1:]
	return r, true
}

func (rs *recordStream) stop() {
	select {
	case <-rs.done:
	default:
		close(rs.done)
	}
}
