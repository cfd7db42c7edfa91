//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// werewolfRecords writes a werewolf-like run that the built-in scenarios
// do not cover: a private channel (#wolves) beside direct messages and
// broadcasts, long announcements sent by the last seat (their labels run
// past the last lifeline), and team rewards with six significant digits
// around 14 (the groups chart's y labels).
func werewolfRecords(t *testing.T, dir string) string {
	t.Helper()
	var out []byte
	seats := []episode.Seat{{ID: "wolf-1", Role: "wolf"}, {ID: "wolf-2", Role: "wolf"}, {ID: "seer", Role: "villager"}, {ID: "village-elder", Role: "villager"}}
	for i := range 6 {
		rec := &episode.Record{
			Scenario: "werewolf", Status: protocol.StatusCompleted, End: "village wins", Steps: 3, Seats: seats,
			RolloutID: int64(i), Index: int64(i), GroupIndex: int64(i / 3), Seed: uint64(100 + i),
			Turns: []episode.Turn{
				{Seat: 0, Step: 0, State: "night", Action: "kill seer", Emit: true},
				{Seat: 3, Step: 1, State: "day", Action: "announce", Emit: true},
			},
			Messages: []episode.Message{
				{Message: protocol.Message{From: "wolf-1", To: protocol.Channel("wolves"), Kind: "plan", Payload: "we take the seer tonight", Time: 0, Seq: 0}, Recipients: []int{1}},
				{Message: protocol.Message{From: "wolf-1", To: "wolf-2", Kind: "whisper", Payload: "follow my vote", Time: 0, Seq: 1}, Recipients: []int{1}},
				{Message: protocol.Message{From: "village-elder", To: protocol.Broadcast, Kind: "votes", Payload: "wolf-1: 3 (seer, village-elder, wolf-2), seer: 1 (wolf-1), abstained: none", Time: 1, Seq: 2}, Recipients: []int{0, 1, 2}},
				{Message: protocol.Message{From: "village-elder", To: protocol.Broadcast, Kind: "verdict", Payload: "wolf-1 is exiled: the village wins the day with 3 votes against 1", Time: 2, Seq: 3}, Recipients: []int{0, 1, 2}},
			},
			Score: episode.Score{Team: 14.3295 + 0.00001*float64(i), Agents: []float64{0, 0, 1, 1}},
		}
		credit := &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{{rec.Score.Team, rec.Score.Team}}}
		line, err := trajectories.AppendEpisodeJSON(nil, rec, credit)
		require.NoError(t, err)
		out = append(out, line...)
	}
	path := filepath.Join(dir, "werewolf.episodes.jsonl")
	require.NoError(t, os.WriteFile(path, out, 0o644))
	return path
}

// TestBrowserDefects checks, in Chromium, the defects the issue found:
// a channel message drawn like a direct one, its label not naming the
// channel, the sequence diagram's long labels and the groups chart's y
// labels cut by their SVG's edge.
func TestBrowserDefects(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	base := serve(t, openFiles(t, werewolfRecords(t, t.TempDir())))

	b.open(base + "/run-0/ep-0.html")
	b.shotOf("werewolf-sequence", "#sequence")
	// The colours are read from the computed style: what the reader sees.
	var strokes map[string]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("#sequence g.msg")].map(g => [g.dataset.kind, getComputedStyle(g.querySelector(".msg-line")).stroke]))`, &strokes)
	require.Len(t, strokes, 4)
	assert.NotEqual(t, strokes["whisper"], strokes["plan"], "a channel message is drawn apart from a direct one")
	assert.NotEqual(t, strokes["votes"], strokes["plan"], "and from a broadcast")
	var legend string
	b.eval(`getComputedStyle(document.querySelector(".legend .channel"), "::before").borderTopColor`, &legend)
	assert.Equal(t, legend, strokes["plan"], "the channel's line has the legend's colour")
	var labels map[string]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("#sequence g.msg")].map(g => [g.dataset.kind, g.querySelector(".msg-label").textContent]))`, &labels)
	assert.True(t, strings.HasPrefix(labels["plan"], "#wolves "), "the label names the channel: %q", labels["plan"])
	assert.Contains(t, labels["whisper"], "wolf-2", "a direct message's label names its recipient")
	assert.Contains(t, labels["votes"], "abstained: none", "the votes are not cut")
	assert.Contains(t, labels["verdict"], "3 votes against 1", "the verdict is not cut")
	checkTextInside(t, b, "#sequence", "text")

	b.open(base + "/run-0/index.html")
	b.shot("werewolf-overview")
	var ticks []string
	b.eval(`[...document.querySelectorAll("svg.chart text.tick")].map(t => t.textContent)`, &ticks)
	assert.Contains(t, ticks, "14.3295", "the groups chart's lowest team reward, whole")
	for k := range 3 {
		checkTextInside(t, b, fmt.Sprintf("svg.chart:nth-of-type(%d)", k+1), "text")
	}
}

// checkTextInside asserts that every text of each SVG sel lies whole
// inside it: its rendered box within the SVG's.
func checkTextInside(t *testing.T, b *browser, sel, texts string) {
	t.Helper()
	var cut []string
	b.eval(fmt.Sprintf(`[...document.querySelectorAll(%q)].flatMap(svg => { const r = svg.getBoundingClientRect(); return [...svg.querySelectorAll(%q)].filter(x => { const q = x.getBoundingClientRect(); return q.width > 0 && (q.left < r.left - 0.5 || q.right > r.right + 0.5 || q.top < r.top - 0.5 || q.bottom > r.bottom + 0.5); }).map(x => x.textContent + " [" + Math.round(x.getBoundingClientRect().left - r.left) + ".." + Math.round(x.getBoundingClientRect().right - r.left) + " of " + Math.round(r.width) + "]"); })`, sel, texts), &cut)
	assert.Empty(t, cut, "texts of %s cut by its edge", sel)
}

// TestBrowserGameState: tic-tac-toe and negotiation draw their state; the
// page shows it after the start and after every step, from a replay of
// the record, and the final state agrees with the record.
func TestBrowserGameState(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	_, runs := fixtures(t)
	tictactoe, negotiation := runs[1], runs[3]
	base := serve(t, openFiles(t, tictactoe.Records, negotiation.Records, runs[0].Records))
	type state struct {
		Step  int    `json:"step"`
		Text  string `json:"text"`
		Final bool   `json:"final"`
	}
	read := func() []state {
		var s []state
		b.eval(`[...document.querySelectorAll("#state-steps figure")].map(f => ({step: +f.dataset.step, text: f.querySelector("pre").textContent, final: f.classList.contains("final")}))`, &s)
		return s
	}
	recs, _ := readRecords(t, tictactoe.Records)
	for k, rec := range recs {
		b.open(fmt.Sprintf("%s/run-0/ep-%d.html", base, k))
		states := read()
		require.Len(t, states, rec.Steps+1, "episode %d: the start and every step", k)
		// After step t the board holds t marks, the record's moves so far.
		for _, s := range states {
			marks := strings.Count(s.Text, "X") + strings.Count(s.Text, "O")
			assert.Equal(t, s.Step, marks-strings.Count(s.Text, "(X)")-strings.Count(s.Text, "(O)"), "episode %d after step %d:\n%s", k, s.Step, s.Text)
		}
		last := states[len(states)-1]
		assert.True(t, last.Final)
		switch {
		case rec.Score.Agents[0] > rec.Score.Agents[1]:
			assert.Contains(t, last.Text, rec.Seats[0].ID+" (X) wins")
		case rec.Score.Agents[0] < rec.Score.Agents[1]:
			assert.Contains(t, last.Text, rec.Seats[1].ID+" (O) wins")
		default:
			assert.Contains(t, last.Text, "a draw")
		}
	}
	b.shotOf("tictactoe-state", "#state")

	recs, _ = readRecords(t, negotiation.Records)
	for k, rec := range recs {
		b.open(fmt.Sprintf("%s/run-1/ep-%d.html", base, k))
		states := read()
		require.Len(t, states, rec.Steps+1)
		assert.Contains(t, states[0].Text, "no offer on the table")
		last := states[len(states)-1].Text
		if rec.Score.Team != 0 {
			assert.Contains(t, last, "deal: ", "a scored negotiation ended in a deal")
		}
	}
	b.shotOf("negotiation-state", "#state")

	// El Farol draws no state: no section.
	b.open(base + "/run-2/ep-0.html")
	var n int
	b.eval(`document.querySelectorAll("#state").length`, &n)
	assert.Zero(t, n)
}
