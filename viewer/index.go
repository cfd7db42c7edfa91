package viewer

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/protocol"
)

// Layout is how an episode is stored in its file.
type Layout uint8

// The layouts a file may hold, line by line.
const (
	Flat   Layout = iota // one sample per line, an episode's on consecutive lines
	Nested               // one episode per line: a JSON array of its samples
	Record               // one episode per line in the troupe.episode/v2 form
)

func (l Layout) String() string {
	switch l {
	case Flat:
		return "flat samples"
	case Nested:
		return "nested samples"
	}
	return "episode records"
}

// EpisodeInfo is what the index knows of one episode without decoding it:
// where its lines are, its identity and outcome, and the means the list,
// the overview and the comparison are made of. The index keeps it column
// by column (File.Info puts one back together).
type EpisodeInfo struct {
	Ordinal      int   // position in the file, from 0
	Offset, Size int64 // its bytes in the file
	Line, Lines  int   // its first line (from 1) and how many
	Layout       Layout

	RolloutID, Index, GroupIndex int64
	Seed                         uint64
	Scenario, Status, End        string
	Team                         float64 // the team reward (0 when not scored)
	Samples, Turns               int     // emitted turns, and all turns (the same for samples)
	Messages, Invalid, Agents    int     // Messages: -1 when the file does not hold the bus log

	// Allocators names the allocators of the episode's rewards (shared
	// between episodes with the same list); Alloc is, for each, the mean
	// over the episode's samples, NaN when no sample has it.
	Allocators []string
	Alloc      []float64
	// Roles are the roles of the episode's agents, sorted (shared between
	// episodes with the same roles).
	Roles []string
}

// Scored reports whether the episode has an outcome (completed or
// truncated): aborted and failed episodes are not scored.
func (e *EpisodeInfo) Scored() bool { return scored(e.Status) }

func scored(status string) bool {
	return status == string(protocol.StatusCompleted) || status == string(protocol.StatusTruncated)
}

// AllocValue returns the episode's mean value under the named allocator.
func (e *EpisodeInfo) AllocValue(name string) (float64, bool) {
	for i, a := range e.Allocators {
		if a == name && !math.IsNaN(e.Alloc[i]) {
			return e.Alloc[i], true
		}
	}
	return 0, false
}

// RoleFacts are one role's sums over an episode: what the index pass
// finds, summed into the file's totals per role (File.add), not kept per
// episode.
type RoleFacts struct {
	Role     string
	Agents   int       // agents of the role (seats, or distinct agents with samples)
	Scored   int       // of them, with a score
	ScoreSum float64   // the sum of their scores
	Samples  int       // their samples
	AllocSum []float64 // per allocator of the episode, the sum of their samples' values
}

// Problem is a line the index could not use: the page shows it.
type Problem struct {
	Line int
	Err  string
}

// maxProblems is how many problems a file keeps to show (the first by
// line); the rest are counted.
const maxProblems = 200

// maxLine bounds one line, as trajectories' readers do.
const maxLine = 256 << 20

// ErrTruncated is the problem of a last line without its newline: the
// file was cut while being written.
var ErrTruncated = errors.New("the file ends inside a line (cut while being written?)")

// Open indexes the file at path: one pass, on every CPU, that reads each
// line's identity, outcome and rewards and keeps where each episode's bytes
// are. Lines it cannot use are Problems, not errors: only an unreadable
// file is.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	idx := newFile(path, filepath.Base(path))
	idx.Size, idx.f = fi.Size(), f
	if err := idx.build(runtime.GOMAXPROCS(0), segmentSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return idx, nil
}

// Close closes the file.
func (x *File) Close() error { return x.f.Close() }

// segmentSize is what a worker of the index pass reads at a time: the
// file is cut in segments of about this size, read by the workers and
// added to the index in file order, so that the pass holds a few
// segments' episodes at a time whatever the file's size, and the index is
// the same whatever the number of workers.
const segmentSize = 8 << 20

// maxSegments bounds the segments of a file (tests cut small files in
// segments of a few bytes).
const maxSegments = 1 << 12

// chunkResult is one segment's part of the index: its line numbers count
// from the segment's first line.
type chunkResult struct {
	episodes []entry
	problems []Problem
	problemN int
	lines    int
	err      error
}

// entry is one episode as a worker found it: its facts, and the sums of
// its roles.
type entry struct {
	info  EpisodeInfo
	roles []RoleFacts // sorted by role
}

// build indexes the file: workers read its segments, and the segments are
// added in file order as they come, at most 2×workers held at once.
func (x *File) build(workers int, segment int64) error {
	workers = max(workers, 1)
	n := int(min(max(x.Size/max(segment, 1), 1), maxSegments))
	bounds := make([]int64, 0, n+1)
	bounds = append(bounds, 0)
	for k := 1; k < n; k++ {
		b, err := x.alignedStart(x.Size * int64(k) / int64(n))
		if err != nil {
			return err
		}
		if b > bounds[len(bounds)-1] && b < x.Size {
			bounds = append(bounds, b)
		}
	}
	bounds = append(bounds, x.Size)
	results := make([]chan chunkResult, len(bounds)-1)
	for k := range results {
		results[k] = make(chan chunkResult, 1) // a worker never waits to hand over
	}
	held := make(chan struct{}, 2*workers) // segments read or being read, not yet added
	cpus := make(chan struct{}, workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := range results {
			select {
			case held <- struct{}{}:
			case <-stop:
				return
			}
			wg.Go(func() {
				cpus <- struct{}{}
				defer func() { <-cpus }()
				results[k] <- x.scanChunk(bounds[k], bounds[k+1], bounds[k+1] == x.Size)
			})
		}
	})
	var err error
	for k := range results {
		r := <-results[k]
		<-held
		if r.err != nil {
			err = r.err
			break
		}
		x.merge(&r)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	x.seal()
	return nil
}

// merge adds a segment's episodes and problems to the index.
func (x *File) merge(r *chunkResult) {
	for _, p := range r.problems {
		// Segments come in file order: the first maxProblems by line.
		if len(x.Problems) < maxProblems {
			p.Line += x.Lines
			x.Problems = append(x.Problems, p)
		}
	}
	x.ProblemCount += r.problemN
	for k := range r.episodes {
		e := &r.episodes[k]
		e.info.Line += x.Lines
		x.add(&e.info, e.roles)
	}
	x.Lines += r.lines
}

// alignedStart returns where a worker that should start near off starts:
// at a line, and not inside a flat episode, whose lines must be read by
// one worker (its agents are counted once).
func (x *File) alignedStart(off int64) (int64, error) {
	// The line that contains off-1 ends the previous worker's part, unless
	// the next lines continue its episode.
	start, err := x.lineStart(off)
	if err != nil {
		return 0, err
	}
	prev, _, err := x.lineAt(start)
	if err != nil {
		return 0, err
	}
	id, ok := flatRollout(prev)
	pos := start + int64(len(prev))
	for ok && pos < x.Size {
		line, _, err := x.lineAt(pos)
		if err != nil {
			return 0, err
		}
		next, okNext := flatRollout(line)
		if !okNext || next != id {
			break
		}
		pos += int64(len(line))
	}
	return pos, nil
}

// lineStart returns the start of the line that holds byte off-1: the
// beginning of the file for off 0.
func (x *File) lineStart(off int64) (int64, error) {
	// Most lines are short: read back 4 KiB, then more.
	buf := make([]byte, 4<<10)
	end := off
	for end > 0 {
		if len(buf) < 64<<10 && end < off {
			buf = make([]byte, 2*len(buf))
		}
		begin := max(end-int64(len(buf)), 0)
		n, err := x.f.ReadAt(buf[:end-begin], begin)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// Search before off-1: a newline at off-1 ends the line we want.
		b := buf[:n]
		if end == off && len(b) > 0 {
			b = b[:len(b)-1]
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return begin + int64(i) + 1, nil
		}
		if off-begin > maxLine {
			return off, nil
		}
		end = begin
	}
	return 0, nil
}

// lineAt returns the line starting at off, its newline included, and
// whether it had one.
func (x *File) lineAt(off int64) ([]byte, bool, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(x.f, off, x.Size-off), 4<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line) > maxLine {
				return line, false, nil
			}
		case errors.Is(err, io.EOF):
			return line, false, nil
		default:
			return nil, false, err
		}
	}
}

// flatRollout returns the rollout_id of a flat sample line.
func flatRollout(line []byte) (int64, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return 0, false
	}
	var f sampleFacts
	s := newScanner(line)
	s.scanSample(&f, interner{})
	return f.RolloutID, !s.Failed() && !f.Record
}

// scanChunk indexes the lines in [from, to).
func (x *File) scanChunk(from, to int64, last bool) chunkResult {
	var r chunkResult
	b := newBuilder(&r)
	br := bufio.NewReaderSize(io.NewSectionReader(x.f, from, to-from), int(min(max(to-from, 4<<10), 1<<20)))
	off, lineStart := from, from
	var long []byte // a line longer than the reader's buffer
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		off += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong && len(long)+len(chunk) > maxLine {
				tooLong, long = true, nil
			} else if !tooLong {
				long = append(long, chunk...)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			r.err = err
			return r
		}
		line := chunk
		if long != nil {
			line, long = append(long, chunk...), nil
		}
		start := lineStart
		lineStart = off
		if len(line) == 0 && !tooLong {
			break
		}
		r.lines++
		switch {
		case tooLong:
			b.flush()
			b.problem(r.lines, fmt.Sprintf("longer than %d bytes", maxLine))
		case err != nil && last && len(bytes.TrimSpace(line)) > 0:
			b.flush()
			b.problem(r.lines, ErrTruncated.Error())
		default:
			b.line(line, start, r.lines)
		}
		tooLong = false
		if err != nil {
			break
		}
	}
	b.flush()
	return r
}

// builder assembles episodes from the lines of one worker's part.
type builder struct {
	r   *chunkResult
	in  interner
	s   scanner
	fct sampleFacts
	ep  episodeFacts

	// the flat episode in progress
	open   bool
	cur    EpisodeInfo
	agents map[string]int // agent → its role's position in roles
	acc    episodeAcc
	lists  map[string][]string // allocator lists, shared by the episodes that have the same
}

func newBuilder(r *chunkResult) *builder {
	return &builder{r: r, in: interner{}, agents: map[string]int{}, lists: map[string][]string{}}
}

// episodeAcc sums an episode's samples by allocator and role.
type episodeAcc struct {
	allocs []string
	sums   []float64
	counts []int
	roles  []RoleFacts
}

func (a *episodeAcc) reset() {
	a.allocs, a.sums, a.counts, a.roles = a.allocs[:0], a.sums[:0], a.counts[:0], a.roles[:0]
}

func (a *episodeAcc) role(name string) int {
	for i := range a.roles {
		if a.roles[i].Role == name {
			return i
		}
	}
	a.roles = append(a.roles, RoleFacts{Role: name, AllocSum: make([]float64, len(a.allocs))})
	return len(a.roles) - 1
}

func (a *episodeAcc) alloc(name string) int {
	for i, n := range a.allocs {
		if n == name {
			return i
		}
	}
	a.allocs = append(a.allocs, name)
	a.sums = append(a.sums, 0)
	a.counts = append(a.counts, 0)
	for i := range a.roles {
		a.roles[i].AllocSum = append(a.roles[i].AllocSum, 0)
	}
	return len(a.allocs) - 1
}

func (a *episodeAcc) add(role, alloc int, v float64) {
	a.sums[alloc] += v
	a.counts[alloc]++
	a.roles[role].AllocSum[alloc] += v
}

// finish writes the sums into e and returns its roles' sums, sorted by
// role.
func (b *builder) finish(e *EpisodeInfo, a *episodeAcc) []RoleFacts {
	key := strings.Join(a.allocs, "\x00")
	list, ok := b.lists[key]
	if !ok {
		list = slices.Clone(a.allocs)
		b.lists[key] = list
	}
	e.Allocators = list
	// The episode's values share one allocation.
	k := len(a.allocs)
	vals := make([]float64, k*(1+len(a.roles)))
	e.Alloc = vals[:k:k]
	for i := range a.allocs {
		e.Alloc[i] = math.NaN()
		if a.counts[i] > 0 {
			e.Alloc[i] = a.sums[i] / float64(a.counts[i])
		}
	}
	roles := make([]RoleFacts, len(a.roles))
	for i, r := range a.roles {
		own := vals[(i+1)*k : (i+2)*k : (i+2)*k]
		copy(own, r.AllocSum)
		r.AllocSum = own
		roles[i] = r
	}
	slices.SortFunc(roles, func(x, y RoleFacts) int { return cmp.Compare(x.Role, y.Role) })
	return roles
}

func (b *builder) problem(line int, msg string) {
	b.r.problemN++
	if len(b.r.problems) < maxProblems {
		b.r.problems = append(b.r.problems, Problem{Line: line, Err: msg})
	}
}

// flush closes the flat episode in progress.
func (b *builder) flush() {
	if !b.open {
		return
	}
	b.open = false
	b.cur.Agents = len(b.agents)
	roles := b.finish(&b.cur, &b.acc)
	b.r.episodes = append(b.r.episodes, entry{b.cur, roles})
}

// line indexes one line that starts at off.
func (b *builder) line(line []byte, off int64, n int) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return
	}
	b.s = newScanner(trimmed)
	switch trimmed[0] {
	case '[':
		b.flush()
		b.nested(line, off, n)
	case '{':
		if isRecordLine(trimmed) {
			b.flush()
			b.record(line, off, n)
			return
		}
		b.s.scanSample(&b.fct, b.in)
		if b.fct.Record {
			b.flush()
			b.record(line, off, n)
			return
		}
		b.s.End()
		if b.s.Failed() {
			b.flush()
			b.problem(n, b.s.error().Error())
			return
		}
		if b.open && b.cur.RolloutID != b.fct.RolloutID {
			b.flush()
		}
		if !b.open {
			b.start(Flat, off, n)
		}
		b.cur.Size = off + int64(len(line)) - b.cur.Offset
		b.cur.Lines++
		b.sample(&b.fct)
	default:
		b.flush()
		b.problem(n, "not a JSON object or array: neither a sample, a list of samples nor an episode record")
	}
}

// isRecordLine reports whether line opens with the "format" key that
// troupe writes first on every episode line (others are found by
// scanSample, which sees the key anywhere).
func isRecordLine(line []byte) bool {
	rest := bytes.TrimLeft(line[1:], " \t\r\n")
	return bytes.HasPrefix(rest, []byte(`"format"`))
}

// start opens an episode of samples at the current sample.
func (b *builder) start(l Layout, off int64, n int) {
	f := &b.fct
	b.open = true
	b.cur = EpisodeInfo{
		Offset: off, Line: n, Layout: l, Messages: -1,
		RolloutID: f.RolloutID, Index: f.Episode, GroupIndex: f.GroupIndex, Seed: f.Seed,
		Scenario: f.Scenario, Status: f.Status, End: f.End, Team: f.TeamReward,
	}
	clear(b.agents)
	b.acc.reset()
}

// sample adds one sample to the episode in progress.
func (b *builder) sample(f *sampleFacts) {
	b.cur.Samples++
	b.cur.Turns++
	if f.Invalid {
		b.cur.Invalid++
	}
	role, seen := b.agents[f.Agent]
	if !seen {
		role = b.acc.role(f.Role)
		b.agents[f.Agent] = role
		b.acc.roles[role].Agents++
		if f.HasScore {
			b.acc.roles[role].Scored++
			b.acc.roles[role].ScoreSum += f.AgentScore
		}
	}
	b.acc.roles[role].Samples++
	switch f.Reward {
	case protocol.RewardScalar:
		name := f.Allocator
		if name == "" {
			name = "reward"
		}
		b.acc.add(role, b.acc.alloc(name), f.Value)
	case protocol.RewardDict:
		// metadata.allocator lists the run's allocators in order: the
		// dict's keys are sorted.
		for name := range strings.FieldsSeq(f.Allocator) {
			b.acc.alloc(name)
		}
		for i, name := range f.DictNames {
			b.acc.add(role, b.acc.alloc(name), f.DictValues[i])
		}
	}
}

// nested indexes a line holding one episode's samples.
func (b *builder) nested(line []byte, off int64, n int) {
	first := true
	b.s.array(func(int) {
		b.s.scanSample(&b.fct, b.in)
		if b.s.Failed() {
			return
		}
		if b.fct.Record {
			b.s.failWith(fmt.Errorf("%w: an episode record inside a list of samples", ErrSampleLine))
			return
		}
		if first {
			b.start(Nested, off, n)
			first = false
		} else if b.fct.RolloutID != b.cur.RolloutID {
			b.s.failWith(fmt.Errorf("%w: the list mixes rollout_id %d and %d", ErrSampleLine, b.cur.RolloutID, b.fct.RolloutID))
			return
		}
		b.sample(&b.fct)
	})
	b.s.End()
	if b.s.Failed() {
		b.open = false
		b.problem(n, b.s.error().Error())
		return
	}
	if first {
		b.problem(n, "an empty list of samples")
		return
	}
	b.cur.Size, b.cur.Lines = int64(len(line)), 1
	b.flush()
}

// record indexes a troupe.episode/v2 line.
func (b *builder) record(line []byte, off int64, n int) {
	b.s = newScanner(bytes.TrimSpace(line))
	b.s.scanEpisode(&b.ep, b.in)
	b.s.End()
	if b.s.Failed() {
		b.problem(n, b.s.error().Error())
		return
	}
	f := &b.ep
	e := EpisodeInfo{
		Offset: off, Size: int64(len(line)), Line: n, Lines: 1, Layout: Record,
		RolloutID: f.RolloutID, Index: f.Index, GroupIndex: f.GroupIndex, Seed: f.Seed,
		Scenario: f.Scenario, Status: f.Status, End: f.End, Team: f.Team,
		Samples: len(f.EmitSeats), Turns: f.Turns, Messages: f.Messages, Invalid: f.Invalid, Agents: len(f.SeatRoles),
	}
	a := &b.acc
	a.reset()
	seatRole := make([]int, len(f.SeatRoles))
	for i, r := range f.SeatRoles {
		seatRole[i] = a.role(r)
		a.roles[seatRole[i]].Agents++
		if i < len(f.Agents) {
			a.roles[seatRole[i]].Scored++
			a.roles[seatRole[i]].ScoreSum += f.Agents[i]
		}
	}
	for _, seat := range f.EmitSeats {
		a.roles[seatRole[seat]].Samples++
	}
	for i, name := range f.Allocators {
		k := a.alloc(name)
		for t, v := range f.Values[i] {
			a.add(seatRole[f.EmitSeats[t]], k, v)
		}
	}
	roles := b.finish(&e, a)
	b.r.episodes = append(b.r.episodes, entry{e, roles})
}
