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
	// num gives episode k's value, ok false for an empty cell, sorted
	// last either way; str, for a column of names, its kind's.
	num func(k int) (float64, bool)
	str func(kn *kind) string
}

// columns are the list's columns: the fixed ones, then one per allocator
// of the file (key "alloc:" and its name).
func (x *File) columns() []listCol {
	i := func(c *ints) func(k int) (float64, bool) {
		return func(k int) (float64, bool) { return float64(c.get(k)), true }
	}
	cols := []listCol{
		{Key: "rollout_id", Label: "rollout_id", Num: true, num: i(&x.rollout)},
		{Key: "episode", Label: "episode", Num: true, num: i(&x.index)},
		{Key: "group", Label: "group", Num: true, num: i(&x.group)},
		{Key: "scenario", Label: "scenario", str: func(kn *kind) string { return kn.scenario }},
		{Key: "status", Label: "status", str: func(kn *kind) string { return kn.status }},
		{Key: "end", Label: "end", str: func(kn *kind) string { return kn.end }},
		{Key: "team", Label: "team reward", Num: true, num: func(k int) (float64, bool) {
			v := x.team.get(k)
			return v, !math.IsNaN(v) && !math.IsInf(v, 0)
		}},
		{Key: "agents", Label: "agents", Num: true, num: i(&x.agents)},
		{Key: "samples", Label: "samples", Num: true, num: i(&x.samples)},
		{Key: "turns", Label: "turns", Num: true, num: i(&x.turns)},
		{Key: "messages", Label: "messages", Num: true, num: func(k int) (float64, bool) {
			m := x.messages.get(k)
			return float64(m), m >= 0
		}},
		{Key: "invalid", Label: "invalid", Num: true, num: i(&x.invalid)},
		{Key: "roles", Label: "roles", str: func(kn *kind) string { return kn.roleList }},
	}
	for c, name := range x.allocNames {
		cols = append(cols, listCol{Key: "alloc:" + name, Label: name, Num: true, num: func(k int) (float64, bool) { return x.allocValue(k, c) }})
	}
	return cols
}

// kindsMatch returns whether each kind of x passes the query's filters on
// names (status, scenario, role), nil when there are none: the rows are
// then only read for the filters on numbers.
func (l *listQuery) kindsMatch(x *File) []bool {
	if l.Status == "" && l.Scenario == "" && l.Role == "" {
		return nil
	}
	ok := make([]bool, len(x.kinds))
	for i := range x.kinds {
		kn := &x.kinds[i]
		ok[i] = (l.Status == "" || kn.status == l.Status) && (l.Scenario == "" || kn.scenario == l.Scenario) &&
			(l.Role == "" || slices.Contains(kn.roles, l.Role))
	}
	return ok
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
	kinds := l.kindsMatch(x)
	alloc := -2 // no allocator filter
	if l.Alloc != "" {
		alloc = x.allocColumn(l.Alloc)
	}
	rows := l.Group != nil || l.TeamMin != nil || l.TeamMax != nil || alloc != -2
	ords := make([]int32, 0, x.n)
	for k := range x.n {
		if kinds != nil && !kinds[x.kindOf.get(k)] {
			continue
		}
		if rows {
			if l.Group != nil && x.group.get(k) != *l.Group {
				continue
			}
			if l.TeamMin != nil || l.TeamMax != nil {
				t := x.team.get(k)
				if l.TeamMin != nil && !(t >= *l.TeamMin) || l.TeamMax != nil && !(t <= *l.TeamMax) {
					continue
				}
			}
			if alloc != -2 {
				if alloc < 0 {
					continue
				}
				v, ok := x.allocValue(k, alloc)
				if !ok || l.AllocMin != nil && !(v >= *l.AllocMin) || l.AllocMax != nil && !(v <= *l.AllocMax) {
					continue
				}
			}
		}
		ords = append(ords, int32(k))
	}
	c := slices.IndexFunc(cols, func(c listCol) bool { return c.Key == l.Sort })
	if c < 0 {
		return ords
	}
	dir := 1
	if l.Desc {
		dir = -1
	}
	// Each row's key beside its ordinal: empty cells last in either
	// direction, ties in file order (the ordinal breaks them, so an
	// unstable sort gives the stable order).
	type keyed struct {
		key float64
		ord int32
	}
	keys := make([]keyed, 0, len(ords))
	var empty []int32
	if col := cols[c]; col.num != nil {
		for _, o := range ords {
			if v, ok := col.num(int(o)); ok {
				keys = append(keys, keyed{v, o})
			} else {
				empty = append(empty, o)
			}
		}
	} else {
		// Names by their rank among the kinds' names.
		names := make([]string, len(x.kinds))
		for i := range x.kinds {
			names[i] = col.str(&x.kinds[i])
		}
		sorted := slices.Clone(names)
		slices.Sort(sorted)
		rank := make([]float64, len(names))
		for i, s := range names {
			r, _ := slices.BinarySearch(sorted, s)
			rank[i] = float64(r)
		}
		for _, o := range ords {
			keys = append(keys, keyed{rank[x.kindOf.get(int(o))], o})
		}
	}
	slices.SortFunc(keys, func(a, b keyed) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return dir * c
		}
		return cmp.Compare(a.ord, b.ord)
	})
	ords = ords[:0]
	for _, k := range keys {
		ords = append(ords, k.ord)
	}
	return append(ords, empty...)
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
	p := listPage{Total: x.n, Linked: v.linked}
	l, err := parseListQuery(q, cols)
	if err != nil {
		p.Err = err.Error()
		l = listQuery{}
	}
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
		k := int(o)
		r := listRow{Ordinal: k, Rollout: x.rollout.get(k), Linked: v.linked == 0 || k < v.linked}
		for _, c := range cols {
			cell := listCell{Num: c.Num}
			if c.num != nil {
				if val, ok := c.num(k); ok {
					cell.S = fmtNum(val)
				} else {
					cell.S = "–"
				}
			} else {
				cell.S = c.str(x.kind(k))
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
	n := x.n
	b := make([]byte, 0, 48*n+1024)
	b = append(b, "window.troupeEpisodes = {\"n\":"...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"linked":`...)
	b = strconv.AppendInt(b, int64(linked), 10)
	b = appendNames(b, "statuses", x.statusNames)
	b = appendNames(b, "scenarios", x.scenarioNames)
	b = appendNames(b, "ends", x.endNames)
	b = appendNames(b, "roles", x.roleNames)
	b = appendNames(b, "allocators", x.allocNames)
	b = x.appendIntColumns(b)
	b = append(b, `,"team":`...)
	b = appendFloatColumn(b, n, func(k int) (float64, bool) { return x.team.get(k), true })
	b = append(b, `,"alloc":[`...)
	for c := range x.allocNames {
		if c > 0 {
			b = append(b, ',')
		}
		b = appendFloatColumn(b, n, func(k int) (float64, bool) { return x.allocValue(k, c) })
	}
	return append(b, "]};\n"...)
}

// appendNames writes the list of names that a column of positions
// refers to, under key.
func appendNames(b []byte, key string, list []string) []byte {
	j, _ := json.Marshal(list)
	b = append(b, `,"`+key+`":`...)
	return append(b, j...)
}

// appendIntColumns writes the index's integer columns, those of names
// as positions in their lists, and the sets of roles that the "roleset"
// column refers to.
func (x *File) appendIntColumns(b []byte) []byte {
	deltas := make([]int64, x.n) // scratch for every column
	ints := func(key string, f func(k int) int64) { b = appendIntColumn(b, deltas, key, f) }
	// Per kind, the positions of its names in the lists above.
	pos := func(list []string, name func(kn *kind) string) []int64 {
		out := make([]int64, len(x.kinds))
		for i := range x.kinds {
			out[i] = int64(slices.Index(list, name(&x.kinds[i])))
		}
		return out
	}
	byKind := func(key string, of []int64) { ints(key, func(k int) int64 { return of[x.kindOf.get(k)] }) }
	ints("rollout_id", x.rollout.get)
	ints("episode", x.index.get)
	ints("group", x.group.get)
	byKind("scenario", pos(x.scenarioNames, func(kn *kind) string { return kn.scenario }))
	byKind("status", pos(x.statusNames, func(kn *kind) string { return kn.status }))
	byKind("end", pos(x.endNames, func(kn *kind) string { return kn.end }))
	ints("agents", x.agents.get)
	ints("samples", x.samples.get)
	ints("turns", x.turns.get)
	ints("messages", x.messages.get)
	ints("invalid", x.invalid.get)
	setOf, sets := x.roleSets()
	byKind("roleset", setOf)
	j, _ := json.Marshal(sets)
	b = append(b, `,"rolesets":`...)
	return append(b, j...)
}

// roleSets numbers the kinds' sets of roles in order of first use and
// returns each kind's set and the sets, each as positions in roleNames:
// runs have few distinct sets. Kinds are in order of first use, so a
// set's first kind is its first episode's.
func (x *File) roleSets() (setOf []int64, sets [][]int) {
	ids := map[string]int64{}
	setOf = make([]int64, len(x.kinds))
	for i := range x.kinds {
		var ks []int
		for _, r := range x.kinds[i].roles {
			ks = append(ks, slices.Index(x.roleNames, r))
		}
		key := fmt.Sprint(ks)
		id, ok := ids[key]
		if !ok {
			id = int64(len(sets))
			ids[key] = id
			sets = append(sets, ks)
		}
		setOf[i] = id
	}
	return setOf, sets
}

// appendIntColumn writes the integer column f of len(deltas) rows under
// key, as differences from the row before, run-length encoded
// ({"rle":[value,count,...]}) when that is shorter: rollout ids that count
// up, a status that rarely changes, are a few numbers for a million rows.
// deltas is scratch, overwritten.
func appendIntColumn(b []byte, deltas []int64, key string, f func(k int) int64) []byte {
	n := len(deltas)
	prev, runs := int64(0), 0
	for k := range n {
		v := f(k)
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
		return append(b, "]}"...)
	}
	b = append(b, '[')
	for k, d := range deltas {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return append(b, ']')
}

// appendFloatColumn writes the float column f of n rows whole, or, when
// it takes few distinct values (the outcomes of a discrete game), as a
// table of them and a position per episode: El Farol's million team
// rewards are a few hundred numbers. Both are exact: the script filters
// what the server would. A row f has no value for, or whose value is not
// finite, is null.
func appendFloatColumn(b []byte, n int, f func(k int) (float64, bool)) []byte {
	pos := map[float64]int{}
	var table []float64
	for k := range n {
		v, ok := f(k)
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
	for k := range n {
		if k > 0 {
			b = append(b, ',')
		}
		v, ok := f(k)
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
