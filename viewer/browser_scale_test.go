//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/viewer"
)

// crowdRecord writes one El Farol-like episode of n agents in two roles:
// each plays one turn, a broadcast reaches everyone, the team reward is
// 14 and the difference reward is small (-0.13 to +0.03), so that on one
// scale with the team it would not show.
func crowdRecord(t *testing.T, dir string, n int) (string, *episode.Record, *trajectories.Credit) {
	t.Helper()
	rec := &episode.Record{Scenario: "crowd", Status: protocol.StatusCompleted, End: "terminated", Steps: 2}
	credit := &trajectories.Credit{Allocators: []string{"team", "difference"}, Values: [][]float64{{}, {}}}
	all := make([]int, n)
	for i := range n {
		role := "patron"
		if i%10 == 0 {
			role = "barkeep"
		}
		rec.Seats = append(rec.Seats, episode.Seat{ID: fmt.Sprintf("agent-%d", i), Role: role})
		rec.Turns = append(rec.Turns, episode.Turn{Seat: i, Step: 1, State: "deciding", View: "pick a night", Action: strconv.Itoa(i % 7), Emit: true})
		rec.Transitions = append(rec.Transitions, episode.Transition{Step: 1, Seat: i, Event: "decided", From: "deciding", To: "done"})
		rec.Score.Agents = append(rec.Score.Agents, 1)
		credit.Values[0] = append(credit.Values[0], 14)
		credit.Values[1] = append(credit.Values[1], -0.13+0.16*float64(i%1000)/999)
		all[i] = i
	}
	rec.Score.Team = 14
	rec.Messages = []episode.Message{
		{Message: protocol.Message{From: "env", To: protocol.Broadcast, Kind: "open", Payload: "the bar opens", Time: 0, Seq: 0}, Recipients: all},
		{Message: protocol.Message{From: "agent-3", To: "agent-4", Kind: "tip", Payload: "Thursday", Time: 1, Seq: 1}, Recipients: []int{4}},
	}
	line, err := trajectories.AppendEpisodeJSON(nil, rec, credit)
	require.NoError(t, err)
	path := filepath.Join(dir, fmt.Sprintf("crowd-%d.episodes.jsonl", n))
	require.NoError(t, os.WriteFile(path, line, 0o644))
	return path, rec, credit
}

// TestBrowserTenThousandAgents opens an episode of 10,000 agents: a page
// of bounded weight that aggregates per role, shows the top and bottom
// agents with each allocator on its own scale, and one agent on demand.
func TestBrowserTenThousandAgents(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	path, rec, credit := crowdRecord(t, t.TempDir(), 10000)
	base := serve(t, openFiles(t, path))

	resp, err := http.Get(base + "/run-0/ep-0.html")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("episode page of 10,000 agents: %d bytes", len(body))
	assert.Less(t, len(body), 200<<10, "the page's weight is bounded")

	b.open(base + "/run-0/ep-0.html")
	b.shot("crowd-episode")
	var elements int
	b.eval(`document.getElementsByTagName("*").length`, &elements)
	t.Logf("%d DOM elements", elements)
	assert.Less(t, elements, 3000)

	// Per role and allocator: the agents' mean, min and max.
	type stat struct {
		n           int
		sum, lo, hi float64
	}
	want := map[[2]string]*stat{}
	for a, name := range credit.Allocators {
		for i, s := range rec.Seats {
			k := [2]string{s.Role, name}
			v := credit.Values[a][i]
			st, ok := want[k]
			if !ok {
				st = &stat{lo: v, hi: v}
				want[k] = st
			}
			st.n++
			st.sum += v
			st.lo, st.hi = math.Min(st.lo, v), math.Max(st.hi, v)
		}
	}
	var rows [][]string
	b.eval(`[...document.querySelectorAll("#role-credit tbody tr")].map(r => [r.dataset.role, r.dataset.allocator, ...[...r.cells].slice(2).map(c => c.textContent)])`, &rows)
	require.Len(t, rows, len(want))
	for _, r := range rows {
		st := want[[2]string{r[0], r[1]}]
		require.NotNil(t, st, "%v", r)
		assert.Equal(t, strconv.Itoa(st.n), r[2])
		assert.True(t, near(t, r[3], st.sum/float64(st.n)), "%v: mean %v", r, st.sum/float64(st.n))
		assert.True(t, near(t, r[5], st.lo), "%v", r)
		assert.True(t, near(t, r[6], st.hi), "%v", r)
	}

	// The difference reward's bars are visible on their own scale: the
	// widest is about half its column, not 1% of it.
	var widths []float64
	b.eval(`[...document.querySelectorAll('rect.credit-bar[data-allocator="difference"]')].map(r => r.getBBox().width)`, &widths)
	require.NotEmpty(t, widths)
	assert.Greater(t, slices.Max(widths), 60.0)
	// The agents shown: the top and bottom 5 under each allocator.
	var shown []string
	b.eval(`[...document.querySelectorAll("#credit-table tbody tr")].map(r => r.dataset.agent)`, &shown)
	assert.LessOrEqual(t, len(shown), 20)
	assert.Contains(t, shown, "agent-999", "the top difference reward")
	assert.Contains(t, shown, "agent-0", "the bottom one")

	// Ask for one agent: its row, its turn and its lifeline appear.
	b.open(base + "/run-0/ep-0.html?agent=agent-4321")
	var focus string
	b.eval(`document.querySelector("#focus").textContent`, &focus)
	assert.Equal(t, "agent-4321", focus)
	b.eval(`[...document.querySelectorAll("#credit-table tbody tr")].map(r => r.dataset.agent)`, &shown)
	assert.Contains(t, shown, "agent-4321")
	var turns []string
	b.eval(`[...document.querySelectorAll("details.turn")].map(d => d.dataset.agent)`, &turns)
	assert.Contains(t, turns, "agent-4321")
	var lanes []string
	b.eval(`[...document.querySelectorAll("#sequence .lane-label")].map(t => t.textContent)`, &lanes)
	assert.Contains(t, lanes, "agent-4321")
	checkTextInside(t, b, "#sequence", "text")
	b.open(base + "/run-0/ep-0.html?agent=nobody")
	var msg string
	b.eval(`document.querySelector("#agent-error").textContent`, &msg)
	assert.Contains(t, msg, `no agent "nobody"`)
}

// TestBrowserExportedAgent asks an exported page of 10,000 agents, opened
// from the file system, for one agent: its row of the credit table comes
// from the page's agents file, the same row the server draws; an unknown
// agent is named.
func TestBrowserExportedAgent(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	path, _, _ := crowdRecord(t, t.TempDir(), 10000)
	files := openFiles(t, path)
	dir := exportSized(t, files, 0, "run-0/ep-0.agents.js")

	// The served page's row of agent-4321, to compare.
	base := serve(t, files)
	b.open(base + "/run-0/ep-0.html?agent=agent-4321")
	var served []string
	rowText := `[...document.querySelector('#credit-table tr[data-agent="agent-4321"]').cells].map(c => c.textContent)`
	b.eval(rowText, &served)

	page := "file://" + filepath.ToSlash(dir) + "/run-0/ep-0.html"
	b.open(page + "?agent=agent-4321")
	assert.Equal(t, "agent-4321", textOnceSet(b, "#focus"), "the agents file is read when asked")
	var static []string
	b.eval(rowText, &static)
	assert.Equal(t, served, static, "the exported row is the served one")
	var value string
	b.eval(`document.querySelector("#agent").value`, &value)
	assert.Equal(t, "agent-4321", value)
	b.noErrors("an exported page of many agents, asked for one")

	b.open(page + "?agent=nobody")
	assert.Contains(t, textOnceSet(b, "#agent-error"), `no agent "nobody"`)
	var hidden bool
	b.eval(`document.querySelector("#focus-line").hidden`, &hidden)
	assert.True(t, hidden)
}

// exportSized exports files (at most maxEpisodes pages each) to a new
// directory, logs the size of its file rel and returns the directory.
func exportSized(t *testing.T, files []*viewer.File, maxEpisodes int, rel string) string {
	t.Helper()
	v, err := viewer.New(files, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = v.Export(dir, maxEpisodes)
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	require.NoError(t, err)
	t.Logf("export: %s %d bytes", rel, fi.Size())
	return dir
}

// textOnceSet polls the text of the element sel until the page's script
// sets it (for 2 s at most) and returns it.
func textOnceSet(b *browser, sel string) string {
	var text string
	for range 200 {
		b.eval(`document.querySelector(`+strconv.Quote(sel)+`).textContent`, &text)
		if text != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return text
}

// TestBrowserListOfManyEpisodes drives the list of a made-up run of
// 100,000 episodes (viewer.Synthesized: an index without a file, as playing
// them would be too slow for a test; the real million is measured by
// hand, docs/viewer.md): every page weighs about the same whatever the
// run's size, and every filter, sort and page matches what the index
// holds.
func TestBrowserListOfManyEpisodes(t *testing.T) {
	t.Parallel()
	const n = 100_000
	b := newBrowser(t)
	v, err := viewer.New([]*viewer.File{viewer.Synthesized("many.jsonl", n)}, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	t.Cleanup(srv.Close)
	base := srv.URL + "/run-0/episodes.html"

	weigh := func(query string) int {
		resp, err := http.Get(base + query)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, query)
		return len(body)
	}
	for _, q := range []string{"", "?sort=team&dir=desc", "?status=failed&page=3", "?role=dealer&sort=alloc%3Adifference"} {
		w := weigh(q)
		t.Logf("list%s: %d bytes", q, w)
		assert.Less(t, w, 64<<10, "list%s", q)
	}

	count := func(keep func(k int) bool) int {
		c := 0
		for k := range n {
			if keep(k) {
				c++
			}
		}
		return c
	}
	status := func(k int) string {
		switch {
		case k%13 == 0:
			return "failed"
		case k%7 == 0:
			return "truncated"
		}
		return "completed"
	}
	matched := func() int { return listMatched(t, b) }
	rollouts := func() []int64 { return listRollouts(b) }
	set := func(sel, value string) { b.navigate(setField(sel, value)) }
	b.open(base)
	assert.Equal(t, n, matched())
	assert.Len(t, rollouts(), 100, "a page of 100 rows")

	set("#f-status", "truncated")
	assert.Equal(t, count(func(k int) bool { return status(k) == "truncated" }), matched())
	set("#f-scenario", "other")
	assert.Equal(t, count(func(k int) bool { return status(k) == "truncated" && k%3 == 0 }), matched())
	set("#f-status", "")
	set("#f-scenario", "")
	set("#f-role", "dealer")
	assert.Equal(t, count(func(k int) bool { return k%3 == 0 }), matched())
	set("#f-role", "")
	set("#f-group", "1234")
	assert.Equal(t, []int64{9872, 9873, 9874, 9875, 9876, 9877, 9878, 9879}, rollouts())
	set("#f-group", "")
	set("#f-team-min", "2.5")
	set("#f-team-max", "2.75")
	assert.Equal(t, count(func(k int) bool { v := viewer.SynthTeam(k); return v >= 2.5 && v <= 2.75 }), matched())
	set("#f-team-min", "")
	set("#f-team-max", "")
	set("#f-alloc", "difference")
	set("#f-alloc-max", "-0.45")
	assert.Equal(t, count(func(k int) bool { return viewer.SynthDiff(k) <= -0.45 }), matched())
	set("#f-alloc-max", "")
	set("#f-alloc", "")

	// Sort by team reward, descending, then page on: the order holds
	// across pages.
	b.navigate(`[...document.querySelectorAll("#episodes-head th a")].find(a => a.textContent === "team reward").click()`)
	b.navigate(`[...document.querySelectorAll("#episodes-head th a")].find(a => a.textContent === "team reward").click()`)
	first := rollouts()
	b.navigate(`document.querySelector("#list-next").click()`)
	second := rollouts()
	all := append(first, second...)
	require.Len(t, all, 200)
	for k := 1; k < len(all); k++ {
		assert.GreaterOrEqual(t, viewer.SynthTeam(int(all[k-1])), viewer.SynthTeam(int(all[k])), "descending at %d", k)
	}
	var page string
	b.eval(`document.querySelector("#list-page").textContent`, &page)
	assert.Equal(t, fmt.Sprintf("page 2 of %d", n/100), page)
	b.noErrors("the list of 100,000 episodes")
}

// EnvLargeFile names a large episode file (a million episodes) for
// TestBrowserLargeFile, run by hand: playing it is too slow for a test.
const EnvLargeFile = "TROUPE_VIEW_LARGE_FILE"

// TestBrowserLargeFile opens a large run of real episodes, serves it and
// drives its pages in Chromium: the overview, the list under every filter
// and sort, an episode; it logs each page's weight and the heap the
// server keeps. Skipped unless $TROUPE_VIEW_LARGE_FILE names the file
// (docs/viewer.md gives the command and the numbers).
func TestBrowserLargeFile(t *testing.T) {
	x := openLarge(t)
	b := newBrowser(t)
	base := serve(t, []*viewer.File{x})
	e0 := x.Info(0)
	alloc := e0.Allocators[len(e0.Allocators)-1]
	for _, page := range []string{"/run-0/index.html", "/run-0/episodes.html", "/run-0/episodes.html?sort=team&dir=desc&page=500",
		"/run-0/episodes.html?status=completed&scenario=" + url.QueryEscape(e0.Scenario) + "&role=" + url.QueryEscape(e0.Roles[0]) + "&team_min=1&team_max=2&alloc=" + url.QueryEscape(alloc) + "&alloc_min=0.3&sort=alloc%3A" + url.QueryEscape(alloc),
		"/run-0/episodes.html?group=777", "/run-0/ep-999.html", "/compare-0-0.html"} {
		t0 := time.Now()
		resp, err := http.Get(base + page)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.HasPrefix(page, "/compare") {
			assert.Equal(t, 404, resp.StatusCode)
			continue
		}
		require.Equal(t, 200, resp.StatusCode, page)
		t.Logf("%s: %d bytes in %v", page, len(body), time.Since(t0))
		assert.Less(t, len(body), 256<<10, page)
		b.open(base + page)
	}
	// Each filter, in the browser, against the index.
	b.open(base + "/run-0/episodes.html")
	count := func(keep func(e *viewer.EpisodeInfo) bool) int {
		n := 0
		for k := range x.Len() {
			if e := x.Info(k); keep(&e) {
				n++
			}
		}
		return n
	}
	set := func(sel, value string) { b.navigate(setField(sel, value)) }
	set("#f-group", "777")
	assert.Equal(t, count(func(e *viewer.EpisodeInfo) bool { return e.GroupIndex == 777 }), listMatched(t, b))
	set("#f-group", "")
	set("#f-team-min", "2")
	assert.Equal(t, count(func(e *viewer.EpisodeInfo) bool { return e.Team >= 2 }), listMatched(t, b))
	set("#f-team-min", "")
	set("#f-alloc", alloc)
	set("#f-alloc-max", "0.5")
	assert.Equal(t, count(func(e *viewer.EpisodeInfo) bool { v, ok := e.AllocValue(alloc); return ok && v <= 0.5 }), listMatched(t, b))
	set("#f-status", "completed")
	assert.Equal(t, count(func(e *viewer.EpisodeInfo) bool {
		v, ok := e.AllocValue(alloc)
		return ok && v <= 0.5 && e.Status == "completed"
	}), listMatched(t, b))
	b.noErrors("the large file's list")

	// Its export: the list filters the compact index in the browser.
	dir := exportSized(t, []*viewer.File{x}, 20, "run-0/episodes-index.js")
	t0 := time.Now()
	b.open("file://" + filepath.ToSlash(dir) + "/run-0/episodes.html")
	t.Logf("exported list opened in %v", time.Since(t0))
	assert.Equal(t, x.Len(), listMatched(t, b))
	b.exec(setField("#f-team-min", "2"))
	assert.Equal(t, count(func(e *viewer.EpisodeInfo) bool { return e.Team >= 2 }), listMatched(t, b))
	b.noErrors("the large file's exported list")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap after serving: %.0f MiB", float64(ms.HeapAlloc)/(1<<20))
}
