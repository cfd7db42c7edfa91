package viewer

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/httpedge"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// CSP is the Content-Security-Policy of every page: scripts and styles
// only from the viewer's own embedded files, nothing else fetched, no
// inline script or style, no frames, no forms posting elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'"

// Scenarios is what the viewer asks of a scenario registry (*env.Registry):
// the roles of the scenarios the running binary knows, for their state
// diagrams.
type Scenarios interface {
	Lookup(name string) (env.Scenario, error)
}

// Viewer is the pages of a set of indexed files: served by Handler, or
// written out as a static site by Export. Both produce the same pages at
// the same paths.
type Viewer struct {
	files     []*File
	scenarios Scenarios
	tmpl      *template.Template
	cache     *cache

	mu        sync.Mutex
	overviews map[int]*Overview
	lastList  *listResult // the list's last query, for its next page
	// linked, while Export writes a bounded site, is how many episode
	// pages each file has: the pages link no further. 0: all.
	linked int
	// exporting is set while Export writes: the list's script filters the
	// compact index instead of asking the server.
	exporting bool
}

// cacheSize is how many decoded episodes the viewer keeps.
const cacheSize = 32

// New returns the viewer of files; scenarios (nil: none) gives the role
// diagrams.
func New(files []*File, scenarios Scenarios) (*Viewer, error) {
	if len(files) == 0 {
		return nil, errors.New("no file to view")
	}
	v := &Viewer{files: files, scenarios: scenarios, cache: newCache(cacheSize), overviews: map[int]*Overview{}}
	t, err := template.New("").Funcs(template.FuncMap{
		"num":  num,
		"f1":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"pct":  func(n, of int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/math.Max(float64(of), 1)) },
		"add":  func(a, b int) int { return a + b },
		"json": func(v any) (string, error) { b, err := json.Marshal(v); return string(b), err },
		"alloc": func(vs []float64, i int) string {
			if i >= len(vs) || math.IsNaN(vs[i]) {
				return "–"
			}
			return num(vs[i])
		},
		"credit": func(cs []AgentCredit, i int) AgentCredit { return cs[i] },
		"row":    func(s SeatView, allocators []string) creditRow { return creditRow{s, allocators} },
		"strip":  func(t *TurnView) LogProbStrip { return logProbStrip(t) },
		// linked reports whether episode ordinal has a page.
		"linked": func(ordinal int) bool { return v.linked == 0 || ordinal < v.linked },
	}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	v.tmpl = t
	return v, nil
}

// creditRow is the data of one agent's row of the credit table.
type creditRow struct {
	S          SeatView
	Allocators []string
}

// agentsJS is, for an exported page of many agents, every agent's row of
// the credit table by id: the page's script shows the one ?agent= asks for,
// as the server would.
func (v *Viewer) agentsJS(ep *Episode) ([]byte, error) {
	rows := make(map[string]string, len(ep.Seats))
	var b bytes.Buffer
	for _, s := range ep.Seats {
		b.Reset()
		if err := v.tmpl.ExecuteTemplate(&b, "credit-row", creditRow{s, ep.Allocators}); err != nil {
			return nil, err
		}
		rows[s.ID] = b.String()
	}
	j, err := json.Marshal(rows) // keys sorted: the same bytes every time
	if err != nil {
		return nil, err
	}
	return append(append([]byte("window.troupeAgents = "), j...), ";\n"...), nil
}

// Files returns the viewer's files.
func (v *Viewer) Files() []*File { return v.files }

func (v *Viewer) overview(i int) *Overview {
	v.mu.Lock()
	defer v.mu.Unlock()
	if o, ok := v.overviews[i]; ok {
		return o
	}
	o := v.files[i].Overview()
	v.overviews[i] = o
	return o
}

// episode returns episode ordinal of file i, decoded or from the cache.
func (v *Viewer) episode(i, ordinal int) (*Episode, error) {
	k := cacheKey{i, ordinal}
	if ep, ok := v.cache.get(k); ok {
		return ep, nil
	}
	ep, err := v.files[i].Load(ordinal)
	if err != nil {
		return nil, err
	}
	v.replayStates(ep)
	v.cache.put(k, ep)
	return ep, nil
}

// maxStates bounds the states an episode's page shows: the first ones and
// the last.
const maxStates = 200

// replayStates gives ep its states when the binary knows its scenario and
// the scenario's game draws them: a deterministic replay of the record's
// own moves, once per decoded episode (the record stays as it was, and
// the run paid nothing for it).
func (v *Viewer) replayStates(ep *Episode) {
	rec := ep.record
	ep.record = nil
	if rec == nil || v.scenarios == nil {
		return
	}
	sc, err := v.scenarios.Lookup(rec.Scenario)
	if err != nil {
		return
	}
	ep.Empty = emptyCoalitions(sc, rec, ep)
	states, err := env.States(context.Background(), sc, rec)
	if errors.Is(err, env.ErrNoStates) {
		return
	}
	if err != nil {
		ep.StatesErr = err.Error()
	}
	if len(states) > maxStates {
		states = append(states[:maxStates-1], states[len(states)-1])
	}
	ep.States = states
}

// emptyCoalitions computes v(∅) for each Shapley allocator of ep, by a
// replay of rec with every seat absent (or, mode=null, playing its null
// action): the record keeps each sample's value, not the coalition values,
// and an agent that took no turn has no sample, so without it the sum over
// agents was not G − v(∅). With v(∅), an agent without samples gets the
// value efficiency implies when it is the only one. With teams, the game
// is each team's (credit.Shapley): its v_T(∅), set on its SideView, is its
// reward with its own members out and the other teams present, and the
// team's values sum to its reward − v_T(∅); there is no one v(∅), and the
// result is all NaN.
func emptyCoalitions(sc env.Scenario, rec *episode.Record, ep *Episode) []float64 {
	out := make([]float64, len(ep.Allocators))
	all := make([]int, len(rec.Seats))
	for i := range all {
		all[i] = i
	}
	for a, name := range ep.Allocators {
		out[a] = math.NaN()
		base, params, _ := strings.Cut(name, ":")
		if base != "shapley" && base != "shapley-mc" || !ep.Scored {
			continue
		}
		null := strings.Contains(params, "mode=null")
		resimulate := strings.Contains(params, "sim=resimulate") ||
			!strings.Contains(params, "sim=frozen") && sc.Info().Counterfactual != nil && sc.Info().Counterfactual.Resimulate
		if rec.Teams != nil {
			for t := range ep.Sides {
				sideOut(sc, rec, ep, a, t, null, resimulate)
			}
			continue
		}
		score, err := replayWithout(sc, rec, all, null, resimulate)
		if err != nil {
			continue
		}
		out[a] = score.Team
		var missing []int
		sum := 0.0
		for i := range ep.Seats {
			if c := ep.Seats[i].Credit[a]; c.N > 0 {
				sum += c.Mean()
			} else {
				missing = append(missing, i)
			}
		}
		if len(missing) == 1 {
			ep.Seats[missing[0]].Credit[a].Derived = num(ep.Team - score.Team - sum)
		}
	}
	return out
}

// sideOut sets, for Shapley allocator a of ep, team t's v_T(∅) (a replay
// without its members) and its members' sum, its reward − v_T(∅), which
// counts the members that took no turn (players of the team's game all
// the same); with one such member, that member's value is derived. A team
// none of whose members has samples was not evaluated (credit.Shapley),
// and keeps the sum of its members' values, 0.
func sideOut(sc env.Scenario, rec *episode.Record, ep *Episode, a, t int, null, resimulate bool) {
	side := &ep.Sides[t]
	var members, missing []int
	sum := 0.0
	for i := range ep.Seats {
		if rec.Seats[i].Team != t {
			continue
		}
		members = append(members, i)
		if c := ep.Seats[i].Credit[a]; c.N > 0 {
			sum += c.Mean()
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == len(members) {
		return
	}
	score, err := replayWithout(sc, rec, members, null, resimulate)
	if err != nil {
		return
	}
	empty := score.Of(t)
	side.Empty[a] = empty
	side.Credit[a] = side.Reward - empty
	if len(missing) == 1 {
		ep.Seats[missing[0]].Credit[a].Derived = num(side.Reward - empty - sum)
	}
}

// replayWithout replays rec with the seats out absent (null: playing
// their null action), the other seats as the allocator played them:
// their recorded actions, or, re-simulating, asked again. The record
// holds no policy, so a replay that would need one (a re-simulated seat
// that acts, a frozen one past the end of its record) fails rather than
// give another value than the allocator's: with a team out, the other
// teams often win at once, and nobody is asked.
func replayWithout(sc env.Scenario, rec *episode.Record, out []int, null, resimulate bool) (episode.Score, error) {
	info := sc.Info()
	params, err := info.ParseParams(rec.Params)
	if err != nil {
		return episode.Score{}, fmt.Errorf("scenario %s: %w", info.Name, err)
	}
	cf := episode.Counterfactual{Absent: out, Resimulate: resimulate}
	if null {
		cf = episode.Counterfactual{Null: out, Resimulate: resimulate}
	}
	r := env.NewReplayer(env.Setup{
		Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(unrecorded{})}, Seed: rec.Seed, PolicySeed: rec.PolicySeed,
		Index: rec.Index, RolloutID: rec.RolloutID, GroupIndex: rec.GroupIndex,
	}, rec.Seats, rec.Turns)
	return r.Replay(context.Background(), cf)
}

// errUnrecorded is a replay that needs a policy the record does not hold.
var errUnrecorded = errors.New("the record holds no policy to ask")

// unrecorded is the policy of a seat in a replay of a record: it fails if
// asked.
type unrecorded struct{}

func (unrecorded) Act(context.Context, *agents.Observation) (agents.Action, error) {
	return agents.Action{}, errUnrecorded
}

func (v *Viewer) roles(scenario string) ([]*agents.Role, error) {
	sc, err := v.scenarios.Lookup(scenario)
	if err != nil {
		return nil, err
	}
	return sc.Info().Roles, nil
}

// page is what every template gets.
type page struct {
	Title string
	Root  string // the relative path to the site's root: "" or "../"
	Files []*File
	File  *File
	Run   int
	Nav   string
	Data  any
}

// The pages' paths, the same served and exported.
var (
	runPath     = regexp.MustCompile(`^run-(\d+)/(index|episodes)\.html$`)
	episodePath = regexp.MustCompile(`^run-(\d+)/ep-(\d+)\.html$`)
	comparePath = regexp.MustCompile(`^compare-(\d+)-(\d+)\.html$`)
	// jumpPath is the list's form (served only): ?rollout_id=N.
	jumpPath = regexp.MustCompile(`^run-(\d+)/episode$`)
)

// errNotFound is a path the viewer has no page for.
var errNotFound = errors.New("no such page")

// render writes the page at path (relative, no leading slash); query is
// the list's filters, sort and page (nil in an export).
func (v *Viewer) render(w io.Writer, path string, query url.Values) error {
	if path == "" || path == "index.html" {
		return v.exec(w, "index", page{Title: "troupe view", Files: v.files, Nav: "index", Data: v.runsData()})
	}
	if m := runPath.FindStringSubmatch(path); m != nil {
		i, err := v.fileIndex(m[1])
		if err != nil {
			return err
		}
		p := page{Root: "../", Files: v.files, File: v.files[i], Run: i}
		if m[2] == "index" {
			p.Title, p.Nav, p.Data = v.files[i].Name+": overview", "overview", v.overview(i)
			return v.exec(w, "overview", p)
		}
		lp := v.listPage(i, query)
		if v.linked != 0 || v.exporting {
			lp.Index = "episodes-index.js"
		}
		p.Title, p.Nav, p.Data = v.files[i].Name+": episodes", "episodes", lp
		return v.exec(w, "list", p)
	}
	if m := episodePath.FindStringSubmatch(path); m != nil {
		i, err := v.fileIndex(m[1])
		if err != nil {
			return err
		}
		ord, err := strconv.Atoi(m[2])
		if err != nil || ord >= v.files[i].n {
			return errNotFound
		}
		p := page{Root: "../", Files: v.files, File: v.files[i], Run: i, Nav: "episode"}
		e := v.files[i].Info(ord)
		info := &e
		p.Title = fmt.Sprintf("%s: episode %d (rollout_id %d)", v.files[i].Name, info.Index, info.RolloutID)
		ep, err := v.episode(i, ord)
		if err != nil {
			p.Data = episodePage{Info: info, Err: err.Error()}
		} else {
			p.Data = v.episodePage(ep, query.Get("agent"))
		}
		return v.exec(w, "episode", p)
	}
	if m := comparePath.FindStringSubmatch(path); m != nil {
		a, err := v.fileIndex(m[1])
		if err != nil {
			return err
		}
		b, err := v.fileIndex(m[2])
		if err != nil || a == b {
			return errNotFound
		}
		p := page{Title: fmt.Sprintf("compare %s and %s", v.files[a].Name, v.files[b].Name), Files: v.files, Nav: "compare",
			Data: compare(v.overview(a), v.overview(b), a, b)}
		return v.exec(w, "compare", p)
	}
	return errNotFound
}

func (v *Viewer) fileIndex(s string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(v.files) {
		return 0, errNotFound
	}
	return i, nil
}

func (v *Viewer) exec(w io.Writer, name string, p page) error {
	var b bytes.Buffer
	if err := v.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// runsData is the index page's: each file's overview.
func (v *Viewer) runsData() []*Overview {
	out := make([]*Overview, len(v.files))
	for i := range v.files {
		out[i] = v.overview(i)
	}
	return out
}

// episodePage is the data of an episode's page.
type episodePage struct {
	Info *EpisodeInfo
	Err  string
	// Ep is what the page draws: the episode, or, past manyAgents, the
	// few agents Many lists; Full is the whole episode.
	Ep, Full *Episode
	Many     *manyView
	Serving  bool // the page is served: it may ask for an agent
	Extremes int
	Turns    []TurnView
	Msgs     []MessageView
	Seq      SeqDiagram
	Roles    []RoleView
	Credit   Chart
	Sum      []float64 // per allocator, the sum over the episode's samples
	AgentSum []float64 // per allocator, the sum over agents of their value per sample
}

func (v *Viewer) episodePage(full *Episode, focus string) episodePage {
	ep := full
	var many *manyView
	if len(full.Seats) > manyAgents {
		ep, many = focusSubset(full, focus)
	}
	p := episodePage{Info: ep.Info, Ep: ep, Full: full, Many: many, Serving: !v.exporting, Extremes: extremes, Seq: sequence(ep), Credit: creditChart(ep)}
	p.Turns = ep.Turns[:min(len(ep.Turns), maxTurnsShown)]
	p.Msgs = ep.Messages[:min(len(ep.Messages), maxMessagesListed)]
	var lookup func(string) ([]*agents.Role, error)
	if v.scenarios != nil {
		lookup = v.roles
	}
	p.Roles = roleViews(ep, lookup)
	p.Sum = make([]float64, len(ep.Allocators))
	p.AgentSum = make([]float64, len(ep.Allocators))
	for _, s := range full.Seats {
		for a, c := range s.Credit {
			p.Sum[a] += c.Sum
			p.AgentSum[a] += c.Mean()
		}
	}
	// Efficient allocators sum to G − v(∅) over the agents, those without
	// samples included; with teams, each team's to its reward − v_T(∅)
	// (SideView.Credit).
	for a, empty := range full.Empty {
		if !math.IsNaN(empty) {
			p.AgentSum[a] = full.Team - empty
		}
	}
	if len(full.Sides) > 0 {
		clear(p.AgentSum)
		for _, side := range full.Sides {
			for a, c := range side.Credit {
				p.AgentSum[a] += c
			}
		}
	}
	return p
}

// Handler serves the pages and the embedded assets, nothing else. With a
// token, every request must carry it (the Authorization header, or the
// cookie that the printed URL's ?token= sets). With loopback set, it
// answers only requests whose Host is a loopback name, so that a web page
// elsewhere cannot reach it by rebinding a DNS name to 127.0.0.1.
func (v *Viewer) Handler(token string, loopback bool) http.Handler {
	assets, _ := fs.Sub(assetFS, "assets")
	static := http.StripPrefix("/assets/", http.FileServerFS(assets))
	// guarded wraps a GET (and HEAD) route in the token check; other methods
	// reach the method-less "/" below first, so that they are refused
	// before the token is asked for.
	guarded := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token != "" && !authorized(w, r, token) {
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /assets", guarded(http.NotFound)) // not a redirect to /assets/
	mux.HandleFunc("GET /assets/{file...}", guarded(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("file") == "" {
			http.NotFound(w, r)
			return
		}
		static.ServeHTTP(w, r)
	}))
	// The pages' paths are render's to read, as an export writes the
	// same ones; ServeMux wildcards cannot say "run-N", and a "/{run}/..."
	// pattern would clash with /assets/.
	mux.HandleFunc("GET /", guarded(func(w http.ResponseWriter, r *http.Request) {
		if m := jumpPath.FindStringSubmatch(strings.TrimPrefix(r.URL.Path, "/")); m != nil {
			v.jump(w, r, m[1])
			return
		}
		v.servePage(w, r)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	})
	routed := httpedge.Routed(mux, http.NotFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP+"; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if loopback && !httpedge.Loopback(r.Host) {
			http.Error(w, "troupe view answers only to 127.0.0.1, localhost and [::1]", http.StatusMisdirectedRequest)
			return
		}
		routed.ServeHTTP(w, r)
	})
}

// servePage answers one of the pages render knows (the ones an export
// writes too), by its path.
func (v *Viewer) servePage(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := v.render(&b, strings.TrimPrefix(r.URL.Path, "/"), r.URL.Query()); err != nil {
		if errors.Is(err, errNotFound) {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "troupe view: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// jump redirects ?rollout_id=N to that episode's page.
func (v *Viewer) jump(w http.ResponseWriter, r *http.Request, run string) {
	i, err := v.fileIndex(run)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	id, err := strconv.ParseInt(strings.TrimSpace(r.URL.Query().Get("rollout_id")), 10, 64)
	if err != nil {
		http.Error(w, "rollout_id: want an integer", http.StatusBadRequest)
		return
	}
	ords := v.files[i].Lookup(id)
	if len(ords) == 0 {
		http.Error(w, fmt.Sprintf("%s has no episode with rollout_id %d", v.files[i].Name, id), http.StatusNotFound)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("/run-%d/ep-%d.html", i, ords[0]), http.StatusSeeOther)
}

const tokenCookie = "troupe_view_token"

// authorized checks the request's token; a good ?token= becomes a cookie
// and a redirect to the same page without it.
func authorized(w http.ResponseWriter, r *http.Request, token string) bool {
	same := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(token)) == 1 }
	if q := r.URL.Query().Get("token"); q != "" && same(q) {
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		u := *r.URL
		qs := u.Query()
		qs.Del("token")
		u.RawQuery = qs.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return false
	}
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && same(auth) {
		return true
	}
	if c, err := r.Cookie(tokenCookie); err == nil && same(c.Value) {
		return true
	}
	http.Error(w, "troupe view: this viewer needs its token: open the URL it printed", http.StatusUnauthorized)
	return false
}
