package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// How often a run reports its progress: a terminal's bar is redrawn often
// enough to look alive; a log (CI, a file) gets a line every few seconds
// so that it stays readable.
const (
	barEvery  = 100 * time.Millisecond
	lineEvery = 2 * time.Second
	barWidth  = 30
)

// reporter writes a run's progress and messages to stderr. On a terminal it
// redraws one progress-bar line in place; elsewhere it prints a plain line
// at most every lineEvery. Its methods are safe for concurrent use (the
// interruption notice comes from another goroutine than the progress).
//
// Its clock is the runner's: play.Progress.Elapsed, so the reporter itself
// reads no time.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	quiet bool
	total int
	drawn bool          // the bar is on the current line, not yet ended
	last  time.Duration // Elapsed at the last report
	any   bool          // a report was made
}

func newReporter(w io.Writer, tty, quiet bool, total int) *reporter {
	return &reporter{w: w, tty: tty, quiet: quiet, total: total}
}

// update reports p, unless the previous report was too recent. The last
// update of a run (Done == Total) is always drawn on a terminal.
func (r *reporter) update(p play.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet {
		return
	}
	if r.tty {
		if r.any && p.Elapsed-r.last < barEvery && p.Done < p.Total {
			return
		}
		fmt.Fprintf(r.w, "\r\x1b[K%s", bar(p))
		r.drawn = true
	} else {
		if p.Elapsed-r.last < lineEvery {
			return
		}
		fmt.Fprintln(r.w, progressLine(p))
	}
	r.last, r.any = p.Elapsed, true
}

// printf prints a message on a line of its own.
func (r *reporter) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLine()
	fmt.Fprintf(r.w, format, args...)
}

// Write writes p on the reporter's line, after the progress bar's: the
// writer for logs of goroutines that run beside the progress reports (a
// distributed run's).
func (r *reporter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLine()
	return r.w.Write(p)
}

// finish ends the progress bar's line, if one is drawn.
func (r *reporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLine()
}

func (r *reporter) endLine() {
	if r.drawn {
		fmt.Fprintln(r.w)
		r.drawn = false
	}
}

// bar renders a terminal progress bar:
//
//	[##########--------------------]  33%  330/1000 episodes  12.3k turns/s  eta 2s
func bar(p play.Progress) string {
	frac := 0.0
	if p.Total > 0 {
		frac = min(float64(p.Done)/float64(p.Total), 1)
	}
	full := int(frac * barWidth)
	var b strings.Builder
	b.WriteByte('[')
	b.WriteString(strings.Repeat("#", full))
	b.WriteString(strings.Repeat("-", barWidth-full))
	// The percentage is rounded down: 100% means done.
	fmt.Fprintf(&b, "] %3d%%  %d/%d episodes%s  %s turns/s", int(100*frac), p.Done, p.Total, playing(p), compact(rate(float64(p.Turns), p.Elapsed)))
	if p.Done > 0 && p.Done < p.Total {
		eta := time.Duration(float64(p.Elapsed) * float64(p.Total-p.Done) / float64(p.Done))
		fmt.Fprintf(&b, "  eta %s", eta.Round(etaPrecision(eta)))
	}
	return b.String()
}

// playing says how many episodes were played beyond those written, when
// some were: a run whose first group is slow shows that it plays.
func playing(p play.Progress) string {
	if p.Played > p.Done {
		return fmt.Sprintf(" (%d played)", p.Played)
	}
	return ""
}

// progressLine renders a plain progress line for logs.
func progressLine(p play.Progress) string {
	pct := 0.0
	if p.Total > 0 {
		pct = 100 * float64(p.Done) / float64(p.Total)
	}
	return fmt.Sprintf("troupe: %d/%d episodes (%.0f%%)%s, %d samples, %s turns/s, %s elapsed",
		p.Done, p.Total, pct, playing(p), p.Samples, compact(rate(float64(p.Turns), p.Elapsed)), roundDuration(p.Elapsed))
}

// writeSummary prints what a run did: episodes by status, samples, mean
// team reward, throughput, elapsed time, the output and the first failure.
func writeSummary(r *reporter, p *plan, out string, s play.Summary) {
	info := p.cfg.Scenario.Info()
	var b strings.Builder
	fmt.Fprintf(&b, "troupe: %s: %d episodes, %d samples written to %s (%s layout)\n",
		info.Name, s.Episodes, s.Samples, out, layoutName(p.layout))
	fmt.Fprintf(&b, "  status:      %s\n", statusCounts(s))
	if s.Scored > 0 {
		fmt.Fprintf(&b, "  team reward: mean %.6g over %d scored episodes\n", s.MeanTeamReward(), s.Scored)
		if len(s.TeamScores) > 0 {
			var teams []string
			for _, t := range info.Teams {
				if ts, ok := s.TeamScores[t]; ok {
					teams = append(teams, fmt.Sprintf("%s %.6g", t, ts.Mean()))
				}
			}
			fmt.Fprintf(&b, "  per team:    mean %s (the team reward is their sum)\n", strings.Join(teams, ", "))
		}
	} else {
		fmt.Fprintf(&b, "  team reward: no scored episodes\n")
	}
	if len(s.RoleScores) > 0 {
		var roles []string
		for _, r := range info.Roles {
			if rs, ok := s.RoleScores[r.Name]; ok {
				roles = append(roles, fmt.Sprintf("%s %.6g", r.Name, rs.Mean()))
			}
		}
		fmt.Fprintf(&b, "  agent score: mean per role: %s\n", strings.Join(roles, ", "))
	}
	fmt.Fprintf(&b, "  credit:      %s (%s rewards)\n", strings.Join(allocatorNames(p.allocators), ", "), rewardFormatName(p))
	fmt.Fprintf(&b, "  policies:    %s\n", policyNames(p))
	fmt.Fprintf(&b, "  throughput:  %s turns/s, %s episodes/s (%d turns)\n",
		compact(rate(float64(s.Turns), s.Elapsed)), compact(rate(float64(s.Episodes), s.Elapsed)), s.Turns)
	fmt.Fprintf(&b, "  elapsed:     %s\n", roundDuration(s.Elapsed))
	if s.FirstFailure != "" {
		fmt.Fprintf(&b, "  first failure: episode %d: %s\n%s", s.FirstFailureAt, s.FirstFailure, stackLines(s.FirstFailureStack))
	}
	r.printf("%s", b.String())
}

// stackLines is a panic's stack (episode.Record.Stack) as lines under a
// failure, or "" for none.
func stackLines(stack string) string {
	if stack == "" {
		return ""
	}
	return "    panicked in:\n      " + strings.ReplaceAll(stack, "\n", "\n      ") + "\n"
}

// statuses in the order a summary lists them.
var statuses = []protocol.Status{
	protocol.StatusCompleted, protocol.StatusTruncated, protocol.StatusAborted,
	protocol.StatusFailed, protocol.StatusPending,
}

func statusCounts(s play.Summary) string {
	var parts []string
	for _, st := range statuses {
		if n := s.ByStatus[st]; n > 0 {
			parts = append(parts, string(st)+" "+strconv.Itoa(n))
		}
	}
	if len(parts) == 0 {
		return "no episodes written"
	}
	return strings.Join(parts, ", ")
}

// allocatorNames are the allocators' names: canonical specs, which the
// registry reads back.
func allocatorNames(allocs []trajectories.Allocator) []string {
	names := make([]string, len(allocs))
	for i, a := range allocs {
		names[i] = a.Name()
	}
	return names
}

func rewardFormatName(p *plan) string {
	if p.format == trajectories.RewardDict {
		return "dict"
	}
	return "scalar"
}

func layoutName(l trajectories.Layout) string {
	if l == trajectories.Nested {
		return "nested"
	}
	return "flat"
}

func policyNames(p *plan) string {
	info := p.cfg.Scenario.Info()
	parts := make([]string, len(info.Roles))
	for i, r := range info.Roles {
		parts[i] = r.Name + "=" + p.policies[r.Name]
	}
	return strings.Join(parts, ", ")
}

// rate is n per second of d.
func rate(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

// compact renders a non-negative rate with three significant digits and a
// k or M suffix: 950, 12.3k, 4.56M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', digits(v/1e6), 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', digits(v/1e3), 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', digits(v), 64)
}

// digits is how many decimals give v (in [0, 1000)) three significant
// digits.
func digits(v float64) int {
	switch {
	case v >= 100:
		return 0
	case v >= 10:
		return 1
	}
	return 2
}

// etaPrecision is how precisely an estimate of d is worth showing.
func etaPrecision(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return time.Second
	case d >= time.Second:
		return 100 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// roundDuration shortens d for display: milliseconds below a minute,
// seconds above.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
