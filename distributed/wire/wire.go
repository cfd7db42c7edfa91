// Package wire encodes a finished episode's record for transport between
// processes: a worker that played it and a collector that allocates its
// credit, projects its samples (trajectories.Samples) and writes it out.
//
// The encoding is binary, so that Decode(Encode(rec)) is the same record
// and projects to the same samples, byte for byte, and so that a collector
// decodes an episode in a fraction of what a JSON decoder takes:
//
//   - a magic byte (0xB7, which no JSON text starts with) and the version,
//     as an unsigned varint;
//   - integers as varints (zig-zag for those that may be negative), seeds
//     as unsigned varints, floats as their 8 IEEE-754 bytes (NaN, ±Inf and
//     -0 travel as they are);
//   - strings as a length and their bytes: invalid UTF-8 travels exactly,
//     and the collector's output replaces it as a local run's does;
//   - a slice or map as its length plus one, 0 for nil, so that nil and
//     empty stay apart; a pointer as a presence byte;
//   - a turn's notes as the JSON of each value; a value whose JSON does
//     not survive a decode into an interface value unchanged (a struct's
//     field order, an integer beyond 2^53) comes back as json.RawMessage
//     holding the exact bytes it encoded to, so that the collector writes
//     the same output; a value that does not encode arrives as the string
//     the sample encoding writes for it.
//
// A tree-sampled episode's tree and candidates (Record.Tree, Candidates)
// travel with it, but not the candidates' continuations
// (episode.Candidate.Fork): the allocators that credit a candidate from
// its continuation refuse such an episode (trajectories.ErrNoFork).
// Record.Replay is a function and never travels: the collector rebuilds
// it.
package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Version is the encoding's version, written after the magic byte. Decode
// rejects others. Versions 1 to 3 were JSON: version 1 carried the samples
// beside a record without the turns' prompts, tokens and notes; version 2
// had no state-machine transitions; version 4 had no panic stack
// (Record.Stack); version 5 had no teams (Record.Teams, Seat.Team,
// Score.Teams); version 6 had no tree (Record.Tree, Candidates).
const Version = 7

// magic opens every encoding: a byte no JSON text starts with, so that a
// message of the JSON versions is told apart.
const magic = 0xB7

// ErrDecode is wrapped by every error Decode returns.
var ErrDecode = errors.New("decode episode")

// Encode appends rec's encoding to dst and returns the extended buffer. The
// encoding is deterministic: equal records encode to equal bytes.
func Encode(dst []byte, ep *episode.Record) []byte {
	e := encoder{b: dst}
	e.b = append(e.b, magic)
	e.uvarint(Version)
	e.str(ep.Scenario)
	if e.count(ep.Params == nil, len(ep.Params)) {
		for _, k := range slices.Sorted(maps.Keys(ep.Params)) {
			e.str(k)
			e.str(ep.Params[k])
		}
	}
	e.uvarint(ep.Seed)
	e.uvarint(ep.PolicySeed)
	e.varint(ep.Index)
	e.varint(ep.RolloutID)
	e.varint(ep.GroupIndex)
	e.str(string(ep.Status))
	e.str(ep.End)
	e.str(ep.Err)
	e.str(ep.Stack)
	e.varint(int64(ep.Steps))
	e.str(ep.Label)
	e.strs(ep.Teams)
	if e.count(ep.Seats == nil, len(ep.Seats)) {
		for _, s := range ep.Seats {
			e.str(s.ID)
			e.str(s.Role)
			e.varint(int64(s.Team))
		}
	}
	if e.count(ep.Turns == nil, len(ep.Turns)) {
		for i := range ep.Turns {
			e.turn(&ep.Turns[i])
		}
	}
	if e.count(ep.Messages == nil, len(ep.Messages)) {
		for i := range ep.Messages {
			m := &ep.Messages[i]
			e.str(m.From)
			e.str(string(m.To))
			e.str(m.Kind)
			e.str(m.Payload)
			e.varint(int64(m.Time))
			e.varint(int64(m.Seq))
			e.flag(m.Quiet)
			e.ints(m.Recipients)
		}
	}
	if e.count(ep.Transitions == nil, len(ep.Transitions)) {
		for i := range ep.Transitions {
			tr := &ep.Transitions[i]
			e.varint(int64(tr.Step))
			e.varint(int64(tr.Seat))
			e.str(string(tr.Event))
			e.str(string(tr.From))
			e.str(string(tr.To))
		}
	}
	e.float(ep.Score.Team)
	e.floats(ep.Score.Teams)
	e.floats(ep.Score.Agents)
	e.flag(ep.Tree != nil)
	if t := ep.Tree; t != nil {
		e.varint(int64(t.K))
		e.float(t.Alpha)
		e.flag(t.Joint)
		e.strs(t.Roles)
	}
	if e.count(ep.Candidates == nil, len(ep.Candidates)) {
		for i := range ep.Candidates {
			e.candidate(&ep.Candidates[i])
		}
	}
	return e.b
}

func (e *encoder) candidate(c *episode.Candidate) {
	e.varint(int64(c.Turn))
	e.varint(int64(c.Index))
	e.uvarint(c.Seed)
	e.str(c.Action)
	e.str(c.Invalid)
	e.flag(c.Generation != nil)
	if g := c.Generation; g != nil {
		e.str(g.Completion)
		e.generation(g)
	}
	e.notes(c.Notes)
	e.float(c.Team)
	e.float(c.Local)
	e.float(c.Reward)
	e.flag(c.Chosen)
}

// Prompt kinds: none, a plain string, a chat.
const (
	promptNone byte = iota
	promptText
	promptChat
)

func (e *encoder) turn(a *episode.Turn) {
	e.varint(int64(a.Step))
	e.varint(int64(a.Seat))
	e.varint(int64(a.Turn))
	e.str(string(a.State))
	e.uvarint(a.Seed)
	e.str(a.View)
	e.strs(a.Legal)
	e.ints(a.Inbox)
	g := a.Generated()
	e.str(a.Action)
	e.str(g.Completion)
	e.str(a.Invalid)
	e.flag(a.Emit)
	e.generation(&g)
	e.notes(a.Notes)
}

// generation encodes g's prompt and tokens (its completion is the
// caller's).
func (e *encoder) generation(g *agents.Generation) {
	switch {
	case g.Prompt == nil:
		e.b = append(e.b, promptNone)
	case g.Prompt.Messages == nil:
		e.b = append(e.b, promptText)
		e.str(g.Prompt.Text)
	default:
		e.b = append(e.b, promptChat)
		e.uvarint(uint64(len(g.Prompt.Messages)))
		for _, m := range g.Prompt.Messages {
			e.str(m.Role)
			e.str(m.Content)
		}
	}
	e.flag(g.Tokens != nil)
	if tk := g.Tokens; tk != nil {
		e.ints(tk.Prompt)
		e.ints(tk.Response)
		e.floats(tk.LogProbs)
		e.ints(tk.LossMask)
	}
}

// notes encodes a turn's or candidate's notes, each value as its JSON.
func (e *encoder) notes(notes map[string]any) {
	if e.count(notes == nil, len(notes)) {
		for _, k := range slices.Sorted(maps.Keys(notes)) {
			e.str(k)
			v, err := json.Marshal(notes[k])
			if err != nil {
				// As the sample encoding writes it.
				v = protocol.AppendString(nil, "unencodable: "+err.Error())
			}
			e.uvarint(uint64(len(v)))
			e.b = append(e.b, v...)
		}
	}
}

// encoder appends the encoding's items to b.
type encoder struct{ b []byte }

func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }

func (e *encoder) flag(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) float(f float64) { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(f)) }

// count writes a slice's or map's length plus one, 0 for nil, and reports
// whether its elements follow.
func (e *encoder) count(isNil bool, n int) bool {
	if isNil {
		e.uvarint(0)
		return false
	}
	e.uvarint(uint64(n) + 1)
	return true
}

func (e *encoder) strs(v []string) {
	if e.count(v == nil, len(v)) {
		for _, s := range v {
			e.str(s)
		}
	}
}

func (e *encoder) ints(v []int) {
	if e.count(v == nil, len(v)) {
		for _, x := range v {
			e.varint(int64(x))
		}
	}
}

func (e *encoder) floats(v []float64) {
	if e.count(v == nil, len(v)) {
		for _, x := range v {
			e.float(x)
		}
	}
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
	if len(data) > 0 && data[0] == '{' {
		return nil, fmt.Errorf("%w: a JSON record (wire version 3 or older, from an older troupe); this build reads binary version %d", ErrDecode, Version)
	}
	if len(data) == 0 || data[0] != magic {
		return nil, fmt.Errorf("%w: not an episode record (no magic byte)", ErrDecode)
	}
	d := decoder{b: data, off: 1}
	if v := d.uvarint(); d.err == nil && v != Version {
		return nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrDecode, v, Version)
	}
	ep := &episode.Record{}
	d.identity(ep)
	d.seats(ep)
	if n, ok := d.count(12); ok {
		ep.Turns = make([]episode.Turn, n)
		for i := range ep.Turns {
			d.turn(&ep.Turns[i], i)
		}
	}
	d.messages(ep)
	d.transitions(ep)
	d.score(ep)
	if d.flag() {
		ep.Tree = &episode.Tree{K: d.intn(), Alpha: d.float(), Joint: d.flag(), Roles: d.shorts()}
	}
	d.candidates(ep)
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d bytes after the record", len(d.b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	if ep.Status != "" && !ep.Status.Valid() {
		return nil, fmt.Errorf("%w: status %q is not a slime status", ErrDecode, ep.Status)
	}
	return ep, nil
}

// identity reads a record's fields from its scenario to its teams.
func (d *decoder) identity(ep *episode.Record) {
	ep.Scenario = d.str()
	if n, ok := d.count(2); ok {
		ep.Params = make(map[string]string, n)
		for range n {
			k := d.str()
			if _, dup := ep.Params[k]; dup && d.err == nil {
				d.fail("parameter %q twice", k)
			}
			ep.Params[k] = d.str()
		}
	}
	ep.Seed, ep.PolicySeed = d.uvarint(), d.uvarint()
	ep.Index, ep.RolloutID, ep.GroupIndex = d.varint(), d.varint(), d.varint()
	ep.Status, ep.End, ep.Err, ep.Stack = protocol.Status(d.str()), d.str(), d.str(), d.str()
	ep.Steps = d.intn()
	ep.Label = d.str()
	ep.Teams = d.shorts()
}

// seats reads a record's seats, refusing one on a team it does not have.
func (d *decoder) seats(ep *episode.Record) {
	if n, ok := d.count(3); ok {
		ep.Seats = make([]episode.Seat, n)
		for i := range ep.Seats {
			ep.Seats[i] = episode.Seat{ID: d.short(), Role: d.short(), Team: d.intn()}
			if t := ep.Seats[i].Team; d.err == nil && (t < 0 || t >= ep.TeamCount()) {
				d.fail("seat %d is on team %d of %d", i, t, ep.TeamCount())
			}
		}
	}
}

// messages reads a record's messages.
func (d *decoder) messages(ep *episode.Record) {
	if n, ok := d.count(8); ok {
		ep.Messages = make([]episode.Message, n)
		for i := range ep.Messages {
			m := &ep.Messages[i]
			m.From, m.To, m.Kind, m.Payload = d.short(), protocol.Address(d.short()), d.short(), d.str()
			m.Time, m.Seq = d.intn(), d.intn()
			m.Quiet = d.flag()
			m.Recipients = d.ints()
		}
	}
}

// transitions reads a record's transitions, refusing one of a seat it
// does not have.
func (d *decoder) transitions(ep *episode.Record) {
	if n, ok := d.count(5); ok {
		ep.Transitions = make([]episode.Transition, n)
		for i := range ep.Transitions {
			tr := &ep.Transitions[i]
			tr.Step, tr.Seat = d.intn(), d.intn()
			tr.Event, tr.From, tr.To = agents.Event(d.short()), agents.State(d.short()), agents.State(d.short())
			if d.err == nil && (tr.Seat < 0 || tr.Seat >= len(ep.Seats)) {
				d.fail("transition %d names seat %d of %d", i, tr.Seat, len(ep.Seats))
			}
		}
	}
}

// score reads a record's score, refusing team rewards that are not one
// per team.
func (d *decoder) score(ep *episode.Record) {
	ep.Score.Team = d.float()
	ep.Score.Teams = d.floats()
	if d.err == nil && ep.Score.Teams != nil && len(ep.Score.Teams) != len(ep.Teams) {
		d.fail("%d team rewards for %d teams", len(ep.Score.Teams), len(ep.Teams))
	}
	ep.Score.Agents = d.floats()
}

// candidates reads a tree-sampled record's candidates, refusing one of a
// turn the record does not have, and candidates without a tree.
func (d *decoder) candidates(ep *episode.Record) {
	if n, ok := d.count(16); ok {
		ep.Candidates = make([]episode.Candidate, n)
		for i := range ep.Candidates {
			c := &ep.Candidates[i]
			d.candidate(c, i)
			if d.err == nil && (c.Turn < 0 || c.Turn >= len(ep.Turns)) {
				d.fail("candidate %d is of turn %d of %d", i, c.Turn, len(ep.Turns))
			}
		}
		if d.err == nil && ep.Tree == nil && n > 0 {
			d.fail("%d candidates without a tree", n)
		}
	}
}

func (d *decoder) turn(t *episode.Turn, i int) {
	t.Step, t.Seat, t.Turn = d.intn(), d.intn(), d.intn()
	t.State = agents.State(d.short())
	t.Seed = d.uvarint()
	t.View = d.str()
	t.Legal = d.shorts()
	t.Inbox = d.ints()
	var g agents.Generation
	t.Action, g.Completion, t.Invalid = d.short(), d.str(), d.str()
	t.Emit = d.flag()
	d.generation(&g, "turn", i)
	t.SetGeneration(&g)
	t.Notes = d.notes("turn", i)
}

func (d *decoder) candidate(c *episode.Candidate, i int) {
	c.Turn, c.Index = d.intn(), d.intn()
	c.Seed = d.uvarint()
	c.Action, c.Invalid = d.short(), d.str()
	if d.flag() {
		c.Generation = &agents.Generation{Completion: d.str()}
		d.generation(c.Generation, "candidate", i)
	}
	c.Notes = d.notes("candidate", i)
	c.Team, c.Local, c.Reward = d.float(), d.float(), d.float()
	c.Chosen = d.flag()
}

// generation decodes g's prompt and tokens into g, for item i of what.
func (d *decoder) generation(g *agents.Generation, what string, i int) {
	switch kind := d.readByte(); kind {
	case promptNone:
	case promptText:
		g.Prompt = &protocol.Prompt{Text: d.str()}
	case promptChat:
		n := d.uvarint()
		if d.err != nil {
			break // n is no count: allocate nothing for it
		}
		if n > uint64(d.left()/2) {
			d.fail("%s %d: a chat of %d messages in %d bytes", what, i, n, d.left())
			break
		}
		g.Prompt = &protocol.Prompt{Messages: make([]protocol.ChatMessage, n)}
		for j := range g.Prompt.Messages {
			g.Prompt.Messages[j] = protocol.ChatMessage{Role: d.short(), Content: d.str()}
		}
	default:
		if d.err == nil {
			d.fail("%s %d: prompt kind %d", what, i, kind)
		}
	}
	if d.flag() {
		g.Tokens = &agents.Tokens{Prompt: d.ints(), Response: d.ints(), LogProbs: d.floats(), LossMask: d.ints()}
	}
}

// notes decodes the notes of item i of what.
func (d *decoder) notes(what string, i int) map[string]any {
	n, ok := d.count(2)
	if !ok {
		return nil
	}
	raw := make(map[string]json.RawMessage, n)
	for range n {
		k := d.str()
		v := d.bytes()
		if _, dup := raw[k]; dup && d.err == nil {
			d.fail("%s %d: note %q twice", what, i, k)
		}
		raw[k] = v
	}
	if d.err != nil {
		return nil
	}
	notes, err := decodeNotes(raw)
	if err != nil {
		d.err = fmt.Errorf("%s %d: %w", what, i, err)
	}
	return notes
}

// decoder reads the encoding's items from b at off. The first error sticks:
// every later read returns a zero value, so that Decode checks once.
type decoder struct {
	b   []byte
	off int
	err error
	// names interns the short strings that repeat through an episode
	// (states, events, roles, legal actions), one allocation each.
	names map[string]string
}

func (d *decoder) fail(format string, args ...any) {
	d.err = fmt.Errorf("%w: %s", ErrDecode, fmt.Sprintf(format, args...))
}

func (d *decoder) left() int { return len(d.b) - d.off }

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("a cut or overlong number at byte %d", d.off)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("a cut or overlong number at byte %d", d.off)
		return 0
	}
	d.off += n
	return v
}

// intn reads an int that must fit this platform's int.
func (d *decoder) intn() int {
	v := d.varint()
	if int64(int(v)) != v && d.err == nil {
		d.fail("%d at byte %d does not fit an int", v, d.off)
	}
	return int(v)
}

func (d *decoder) readByte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("cut at byte %d", d.off)
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

func (d *decoder) flag() bool {
	switch b := d.readByte(); b {
	case 0:
		return false
	case 1:
		return true
	default:
		if d.err == nil {
			d.fail("byte %d at %d is not a bool", b, d.off-1)
		}
		return false
	}
}

// bytes reads a length and that many bytes, which it returns in place.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(d.left()) {
		d.fail("a string of %d bytes at byte %d, %d left", n, d.off, d.left())
		return nil
	}
	b := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// short reads a string that is likely to repeat, interned.
func (d *decoder) short() string {
	b := d.bytes()
	if len(b) == 0 || len(b) > 32 {
		return string(b)
	}
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	if d.names == nil {
		d.names = map[string]string{}
	}
	s := string(b)
	d.names[s] = s
	return s
}

func (d *decoder) float() float64 {
	if d.err != nil {
		return 0
	}
	if d.left() < 8 {
		d.fail("a cut float at byte %d", d.off)
		return 0
	}
	d.off += 8
	return math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off-8:]))
}

// count reads a slice's or map's length plus one: ok is false for nil. Each
// element takes at least min bytes, so a count the rest cannot hold is an
// error, not an allocation.
func (d *decoder) count(min int) (n int, ok bool) {
	c := d.uvarint()
	if d.err != nil || c == 0 {
		return 0, false
	}
	if c-1 > uint64(d.left()/min) {
		d.fail("%d items at byte %d, %d bytes left", c-1, d.off, d.left())
		return 0, false
	}
	return int(c - 1), true
}

// shorts decodes a list of short, repeating strings (legal actions,
// roles).
func (d *decoder) shorts() []string {
	n, ok := d.count(1)
	if !ok {
		return nil
	}
	v := make([]string, n)
	for j := range v {
		v[j] = d.short()
	}
	return v
}

func (d *decoder) ints() []int {
	n, ok := d.count(1)
	if !ok {
		return nil
	}
	v := make([]int, n)
	for i := range v {
		v[i] = d.intn()
	}
	return v
}

func (d *decoder) floats() []float64 {
	n, ok := d.count(8)
	if !ok {
		return nil
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = d.float()
	}
	return v
}
