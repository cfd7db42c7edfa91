package viewer

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The episode list is filtered, sorted and paged by the server: a page
// carries listPageSize rows whatever the size of the run (a million
// episodes once made a 56 MB page of JSON). Its filters are a GET form, so
// that every state of the list is a URL. An exported site has no server:
// its list page holds the first rows, and the script filters and sorts a
// compact index of every episode (episodes-index.js, columnar) with the
// same rules (listFilter and listLess here, list() in app.js).

// listPageSize is how many rows a page of the list shows.
const listPageSize = 100

// listQuery is the list's state, read from the page's URL: its filters,
// its sort and its page.
type listQuery struct {
	Status, Scenario, Role string // "" is any
	Group                  *int64
	TeamMin, TeamMax       *float64
	Alloc                  string // the allocator the bounds apply to; "" none
	AllocMin, AllocMax     *float64
	Sort                   string // a column's key; "" file order
	Desc                   bool
	Page                   int // from 0
}

// errQuery wraps the list's bad parameters: the page says what was wrong.
var errQuery = errors.New("bad list parameter")

// parseListQuery reads q; every bad value is an error naming its
// parameter.
func parseListQuery(q url.Values, cols []listCol) (listQuery, error) {
	var l listQuery
	l.Status, l.Scenario, l.Role, l.Alloc = q.Get("status"), q.Get("scenario"), q.Get("role"), q.Get("alloc")
	float := func(name string, dst **float64) error {
		s := strings.TrimSpace(q.Get(name))
		if s == "" {
			return nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) {
			return fmt.Errorf("%w: %s: want a number, got %q", errQuery, name, s)
		}
		*dst = &v
		return nil
	}
	for name, dst := range map[string]**float64{"team_min": &l.TeamMin, "team_max": &l.TeamMax, "alloc_min": &l.AllocMin, "alloc_max": &l.AllocMax} {
		if err := float(name, dst); err != nil {
			return l, err
		}
	}
	if s := strings.TrimSpace(q.Get("group")); s != "" {
		g, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return l, fmt.Errorf("%w: group: want an integer, got %q", errQuery, s)
		}
		l.Group = &g
	}
	if (l.AllocMin != nil || l.AllocMax != nil) && l.Alloc == "" {
		return l, fmt.Errorf("%w: alloc_min and alloc_max need an allocator (alloc)", errQuery)
	}
	if s := q.Get("sort"); s != "" {
		if !slices.ContainsFunc(cols, func(c listCol) bool { return c.Key == s }) {
			return l, fmt.Errorf("%w: sort: no column %q", errQuery, s)
		}
		l.Sort = s
	}
	switch q.Get("dir") {
	case "", "asc":
	case "desc":
		l.Desc = true
	default:
		return l, fmt.Errorf("%w: dir: want asc or desc, got %q", errQuery, q.Get("dir"))
	}
	if s := q.Get("page"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 {
			return l, fmt.Errorf("%w: page: want a page number from 1, got %q", errQuery, s)
		}
		l.Page = p - 1
	}
	return l, nil
}

// values writes the query back as URL parameters, page excluded.
func (l listQuery) values() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	set("status", l.Status)
	set("scenario", l.Scenario)
	set("role", l.Role)
	if l.Group != nil {
		set("group", strconv.FormatInt(*l.Group, 10))
	}
	set("team_min", f(l.TeamMin))
	set("team_max", f(l.TeamMax))
	set("alloc", l.Alloc)
	set("alloc_min", f(l.AllocMin))
	set("alloc_max", f(l.AllocMax))
	set("sort", l.Sort)
	if l.Desc {
		q.Set("dir", "desc")
	}
	return q
}

// url is the list page of this query at page p (from 0).
func (l listQuery) url(p int) string {
	q := l.values()
	if p > 0 {
		q.Set("page", strconv.Itoa(p+1))
	}
	if len(q) == 0 {
		return "episodes.html"
	}
	return "episodes.html?" + q.Encode()
}

// listCol is one column of the list.
type listCol struct {
	Key, Label string
	Num        bool
	// num or str gives an episode's value; ok false is an empty cell,
	// sorted last either way.
	num func(e *EpisodeInfo) (float64, bool)
	str func(e *EpisodeInfo) string
}

// columns are the list's columns: the fixed ones, then one per allocator
// of the file (key "alloc:" and its name).
func (x *File) columns() []listCol {
	i := func(f func(e *EpisodeInfo) int64) func(e *EpisodeInfo) (float64, bool) {
		return func(e *EpisodeInfo) (float64, bool) { return float64(f(e)), true }
	}
	cols := []listCol{
		{Key: "rollout_id", Label: "rollout_id", Num: true, num: i(func(e *EpisodeInfo) int64 { return e.RolloutID })},
		{Key: "episode", Label: "episode", Num: true, num: i(func(e *EpisodeInfo) int64 { return e.Index })},
		{Key: "group", Label: "group", Num: true, num: i(func(e *EpisodeInfo) int64 { return e.GroupIndex })},
		{Key: "scenario", Label: "scenario", str: func(e *EpisodeInfo) string { return e.Scenario }},
		{Key: "status", Label: "status", str: func(e *EpisodeInfo) string { return e.Status }},
		{Key: "end", Label: "end", str: func(e *EpisodeInfo) string { return e.End }},
		{Key: "team", Label: "team reward", Num: true, num: func(e *EpisodeInfo) (float64, bool) {
			return e.Team, !math.IsNaN(e.Team) && !math.IsInf(e.Team, 0)
		}},
		{Key: "agents", Label: "agents", Num: true, num: i(func(e *EpisodeInfo) int64 { return int64(e.Agents) })},
		{Key: "samples", Label: "samples", Num: true, num: i(func(e *EpisodeInfo) int64 { return int64(e.Samples) })},
		{Key: "turns", Label: "turns", Num: true, num: i(func(e *EpisodeInfo) int64 { return int64(e.Turns) })},
		{Key: "messages", Label: "messages", Num: true, num: func(e *EpisodeInfo) (float64, bool) { return float64(e.Messages), e.Messages >= 0 }},
		{Key: "invalid", Label: "invalid", Num: true, num: i(func(e *EpisodeInfo) int64 { return int64(e.Invalid) })},
		{Key: "roles", Label: "roles", str: func(e *EpisodeInfo) string {
			names := make([]string, len(e.Roles))
			for k, r := range e.Roles {
				names[k] = r.Role
			}
			return strings.Join(names, " ")
		}},
	}
	for _, name := range x.allocators() {
		cols = append(cols, listCol{Key: "alloc:" + name, Label: name, Num: true, num: func(e *EpisodeInfo) (float64, bool) { return e.AllocValue(name) }})
	}
	return cols
}

// allocators are the file's allocators, in order of first use.
func (x *File) allocators() []string {
	x.namesOnce.Do(x.names)
	return x.allocNames
}

// names collects the names the list's filters offer.
func (x *File) names() {
	var last []string
	seen := map[string]bool{}
	for k := range x.Episodes {
		e := &x.Episodes[k]
		// Episodes share their allocator list: skip the repeats.
		if len(e.Allocators) > 0 && (len(last) == 0 || &e.Allocators[0] != &last[0]) {
			last = e.Allocators
			for _, a := range e.Allocators {
				if !seen[a] {
					seen[a] = true
					x.allocNames = append(x.allocNames, a)
				}
			}
		}
		for _, r := range e.Roles {
			if !slices.Contains(x.roleNames, r.Role) {
				x.roleNames = append(x.roleNames, r.Role)
			}
		}
		for _, p := range []struct {
			list *[]string
			s    string
		}{{&x.scenarioNames, e.Scenario}, {&x.statusNames, e.Status}, {&x.endNames, e.End}} {
			if !slices.Contains(*p.list, p.s) {
				*p.list = append(*p.list, p.s)
			}
		}
	}
	slices.Sort(x.roleNames)
}

// match reports whether e passes the query's filters.
func (l *listQuery) match(e *EpisodeInfo) bool {
	if l.Status != "" && e.Status != l.Status || l.Scenario != "" && e.Scenario != l.Scenario {
		return false
	}
	if l.Role != "" && !slices.ContainsFunc(e.Roles, func(r RoleFacts) bool { return r.Role == l.Role }) {
		return false
	}
	if l.Group != nil && e.GroupIndex != *l.Group {
		return false
	}
	if l.TeamMin != nil && !(e.Team >= *l.TeamMin) || l.TeamMax != nil && !(e.Team <= *l.TeamMax) {
		return false
	}
	if l.Alloc != "" {
		v, ok := e.AllocValue(l.Alloc)
		if !ok || l.AllocMin != nil && !(v >= *l.AllocMin) || l.AllocMax != nil && !(v <= *l.AllocMax) {
			return false
		}
	}
	return true
}

// listResult is the ordinals a query selects, in its order: kept for the
// next page of the same query.
type listResult struct {
	file  int
	key   string
	ords  []int32
	total int
}

// run selects and sorts the file's episodes for l.
func (x *File) run(l *listQuery, cols []listCol) []int32 {
	ords := make([]int32, 0, len(x.Episodes))
	for k := range x.Episodes {
		if l.match(&x.Episodes[k]) {
			ords = append(ords, int32(k))
		}
	}
	k := slices.IndexFunc(cols, func(c listCol) bool { return c.Key == l.Sort })
	if k < 0 {
		return ords
	}
	c := cols[k]
	dir := 1
	if l.Desc {
		dir = -1
	}
	// Empty cells last in either direction; ties in file order.
	if c.num != nil {
		keys := make([]float64, len(x.Episodes))
		has := make([]bool, len(x.Episodes))
		for _, o := range ords {
			keys[o], has[o] = c.num(&x.Episodes[o])
		}
		slices.SortStableFunc(ords, func(a, b int32) int {
			switch {
			case has[a] != has[b]:
				if has[a] {
					return -1
				}
				return 1
			case !has[a]:
				return 0
			}
			return dir * cmp.Compare(keys[a], keys[b])
		})
		return ords
	}
	keys := make([]string, len(x.Episodes))
	for _, o := range ords {
		keys[o] = c.str(&x.Episodes[o])
	}
	slices.SortStableFunc(ords, func(a, b int32) int { return dir * strings.Compare(keys[a], keys[b]) })
	return ords
}

// listPage is the data of a page of the list.
type listPage struct {
	Query      listQuery
	Err        string
	Cols       []listHead
	Rows       []listRow
	Total      int // the file's episodes
	Matched    int // the query's
	Page, Last int // from 0
	From, To   int // the rows shown, from 1
	Prev, Next string
	Statuses   []option
	Scenarios  []option
	Roles      []option
	Allocators []option
	// Index is, in an exported site, the compact index the script filters.
	Index  string
	Linked int
}

// listHead is a column's header: a link that sorts by it.
type listHead struct {
	Label, URL, Sorted string // Sorted: "", "asc" or "desc"
	Key                string
}

type listRow struct {
	Ordinal int
	Rollout int64
	Linked  bool
	Cells   []listCell
}

type listCell struct {
	S   string
	Num bool
}

type option struct {
	Name     string
	Selected bool
}

func options(names []string, selected string) []option {
	out := make([]option, len(names))
	for i, n := range names {
		out[i] = option{n, n == selected}
	}
	return out
}

// listPage renders page data for the query q of file i (nil: the first
// page, unfiltered, as an export writes it).
func (v *Viewer) listPage(i int, q url.Values) listPage {
	x := v.files[i]
	cols := x.columns()
	p := listPage{Total: len(x.Episodes), Linked: v.linked}
	l, err := parseListQuery(q, cols)
	if err != nil {
		p.Err = err.Error()
		l = listQuery{}
	}
	x.allocators()
	p.Query = l
	p.Statuses, p.Scenarios, p.Roles, p.Allocators = options(x.statusNames, l.Status), options(x.scenarioNames, l.Scenario), options(x.roleNames, l.Role), options(x.allocNames, l.Alloc)
	ords := v.selection(i, &l, cols)
	p.Matched = len(ords)
	p.Last = max(0, (len(ords)-1)/listPageSize)
	p.Page = min(l.Page, p.Last)
	from, to := p.Page*listPageSize, min((p.Page+1)*listPageSize, len(ords))
	p.From, p.To = from+1, to
	if p.Page > 0 {
		p.Prev = l.url(p.Page - 1)
	}
	if p.Page < p.Last {
		p.Next = l.url(p.Page + 1)
	}
	for _, c := range cols {
		h := listHead{Label: c.Label, Key: c.Key}
		s := l
		s.Page, s.Sort, s.Desc = 0, c.Key, l.Sort == c.Key && !l.Desc
		h.URL = s.url(0)
		if l.Sort == c.Key {
			h.Sorted = map[bool]string{false: "asc", true: "desc"}[l.Desc]
		}
		p.Cols = append(p.Cols, h)
	}
	for _, o := range ords[from:to] {
		e := &x.Episodes[o]
		r := listRow{Ordinal: int(o), Rollout: e.RolloutID, Linked: v.linked == 0 || int(o) < v.linked}
		for _, c := range cols {
			cell := listCell{Num: c.Num}
			if c.num != nil {
				if val, ok := c.num(e); ok {
					cell.S = fmtNum(val)
				} else {
					cell.S = "–"
				}
			} else {
				cell.S = c.str(e)
			}
			r.Cells = append(r.Cells, cell)
		}
		p.Rows = append(p.Rows, r)
	}
	return p
}

// fmtNum writes a list cell's number as the script does: integers whole,
// others to six significant digits.
func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// selection returns the ordinals of query l, from the last result when it
// is the same query (paging through a million episodes sorts them once).
func (v *Viewer) selection(i int, l *listQuery, cols []listCol) []int32 {
	key := l.values().Encode()
	v.mu.Lock()
	last := v.lastList
	v.mu.Unlock()
	if last != nil && last.file == i && last.key == key {
		return last.ords
	}
	ords := v.files[i].run(l, cols)
	v.mu.Lock()
	v.lastList = &listResult{file: i, key: key, ords: ords}
	v.mu.Unlock()
	return ords
}

// indexJS is an exported list's compact index: a script that sets
// window.troupeEpisodes to the file's episodes, column by column (integers
// as differences from the row before, names as positions in a list).
func (x *File) indexJS(linked int) []byte {
	x.allocators()
	n := len(x.Episodes)
	b := make([]byte, 0, 48*n+1024)
	b = append(b, "window.troupeEpisodes = {\"n\":"...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"linked":`...)
	b = strconv.AppendInt(b, int64(linked), 10)
	names := func(key string, list []string) {
		j, _ := json.Marshal(list)
		b = append(b, `,"`+key+`":`...)
		b = append(b, j...)
	}
	names("statuses", x.statusNames)
	names("scenarios", x.scenarioNames)
	names("ends", x.endNames)
	names("roles", x.roleNames)
	names("allocators", x.allocNames)
	// An integer column is written as differences from the row before,
	// run-length encoded ({"rle":[value,count,...]}) when that is shorter:
	// rollout ids that count up, a status that rarely changes, are a few
	// numbers for a million rows.
	deltas := make([]int64, n)
	ints := func(key string, f func(e *EpisodeInfo) int64) {
		prev, runs := int64(0), 0
		for k := range x.Episodes {
			v := f(&x.Episodes[k])
			deltas[k] = v - prev
			prev = v
			if k == 0 || deltas[k] != deltas[k-1] {
				runs++
			}
		}
		b = append(b, `,"`+key+`":`...)
		if 2*runs < n {
			b = append(b, `{"rle":[`...)
			for k := 0; k < n; {
				j := k
				for j < n && deltas[j] == deltas[k] {
					j++
				}
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, deltas[k], 10)
				b = append(b, ',')
				b = strconv.AppendInt(b, int64(j-k), 10)
				k = j
			}
			b = append(b, "]}"...)
			return
		}
		b = append(b, '[')
		for k, d := range deltas {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
	}
	pos := func(list []string, s string) int64 { return int64(slices.Index(list, s)) }
	ints("rollout_id", func(e *EpisodeInfo) int64 { return e.RolloutID })
	ints("episode", func(e *EpisodeInfo) int64 { return e.Index })
	ints("group", func(e *EpisodeInfo) int64 { return e.GroupIndex })
	ints("scenario", func(e *EpisodeInfo) int64 { return pos(x.scenarioNames, e.Scenario) })
	ints("status", func(e *EpisodeInfo) int64 { return pos(x.statusNames, e.Status) })
	ints("end", func(e *EpisodeInfo) int64 { return pos(x.endNames, e.End) })
	ints("agents", func(e *EpisodeInfo) int64 { return int64(e.Agents) })
	ints("samples", func(e *EpisodeInfo) int64 { return int64(e.Samples) })
	ints("turns", func(e *EpisodeInfo) int64 { return int64(e.Turns) })
	ints("messages", func(e *EpisodeInfo) int64 { return int64(e.Messages) })
	ints("invalid", func(e *EpisodeInfo) int64 { return int64(e.Invalid) })
	// The roles of an episode as the position of its set of roles in
	// rolesets: runs have few distinct sets.
	roleSets := map[string]int64{}
	var sets [][]int
	ints("roleset", func(e *EpisodeInfo) int64 {
		var ks []int
		for _, r := range e.Roles {
			ks = append(ks, slices.Index(x.roleNames, r.Role))
		}
		key := fmt.Sprint(ks)
		id, ok := roleSets[key]
		if !ok {
			id = int64(len(sets))
			roleSets[key] = id
			sets = append(sets, ks)
		}
		return id
	})
	j, _ := json.Marshal(sets)
	b = append(b, `,"rolesets":`...)
	b = append(b, j...)
	// A float column is written whole, or, when it takes few distinct
	// values (the outcomes of a discrete game), as a table of them and a
	// position per episode: El Farol's million team rewards are a few
	// hundred numbers. Both are exact: the script filters what the server
	// would.
	floats := func(f func(e *EpisodeInfo) (float64, bool)) {
		pos := map[float64]int{}
		var table []float64
		for k := range x.Episodes {
			v, ok := f(&x.Episodes[k])
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			if _, seen := pos[v]; !seen {
				if len(table) >= maxTable || len(table) > n/4 {
					table = nil
					break
				}
				pos[v] = len(table)
				table = append(table, v)
			}
		}
		if table != nil {
			b = append(b, `{"table":[`...)
			for i, v := range table {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendNum(b, v)
			}
			b = append(b, `],"at":[`...)
		} else {
			b = append(b, '[')
		}
		for k := range x.Episodes {
			if k > 0 {
				b = append(b, ',')
			}
			v, ok := f(&x.Episodes[k])
			switch {
			case !ok || math.IsNaN(v) || math.IsInf(v, 0):
				b = append(b, "null"...)
			case table != nil:
				b = strconv.AppendInt(b, int64(pos[v]), 10)
			default:
				b = appendNum(b, v)
			}
		}
		b = append(b, ']')
		if table != nil {
			b = append(b, '}')
		}
	}
	b = append(b, `,"team":`...)
	floats(func(e *EpisodeInfo) (float64, bool) { return e.Team, true })
	b = append(b, `,"alloc":[`...)
	for a, name := range x.allocNames {
		if a > 0 {
			b = append(b, ',')
		}
		floats(func(e *EpisodeInfo) (float64, bool) { return e.AllocValue(name) })
	}
	b = append(b, "]};\n"...)
	return b
}

// maxTable is the most distinct values a column of the index writes as a
// table.
const maxTable = 1 << 16

// appendNum writes a number JSON can hold; NaN and infinities as null.
func appendNum(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
