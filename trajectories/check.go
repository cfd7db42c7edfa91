package trajectories

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/troupe-rl/troupe/protocol"
)

// CheckOptions are what a check knows of the run beyond the file: zero
// values are unknown.
type CheckOptions struct {
	// GroupSize is the run's episodes per group; unknown, every group but
	// the last must be as large as the first.
	GroupSize int
	// Episodes is the run's episode count: the last group must then be
	// as large as the run's last group is, unless the file is a prefix
	// that ends before it.
	Episodes int64
	// MaxProblems bounds the problems listed (the rest are counted);
	// 0 means 20.
	MaxProblems int
}

// CheckReport is what Check found in a file.
type CheckReport struct {
	Kind         string   `json:"kind"`             // "samples" or "episodes"
	Layout       string   `json:"layout,omitempty"` // samples: flat or nested
	Lines        int      `json:"lines"`
	Samples      int64    `json:"samples"`      // placeholders included
	Placeholders int64    `json:"placeholders"` // episodes written as a Placeholder
	Episodes     int64    `json:"episodes"`
	Groups       int64    `json:"groups"`
	Problems     []string `json:"problems"`      // the first MaxProblems, each naming its line
	More         int      `json:"more_problems"` // problems not listed
	// Notes are what the check cannot tell from the file alone (a smaller
	// last group, which a run's last group may be).
	Notes []string `json:"notes"`
	// Truncated: the file ends inside a line (a run killed while
	// writing; --resume cuts it back).
	Truncated bool `json:"truncated"`
}

// OK reports whether the check found no problem.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 && r.More == 0 }

// checker accumulates a report.
type checker struct {
	r   CheckReport
	max int
	opt CheckOptions

	nextIndex  int64 // the sample index expected next; -1 before the first
	lastRollo  int64
	seenRollo  bool
	group      int64 // the current group's index
	inGroup    int64 // its episodes so far
	firstGroup int64 // the first group's size, once it ended
	groupLine  int   // the line the current group began on
}

func (c *checker) problem(line int, format string, args ...any) {
	if len(c.r.Problems) >= c.max {
		c.r.More++
		return
	}
	c.r.Problems = append(c.r.Problems, fmt.Sprintf("line %d: %s", line, fmt.Sprintf(format, args...)))
}

// episode takes the next episode of the file, on line: its rollout id and
// group index.
func (c *checker) episode(line int, rollout, group int64) {
	c.r.Episodes++
	if c.seenRollo {
		switch {
		case rollout <= c.lastRollo:
			c.problem(line, "rollout_id %d after %d: a duplicate or out of order", rollout, c.lastRollo)
		case rollout != c.lastRollo+1:
			c.problem(line, "rollout_id %d after %d: episodes %d to %d are missing", rollout, c.lastRollo, c.lastRollo+1, rollout-1)
		}
	}
	if !c.seenRollo || group != c.group {
		if c.seenRollo {
			if group < c.group {
				c.problem(line, "group_index %d after %d: out of order", group, c.group)
			} else if group != c.group+1 {
				c.problem(line, "group_index %d after %d: groups %d to %d are missing", group, c.group, c.group+1, group-1)
			}
			c.endGroup(false)
		}
		c.group, c.inGroup, c.groupLine = group, 0, line
		c.r.Groups++
	}
	c.inGroup++
	if size := c.opt.GroupSize; size > 0 && c.inGroup > int64(size) {
		c.problem(line, "group %d has more than %d episodes", group, size)
	}
	c.lastRollo, c.seenRollo = rollout, true
}

// endGroup checks the size of the group that just ended (last: at the end
// of the file).
func (c *checker) endGroup(last bool) {
	if c.r.Groups == 0 {
		return
	}
	want := int64(c.opt.GroupSize)
	if want == 0 {
		if c.r.Groups == 1 {
			c.firstGroup = c.inGroup
			return
		}
		want = c.firstGroup
	}
	switch {
	case !last && c.inGroup < want:
		c.problem(c.groupLine, "group %d has %d episodes, not %d: a partial group", c.group, c.inGroup, want)
	case last && c.inGroup < want:
		// The run's last group may be smaller; only when the run's size is
		// known can the check tell.
		if c.opt.Episodes > 0 && c.opt.GroupSize > 0 {
			if end := c.opt.Episodes; c.r.Episodes < end {
				c.problem(c.groupLine, "group %d has %d episodes, not %d: a partial group", c.group, c.inGroup, want)
			}
		} else if c.r.Groups > 1 {
			c.r.Notes = append(c.r.Notes, fmt.Sprintf("line %d: the last group (%d) has %d episodes, the others %d: a partial group, unless it is the run's last", c.groupLine, c.group, c.inGroup, want))
		}
	}
}

// sample checks one sample of line.
func (c *checker) sample(line int, s *protocol.Sample) {
	c.r.Samples++
	if IsPlaceholder(s) {
		c.r.Placeholders++
	}
	if err := s.Validate(); err != nil {
		c.problem(line, "%v", err)
	}
	if c.nextIndex >= 0 {
		switch {
		case s.Index < c.nextIndex:
			c.problem(line, "sample index %d after %d: a duplicate or out of order", s.Index, c.nextIndex-1)
		case s.Index > c.nextIndex:
			c.problem(line, "sample index %d after %d: indexes %d to %d are missing", s.Index, c.nextIndex-1, c.nextIndex, s.Index-1)
		}
	}
	c.nextIndex = s.Index + 1
}

// Check reads a file that troupe wrote (slime samples, flat or nested, or
// troupe.episode/v2 records, told apart by the first line) with troupe's
// readers and reports what is wrong with it: a line cut short, lines that
// do not parse, invalid samples (protocol.Sample.Validate), sample indexes
// and rollout ids that skip or repeat, the samples of one episode split
// up, groups out of order, missing or partial. It never stops at the first
// problem, but at a line it cannot parse past.
func Check(r io.Reader, opt CheckOptions) CheckReport {
	c := &checker{max: opt.MaxProblems, opt: opt, nextIndex: -1}
	if c.max <= 0 {
		c.max = 20
	}
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(64)
	if bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte(`{"format":"`+EpisodeFormat+`"`)) {
		c.r.Kind = "episodes"
		c.checkEpisodes(br)
	} else {
		c.r.Kind = "samples"
		c.checkSamples(br)
	}
	c.endGroup(true)
	if c.r.Problems == nil {
		c.r.Problems = []string{}
	}
	if c.r.Notes == nil {
		c.r.Notes = []string{}
	}
	return c.r
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

func (c *checker) checkSamples(br *bufio.Reader) {
	rd := &Reader{lineReader: lineReader{br: br}}
	var rollout []protocol.Sample // the flat episode being read
	from := 0                     // the line it began on
	flush := func() {
		if len(rollout) > 0 {
			c.episode(from, rollout[0].RolloutID, rollout[0].GroupIndex)
			rollout = rollout[:0]
		}
	}
	for {
		samples, nested, err := rd.next()
		line := rd.line
		if err != nil {
			flush()
			c.stop(err, line)
			c.r.Lines = rd.line
			return
		}
		layout := "flat"
		if nested {
			layout = "nested"
		}
		if c.r.Layout == "" {
			c.r.Layout = layout
		} else if c.r.Layout != layout {
			c.problem(line, "a %s line in a %s file", layout, c.r.Layout)
		}
		for i := range samples {
			c.sample(line, &samples[i])
		}
		if nested {
			if len(samples) == 0 {
				c.problem(line, "an episode with no sample")
				continue
			}
			if err := protocol.ValidateRollout(samples); err != nil {
				c.problem(line, "%v", err)
			}
			c.episode(line, samples[0].RolloutID, samples[0].GroupIndex)
			continue
		}
		s := samples[0]
		if len(rollout) > 0 && s.RolloutID != rollout[0].RolloutID {
			flush()
		}
		if len(rollout) == 0 {
			from = line
		}
		if len(rollout) > 0 && s.GroupIndex != rollout[0].GroupIndex {
			c.problem(line, "rollout %d has samples of groups %d and %d", s.RolloutID, rollout[0].GroupIndex, s.GroupIndex)
		}
		rollout = append(rollout, s)
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
		c.episode(line, rec.RolloutID, rec.GroupIndex)
		c.nextIndex = rec.Index + 1
	}
}
