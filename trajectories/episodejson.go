package trajectories

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// episodeEncoder writes the episode JSONL form (troupe.episode/v2) by hand,
// byte for byte what encoding/json writes of an episodeLine (the form's
// definition, which DecodeEpisode reads): keys in the struct's order, maps'
// keys sorted, strings with encoding/json's escapes (HTML's <, > and &
// included), numbers as encoding/json writes them and jfloat's as its
// MarshalJSON does.
//
// encoding/json wrote an episode through reflection, into a buffer of its
// own that it then copied out, with an allocation per number of the credit
// (jfloat's MarshalJSON) and a line struct as large as the episode: about
// seven allocations and a kilobyte of garbage a turn, and for an episode
// of thousands of agents a buffer grown by doubling, copied out and
// dropped, every episode. This one appends to the caller's buffer and
// allocates nothing for the scenarios' usual turns (notes of strings,
// numbers and booleans).
//
// It remembers the last view and legal actions it wrote, escaped: the
// turns of most episodes repeat them (every patron of El Farol sees the
// same view), and copying the escaped bytes costs less than escaping them
// again.
type episodeEncoder struct {
	view             string // the last view
	viewJSON         []byte // view as a JSON string
	legal            []string
	legalJSON        []byte // the last legal actions, and their JSON array
	legalNil, legalK bool   // legal was nil; legalJSON holds a list
	keys             []string
}

// appendEpisode is AppendEpisodeJSON with e's memory.
func (e *episodeEncoder) appendEpisode(dst []byte, rec *episode.Record, credit *Credit) []byte {
	dst = e.appendIdentity(dst, rec)
	dst = appendSeats(dst, rec)
	dst = e.appendTurns(dst, rec, credit)
	dst = appendMessages(dst, rec.Messages)
	dst = appendTransitions(dst, rec.Transitions)
	dst = appendScore(dst, &rec.Score)
	dst = e.appendCredit(dst, credit)
	if rec.Tree != nil {
		dst = e.appendTree(dst, rec)
	}
	return append(dst, "}\n"...)
}

// appendIdentity opens the line and writes its keys from "format" to
// "teams": what names the episode and how it ended.
func (e *episodeEncoder) appendIdentity(dst []byte, rec *episode.Record) []byte {
	dst = append(dst, `{"format":`...)
	dst = appendJSONString(dst, EpisodeFormat)
	dst = append(dst, `,"scenario":`...)
	dst = appendJSONString(dst, rec.Scenario)
	dst = append(dst, `,"params":{`...)
	e.keys = e.keys[:0]
	for k := range rec.Params {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys)
	for i, k := range e.keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, rec.Params[k])
	}
	dst = append(dst, `},"seed":`...)
	dst = strconv.AppendUint(dst, rec.Seed, 10)
	dst = append(dst, `,"policy_seed":`...)
	dst = strconv.AppendUint(dst, rec.PolicySeed, 10)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, rec.Index, 10)
	dst = append(dst, `,"rollout_id":`...)
	dst = strconv.AppendInt(dst, rec.RolloutID, 10)
	dst = append(dst, `,"group_index":`...)
	dst = strconv.AppendInt(dst, rec.GroupIndex, 10)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, string(rec.Status))
	dst = append(dst, `,"end":`...)
	dst = appendJSONString(dst, rec.End)
	dst = append(dst, `,"error":`...)
	dst = appendJSONString(dst, rec.Err)
	if rec.Stack != "" {
		dst = append(dst, `,"stack":`...)
		dst = appendJSONString(dst, rec.Stack)
	}
	dst = append(dst, `,"steps":`...)
	dst = strconv.AppendInt(dst, int64(rec.Steps), 10)
	dst = append(dst, `,"label":`...)
	dst = appendJSONString(dst, rec.Label)
	if rec.Teams != nil {
		dst = append(dst, `,"teams":`...)
		dst = appendJSONStrings(dst, rec.Teams)
	}
	return dst
}

// appendSeats writes the "seats" list; a seat names its team only in an
// episode that has teams, as the form's omitempty does.
func appendSeats(dst []byte, rec *episode.Record) []byte {
	dst = append(dst, `,"seats":[`...)
	for i, s := range rec.Seats {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendJSONString(dst, s.ID)
		dst = append(dst, `,"role":`...)
		dst = appendJSONString(dst, s.Role)
		if rec.Teams != nil {
			dst = append(dst, `,"team":`...)
			dst = appendJSONString(dst, rec.TeamName(s.Team))
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendTurns writes the "turns" list. Once the first turn is written it
// grows dst for about the rest of the line at once, so that a long
// episode's buffer is not grown by doubling, copied and dropped on the way.
func (e *episodeEncoder) appendTurns(dst []byte, rec *episode.Record, credit *Credit) []byte {
	dst = append(dst, `,"turns":[`...)
	for i := range rec.Turns {
		if i > 0 {
			dst = append(dst, ',')
		}
		start := len(dst)
		dst = e.appendTurn(dst, &rec.Turns[i])
		if i == 0 {
			// The turns at the first one's size, the transitions and
			// credit values at a guess (growFor grows again for more
			// transitions).
			rest := (len(dst)-start)*(len(rec.Turns)-1) + 80*len(rec.Transitions)
			if credit != nil {
				rest += 24 * len(rec.Turns) * len(credit.Values)
			}
			dst = slices.Grow(dst, rest+rest/8)
		}
	}
	return append(dst, ']')
}

// appendMessages writes the "messages" list.
func appendMessages(dst []byte, msgs []episode.Message) []byte {
	dst = append(dst, `,"messages":[`...)
	for i := range msgs {
		m := &msgs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"seq":`...)
		dst = strconv.AppendInt(dst, int64(m.Seq), 10)
		dst = append(dst, `,"time":`...)
		dst = strconv.AppendInt(dst, int64(m.Time), 10)
		dst = append(dst, `,"from":`...)
		dst = appendJSONString(dst, m.From)
		dst = append(dst, `,"to":`...)
		dst = appendJSONString(dst, string(m.To))
		dst = append(dst, `,"kind":`...)
		dst = appendJSONString(dst, m.Kind)
		dst = append(dst, `,"payload":`...)
		dst = appendJSONString(dst, m.Payload)
		dst = append(dst, `,"recipients":`...)
		dst = appendInts(dst, m.Recipients, "[]")
		if m.Quiet {
			dst = append(dst, `,"quiet":true`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendTransitions writes the "transitions" list, growing dst for all of
// them at the first one's size once it is written.
func appendTransitions(dst []byte, trs []episode.Transition) []byte {
	dst = append(dst, `,"transitions":[`...)
	start := len(dst)
	for i := range trs {
		tr := &trs[i]
		if i == 1 {
			dst = growFor(dst, len(dst)-start, len(trs))
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"step":`...)
		dst = strconv.AppendInt(dst, int64(tr.Step), 10)
		dst = append(dst, `,"seat":`...)
		dst = strconv.AppendInt(dst, int64(tr.Seat), 10)
		dst = append(dst, `,"event":`...)
		dst = appendJSONString(dst, string(tr.Event))
		dst = append(dst, `,"from":`...)
		dst = appendJSONString(dst, string(tr.From))
		dst = append(dst, `,"to":`...)
		dst = appendJSONString(dst, string(tr.To))
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendScore writes the "score" object.
func appendScore(dst []byte, sc *episode.Score) []byte {
	dst = append(dst, `,"score":{"team":`...)
	dst = appendJFloat(dst, sc.Team)
	if sc.Teams != nil {
		dst = append(dst, `,"teams":`...)
		dst = appendJFloats(dst, sc.Teams)
	}
	dst = append(dst, `,"agents":`...)
	dst = appendJFloats(dst, sc.Agents)
	return append(dst, '}')
}

// appendCredit writes the "credit" object, null for an episode without.
// It grows dst for every value list at the first list's size, which is
// about the size of each: one value per emitted turn.
func (e *episodeEncoder) appendCredit(dst []byte, credit *Credit) []byte {
	dst = append(dst, `,"credit":`...)
	if credit == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"allocators":`...)
	dst = appendJSONStrings(dst, credit.Allocators)
	dst = append(dst, `,"values":[`...)
	for i, v := range credit.Values {
		if i > 0 {
			dst = append(dst, ',')
		}
		if i == 0 && len(v) > 0 {
			start := len(dst)
			dst = appendJFloat(append(dst, '['), v[0])
			dst = growFor(dst, len(dst)-start, len(v)*len(credit.Values))
			dst = appendJFloats(dst[:start], v)
			continue
		}
		dst = appendJFloats(dst, v)
	}
	dst = append(dst, `],"notes":`...)
	dst = e.appendNotes(dst, credit.Notes, "null")
	return append(dst, '}')
}

// appendTurn writes one turn of the "turns" list.
func (e *episodeEncoder) appendTurn(dst []byte, t *episode.Turn) []byte {
	dst = append(dst, `{"seat":`...)
	dst = strconv.AppendInt(dst, int64(t.Seat), 10)
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, int64(t.Step), 10)
	dst = append(dst, `,"turn":`...)
	dst = strconv.AppendInt(dst, int64(t.Turn), 10)
	dst = append(dst, `,"state":`...)
	dst = appendJSONString(dst, string(t.State))
	dst = append(dst, `,"seed":`...)
	dst = strconv.AppendUint(dst, t.Seed, 10)
	dst = append(dst, `,"view":`...)
	if t.View == e.view && e.viewJSON != nil {
		dst = append(dst, e.viewJSON...)
	} else {
		start := len(dst)
		dst = appendJSONString(dst, t.View)
		e.view, e.viewJSON = t.View, append(e.viewJSON[:0], dst[start:]...)
	}
	dst = append(dst, `,"legal":`...)
	if !e.sameLegal(t.Legal) {
		e.legal = append(e.legal[:0], t.Legal...)
		e.legalNil, e.legalK = t.Legal == nil, true
		e.legalJSON = e.legalJSON[:0]
		if t.Legal == nil {
			e.legalJSON = append(e.legalJSON, "null"...)
		} else {
			e.legalJSON = append(e.legalJSON, '[')
			for i, a := range t.Legal {
				if i > 0 {
					e.legalJSON = append(e.legalJSON, ',')
				}
				e.legalJSON = appendJSONString(e.legalJSON, a)
			}
			e.legalJSON = append(e.legalJSON, ']')
		}
	}
	dst = append(dst, e.legalJSON...)
	dst = append(dst, `,"inbox":`...)
	dst = appendInts(dst, t.Inbox, "[]")
	dst = e.appendAnswer(dst, t.Action, t.Generation, t.Invalid, t.Notes)
	if t.Emit {
		return append(dst, `,"emit":true}`...)
	}
	return append(dst, `,"emit":false}`...)
}

// appendAnswer writes a turn's or a candidate's answer, from "action" to
// "notes".
func (e *episodeEncoder) appendAnswer(dst []byte, action string, g *agents.Generation, invalid string, notes map[string]any) []byte {
	if g == nil {
		g = &noGeneration
	}
	dst = append(dst, `,"action":`...)
	dst = appendJSONString(dst, action)
	dst = append(dst, `,"completion":`...)
	dst = appendJSONString(dst, g.Completion)
	if g.Prompt != nil {
		dst = append(dst, `,"prompt":`...)
		if g.Prompt.Messages == nil {
			dst = appendJSONString(dst, g.Prompt.Text)
		} else {
			dst = append(dst, '[')
			for i, m := range g.Prompt.Messages {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"role":`...)
				dst = appendJSONString(dst, m.Role)
				dst = append(dst, `,"content":`...)
				dst = appendJSONString(dst, m.Content)
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
		}
	}
	if tk := g.Tokens; tk != nil {
		dst = append(dst, `,"tokens":{"prompt":`...)
		dst = appendInts(dst, tk.Prompt, "null")
		dst = append(dst, `,"response":`...)
		dst = appendInts(dst, tk.Response, "null")
		dst = append(dst, `,"log_probs":`...)
		dst = appendJFloats(dst, tk.LogProbs)
		dst = append(dst, `,"loss_mask":`...)
		dst = appendInts(dst, tk.LossMask, "null")
		dst = append(dst, '}')
	}
	dst = append(dst, `,"invalid":`...)
	dst = appendJSONString(dst, invalid)
	dst = append(dst, `,"notes":`...)
	return e.appendNotes(dst, notes, "{}")
}

// appendTree writes a tree-sampled episode's "tree" and "candidates".
func (e *episodeEncoder) appendTree(dst []byte, rec *episode.Record) []byte {
	tr := rec.Tree
	dst = append(dst, `,"tree":{"k":`...)
	dst = strconv.AppendInt(dst, int64(tr.K), 10)
	dst = append(dst, `,"alpha":`...)
	dst = appendJFloat(dst, tr.Alpha)
	dst = append(dst, `,"joint":`...)
	dst = strconv.AppendBool(dst, tr.Joint)
	dst = append(dst, `,"roles":`...)
	dst = appendJSONStrings(dst, tr.Roles)
	dst = append(dst, '}')
	if len(rec.Candidates) == 0 {
		return dst
	}
	dst = append(dst, `,"candidates":[`...)
	for i := range rec.Candidates {
		c := &rec.Candidates[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"turn":`...)
		dst = strconv.AppendInt(dst, int64(c.Turn), 10)
		dst = append(dst, `,"index":`...)
		dst = strconv.AppendInt(dst, int64(c.Index), 10)
		dst = append(dst, `,"seed":`...)
		dst = strconv.AppendUint(dst, c.Seed, 10)
		dst = e.appendAnswer(dst, c.Action, c.Generation, c.Invalid, c.Notes)
		dst = append(dst, `,"team":`...)
		dst = appendJFloat(dst, c.Team)
		dst = append(dst, `,"local":`...)
		dst = appendJFloat(dst, c.Local)
		dst = append(dst, `,"reward":`...)
		dst = appendJFloat(dst, c.Reward)
		dst = append(dst, `,"chosen":`...)
		dst = strconv.AppendBool(dst, c.Chosen)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// growFor grows dst, once the first of n items of a list is written
// (size bytes), for the rest of them, at the first one's size and an
// eighth more. A line of thousands of turns otherwise grows the buffer by
// doubling, copying all it holds each time.
func growFor(dst []byte, size, n int) []byte {
	rest := size * (n - 1)
	return slices.Grow(dst, rest+rest/8)
}

// sameLegal reports whether legal is the list e wrote last.
func (e *episodeEncoder) sameLegal(legal []string) bool {
	return e.legalK && (legal == nil) == e.legalNil && slices.Equal(legal, e.legal)
}

// appendNotes writes notes as a JSON object with sorted keys, or ifNil for
// a nil map. A value JSON cannot encode (NaN, a channel) is written as the
// samples write it, the string "unencodable: <why>".
func (e *episodeEncoder) appendNotes(dst []byte, notes map[string]any, ifNil string) []byte {
	if notes == nil {
		return append(dst, ifNil...)
	}
	dst = append(dst, '{')
	keys := e.keys[:0]
	if len(notes) == 1 {
		for k := range notes {
			keys = append(keys, k)
		}
	} else {
		keys = slices.AppendSeq(keys, maps.Keys(notes))
		slices.Sort(keys)
	}
	e.keys = keys
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendNote(dst, notes[k])
	}
	return append(dst, '}')
}

// appendNote writes one note's value as encoding/json does: the usual
// kinds by hand, anything else through json.Marshal.
func appendNote(dst []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case string:
		return appendJSONString(dst, v)
	case bool:
		return strconv.AppendBool(dst, v)
	case int:
		return strconv.AppendInt(dst, int64(v), 10)
	case int64:
		return strconv.AppendInt(dst, v, 10)
	case float64:
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			return protocol.AppendFloat(dst, v)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return appendJSONString(dst, "unencodable: "+err.Error())
	}
	return append(dst, b...)
}

// noGeneration is a turn's generation when it has none.
var noGeneration agents.Generation

// appendJSONStrings writes v as a JSON list of strings, or null for nil.
func appendJSONStrings(dst []byte, v []string) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, s := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendInts writes v as a JSON list of numbers, or ifNil for nil.
func appendInts(dst []byte, v []int, ifNil string) []byte {
	if v == nil {
		return append(dst, ifNil...)
	}
	dst = append(dst, '[')
	for i, x := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return append(dst, ']')
}

// appendJFloat writes f as jfloat's MarshalJSON does.
func appendJFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Inf"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// appendJFloats writes v as a list of jfloats, or null for nil.
func appendJFloats(dst []byte, v []float64) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, x := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJFloat(dst, x)
	}
	return append(dst, ']')
}

const jsonHex = "0123456789abcdef"

// appendJSONString writes s as encoding/json writes a string (with
// SetEscapeHTML on, its default): invalid UTF-8 as U+FFFD; ", \, \b, \f,
// \n, \r and \t with a backslash; the other control characters, <, > and &
// as \u00XX; U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', jsonHex[b>>4], jsonHex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', jsonHex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe[b] reports whether ASCII byte b stands for itself in a JSON
// string that encoding/json writes: printable, and not ", \, <, > or &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()
