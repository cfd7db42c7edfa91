package trajectories

import (
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
	// Checkpoint is the progress file's checkpoint of a samples file
	// (nil: none): its length there ends a group, so a file that ends at
	// it ends with a whole episode.
	Checkpoint *Checkpoint
	// Records, when set, reads the run's episode file (--episodes-out):
	// each record says how many samples its episode is written as, which
	// proves every episode of a samples file whole or partial, as far as
	// the episode file goes.
	Records io.Reader
}

// Checkpoint is where a progress file says a samples file stood.
type Checkpoint struct {
	Bytes, Episodes, Samples int64
}

// How a file ends (CheckReport.Ending).
const (
	// EndWhole: the last episode is whole (proven: a nested line, an
	// episode record, the checkpoint, a placeholder), and so is its group
	// when the run's group size is known.
	EndWhole = "whole"
	// EndPartialGroup: whole episodes, but the last group is short of the
	// run's group size and is not the run's last.
	EndPartialGroup = "partial_group"
	// EndPartialEpisode: the last episode has fewer samples than its
	// record in the episode file says.
	EndPartialEpisode = "partial_episode"
	// EndCutLine: the file ends inside a line.
	EndCutLine = "cut_line"
	// EndUnproven: a flat file whose last episode nothing proves whole: a
	// cut at a line boundary inside it would look the same. The episode
	// file, or a checkpoint the file ends at, proves it.
	EndUnproven = "unproven"
)

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
	// Ending is how the file ends: EndWhole, EndPartialGroup,
	// EndPartialEpisode, EndCutLine or EndUnproven.
	Ending string `json:"ending"`
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

	partialGroup bool // the last group is proven partial

	// the flat episode being read
	open                    bool
	cur                     episodeSoFar
	lastNested, lastProven  bool // the last episode: a nested line; proven whole
	lastPartial             bool // the last episode is proven partial
	lastPlaceholder         bool // the last episode is one placeholder sample
	records                 *recordStream
	atCheckpoint, ckptAgree bool // a line ended at the checkpoint; the counts agreed there
	bytes                   int64
}

// episodeSoFar is the flat episode being read.
type episodeSoFar struct {
	rollout, group int64
	line           int   // its first line
	samples        int64 // its samples so far
	placeholders   int64
}

func (c *checker) problem(line int, format string, args ...any) {
	if len(c.r.Problems) >= c.max {
		c.r.More++
		return
	}
	c.r.Problems = append(c.r.Problems, fmt.Sprintf("line %d: %s", line, fmt.Sprintf(format, args...)))
}

// episode takes the next episode of the file, on line: its rollout id,
// group index and samples (0 for an episode record).
func (c *checker) episode(line int, rollout, group, samples int64) {
	c.r.Episodes++
	if samples > 0 {
		c.prove(line, rollout, group, samples)
	}
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
				c.partialGroup = true
				c.problem(c.groupLine, "group %d has %d episodes, not %d: a partial group", c.group, c.inGroup, want)
			}
		} else if c.r.Groups > 1 {
			c.r.Notes = append(c.r.Notes, fmt.Sprintf("line %d: the last group (%d) has %d episodes, the others %d: a partial group, unless it is the run's last", c.groupLine, c.group, c.inGroup, want))
		}
	}
}

// sample checks one sample of line.
func (c *checker) sample(line int, s *protocol.Sample) {
	var err error
	if err = s.Validate(); err != nil {
		c.problem(line, "%v", err)
	}
	c.sampleIndex(line, s.Index, IsPlaceholder(s))
}

// sampleIndex counts a sample and checks its index.
func (c *checker) sampleIndex(line int, index int64, placeholder bool) {
	c.r.Samples++
	if placeholder {
		c.r.Placeholders++
	}
	if c.nextIndex >= 0 {
		switch {
		case index < c.nextIndex:
			c.problem(line, "sample index %d after %d: a duplicate or out of order", index, c.nextIndex-1)
		case index > c.nextIndex:
			c.problem(line, "sample index %d after %d: indexes %d to %d are missing", index, c.nextIndex-1, c.nextIndex, index-1)
		}
	}
	c.nextIndex = index + 1
}
