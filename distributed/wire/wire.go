// Package wire encodes a finished episode's record for transport between
// processes: a worker that played it and a collector that allocates its
// credit, projects its samples (trajectories.Samples) and writes it out.
//
// The encoding is one JSON object holding the whole record, so that
// Decode(Encode(rec)) is the same record and projects to the same samples,
// byte for byte. What JSON cannot carry as it is travels exactly all the
// same:
//
//   - floats (scores, log-probs) are written as the shortest number that
//     round-trips, and NaN, ±Inf as the strings "NaN", "+Inf", "-Inf";
//   - a turn's notes travel as the JSON of each value; a value whose JSON
//     does not survive a decode into an interface value unchanged (a
//     struct's field order, an integer beyond 2^53) comes back as
//     json.RawMessage holding the exact bytes it encoded to, so that the
//     collector writes the same output; a value that does not encode
//     arrives as the string the sample encoding writes for it;
//   - strings that are not valid UTF-8 in the replay fields (actions,
//     messages, seats, parameters, error): they are written empty and
//     travel base64-encoded in "raw_strings", so that a counterfactual
//     replay on the collector feeds the game the very bytes the policy
//     answered.
//
// Other strings that are not valid UTF-8 (views, prompts, notes) arrive
// with U+FFFD in place of the bad bytes, exactly as troupe's JSONL output
// writes them. Record.Replay is a function and never travels: the collector
// rebuilds it.
package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Version is the encoding's version, written as "v". Decode rejects others.
// Version 1 carried the samples beside a record without the turns'
// prompts, tokens and notes; version 2 had no state-machine transitions.
const Version = 3

// ErrDecode is wrapped by every error Decode returns.
var ErrDecode = errors.New("decode episode")

// Encode appends rec's encoding to dst and returns the extended buffer. The
// encoding is deterministic: equal records encode to equal bytes.
func Encode(dst []byte, ep *episode.Record) []byte {
	var raws []rawString
	// str appends s as a JSON string; a string that is not valid UTF-8 is
	// written empty, its bytes noted in raws.
	str := func(dst []byte, s, field string, at int, key string) []byte {
		if utf8.ValidString(s) {
			return protocol.AppendString(dst, s)
		}
		raws = append(raws, rawString{Field: field, At: at, Key: key, B64: base64.StdEncoding.EncodeToString([]byte(s))})
		return append(dst, `""`...)
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, Version, 10)
	dst = append(dst, `,"scenario":`...)
	dst = str(dst, ep.Scenario, rawScenario, 0, "")
	dst = append(dst, `,"params":`...)
	if ep.Params == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '{')
		for i, k := range slices.Sorted(maps.Keys(ep.Params)) {
			if i > 0 {
				dst = append(dst, ',')
			}
			// A key that is not valid UTF-8 cannot be a declared
			// parameter's name; it arrives with U+FFFD in its bad bytes.
			dst = protocol.AppendString(dst, k)
			dst = append(dst, ':')
			dst = str(dst, ep.Params[k], rawParam, 0, k)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"seed":`...)
	dst = strconv.AppendUint(dst, ep.Seed, 10)
	dst = append(dst, `,"policy_seed":`...)
	dst = strconv.AppendUint(dst, ep.PolicySeed, 10)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, ep.Index, 10)
	dst = append(dst, `,"rollout_id":`...)
	dst = strconv.AppendInt(dst, ep.RolloutID, 10)
	dst = append(dst, `,"group_index":`...)
	dst = strconv.AppendInt(dst, ep.GroupIndex, 10)
	dst = append(dst, `,"status":`...)
	dst = str(dst, string(ep.Status), rawStatus, 0, "")
	dst = append(dst, `,"end":`...)
	dst = str(dst, ep.End, rawEnd, 0, "")
	dst = append(dst, `,"err":`...)
	dst = str(dst, ep.Err, rawErr, 0, "")
	dst = append(dst, `,"steps":`...)
	dst = strconv.AppendInt(dst, int64(ep.Steps), 10)
	if ep.Label != "" {
		dst = append(dst, `,"label":`...)
		dst = protocol.AppendString(dst, ep.Label)
	}

	dst = append(dst, `,"seats":`...)
	if ep.Seats == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, s := range ep.Seats {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = str(dst, s.ID, rawSeatID, i, "")
			dst = append(dst, `,"role":`...)
			dst = str(dst, s.Role, rawSeatRole, i, "")
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}

	// The turns travel with what replay needs (exactly) and what the record
	// says of them.
	dst = append(dst, `,"actions":`...)
	if ep.Turns == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range ep.Turns {
			a := &ep.Turns[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"step":`...)
			dst = strconv.AppendInt(dst, int64(a.Step), 10)
			dst = append(dst, `,"agent":`...)
			dst = strconv.AppendInt(dst, int64(a.Seat), 10)
			dst = append(dst, `,"turn":`...)
			dst = strconv.AppendInt(dst, int64(a.Turn), 10)
			dst = append(dst, `,"action":`...)
			dst = str(dst, a.Action, rawAction, i, "")
			dst = appendTurn(dst, a)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}

	dst = append(dst, `,"messages":`...)
	if ep.Messages == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range ep.Messages {
			m := &ep.Messages[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"from":`...)
			dst = str(dst, m.From, rawFrom, i, "")
			dst = append(dst, `,"to":`...)
			dst = str(dst, string(m.To), rawTo, i, "")
			dst = append(dst, `,"kind":`...)
			dst = str(dst, m.Kind, rawKind, i, "")
			dst = append(dst, `,"payload":`...)
			dst = str(dst, m.Payload, rawPayload, i, "")
			dst = append(dst, `,"time":`...)
			dst = strconv.AppendInt(dst, int64(m.Time), 10)
			dst = append(dst, `,"seq":`...)
			dst = strconv.AppendInt(dst, int64(m.Seq), 10)
			if m.Quiet {
				dst = append(dst, `,"quiet":true`...)
			}
			if m.Recipients != nil {
				dst = append(dst, `,"recipients":[`...)
				for j, r := range m.Recipients {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = strconv.AppendInt(dst, int64(r), 10)
				}
				dst = append(dst, ']')
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}

	dst = append(dst, `,"transitions":`...)
	if ep.Transitions == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range ep.Transitions {
			tr := &ep.Transitions[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"step":`...)
			dst = strconv.AppendInt(dst, int64(tr.Step), 10)
			dst = append(dst, `,"seat":`...)
			dst = strconv.AppendInt(dst, int64(tr.Seat), 10)
			dst = append(dst, `,"event":`...)
			dst = protocol.AppendString(dst, string(tr.Event))
			dst = append(dst, `,"from":`...)
			dst = protocol.AppendString(dst, string(tr.From))
			dst = append(dst, `,"to":`...)
			dst = protocol.AppendString(dst, string(tr.To))
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}

	dst = append(dst, `,"score":{"team":`...)
	dst = appendFloat(dst, ep.Score.Team)
	dst = append(dst, `,"agents":`...)
	if ep.Score.Agents == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, v := range ep.Score.Agents {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendFloat(dst, v)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, '}')

	if len(raws) > 0 {
		dst = append(dst, `,"raw_strings":`...)
		b, err := json.Marshal(raws)
		if err != nil {
			panic(fmt.Sprintf("wire: encoding raw strings: %v", err)) // strings and ints
		}
		dst = append(dst, b...)
	}
	return append(dst, '}')
}

// appendTurn appends the fields of turn a after its action: the record's
// view of the turn. Its strings are written as the JSONL output writes them
// (invalid UTF-8 becomes U+FFFD): unlike the action, the game never reads
// them back.
func appendTurn(dst []byte, a *episode.Turn) []byte {
	if a.State != "" {
		dst = append(dst, `,"state":`...)
		dst = protocol.AppendString(dst, string(a.State))
	}
	dst = append(dst, `,"seed":`...)
	dst = strconv.AppendUint(dst, a.Seed, 10)
	if a.View != "" {
		dst = append(dst, `,"view":`...)
		dst = protocol.AppendString(dst, a.View)
	}
	if a.Legal != nil {
		dst = append(dst, `,"legal":[`...)
		for j, l := range a.Legal {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = protocol.AppendString(dst, l)
		}
		dst = append(dst, ']')
	}
	if a.Inbox != nil {
		dst = append(dst, `,"inbox":[`...)
		for j, k := range a.Inbox {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(k), 10)
		}
		dst = append(dst, ']')
	}
	if a.Completion != "" {
		dst = append(dst, `,"completion":`...)
		dst = protocol.AppendString(dst, a.Completion)
	}
	if a.Invalid != "" {
		dst = append(dst, `,"invalid":`...)
		dst = protocol.AppendString(dst, a.Invalid)
	}
	if a.Emit {
		dst = append(dst, `,"emit":true`...)
	}
	if a.Prompt != nil {
		dst = append(dst, `,"prompt":`...)
		if a.Prompt.Messages == nil {
			dst = protocol.AppendString(dst, a.Prompt.Text)
		} else {
			dst = append(dst, '[')
			for j, m := range a.Prompt.Messages {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"role":`...)
				dst = protocol.AppendString(dst, m.Role)
				dst = append(dst, `,"content":`...)
				dst = protocol.AppendString(dst, m.Content)
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
		}
	}
	if tk := a.Tokens; tk != nil {
		dst = append(dst, `,"tokens":{"prompt":`...)
		dst = appendInts(dst, tk.Prompt)
		dst = append(dst, `,"response":`...)
		dst = appendInts(dst, tk.Response)
		dst = append(dst, `,"log_probs":`...)
		if tk.LogProbs == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for j, v := range tk.LogProbs {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendFloat(dst, v)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"loss_mask":`...)
		dst = appendInts(dst, tk.LossMask)
		dst = append(dst, '}')
	}
	if a.Notes != nil {
		dst = append(dst, `,"notes":{`...)
		for j, k := range slices.Sorted(maps.Keys(a.Notes)) {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = protocol.AppendString(dst, k)
			dst = append(dst, ':')
			v, err := json.Marshal(a.Notes[k])
			if err != nil {
				// As the sample encoding writes it.
				v = protocol.AppendString(nil, "unencodable: "+err.Error())
			}
			dst = append(dst, v...)
		}
		dst = append(dst, '}')
	}
	return dst
}

func appendInts(dst []byte, v []int) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for j, x := range v {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return append(dst, ']')
}

// decodeNotes reads a turn's notes: each value as its plain Go value when
// that encodes back to the same JSON, else as the JSON itself.
func decodeNotes(raw map[string]json.RawMessage) (map[string]any, error) {
	if raw == nil {
		return nil, nil
	}
	notes := make(map[string]any, len(raw))
	for k, r := range raw {
		var v any
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, fmt.Errorf("%w: note %q: %w", ErrDecode, k, err)
		}
		again, err := json.Marshal(v)
		if err != nil || !bytes.Equal(again, r) {
			var c bytes.Buffer
			if err := json.Compact(&c, r); err != nil {
				return nil, fmt.Errorf("%w: note %q: %w", ErrDecode, k, err)
			}
			notes[k] = json.RawMessage(c.Bytes())
			continue
		}
		notes[k] = v
	}
	return notes, nil
}

// Decode decodes a record Encode wrote. Replay is nil.
func Decode(data []byte) (*episode.Record, error) {
	var w wireEpisode
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if w.V == nil {
		return nil, fmt.Errorf("%w: no version", ErrDecode)
	}
	if *w.V != Version {
		return nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrDecode, *w.V, Version)
	}
	for _, r := range w.RawStrings {
		if err := r.apply(&w); err != nil {
			return nil, err
		}
	}
	ep := &episode.Record{
		Scenario:   w.Scenario,
		Seed:       w.Seed,
		PolicySeed: w.PolicySeed,
		Index:      w.Index,
		RolloutID:  w.RolloutID,
		GroupIndex: w.GroupIndex,
		Status:     protocol.Status(w.Status),
		End:        w.End,
		Err:        w.Err,
		Steps:      w.Steps,
		Label:      w.Label,
		Score:      episode.Score{Team: float64(w.Score.Team)},
	}
	if ep.Status != "" && !ep.Status.Valid() {
		return nil, fmt.Errorf("%w: status %q is not a slime status", ErrDecode, ep.Status)
	}
	if w.Params != nil {
		ep.Params = w.Params
	}
	if w.Seats != nil {
		ep.Seats = make([]episode.Seat, len(w.Seats))
		for i, s := range w.Seats {
			ep.Seats[i] = episode.Seat{ID: s.ID, Role: s.Role}
		}
	}
	if w.Actions != nil {
		ep.Turns = make([]episode.Turn, len(w.Actions))
		for i, a := range w.Actions {
			t := &ep.Turns[i]
			*t = episode.Turn{
				Step: a.Step, Seat: a.Agent, Turn: a.Turn, Action: a.Action,
				State: agents.State(a.State), Seed: a.Seed, View: a.View, Legal: a.Legal, Inbox: a.Inbox,
				Completion: a.Completion, Invalid: a.Invalid, Emit: a.Emit,
			}
			if p := bytes.TrimSpace(a.Prompt); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
				t.Prompt = &protocol.Prompt{}
				var err error
				if p[0] == '"' {
					err = json.Unmarshal(p, &t.Prompt.Text)
				} else {
					t.Prompt.Messages = []protocol.ChatMessage{}
					err = json.Unmarshal(p, &t.Prompt.Messages)
				}
				if err != nil {
					return nil, fmt.Errorf("%w: prompt of turn %d: %w", ErrDecode, i, err)
				}
			}
			if tk := a.Tokens; tk != nil {
				t.Tokens = &agents.Tokens{Prompt: tk.Prompt, Response: tk.Response, LossMask: tk.LossMask}
				if tk.LogProbs != nil {
					t.Tokens.LogProbs = make([]float64, len(tk.LogProbs))
					for j, v := range tk.LogProbs {
						t.Tokens.LogProbs[j] = float64(v)
					}
				}
			}
			var err error
			if t.Notes, err = decodeNotes(a.Notes); err != nil {
				return nil, err
			}
		}
	}
	if w.Messages != nil {
		ep.Messages = make([]episode.Message, len(w.Messages))
		for i, m := range w.Messages {
			ep.Messages[i] = episode.Message{
				Message:    protocol.Message{From: m.From, To: protocol.Address(m.To), Kind: m.Kind, Payload: m.Payload, Time: m.Time, Seq: m.Seq, Quiet: m.Quiet},
				Recipients: m.Recipients,
			}
		}
	}
	if w.Transitions != nil {
		ep.Transitions = make([]episode.Transition, len(w.Transitions))
		for i, tr := range w.Transitions {
			if tr.Seat < 0 || tr.Seat >= len(ep.Seats) {
				return nil, fmt.Errorf("%w: transition %d names seat %d of %d", ErrDecode, i, tr.Seat, len(ep.Seats))
			}
			ep.Transitions[i] = episode.Transition{Step: tr.Step, Seat: tr.Seat, Event: agents.Event(tr.Event), From: agents.State(tr.From), To: agents.State(tr.To)}
		}
	}
	if w.Score.Agents != nil {
		ep.Score.Agents = make([]float64, len(w.Score.Agents))
		for i, v := range w.Score.Agents {
			ep.Score.Agents[i] = float64(v)
		}
	}
	return ep, nil
}

type wireEpisode struct {
	V          *int              `json:"v"`
	Scenario   string            `json:"scenario"`
	Params     map[string]string `json:"params"`
	Seed       uint64            `json:"seed"`
	PolicySeed uint64            `json:"policy_seed"`
	Index      int64             `json:"index"`
	RolloutID  int64             `json:"rollout_id"`
	GroupIndex int64             `json:"group_index"`
	Status     string            `json:"status"`
	End        string            `json:"end"`
	Err        string            `json:"err"`
	Steps      int               `json:"steps"`
	Label      string            `json:"label"`
	Seats      []struct {
		ID   string `json:"id"`
		Role string `json:"role"`
	} `json:"seats"`
	Actions []struct {
		Step       int             `json:"step"`
		Agent      int             `json:"agent"`
		Turn       int             `json:"turn"`
		Action     string          `json:"action"`
		State      string          `json:"state"`
		Seed       uint64          `json:"seed"`
		View       string          `json:"view"`
		Legal      []string        `json:"legal"`
		Inbox      []int           `json:"inbox"`
		Completion string          `json:"completion"`
		Invalid    string          `json:"invalid"`
		Emit       bool            `json:"emit"`
		Prompt     json.RawMessage `json:"prompt"`
		Tokens     *struct {
			Prompt   []int    `json:"prompt"`
			Response []int    `json:"response"`
			LogProbs []wfloat `json:"log_probs"`
			LossMask []int    `json:"loss_mask"`
		} `json:"tokens"`
		Notes map[string]json.RawMessage `json:"notes"`
	} `json:"actions"`
	Messages []struct {
		From       string `json:"from"`
		To         string `json:"to"`
		Kind       string `json:"kind"`
		Payload    string `json:"payload"`
		Time       int    `json:"time"`
		Seq        int    `json:"seq"`
		Quiet      bool   `json:"quiet"`
		Recipients []int  `json:"recipients"`
	} `json:"messages"`
	Transitions []struct {
		Step  int    `json:"step"`
		Seat  int    `json:"seat"`
		Event string `json:"event"`
		From  string `json:"from"`
		To    string `json:"to"`
	} `json:"transitions"`
	Score struct {
		Team   wfloat   `json:"team"`
		Agents []wfloat `json:"agents"`
	} `json:"score"`
	RawStrings []rawString `json:"raw_strings"`
}

// Fields a raw string can restore.
const (
	rawScenario = "scenario"
	rawParam    = "param" // Params[Key]
	rawStatus   = "status"
	rawEnd      = "end"
	rawErr      = "err"
	rawSeatID   = "seat_id"   // Seats[At].ID
	rawSeatRole = "seat_role" // Seats[At].Role
	rawAction   = "action"    // Actions[At].Action
	rawFrom     = "from"      // Messages[At].From
	rawTo       = "to"        // Messages[At].To
	rawKind     = "kind"      // Messages[At].Kind
	rawPayload  = "payload"   // Messages[At].Payload
)

// rawString restores a string of the episode that is not valid UTF-8,
// which a JSON string cannot carry: it is written empty in its place, and
// its bytes here.
type rawString struct {
	Field string `json:"f"`
	At    int    `json:"i,omitempty"`
	Key   string `json:"k,omitempty"`
	B64   string `json:"b64"`
}

func (r *rawString) apply(w *wireEpisode) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: raw string %s %d: %s", ErrDecode, r.Field, r.At, fmt.Sprintf(format, args...))
	}
	b, err := base64.StdEncoding.DecodeString(r.B64)
	if err != nil {
		return bad("b64: %v", err)
	}
	v := string(b)
	in := func(n int) bool { return r.At >= 0 && r.At < n }
	switch r.Field {
	case rawScenario:
		w.Scenario = v
	case rawParam:
		if _, ok := w.Params[r.Key]; !ok {
			return bad("no parameter %q", r.Key)
		}
		w.Params[r.Key] = v
	case rawStatus:
		w.Status = v
	case rawEnd:
		w.End = v
	case rawErr:
		w.Err = v
	case rawSeatID, rawSeatRole:
		if !in(len(w.Seats)) {
			return bad("the episode has %d seats", len(w.Seats))
		}
		if r.Field == rawSeatID {
			w.Seats[r.At].ID = v
		} else {
			w.Seats[r.At].Role = v
		}
	case rawAction:
		if !in(len(w.Actions)) {
			return bad("the episode has %d actions", len(w.Actions))
		}
		w.Actions[r.At].Action = v
	case rawFrom, rawTo, rawKind, rawPayload:
		if !in(len(w.Messages)) {
			return bad("the episode has %d messages", len(w.Messages))
		}
		m := &w.Messages[r.At]
		switch r.Field {
		case rawFrom:
			m.From = v
		case rawTo:
			m.To = v
		case rawKind:
			m.Kind = v
		default:
			m.Payload = v
		}
	default:
		return bad("unknown field")
	}
	return nil
}

// wfloat is a float64 that travels exactly: finite values as the shortest
// JSON number that round-trips, NaN and infinities as "NaN", "+Inf", "-Inf".
type wfloat float64

func appendFloat(dst []byte, f float64) []byte {
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

func (f wfloat) MarshalJSON() ([]byte, error) { return appendFloat(nil, float64(f)), nil }

func (f *wfloat) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		switch string(data) {
		case `"NaN"`:
			*f = wfloat(math.NaN())
		case `"+Inf"`:
			*f = wfloat(math.Inf(1))
		case `"-Inf"`:
			*f = wfloat(math.Inf(-1))
		default:
			return fmt.Errorf("%s is not a number", data)
		}
		return nil
	}
	// The decoder has checked that data is a JSON number, which
	// ParseFloat reads exactly.
	v, err := strconv.ParseFloat(string(data), 64)
	if err != nil {
		return fmt.Errorf("%s: %w", data, err)
	}
	*f = wfloat(v)
	return nil
}
