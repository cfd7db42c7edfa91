//go:build !fuzzing

// This file, like every file of package viewer_test, is left out of make
// fuzz's builds (-tags fuzzing): their imports (the cli, which builds the
// fixtures, and a browser driver) would have the fuzzer instrument some
// 480 packages that the fuzz targets, all in package viewer, never reach,
// which costs their coverage bookkeeping 97% of the executions.

package viewer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/viewer"
)

// EnvRequireBrowser makes a missing Chromium fail the browser tests
// instead of skipping them: CI sets it, once its set-up has installed
// Debian's chromium.
const EnvRequireBrowser = "TROUPE_REQUIRE_BROWSER"

// chromiumPath finds a Chromium: $TROUPE_CHROMIUM, else chromium on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TROUPE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequireBrowser) == "1" {
		t.Fatalf("no Chromium found (chromium on PATH or $TROUPE_CHROMIUM) and %s=1: install Debian's chromium (make test does under CI)", EnvRequireBrowser)
	}
	t.Skipf("no Chromium found (chromium on PATH or $TROUPE_CHROMIUM): the browser tests are skipped; apt-get install chromium to run them (%s=1 makes this a failure, as in CI)", EnvRequireBrowser)
	return ""
}

// browser is one headless Chromium tab that records every console error,
// uncaught exception and error the browser logs (a CSP violation, a
// resource that failed to load).
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	shots  string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	b := &browser{t: t, ctx: ctx, shots: filepath.Join("..", "out", "view")}
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.errors = append(b.errors, "console."+string(e.Type)+": "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			b.errors = append(b.errors, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, desc))
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				b.errors = append(b.errors, fmt.Sprintf("log: %s (%s)", e.Entry.Text, e.Entry.URL))
			}
		}
	})
	require.NoError(t, err, "start Chromium at %s", path)
	require.NoError(t, os.MkdirAll(b.shots, 0o755))
	return b
}

// open loads url, waits for the page's script, and fails the test on any
// error the page caused.
func (b *browser) open(url string) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, chromedp.Navigate(url), chromedp.WaitReady("body")), url)
	b.settle()
	b.noErrors(url)
}

func (b *browser) noErrors(where string) {
	b.t.Helper()
	b.mu.Lock()
	errs := b.errors
	b.errors = nil
	b.mu.Unlock()
	assert.Empty(b.t, errs, "errors on %s", where)
}

// settle waits for the page to have loaded, its deferred script run, and
// late errors to arrive.
func (b *browser) settle() {
	b.t.Helper()
	for range 100 {
		done, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.readyState === "complete"`))
		require.NoError(b.t, err)
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
}

// eval runs js in the page and decodes its JSON value into out.
func (b *browser) eval(js string, out any) {
	b.t.Helper()
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(`+js+`)`))
	require.NoError(b.t, err, js)
	require.NoError(b.t, json.Unmarshal([]byte(raw), out), raw)
}

// navigate runs js, which leaves the page (a form's submission, a link's
// click), and waits for the next page to load.
func (b *browser) navigate(js string) {
	b.t.Helper()
	b.exec(`window.__old = true`)
	b.exec(js)
	for range 500 {
		// Asked while the old page goes, Chromium may answer that the
		// target navigated: not yet, ask again.
		gone, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__old === undefined && document.readyState === "complete"`))
		if err != nil && !strings.Contains(err.Error(), "Inspected target navigated or closed") {
			require.NoError(b.t, err)
		}
		if gone {
			b.settle()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.t.Fatalf("%s did not leave the page", js)
}

// exec runs js in the page for its effect.
func (b *browser) exec(js string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(`+js+`, true)`))
	require.NoError(b.t, err, js)
}

// do runs browser actions.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, steps...))
}

// shot writes a full-page screenshot under out/view.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

// shotOf writes a screenshot of the element sel under out/view.
func (b *browser) shotOf(name, sel string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.Screenshot(sel))
	require.NoError(b.t, err, sel)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

func openFiles(t *testing.T, paths ...string) []*viewer.File {
	t.Helper()
	var files []*viewer.File
	for _, p := range paths {
		f, err := viewer.Open(p)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		files = append(files, f)
	}
	return files
}

func serve(t *testing.T, files []*viewer.File) string {
	t.Helper()
	v, err := viewer.New(files, scenarios.Builtin())
	require.NoError(t, err)
	srv := httptest.NewServer(v.Handler("", true))
	t.Cleanup(srv.Close)
	return srv.URL
}

// near reports whether a page's number (six significant digits) is v.
func near(t *testing.T, page string, v float64) bool {
	t.Helper()
	got, err := strconv.ParseFloat(page, 64)
	require.NoError(t, err, page)
	return math.Abs(got-v) <= 1e-5*math.Max(1, math.Abs(v))
}

// TestBrowserEveryScenario loads the overview, the list and the first
// episode of every built-in scenario's episode records in Chromium, and
// checks the drawn message arrows, state timelines, diagram highlights and
// credit bars against the file as trajectories reads it.
func TestBrowserEveryScenario(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	dir, runs := fixtures(t)
	paths := []string{}
	for _, r := range runs {
		paths = append(paths, r.Records)
	}
	paths = append(paths, llmRun(t, dir))
	base := serve(t, openFiles(t, paths...))

	b.open(base + "/")
	b.shot("index")
	var nRuns int
	b.eval(`document.querySelectorAll("#runs tr.run").length`, &nRuns)
	require.Equal(t, len(paths), nRuns)

	for i, path := range paths {
		recs, credits := readRecords(t, path)
		name := strings.TrimSuffix(filepath.Base(path), ".episodes.jsonl")
		t.Run(name, func(t *testing.T) {
			b.t = t
			run := fmt.Sprintf("%s/run-%d/", base, i)

			b.open(run + "index.html")
			b.shot(name + "-overview")
			statuses := map[string]int{}
			for _, r := range recs {
				statuses[string(r.Status)]++
			}
			var shown map[string]int
			b.eval(`Object.fromEntries([...document.querySelectorAll("#statuses tr[data-status]")].map(r => [r.dataset.status, +r.cells[1].textContent]))`, &shown)
			assert.Equal(t, statuses, shown, "status counts")

			b.open(run + "episodes.html")
			b.shot(name + "-list")
			var rows []int64
			b.eval(`[...document.querySelectorAll("#episodes-body tr")].map(r => +r.dataset.rollout)`, &rows)
			var want []int64
			for _, r := range recs {
				want = append(want, r.RolloutID)
			}
			assert.Equal(t, want, rows, "the list shows every episode, in file order")

			b.open(run + "ep-0.html")
			b.shotOf(name+"-states", "#states")
			checkEpisode(t, b, recs[0], credits[0])
			if strings.Contains(name, "llm") {
				checkLLMTurns(t, b, recs[0])
			}
			b.shot(name + "-episode")
		})
	}
	b.t = t
}

// checkEpisode compares an episode's page with its record.
func checkEpisode(t *testing.T, b *browser, rec *episode.Record, credit *trajectories.Credit) {
	t.Helper()
	// Message arrows: one group per message, an arrowhead per recipient.
	type msg struct {
		Seq   int    `json:"seq"`
		From  string `json:"from"`
		To    string `json:"to"`
		Heads []int  `json:"heads"`
	}
	var msgs []msg
	b.eval(`[...document.querySelectorAll("#sequence g.msg")].map(g => ({seq: +g.dataset.seq, from: g.dataset.from, to: g.dataset.to, heads: [...g.querySelectorAll("path.arrow")].map(p => +p.dataset.seat)}))`, &msgs)
	require.Len(t, msgs, len(rec.Messages), "one arrow group per message")
	for k, m := range rec.Messages {
		want := m.Recipients
		if want == nil {
			want = []int{}
		}
		assert.Equal(t, msg{Seq: m.Seq, From: m.From, To: string(m.To), Heads: want}, msgs[k], "message %d", k)
	}
	// Turn marks on the lifelines: one per turn, at its seat, in its state.
	var marks [][]any
	b.eval(`[...document.querySelectorAll("#sequence circle.turn-mark")].map(r => [+r.dataset.turn, +r.dataset.seat, r.dataset.state])`, &marks)
	require.Len(t, marks, len(rec.Turns))
	for k, tn := range rec.Turns {
		assert.Equal(t, []any{float64(k), float64(tn.Seat), string(tn.State)}, marks[k], "turn %d's mark", k)
	}
	checkTimelines(t, b, rec)
	// Credit bars: every agent with samples, under every allocator, its
	// mean value per sample.
	var team string
	b.eval(`document.querySelector("#team").dataset.value`, &team)
	assert.True(t, near(t, team, rec.Score.Team), "team reward %s, want %v", team, rec.Score.Team)
	type bar struct{ Agent, Alloc, Value string }
	var bars []bar
	b.eval(`[...document.querySelectorAll("rect.credit-bar")].map(r => ({Agent: r.dataset.agent, Alloc: r.dataset.allocator, Value: r.dataset.value}))`, &bars)
	if credit == nil {
		assert.Empty(t, bars)
		return
	}
	want := map[[2]string]float64{}
	n := map[[2]string]int{}
	k := 0
	for _, tn := range rec.Turns {
		if !tn.Emit {
			continue
		}
		for a, name := range credit.Allocators {
			key := [2]string{rec.Seats[tn.Seat].ID, name}
			want[key] += credit.Values[a][k]
			n[key]++
		}
		k++
	}
	require.Len(t, bars, len(want), "a bar per agent and allocator")
	for _, br := range bars {
		key := [2]string{br.Agent, br.Alloc}
		require.Contains(t, n, key)
		assert.True(t, near(t, br.Value, want[key]/float64(n[key])), "%s under %s: bar %s, want %v", br.Agent, br.Alloc, br.Value, want[key]/float64(n[key]))
	}
}

// drawn is an element of a state timeline, as the page has it.
type drawn struct {
	Kind         string  `json:"kind"` // seg, self, turn or final
	Seat         int     `json:"seat"`
	K            int     `json:"k"`
	Step         int     `json:"step"`
	Turn         int     `json:"turn"`
	State        string  `json:"state"`
	Event        string  `json:"event"`
	X            float64 `json:"x"`
	W            float64 `json:"w"`
	Text         string  `json:"text"`
	FromRecorded bool    `json:"recorded"`
}

// timelineJS lists the timelines' elements in document order.
const timelineJS = `[...document.querySelectorAll("svg.timeline .state-seg, svg.timeline .self-tick, svg.timeline .turn-dot, svg.timeline .final-state")].map(el => ({
	kind: el.classList.contains("state-seg") ? "seg" : el.classList.contains("self-tick") ? "self" : el.classList.contains("turn-dot") ? "turn" : "final",
	recorded: el.closest("svg.timeline").dataset.from === "transitions",
	seat: +el.dataset.seat, k: +(el.dataset.k ?? -1), step: +(el.dataset.step ?? -1), turn: +(el.dataset.turn ?? -1),
	state: el.dataset.state, event: el.dataset.event || "", text: el.classList.contains("final-state") ? el.lastChild.textContent : "",
	x: +(el.getAttribute("x") ?? el.getAttribute("x1") ?? el.getAttribute("cx")), w: +(el.getAttribute("width") ?? 0)}))`

// checkTimelines compares an episode record's page with its transitions:
// per seat, a segment for its role's initial state and one for each state
// a transition entered, in order, a tick per self-transition, its final
// state named; a dot per turn, drawn on a segment of the state it was
// played in; the role diagrams highlight every state visited and every
// event fired, and picking an agent highlights its own.
func checkTimelines(t *testing.T, b *browser, rec *episode.Record) {
	t.Helper()
	require.NotEmpty(t, rec.Transitions, "every built-in scenario's record holds transitions")
	sc, err := scenarios.Builtin().Lookup(rec.Scenario)
	require.NoError(t, err)
	info := sc.Info()
	var els []drawn
	b.eval(timelineJS, &els)
	segs, selfs, finals := map[int][]drawn{}, map[int][]drawn{}, map[int]drawn{}
	var dots []drawn
	for _, el := range els {
		require.True(t, el.FromRecorded, "a record's timelines are drawn from its transitions")
		switch el.Kind {
		case "seg":
			segs[el.Seat] = append(segs[el.Seat], el)
		case "self":
			selfs[el.Seat] = append(selfs[el.Seat], el)
		case "turn":
			dots = append(dots, el)
		case "final":
			finals[el.Seat] = el
		}
	}
	type stay struct {
		K, Step      int
		State, Event string
	}
	visited := map[string]map[string]bool{}
	fired := map[string]map[string]bool{}
	mine := map[int]struct{ states, moves []string }{}
	note := func(seat int, state string) {
		role := rec.Seats[seat].Role
		if visited[role] == nil {
			visited[role], fired[role] = map[string]bool{}, map[string]bool{}
		}
		visited[role][state] = true
		m := mine[seat]
		if !slices.Contains(m.states, state) {
			m.states = append(m.states, state)
		}
		mine[seat] = m
	}
	for seat, s := range rec.Seats {
		initial := info.Role(s.Role).Initial
		note(seat, string(initial))
		wantSegs := []stay{{-1, -1, string(initial), ""}}
		var wantSelfs []stay
		n := 0
		for k, tr := range rec.Transitions {
			if tr.Seat != seat {
				continue
			}
			n++
			note(seat, string(tr.To))
			mv := fmt.Sprintf("%s|%s|%s", tr.From, tr.Event, tr.To)
			fired[s.Role][mv] = true
			m := mine[seat]
			if !slices.Contains(m.moves, mv) {
				m.moves = append(m.moves, mv)
			}
			mine[seat] = m
			st := stay{k, tr.Step, string(tr.To), string(tr.Event)}
			if tr.From == tr.To {
				wantSelfs = append(wantSelfs, st)
			} else {
				wantSegs = append(wantSegs, st)
			}
		}
		var gotSegs, gotSelfs []stay
		for _, el := range segs[seat] {
			gotSegs = append(gotSegs, stay{el.K, el.Step, el.State, el.Event})
		}
		for _, el := range selfs[seat] {
			gotSelfs = append(gotSelfs, stay{el.K, el.Step, el.State, el.Event})
		}
		assert.Equal(t, 1+n, len(gotSegs)+len(gotSelfs), "%s: a segment or tick for its initial state and each transition", s.ID)
		assert.Equal(t, wantSegs, gotSegs, "%s: its states, in order", s.ID)
		assert.Equal(t, wantSelfs, gotSelfs, "%s: its self-transitions, in order", s.ID)
		final := wantSegs[len(wantSegs)-1].State
		assert.Equal(t, final, finals[seat].State, "%s's final state", s.ID)
		assert.Equal(t, final, finals[seat].Text, "%s's final state, written", s.ID)
		for i := 1; i < len(segs[seat]); i++ {
			prev, cur := segs[seat][i-1], segs[seat][i]
			assert.InDelta(t, prev.X+prev.W, cur.X, 0.11, "%s: segment %d starts where %d ends", s.ID, i, i-1)
			assert.Positive(t, cur.W, "%s: segment %d", s.ID, i)
		}
	}
	require.Len(t, dots, len(rec.Turns), "a dot per turn")
	for _, d := range dots {
		tn := rec.Turns[d.Turn]
		assert.Equal(t, []any{tn.Seat, tn.Step, string(tn.State)}, []any{d.Seat, d.Step, d.State}, "turn %d's dot", d.Turn)
		in := ""
		for _, sg := range segs[d.Seat] {
			if d.X >= sg.X && d.X < sg.X+sg.W {
				in = sg.State
			}
		}
		assert.Equal(t, string(tn.State), in, "turn %d's dot is on a segment of the state it was played in", d.Turn)
	}

	// The role diagrams (every built-in scenario is known) highlight
	// exactly the states the role's agents were in and the transitions
	// they took.
	type edge struct {
		From  string   `json:"from"`
		To    string   `json:"to"`
		Taken []string `json:"taken"`
		Class string   `json:"class"`
	}
	var highlighted map[string][]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("svg.role-diagram")].map(d => [d.dataset.role, [...d.querySelectorAll(".state-node.visited")].map(n => n.dataset.state)]))`, &highlighted)
	var edges map[string][]edge
	b.eval(`Object.fromEntries([...document.querySelectorAll("svg.role-diagram")].map(d => [d.dataset.role, [...d.querySelectorAll("path.edge")].map(p => ({from: p.dataset.from, to: p.dataset.to, taken: JSON.parse(p.dataset.taken), class: p.getAttribute("class")}))]))`, &edges)
	for role, states := range visited {
		assert.ElementsMatch(t, slices.Collect(maps.Keys(states)), highlighted[role], "role %s's visited states", role)
		var taken []string
		for _, e := range edges[role] {
			assert.Equal(t, len(e.Taken) > 0, slices.Contains(strings.Fields(e.Class), "taken"), "role %s: edge %s → %s is drawn taken iff an event of it was fired", role, e.From, e.To)
			for _, ev := range e.Taken {
				taken = append(taken, fmt.Sprintf("%s|%s|%s", e.From, ev, e.To))
			}
		}
		assert.ElementsMatch(t, slices.Collect(maps.Keys(fired[role])), taken, "role %s's transitions taken", role)
	}
	// Picking the first agent of each role shows its own states and
	// transitions; picking it again, all of them.
	for _, role := range slices.Compact(slices.Sorted(maps.Keys(visited))) {
		seat := slices.IndexFunc(rec.Seats, func(s episode.Seat) bool { return s.Role == role })
		pick := fmt.Sprintf(`[...document.querySelectorAll(".role")].find(r => r.dataset.role === %q).querySelector(".agent-row[data-seat='%d']").dispatchEvent(new MouseEvent("click", {bubbles: true}))`, role, seat)
		b.exec(pick)
		var picked struct {
			States []string `json:"states"`
			Moves  []string `json:"moves"`
		}
		b.eval(fmt.Sprintf(`(r => ({states: [...r.querySelectorAll(".state-node.picked")].map(n => n.dataset.state), moves: [...r.querySelectorAll("path.edge.picked")].flatMap(p => JSON.parse(p.dataset.taken).map(ev => p.dataset.from + "|" + ev + "|" + p.dataset.to))}))([...document.querySelectorAll(".role")].find(r => r.dataset.role === %q))`, role), &picked)
		assert.ElementsMatch(t, mine[seat].states, picked.States, "%s picked: its states", rec.Seats[seat].ID)
		// An arc is picked when the agent fired one of its events: the
		// arc's other events come with it.
		for _, mv := range mine[seat].moves {
			assert.Contains(t, picked.Moves, mv, "%s picked: its transitions", rec.Seats[seat].ID)
		}
		b.exec(pick)
		var still int
		b.eval(`document.querySelectorAll(".picked, .unpicked").length`, &still)
		assert.Zero(t, still, "picking again unpicks")
	}
}

// checkTurnTimeline checks the timelines of a file without transitions (a
// sample file, here of rec): a segment per emitted turn, in the state it
// was played in, and the page says why there is no more.
func checkTurnTimeline(t *testing.T, b *browser, rec *episode.Record) {
	t.Helper()
	var els []drawn
	b.eval(timelineJS, &els)
	var ids map[string]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("svg.timeline .agent-row")].map(r => [r.dataset.seat, r.textContent]))`, &ids)
	var got, want []string
	for _, el := range els {
		require.False(t, el.FromRecorded)
		require.Equal(t, "seg", el.Kind, "no transition, so no tick, dot or final state")
		got = append(got, fmt.Sprintf("%s@%d:%s", ids[fmt.Sprint(el.Seat)], el.Step, el.State))
	}
	for _, tn := range rec.Turns {
		if tn.Emit {
			want = append(want, fmt.Sprintf("%s@%d:%s", rec.Seats[tn.Seat].ID, tn.Step, tn.State))
		}
	}
	assert.ElementsMatch(t, want, got, "a segment per sample")
	var note string
	b.eval(`document.querySelector("#states-note").textContent`, &note)
	assert.Contains(t, note, "sample files do not hold the state machines' transitions")
}

// TestBrowserListFiltersSortsAndJumps drives the episode list the server
// filters, sorts and pages: a status filter chosen in the form, a sort by
// an allocator's reward from its column's header, a group filter, a team
// reward bound and a jump by rollout_id.
func TestBrowserListFiltersSortsAndJumps(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	_, runs := fixtures(t)
	recs, credits := readRecords(t, runs[0].Records) // elfarol: groups of 4, three allocators
	base := serve(t, openFiles(t, runs[0].Records))
	b.open(base + "/run-0/episodes.html")
	checkListFilters(t, b, recs, credits, func(js string) { b.navigate(js) })

	// A rollout_id that does not exist is said so; one that does opens.
	b.do(chromedp.SendKeys("#jump", "999999"))
	b.navigate(`document.querySelector("#jump-form").requestSubmit()`)
	var msg string
	b.eval(`document.body.textContent`, &msg)
	assert.Contains(t, msg, "has no episode with rollout_id 999999")
	b.mu.Lock()
	b.errors = nil // the 404 is logged
	b.mu.Unlock()
	b.open(base + "/run-0/episodes.html")
	target := recs[5].RolloutID
	b.do(chromedp.SetValue("#jump", strconv.FormatInt(target, 10)))
	b.navigate(`document.querySelector("#jump-form").requestSubmit()`)
	var title string
	b.eval(`document.querySelector("h1").textContent`, &title)
	assert.Contains(t, title, fmt.Sprintf("rollout_id %d", target))
	b.noErrors("the jump")

	// A bad parameter is named on the page, and the list is shown whole.
	b.open(base + "/run-0/episodes.html?group=one")
	var bad string
	b.eval(`document.querySelector("#list-error").textContent`, &bad)
	assert.Contains(t, bad, `group: want an integer, got "one"`)
}

// listRollouts returns the rollout ids of the list's rows, in order.
func listRollouts(b *browser) []int64 {
	var ids []int64
	b.eval(`[...document.querySelectorAll("#episodes-body tr")].map(r => +r.dataset.rollout)`, &ids)
	return ids
}

// listMatched returns how many episodes the list says match its filters.
func listMatched(t *testing.T, b *browser) int {
	var n string
	b.eval(`document.querySelector("#count").dataset.matched`, &n)
	k, err := strconv.Atoi(n)
	require.NoError(t, err)
	return k
}

// setField is a script that sets a form field's value as a reader does.
func setField(sel, value string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event("change", {bubbles: true})); })()`, sel, value)
}

// checkListFilters drives a list page's filters and sort; act runs a
// script that changes them (served: a navigation; exported: in place).
func checkListFilters(t *testing.T, b *browser, recs []*episode.Record, credits []*trajectories.Credit, act func(js string)) {
	t.Helper()
	rollouts := func() []int64 { return listRollouts(b) }
	matched := func() int { return listMatched(t, b) }
	set := func(sel, value string) { act(setField(sel, value)) }
	want := []int64{}
	for _, r := range recs {
		want = append(want, r.RolloutID)
	}
	require.Equal(t, want, rollouts(), "every episode, in file order")
	require.Equal(t, len(recs), matched())

	// Group 1 only.
	set("#f-group", "1")
	assert.Equal(t, 4, matched(), "group 1 holds 4 episodes")
	assert.Len(t, rollouts(), 4)
	set("#f-group", "")
	assert.Equal(t, len(recs), matched())

	// Status: every episode is completed; another status matches none.
	set("#f-status", "completed")
	assert.Equal(t, len(recs), matched())

	// Team reward at least the median.
	teams := make([]float64, len(recs))
	for i, r := range recs {
		teams[i] = r.Score.Team
	}
	sorted := slices.Sorted(slices.Values(teams))
	median := sorted[len(sorted)/2]
	above := 0
	for _, v := range teams {
		if v >= median {
			above++
		}
	}
	set("#f-team-min", strconv.FormatFloat(median, 'g', -1, 64))
	assert.Equal(t, above, matched(), "team reward ≥ %v", median)
	set("#f-team-min", "")

	// Role and scenario: the only ones there are.
	set("#f-role", recs[0].Seats[0].Role)
	assert.Equal(t, len(recs), matched())
	set("#f-role", "")
	set("#f-scenario", recs[0].Scenario)
	assert.Equal(t, len(recs), matched())
	set("#f-scenario", "")

	// Sort by the difference allocator's reward, descending (two clicks).
	diff := slices.IndexFunc(credits[0].Allocators, func(s string) bool { return strings.HasPrefix(s, "difference") })
	require.GreaterOrEqual(t, diff, 0)
	header := fmt.Sprintf(`[...document.querySelectorAll("#episodes-head th a")].find(a => a.textContent === %q)`, credits[0].Allocators[diff])
	act(header + `.click()`)
	act(header + `.click()`)
	mean := func(e int) float64 {
		s := 0.0
		for _, v := range credits[e].Values[diff] {
			s += v
		}
		return s / float64(len(credits[e].Values[diff]))
	}
	byID := map[int64]int{}
	for i, r := range recs {
		byID[r.RolloutID] = i
	}
	order := rollouts()
	require.Len(t, order, len(recs))
	for k := 1; k < len(order); k++ {
		assert.GreaterOrEqual(t, mean(byID[order[k-1]])+1e-9, mean(byID[order[k]]), "sorted by %s, descending", credits[0].Allocators[diff])
	}
	b.shot("elfarol-list-sorted")

	// The allocator's bounds: above its median.
	vals := make([]float64, len(recs))
	for i := range recs {
		vals[i] = mean(i)
	}
	mid := slices.Sorted(slices.Values(vals))[len(vals)/2]
	n := 0
	for _, v := range vals {
		if v >= mid {
			n++
		}
	}
	set("#f-alloc", credits[0].Allocators[diff])
	set("#f-alloc-min", strconv.FormatFloat(mid, 'g', -1, 64))
	assert.Equal(t, n, matched(), "%s ≥ %v", credits[0].Allocators[diff], mid)
	set("#f-alloc-min", "")
	set("#f-alloc", "")
	b.noErrors("the list's filters")
}

// TestBrowserCompare compares the same seeds under two allocators: every
// episode pairs, the team rewards agree, the allocators differ.
func TestBrowserCompare(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	dir := t.TempDir()
	a, c := filepath.Join(dir, "team.jsonl"), filepath.Join(dir, "split.jsonl")
	troupe(t, "run", "elfarol", "-n", "20", "-q", "-p", "agents=10", "-a", "team", "-o", a)
	troupe(t, "run", "elfarol", "-n", "20", "-q", "-p", "agents=10", "-a", "equal-split", "-o", c)
	base := serve(t, openFiles(t, a, c))
	b.open(base + "/")
	b.do(chromedp.Click("a.compare-link"), chromedp.WaitVisible("#paired"))
	b.settle()
	b.noErrors("compare")
	b.shot("compare")
	var paired string
	b.eval(`document.querySelector("#paired").textContent`, &paired)
	assert.Equal(t, "20", paired)
	var delta string
	b.eval(`document.querySelector("#delta").dataset.mean`, &delta)
	assert.Equal(t, "0", delta, "the same seeds and policies give the same team rewards")
	var rewards map[string][]string
	b.eval(`Object.fromEntries([...document.querySelectorAll("#compare-rewards tr[data-name]")].map(r => [r.dataset.name, [r.cells[1].textContent, r.cells[2].textContent]]))`, &rewards)
	require.Contains(t, rewards, "team (mean per sample)")
	require.Contains(t, rewards, "equal-split (mean per sample)")
	assert.Equal(t, "–", rewards["team (mean per sample)"][1], "B has no team allocator")
	assert.Equal(t, "–", rewards["equal-split (mean per sample)"][0], "A has no equal-split allocator")
	// The team reward's difference comes with its interval, paired by seed,
	// in words.
	type interval struct{ Paired, Diff, Verdict, Text string }
	var ivs []interval
	b.eval(`[...document.querySelectorAll("#intervals li")].map(l => ({Paired: l.dataset.paired, Diff: l.dataset.diff, Verdict: l.dataset.verdict, Text: l.textContent}))`, &ivs)
	require.NotEmpty(t, ivs)
	assert.Equal(t, "true", ivs[0].Paired)
	assert.Equal(t, "0", ivs[0].Diff)
	assert.Contains(t, ivs[0].Text, "paired over 20 episodes with the same seeds")
}

// checkLLMTurns checks an LLM's turns: the chat prompt, the re-asks, the
// server's token counts and a log-prob cell per response token.
func checkLLMTurns(t *testing.T, b *browser, rec *episode.Record) {
	t.Helper()
	b.exec(`document.querySelector("#expand-all").click()`)
	type turn struct {
		Chat     int      `json:"chat"`
		Rejected []string `json:"rejected"`
		Cells    int      `json:"cells"`
		Tokens   string   `json:"tokens"`
	}
	var turns []turn
	b.eval(`[...document.querySelectorAll("details.turn")].map(d => ({chat: d.querySelectorAll(".chat").length, rejected: [...d.querySelectorAll(".rejected li")].map(l => l.textContent), cells: d.querySelectorAll("svg.logprobs rect.lp").length, tokens: (d.querySelector(".tokens") || {}).textContent || ""}))`, &turns)
	require.Len(t, turns, len(rec.Turns))
	llm := 0
	for k, tn := range rec.Turns {
		g := tn.Generated()
		if g.Tokens == nil {
			continue
		}
		llm++
		assert.Len(t, g.Tokens.LogProbs, turns[k].Cells, "turn %d: a cell per response token", k)
		assert.Equal(t, len(g.Prompt.Messages), turns[k].Chat, "turn %d: the chat that was sent", k)
		assert.Contains(t, turns[k].Tokens, fmt.Sprintf("completion %v", tn.Notes["llm_completion_tokens"]), "turn %d", k)
		if r, ok := tn.Notes["llm_rejected"].([]any); ok {
			assert.Len(t, turns[k].Rejected, len(r), "turn %d: the refused answers", k)
		}
	}
	assert.Positive(t, llm, "the episode has LLM turns")
}

// hostile are payloads that would run script if a page wrote them as
// markup.
var hostile = []string{
	`<script>window.__xss=1</script>`,
	`<img src=x onerror="window.__xss=2">`,
	`"><svg onload="window.__xss=3">`,
	`</script><script>window.__xss=4</script>`,
	`javascript:window.__xss=5`,
	`{{.}}<style>body{display:none}</style>`,
}

// hostileFiles writes an episode record and a sample file whose every
// free text (scenario, parameters, agents, roles, states, events, views,
// prompts, actions, messages, notes, allocators, label, error) is a
// hostile payload.
func hostileFiles(t *testing.T, dir string) (string, string) {
	t.Helper()
	h := func(i int) string { return hostile[i%len(hostile)] }
	rec := &episode.Record{
		Scenario: h(0), Params: map[string]string{h(1): h(2)}, Status: "failed", End: h(3), Err: h(4), Label: h(5), Steps: 2,
		Seats: []episode.Seat{{ID: h(0), Role: h(1)}, {ID: h(2), Role: h(3)}},
		Turns: []episode.Turn{
			{Seat: 0, Step: 0, State: agents.State(h(4)), View: h(5), Legal: []string{h(0), h(1)}, Action: h(0), Invalid: h(5),
				Generation: &agents.Generation{
					Completion: h(2),
					Prompt:     &protocol.Prompt{Messages: []protocol.ChatMessage{{Role: h(3), Content: h(4)}}},
					Tokens:     &agents.Tokens{Prompt: []int{1}, Response: []int{2, 3}, LogProbs: []float64{-0.1, -2}},
				},
				Notes: map[string]any{h(0): h(1), "llm_rejected": []any{h(2), h(3)}}, Emit: true},
			{Seat: 1, Step: 1, State: agents.State(h(5)), Inbox: []int{0}, Action: h(1), Emit: true},
		},
		Messages: []episode.Message{
			{Message: protocol.Message{From: h(0), To: protocol.Address(h(2)), Kind: h(3), Payload: h(0), Time: 0, Seq: 0}, Recipients: []int{1}},
			{Message: protocol.Message{From: "env", To: protocol.Broadcast, Kind: h(1), Payload: h(3), Time: 1, Seq: 1}, Recipients: []int{0, 1}},
		},
		// A self-transition, a chain within a step, a transition at step 0.
		Transitions: []episode.Transition{
			{Step: 0, Seat: 0, Event: agents.Event(h(0)), From: agents.State(h(4)), To: agents.State(h(4))},
			{Step: 0, Seat: 1, Event: agents.Event(h(2)), From: agents.State(h(3)), To: agents.State(h(5))},
			{Step: 1, Seat: 0, Event: agents.Event(h(3)), From: agents.State(h(4)), To: agents.State(h(1))},
			{Step: 1, Seat: 0, Event: agents.Event(h(5)), From: agents.State(h(1)), To: agents.State(h(2))},
			{Step: 1, Seat: 1, Event: agents.Event(h(4)), From: agents.State(h(5)), To: agents.State(h(0))},
		},
		Score: episode.Score{Team: 1, Agents: []float64{1, 0}},
	}
	credit := &trajectories.Credit{Allocators: []string{h(0), h(1)}, Values: [][]float64{{1, 2}, {-1, 0.5}}, Notes: map[string]any{h(2): h(3)}}
	line, err := trajectories.AppendEpisodeJSON(nil, rec, credit)
	require.NoError(t, err)
	records := filepath.Join(dir, "hostile.episodes.jsonl")
	require.NoError(t, os.WriteFile(records, line, 0o644))

	ep := trajectories.NewEpisode(rec)
	trajectories.ApplyCredit(ep, credit, trajectories.RewardDict)
	var samples []byte
	for i := range ep.Samples {
		samples = ep.Samples[i].AppendJSON(samples)
		samples = append(samples, '\n')
	}
	path := filepath.Join(dir, "hostile.jsonl")
	require.NoError(t, os.WriteFile(path, samples, 0o644))
	return records, path
}

// TestBrowserEscapesHostileText: no payload runs (the page's flag stays
// unset, nothing breaks the CSP), and each is shown as the text it is.
func TestBrowserEscapesHostileText(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	records, samples := hostileFiles(t, t.TempDir())
	base := serve(t, openFiles(t, records, samples))
	for _, page := range []string{"/", "/run-0/index.html", "/run-0/episodes.html", "/run-0/ep-0.html", "/run-1/index.html", "/run-1/episodes.html", "/run-1/ep-0.html", "/compare-0-1.html"} {
		b.open(base + page)
		b.exec(`document.querySelectorAll("details").forEach(d => d.open = true)`)
		var flag any
		b.eval(`window.__xss === undefined ? null : window.__xss`, &flag)
		assert.Nil(t, flag, "%s ran a payload", page)
		var injected int
		b.eval(`document.querySelectorAll("main script, main img, main style, main iframe, [onerror], [onload]").length`, &injected)
		assert.Zero(t, injected, "%s: a payload became markup", page)
		b.noErrors(page)
	}
	// The payloads are there, as text.
	b.open(base + "/run-0/ep-0.html")
	var text string
	b.eval(`document.body.innerText`, &text)
	for _, p := range hostile[:4] {
		assert.Contains(t, text, p)
	}
	var payload string
	b.eval(`document.querySelector("#message-table tr.message .payload").textContent`, &payload)
	assert.Equal(t, hostile[0], payload)
	// The states and events, on the timelines, are the texts they are.
	var els []drawn
	b.eval(timelineJS, &els)
	var states, events []string
	for _, el := range els {
		if el.Kind == "seg" || el.Kind == "self" || el.Kind == "final" {
			states, events = append(states, el.Kind+" "+el.State), append(events, el.Event)
		}
	}
	h := func(i int) string { return hostile[i%len(hostile)] }
	// The two seats have a role, so a timeline, each.
	assert.Equal(t, []string{"seg " + h(4), "seg " + h(1), "seg " + h(2), "self " + h(4), "final " + h(2), "seg " + h(3), "seg " + h(5), "seg " + h(0), "final " + h(0)}, states)
	assert.Equal(t, []string{"", h(3), h(5), h(0), "", "", h(2), h(4), ""}, events)
	var titles string
	b.eval(`[...document.querySelectorAll("svg.timeline title")].map(t => t.textContent).join("\n")`, &titles)
	for i := range hostile {
		assert.Contains(t, titles, hostile[i], "the timelines' titles show payload %d as text", i)
	}
	b.shot("hostile-episode")

	// The error listener works: a page that fails to load is caught.
	require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(base+"/no-such-page.html")))
	b.settle()
	b.mu.Lock()
	caught := len(b.errors)
	b.errors = nil
	b.mu.Unlock()
	assert.Positive(t, caught, "a 404 is reported as a console error")
}

// TestBrowserReportsBadLines: a file with an invalid line and a cut last
// line shows its good episodes and lists the two lines.
func TestBrowserReportsBadLines(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	_, runs := fixtures(t)
	data, err := os.ReadFile(runs[2].Records) // signal: 4 episodes
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	bad := lines[0] + `{"format":"troupe.episode/v2","scenario":` + "\n" + lines[1] + lines[2][:len(lines[2])/2]
	path := filepath.Join(t.TempDir(), "cut.episodes.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))
	base := serve(t, openFiles(t, path))
	b.open(base + "/run-0/index.html")
	b.shot("bad-lines-overview")
	var problems []string
	b.eval(`[...document.querySelectorAll("#problems li.problem")].map(l => l.textContent)`, &problems)
	require.Len(t, problems, 2)
	assert.Contains(t, problems[0], "line 2:")
	assert.Contains(t, problems[1], "line 4:")
	assert.Contains(t, problems[1], "cut")
	b.open(base + "/run-0/episodes.html")
	var n int
	b.eval(`document.querySelectorAll("#episodes-body tr").length`, &n)
	assert.Equal(t, 2, n)
}

// TestBrowserStaticExport opens an exported site from the file system:
// the same pages, the list's script and the jump work without a server.
func TestBrowserStaticExport(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	_, runs := fixtures(t)
	files := openFiles(t, runs[2].Records, runs[2].Samples)
	v, err := viewer.New(files, scenarios.Builtin())
	require.NoError(t, err)
	dir := t.TempDir()
	st, err := v.Export(dir, 0)
	require.NoError(t, err)
	assert.Equal(t, 8, st.Episodes)
	root := "file://" + filepath.ToSlash(dir)
	b.open(root + "/index.html")
	b.do(chromedp.Click(`a[href="run-0/episodes.html"]`), chromedp.WaitVisible("#episodes-body tr"))
	b.settle()
	b.noErrors("the exported list")
	recs, _ := readRecords(t, runs[2].Records)
	b.do(chromedp.SendKeys("#jump", strconv.FormatInt(recs[2].RolloutID, 10)))
	b.exec(`document.querySelector("#jump-form").requestSubmit()`)
	b.do(chromedp.WaitVisible("#sequence"))
	b.settle()
	b.noErrors("an exported episode")
	var arrows int
	b.eval(`document.querySelectorAll("#sequence path.arrow").length`, &arrows)
	want := 0
	for _, m := range recs[2].Messages {
		want += len(m.Recipients)
	}
	assert.Equal(t, want, arrows)
	b.shot("export-episode")

	// The samples of the same run: the timelines of the turns only.
	b.open(root + "/run-1/ep-0.html")
	var title string
	b.eval(`document.querySelector("h1").textContent`, &title)
	assert.Contains(t, title, fmt.Sprintf("rollout_id %d", recs[0].RolloutID))
	checkTurnTimeline(t, b, recs[0])
	b.shotOf("export-samples-states", "#states")

	// An exported list filters and sorts its compact index as the server
	// does.
	elfarol, credits := readRecords(t, runs[0].Records)
	v, err = viewer.New(openFiles(t, runs[0].Records), scenarios.Builtin())
	require.NoError(t, err)
	dir = t.TempDir()
	_, err = v.Export(dir, 0)
	require.NoError(t, err)
	b.open("file://" + filepath.ToSlash(dir) + "/run-0/episodes.html")
	checkListFilters(t, b, elfarol, credits, func(js string) { b.exec(js) })
}
