package viewer

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeIndex reads an export's episodes-index.js as the script does:
// integer columns summed back from their differences, float columns from
// their table when they have one.
func decodeIndex(t *testing.T, js []byte) map[string]any {
	t.Helper()
	body, ok := bytes.CutPrefix(js, []byte("window.troupeEpisodes = "))
	require.True(t, ok)
	body = bytes.TrimSuffix(body, []byte(";\n"))
	var d map[string]any
	require.NoError(t, json.Unmarshal(body, &d))
	column := func(c any) []any {
		if m, ok := c.(map[string]any); ok {
			table, at := m["table"].([]any), m["at"].([]any)
			out := make([]any, len(at))
			for i, k := range at {
				if k != nil {
					out[i] = table[int(k.(float64))]
				}
			}
			return out
		}
		return c.([]any)
	}
	d["team"] = column(d["team"])
	allocs := d["alloc"].([]any)
	for a := range allocs {
		allocs[a] = column(allocs[a])
	}
	for _, k := range []string{"rollout_id", "group", "status"} {
		if m, ok := d[k].(map[string]any); ok {
			var out []any
			runs := m["rle"].([]any)
			for r := 0; r < len(runs); r += 2 {
				for range int(runs[r+1].(float64)) {
					out = append(out, runs[r])
				}
			}
			d[k] = out
		}
		acc := 0.0
		for i, v := range d[k].([]any) {
			acc += v.(float64)
			d[k].([]any)[i] = acc
		}
	}
	return d
}

// TestIndexJSIsExact: the export's index holds every episode's values
// exactly, written whole or as a table of the few values a column takes.
func TestIndexJSIsExact(t *testing.T) {
	for _, few := range []bool{false, true} {
		x := Synthesized("run", 1000)
		if few {
			x = synthesized("run", 1000, func(k int) float64 { return float64(k%5) / 3 })
		}
		js := x.indexJS(0)
		assert.Contains(t, string(js), `"rollout_id":{"rle":[0,1,1,999]}`, "ids counting up: one run")
		assert.Contains(t, string(js), `"group":{"rle":[`, "groups of 8: runs")
		if few {
			assert.Contains(t, string(js), `"team":{"table":[`, "few values: a table")
		} else {
			assert.Contains(t, string(js), `"team":[`, "many values: whole")
		}
		d := decodeIndex(t, js)
		team, diff := d["team"].([]any), d["alloc"].([]any)[1].([]any)
		for k := range x.Len() {
			e := x.Info(k)
			assert.Equal(t, e.Team, team[k], "team of %d", k)
			assert.Equal(t, e.Alloc[1], diff[k], "difference of %d", k)
			assert.Equal(t, float64(e.RolloutID), d["rollout_id"].([]any)[k])
			assert.Equal(t, float64(e.GroupIndex), d["group"].([]any)[k])
			assert.Equal(t, e.Status, d["statuses"].([]any)[int(d["status"].([]any)[k].(float64))])
		}
	}
}

func TestListQueryNamesBadParameters(t *testing.T) {
	cols := Synthesized("run", 1).columns()
	for q, want := range map[string]string{
		"group=one":                 `group: want an integer, got "one"`,
		"team_min=x":                `team_min: want a number, got "x"`,
		"alloc_max=1":               "alloc_min and alloc_max need an allocator (alloc)",
		"sort=nope":                 `sort: no column "nope"`,
		"dir=up":                    `dir: want asc or desc, got "up"`,
		"page=0":                    `page: want a page number from 1, got "0"`,
		"team_max=NaN":              `team_max: want a number, got "NaN"`,
		"alloc=team&alloc_min=1e-3": "",
	} {
		v, err := url.ParseQuery(q)
		require.NoError(t, err)
		_, err = parseListQuery(v, cols)
		if want == "" {
			assert.NoError(t, err, q)
			continue
		}
		assert.ErrorIs(t, err, errQuery, q)
		assert.ErrorContains(t, err, want, q)
	}
	// A query's URL reads back as the same query.
	v, _ := url.ParseQuery("status=failed&group=3&team_min=0.5&alloc=difference&alloc_max=-0.1&sort=alloc%3Adifference&dir=desc&page=4")
	l, err := parseListQuery(v, cols)
	require.NoError(t, err)
	u, err := url.Parse(l.url(l.Page))
	require.NoError(t, err)
	back, err := parseListQuery(u.Query(), cols)
	require.NoError(t, err)
	assert.Equal(t, l, back)
}

// TestCacheBoundsBytes: the cache drops the oldest episodes past its
// bytes, keeping the newest however large.
func TestCacheBoundsBytes(t *testing.T) {
	c := newCache(32)
	ep := func(size int64) *Episode { return &Episode{Info: &EpisodeInfo{Size: size}} }
	c.put(cacheKey{0, 0}, ep(cacheBytes/2))
	c.put(cacheKey{0, 1}, ep(cacheBytes/2))
	_, ok := c.get(cacheKey{0, 0})
	assert.True(t, ok, "two halves fit")
	c.put(cacheKey{0, 2}, ep(1))
	_, ok = c.get(cacheKey{0, 1})
	assert.False(t, ok, "the oldest went")
	c.put(cacheKey{0, 3}, ep(2*cacheBytes))
	assert.Equal(t, 1, c.order.Len(), "one episode larger than the bound stays alone")
	assert.Equal(t, int64(2*cacheBytes), c.bytes)
}
