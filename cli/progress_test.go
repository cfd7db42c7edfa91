package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/troupe-rl/troupe/play"
)

func progressAt(done int, elapsed time.Duration) play.Progress {
	return play.Progress{Done: done, Total: 100, Samples: int64(done) * 3, Turns: int64(done) * 3, Elapsed: elapsed}
}

func TestReporterPrintsPlainLinesAtMostEveryTwoSeconds(t *testing.T) {
	var b bytes.Buffer
	r := newReporter(&b, false, false, 100)
	for i, ms := range []int{500, 1000, 1999, 2100, 3000, 4099, 4100, 9000} {
		r.update(progressAt(i+1, time.Duration(ms)*time.Millisecond))
	}
	r.update(progressAt(100, 9500*time.Millisecond)) // the end adds no line of its own
	r.finish()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 3, b.String())
	assert.Equal(t, "troupe: 4/100 episodes (4%), 12 samples, 5.71 turns/s, 2.1s elapsed", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "troupe: 7/100 episodes (7%)"), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "troupe: 8/100 episodes (8%)"), lines[2])
	assert.NotContains(t, b.String(), "\r")
}

func TestReporterRedrawsABarOnATerminal(t *testing.T) {
	var b bytes.Buffer
	r := newReporter(&b, true, false, 100)
	r.update(progressAt(10, 10*time.Millisecond))
	r.update(progressAt(20, 50*time.Millisecond)) // too soon: skipped
	r.update(progressAt(30, 200*time.Millisecond))
	r.printf("note\n")
	r.update(progressAt(100, 210*time.Millisecond)) // the end is always drawn
	r.finish()
	r.finish() // harmless twice

	draws := strings.Split(b.String(), "\r\x1b[K")
	require.Len(t, draws, 4, "%q", b.String())
	assert.Equal(t, "", draws[0])
	assert.Equal(t, "[###---------------------------]  10%  10/100 episodes  3.00k turns/s  eta 90ms", draws[1])
	assert.Equal(t, "[#########---------------------]  30%  30/100 episodes  450 turns/s  eta 470ms\nnote\n", draws[2])
	assert.Equal(t, "[##############################] 100%  100/100 episodes  1.43k turns/s\n", draws[3])
}

func TestBarRoundsDown(t *testing.T) {
	assert.Contains(t, bar(play.Progress{Done: 999, Total: 1000, Elapsed: 20 * time.Second}), "]  99%  999/1000 episodes")
	assert.Contains(t, bar(play.Progress{Done: 999, Total: 1000, Elapsed: 20 * time.Second}), "eta 20ms")
	assert.Contains(t, bar(play.Progress{Done: 1, Total: 100, Elapsed: 1234 * time.Millisecond}), "eta 2m2s")
	assert.Contains(t, bar(play.Progress{Done: 1, Total: 2, Elapsed: 1234 * time.Millisecond}), "eta 1.2s")
	assert.Contains(t, bar(play.Progress{Done: 0, Total: 0}), "[------------------------------]   0%  0/0 episodes  0.00 turns/s")
}

func TestReporterQuiet(t *testing.T) {
	var b bytes.Buffer
	for _, tty := range []bool{false, true} {
		r := newReporter(&b, tty, true, 100)
		r.update(progressAt(50, 5*time.Second))
		r.update(progressAt(100, 10*time.Second))
		r.finish()
	}
	assert.Empty(t, b.String())
}

func TestCompact(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0.00", 3.14159: "3.14", 42.42: "42.4", 950: "950", 12345: "12.3k", 4_560_000: "4.56M",
	} {
		assert.Equal(t, want, compact(v))
	}
}

func TestWrap(t *testing.T) {
	text := "one two three four five six\n\n  G = Σ φ(x)\nseven eight"
	assert.Equal(t, "> one two\n> three\n> four five\n> six\n\n>   G = Σ φ(x)\n> seven\n> eight", wrap(text, 11, "> "))
}
