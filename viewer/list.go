package viewer

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// listData is the episode list's data, read by the page's script from a
// JSON block: the names the rows refer to by position, and one row per
// episode.
type listData struct {
	Allocators []string
	Roles      []string
	JSON       json.RawMessage
}

// The columns of a row of the list's JSON, in order.
var listColumns = []string{"ordinal", "rollout_id", "index", "group", "scenario", "status", "end", "team", "samples", "turns", "messages", "invalid", "agents", "roles", "alloc"}

func (v *Viewer) listData(i int) listData {
	x := v.files[i]
	var allocs, roles, scenarios, statuses, ends []string
	pos := func(list *[]string, s string) int {
		if k := slices.Index(*list, s); k >= 0 {
			return k
		}
		*list = append(*list, s)
		return len(*list) - 1
	}
	for k := range x.Episodes {
		for _, a := range x.Episodes[k].Allocators {
			pos(&allocs, a)
		}
		for _, r := range x.Episodes[k].Roles {
			pos(&roles, r.Role)
		}
	}
	slices.Sort(roles)
	b := make([]byte, 0, 128*len(x.Episodes)+256)
	b = append(b, `{"columns":`...)
	cols, _ := json.Marshal(listColumns)
	b = append(b, cols...)
	b = append(b, `,"rows":[`...)
	for k := range x.Episodes {
		e := &x.Episodes[k]
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for _, n := range []int64{int64(e.Ordinal), e.RolloutID, e.Index, e.GroupIndex,
			int64(pos(&scenarios, e.Scenario)), int64(pos(&statuses, e.Status)), int64(pos(&ends, e.End))} {
			b = strconv.AppendInt(b, n, 10)
			b = append(b, ',')
		}
		b = appendNum(b, e.Team)
		for _, n := range []int{e.Samples, e.Turns, e.Messages, e.Invalid, e.Agents} {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, ",["...)
		for r, rf := range e.Roles {
			if r > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(slices.Index(roles, rf.Role)), 10)
		}
		b = append(b, "],["...)
		for a, name := range allocs {
			if a > 0 {
				b = append(b, ',')
			}
			if val, ok := e.AllocValue(name); ok {
				b = appendNum(b, val)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, "]]"...)
	}
	b = append(b, "]"...)
	for _, kv := range []struct {
		key  string
		list []string
	}{{"allocators", allocs}, {"roles", roles}, {"scenarios", scenarios}, {"statuses", statuses}, {"ends", ends}} {
		names, _ := json.Marshal(kv.list)
		b = append(b, `,"`+kv.key+`":`...)
		b = append(b, names...)
	}
	b = append(b, `,"linked":`...)
	b = strconv.AppendInt(b, int64(v.linked), 10)
	b = append(b, '}')
	return listData{Allocators: allocs, Roles: roles, JSON: b}
}

// appendNum writes a number JSON can hold; NaN and infinities as null.
func appendNum(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
