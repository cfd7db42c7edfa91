package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/internal/strcmp"
)

// AppendJSON appends s as one JSON object, with no trailing newline, and
// returns the extended buffer. The key order is fixed and map keys are
// sorted, so equal samples encode to equal bytes. It allocates nothing beyond
// growing dst unless Metadata.Extra is set.
//
// Non-finite floats cannot be represented in JSON; they are written as null.
// Validate rejects them before they get here in troupe's own pipeline.
func (s *Sample) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"group_index":`...)
	dst = strconv.AppendInt(dst, s.GroupIndex, 10)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, s.Index, 10)
	return s.AppendJSONAfterIndex(append(dst, ','))
}

// AppendJSONAfterIndex appends the part of AppendJSON's encoding that follows
// `{"group_index":G,"index":I,`. It lets a writer encode a sample before its
// index is known (on a worker goroutine) and prepend the index later.
func (s *Sample) AppendJSONAfterIndex(dst []byte) []byte {
	return s.appendAfterIndex(dst, nil)
}

// Encoder is AppendJSONAfterIndex with a memory: it remembers the last
// prompt text, role and state, the last rollout id and rewards, a few agent
// scores, and two stretches of fields that are the same for every sample
// of an episode (from the status to the episode index, and from the
// allocator to the end), and copies their encoded bytes when the next
// sample has the same values (the samples of an episode mostly do),
// instead of escaping the strings or formatting the numbers again; a
// string's bytes from its second sample in a row on. The bytes are those
// AppendJSONAfterIndex writes. The zero value is ready; an Encoder is not
// safe for concurrent use.
type Encoder struct {
	strs   [nStrSlots]strMemo
	floats [nFloatSlots]floatMemo
	// rolloutID holds the rollout id in its bits.
	rolloutID floatMemo
	head      headMemo
	tail      tailMemo
	// scores remembers agent scores, by a hash of their bits: a game with
	// few outcomes (El Farol's nights) gives its agents few distinct ones.
	scores [nScoreSlots]floatMemo
}

// headMemo is the encoding of a status and of the metadata's scenario,
// seed and episode (appendHead).
type headMemo struct {
	status, scenario string
	seed             uint64
	episode          int64
	enc              []byte
	ok               bool
}

// tailMemo is the encoding of the metadata's allocator, text_only and end
// (appendTail).
type tailMemo struct {
	allocator, end string
	textOnly       bool
	enc            []byte
	ok             bool
}

const nScoreSlots = 16

// scoreSlot is the slot of scores that f's bits map to.
func scoreSlot(bits uint64) int { return int((bits * 0x9e3779b97f4a7c15) >> 60) }

// AppendAfterIndex is s.AppendJSONAfterIndex(dst), through e's memory.
func (e *Encoder) AppendAfterIndex(dst []byte, s *Sample) []byte {
	return s.appendAfterIndex(dst, e)
}

// The fields an Encoder remembers, one slot each.
const (
	slotPrompt = iota
	slotRole
	slotState
	nStrSlots
)

const (
	slotReward = iota
	slotTeamReward
	slotRawReward
	nFloatSlots
)

// strMemo is a slot's string: the latest one written (the zero value
// stands for ""), and its encoding once it came twice in a row (ok). The
// encoding is kept only for a string that repeats: a prompt of a board
// game is new at every turn, and copying each one aside cost more than
// encoding it again.
type strMemo struct {
	s   string
	enc []byte
	ok  bool // enc is s's encoding
}

// floatMemo is a number's encoding, by the number's bits.
type floatMemo struct {
	bits uint64
	enc  []byte
	ok   bool
}

// str appends s as a JSON string, remembered in slot. Comparing s with the
// remembered string costs a pointer comparison when they share their bytes,
// as the strings of one episode's samples do.
func (e *Encoder) str(dst []byte, slot int, s string) []byte {
	if e == nil {
		return appendString(dst, s)
	}
	m := &e.strs[slot]
	if !strcmp.Equal(m.s, s) {
		m.s, m.ok = s, false
		return appendString(dst, s)
	}
	// The caller's copy from now on: the samples after it share its
	// bytes (an episode's prompt, say, made anew each episode), which
	// compare by address.
	m.s = s
	if m.ok {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = appendString(dst, s)
	m.enc, m.ok = append(m.enc[:0], dst[start:]...), true
	return dst
}

// float appends f as appendFloat does, remembered in slot.
func (e *Encoder) float(dst []byte, slot int, f float64) []byte {
	if e == nil {
		return appendFloat(dst, f)
	}
	m := &e.floats[slot]
	if bits := math.Float64bits(f); m.ok && m.bits == bits {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = appendFloat(dst, f)
	m.bits, m.enc, m.ok = math.Float64bits(f), append(m.enc[:0], dst[start:]...), true
	return dst
}

// rollout appends the rollout id v in decimal, remembered.
func (e *Encoder) rollout(dst []byte, v int64) []byte {
	if e == nil {
		return appendInt(dst, v)
	}
	m := &e.rolloutID
	if m.ok && m.bits == uint64(v) {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = appendInt(dst, v)
	m.bits, m.enc, m.ok = uint64(v), append(m.enc[:0], dst[start:]...), true
	return dst
}

// appendHead writes a sample's status and its metadata up to the episode
// index: `"completed","metadata":{"scenario":"elfarol","seed":1,"episode":0`.
func appendHead(dst []byte, status Status, m *Metadata) []byte {
	dst = appendString(dst, string(status))
	dst = append(dst, `,"metadata":{"scenario":`...)
	dst = appendString(dst, m.Scenario)
	dst = append(dst, `,"seed":`...)
	dst = strconv.AppendUint(dst, m.Seed, 10)
	dst = append(dst, `,"episode":`...)
	return appendInt(dst, m.Episode)
}

// headOf appends appendHead's bytes, remembered.
func (e *Encoder) headOf(dst []byte, status Status, m *Metadata) []byte {
	if e == nil {
		return appendHead(dst, status, m)
	}
	h := &e.head
	if h.ok && h.seed == m.Seed && h.episode == m.Episode && strcmp.Equal(h.status, string(status)) && strcmp.Equal(h.scenario, m.Scenario) {
		h.status, h.scenario = string(status), m.Scenario // compared by address next, as in str
		return append(dst, h.enc...)
	}
	start := len(dst)
	dst = appendHead(dst, status, m)
	h.status, h.scenario, h.seed, h.episode = string(status), m.Scenario, m.Seed, m.Episode
	h.enc, h.ok = append(h.enc[:0], dst[start:]...), true
	return dst
}

// appendTail writes the metadata's allocator, text_only and end:
// `,"allocator":"team","text_only":true,"end":"terminated"`.
func appendTail(dst []byte, m *Metadata) []byte {
	dst = append(dst, `,"allocator":`...)
	dst = appendString(dst, m.Allocator)
	if m.TextOnly {
		dst = append(dst, `,"text_only":true,"end":`...)
	} else {
		dst = append(dst, `,"text_only":false,"end":`...)
	}
	return appendString(dst, m.End)
}

// tailOf appends appendTail's bytes, remembered.
func (e *Encoder) tailOf(dst []byte, m *Metadata) []byte {
	if e == nil {
		return appendTail(dst, m)
	}
	t := &e.tail
	if t.ok && t.textOnly == m.TextOnly && strcmp.Equal(t.allocator, m.Allocator) && strcmp.Equal(t.end, m.End) {
		t.allocator, t.end = m.Allocator, m.End // compared by address next, as in str
		return append(dst, t.enc...)
	}
	start := len(dst)
	dst = appendTail(dst, m)
	t.allocator, t.end, t.textOnly = m.Allocator, m.End, m.TextOnly
	t.enc, t.ok = append(t.enc[:0], dst[start:]...), true
	return dst
}

// score appends an agent score as appendFloat does, remembered in scores.
func (e *Encoder) score(dst []byte, f float64) []byte {
	if e == nil {
		return appendFloat(dst, f)
	}
	bits := math.Float64bits(f)
	m := &e.scores[scoreSlot(bits)]
	if m.ok && m.bits == bits {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = appendFloat(dst, f)
	m.bits, m.enc, m.ok = bits, append(m.enc[:0], dst[start:]...), true
	return dst
}

func (s *Sample) appendAfterIndex(dst []byte, e *Encoder) []byte {
	dst = append(dst, `"rollout_id":`...)
	dst = e.rollout(dst, s.RolloutID)
	dst = append(dst, `,"prompt":`...)
	if s.Prompt.Messages != nil {
		dst = append(dst, '[')
		for i, m := range s.Prompt.Messages {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":`...)
			dst = appendString(dst, m.Role)
			dst = append(dst, `,"content":`...)
			dst = appendString(dst, m.Content)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	} else {
		dst = e.str(dst, slotPrompt, s.Prompt.Text)
	}
	// The keys and the values that are constants are appended in runs,
	// a run per append: a text-only sample's tokens, label, loss mask
	// and log-probs are all empty, and an append of a short constant
	// costs about what encoding a short string does.
	if len(s.Tokens) == 0 {
		dst = append(dst, `,"tokens":[],"response":`...)
	} else {
		dst = append(dst, `,"tokens":[`...)
		for i, t := range s.Tokens {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(t), 10)
		}
		dst = append(dst, `],"response":`...)
	}
	dst = appendString(dst, s.Response)
	dst = append(dst, `,"response_length":`...)
	dst = appendInt(dst, int64(s.ResponseLength))
	if s.Label.IsNull() {
		dst = append(dst, `,"label":null,"reward":`...)
	} else {
		dst = append(dst, `,"label":`...)
		dst = append(dst, s.Label.raw...)
		dst = append(dst, `,"reward":`...)
	}
	switch s.Reward.Kind {
	case RewardScalar:
		dst = e.float(dst, slotReward, s.Reward.Value)
	case RewardDict:
		dst = append(dst, '{')
		for i, k := range slices.Sorted(maps.Keys(s.Reward.Dict)) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendFloat(dst, s.Reward.Dict[k])
		}
		dst = append(dst, '}')
	default:
		dst = append(dst, "null"...)
	}
	if s.LossMask == nil && s.RolloutLogProbs == nil && !s.RemoveSample {
		dst = append(dst, `,"loss_mask":null,"rollout_log_probs":null,"remove_sample":false,"status":`...)
	} else {
		dst = append(dst, `,"loss_mask":`...)
		if s.LossMask == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for i, m := range s.LossMask {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendInt(dst, int64(m), 10)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"rollout_log_probs":`...)
		if s.RolloutLogProbs == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for i, lp := range s.RolloutLogProbs {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendFloat(dst, lp)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, `,"remove_sample":`...)
		dst = strconv.AppendBool(dst, s.RemoveSample)
		dst = append(dst, `,"status":`...)
	}
	dst = e.headOf(dst, s.Status, &s.Metadata)
	dst = s.Metadata.appendJSON(dst, &s.Reward, e)
	return append(dst, '}')
}

// rawReward is the metadata's raw_reward: the scalar the sample is
// trained on. slime logs metadata.raw_reward (and computes pass@k from it)
// in place of its own raw reward, so it must be the trained value, not the
// team reward (which has its own key). A dict reward has no single trained
// value until slime's --reward-key picks one, so it is not written; the
// slime adapter writes it from the key.
func rawReward(r *Reward) (float64, bool) {
	if r.Kind == RewardScalar {
		return r.Value, true
	}
	return 0, false
}

// appendJSON writes the metadata after its episode index (appendHead
// wrote what comes before), to its closing brace.
func (m *Metadata) appendJSON(dst []byte, reward *Reward, e *Encoder) []byte {
	dst = append(dst, `,"agent":`...)
	dst = appendString(dst, m.Agent)
	dst = append(dst, `,"role":`...)
	dst = e.str(dst, slotRole, m.Role)
	dst = append(dst, `,"turn":`...)
	dst = appendInt(dst, int64(m.Turn))
	dst = append(dst, `,"step":`...)
	dst = appendInt(dst, int64(m.Step))
	dst = append(dst, `,"state":`...)
	dst = e.str(dst, slotState, m.State)
	if m.Team != "" {
		dst = append(dst, `,"team":`...)
		dst = appendString(dst, m.Team)
	}
	dst = append(dst, `,"team_reward":`...)
	dst = e.float(dst, slotTeamReward, m.TeamReward)
	if raw, ok := rawReward(reward); ok {
		dst = append(dst, `,"raw_reward":`...)
		dst = e.float(dst, slotRawReward, raw)
	}
	if m.AgentScore != nil {
		dst = append(dst, `,"agent_score":`...)
		dst = e.score(dst, *m.AgentScore)
	}
	dst = e.tailOf(dst, m)
	if m.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendString(dst, m.Error)
	}
	if m.Action != "" {
		dst = append(dst, `,"action":`...)
		dst = appendString(dst, m.Action)
	}
	if len(m.Extra) == 0 {
		return append(dst, '}')
	}
	for _, k := range slices.Sorted(maps.Keys(m.Extra)) {
		if slices.Contains(metadataKeys, k) {
			continue // Validate reports it; never write a key twice
		}
		dst = append(dst, ',')
		dst = appendString(dst, k)
		dst = append(dst, ':')
		v, err := json.Marshal(m.Extra[k])
		if err != nil {
			v = appendString(nil, "unencodable: "+err.Error())
		}
		dst = append(dst, v...)
	}
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with AppendJSON's encoding.
func (s Sample) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil), nil }

// ErrDecode is wrapped by every error UnmarshalJSON returns.
var ErrDecode = errors.New("decode sample")

// sampleWire is the decoding shape of a Sample: the keys troupe writes, with
// the polymorphic ones (prompt, reward, metadata) kept raw.
type sampleWire struct {
	GroupIndex      *int64          `json:"group_index"`
	Index           *int64          `json:"index"`
	RolloutID       *int64          `json:"rollout_id"`
	Prompt          json.RawMessage `json:"prompt"`
	Tokens          []int           `json:"tokens"`
	Response        string          `json:"response"`
	ResponseLength  int             `json:"response_length"`
	Label           json.RawMessage `json:"label"`
	Reward          json.RawMessage `json:"reward"`
	LossMask        []int           `json:"loss_mask"`
	RolloutLogProbs []float64       `json:"rollout_log_probs"`
	RemoveSample    bool            `json:"remove_sample"`
	Status          *Status         `json:"status"`
	Metadata        json.RawMessage `json:"metadata"`
}

// UnmarshalJSON decodes one slime sample object. rollout_id and status are
// required (troupe always writes them); group_index and index default to 0.
// Keys slime has but troupe does not model are ignored.
func (s *Sample) UnmarshalJSON(data []byte) error {
	var w sampleWire
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if w.RolloutID == nil {
		return fmt.Errorf("%w: rollout_id is missing or null", ErrDecode)
	}
	if w.Status == nil {
		return fmt.Errorf("%w: status is missing", ErrDecode)
	}
	if !w.Status.Valid() {
		return fmt.Errorf("%w: status %q is not a slime status", ErrDecode, *w.Status)
	}
	out := Sample{
		RolloutID:       *w.RolloutID,
		Tokens:          w.Tokens,
		Response:        w.Response,
		ResponseLength:  w.ResponseLength,
		LossMask:        w.LossMask,
		RolloutLogProbs: w.RolloutLogProbs,
		RemoveSample:    w.RemoveSample,
		Status:          *w.Status,
	}
	if len(out.Tokens) == 0 {
		out.Tokens = nil // a text-only sample's nil Tokens encodes as []; decode it back to nil
	}
	if w.GroupIndex != nil {
		out.GroupIndex = *w.GroupIndex
	}
	if w.Index != nil {
		out.Index = *w.Index
	}
	if !isNull(w.Label) {
		l, err := RawLabel(w.Label)
		if err != nil {
			return wrapField("label", err)
		}
		out.Label = l
	}
	if err := out.Prompt.decode(w.Prompt); err != nil {
		return err
	}
	if err := out.Reward.decode(w.Reward); err != nil {
		return err
	}
	if err := out.Metadata.decode(w.Metadata); err != nil {
		return err
	}
	*s = out
	return nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func (p *Prompt) decode(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case isNull(raw):
		return nil
	case raw[0] == '"':
		return wrapField("prompt", json.Unmarshal(raw, &p.Text))
	case raw[0] == '[':
		msgs := []ChatMessage{}
		if err := json.Unmarshal(raw, &msgs); err != nil {
			return wrapField("prompt", err)
		}
		p.Messages = msgs
		return nil
	}
	return fmt.Errorf("%w: prompt must be a string or a list of {role, content}", ErrDecode)
}

func (r *Reward) decode(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case isNull(raw):
		*r = Reward{}
		return nil
	case raw[0] == '{':
		d := map[string]float64{}
		if err := json.Unmarshal(raw, &d); err != nil {
			return wrapField("reward", err)
		}
		*r = Reward{Kind: RewardDict, Dict: d}
		return nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return wrapField("reward", err)
	}
	*r = Scalar(v)
	return nil
}

func (m *Metadata) decode(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return wrapField("metadata", err)
	}
	take := func(key string, dst any) error {
		v, ok := fields[key]
		if !ok {
			return nil
		}
		delete(fields, key)
		if isNull(v) {
			return nil
		}
		return wrapField("metadata."+key, json.Unmarshal(v, dst))
	}
	var score *float64
	var raw_ float64
	for _, f := range []struct {
		key string
		dst any
	}{
		{"scenario", &m.Scenario}, {"seed", &m.Seed}, {"episode", &m.Episode},
		{"agent", &m.Agent}, {"role", &m.Role}, {"turn", &m.Turn}, {"step", &m.Step},
		{"state", &m.State}, {"team", &m.Team}, {"team_reward", &m.TeamReward}, {"raw_reward", &raw_},
		{"agent_score", &score}, {"allocator", &m.Allocator}, {"text_only", &m.TextOnly},
		{"end", &m.End}, {"error", &m.Error}, {"action", &m.Action},
	} {
		if err := take(f.key, f.dst); err != nil {
			return err
		}
	}
	m.AgentScore = score
	if len(fields) > 0 {
		m.Extra = make(map[string]any, len(fields))
		for k, v := range fields {
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				return wrapField("metadata."+k, err)
			}
			m.Extra[k] = x
		}
	}
	return nil
}

func wrapField(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrDecode, field, err)
}

// appendFloat writes f as a JSON number the way encoding/json does (shortest
// representation that round-trips; exponent form outside [1e-6, 1e21)).
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendInt is strconv.AppendInt in base 10, inlined for the one-digit
// numbers (a turn, a step, a short response's length) most samples hold.
func appendInt(dst []byte, v int64) []byte {
	if uint64(v) < 10 {
		return append(dst, byte('0'+v))
	}
	return appendInt10(dst, v)
}

// appendInt10 is strconv.AppendInt in base 10: a call of its own, which
// keeps appendInt within the inliner's budget.
//
//go:noinline
func appendInt10(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

// needsLook returns, for the eight bytes of x (a word read from a string,
// the first in the low byte), the top bit of each byte that a JSON string
// cannot hold as it is: 0x80 and above (x's own top bit), below 0x20 (the
// subtraction wraps), '"' or '\\' (zero after the XOR, which the
// subtraction of one wraps). The other tests may set the top bit of a
// byte of 0x80 and above, which its own already sets. The lowest set bit is
// exact: the subtractions borrow only upward, and only out of a byte that
// needs a look, so a bit can be set falsely only above one.
func needsLook(x uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	q, b := x^'"'*ones, x^'\\'*ones
	return (x | (x - 0x20*ones) | (q - ones) | (b - ones)) & tops
}

// word8 returns the eight bytes of s at i, the first in the low byte: one
// load, which the compiler makes of the eight.
func word8(s string, i int) uint64 {
	w := s[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// appendString writes s as a JSON string. Invalid UTF-8 becomes U+FFFD, so
// the output is always valid JSON and valid UTF-8.
//
// It writes into dst's spare capacity, grown first for a stretch of s at
// a time (escapeStretch bytes, or fewer where the spare room holds at
// least minStretch, whose output is at most six bytes each, and a word
// more), so that nothing in the loop calls append or memmove: a
// word of s is stored whole before it is looked at, and the bytes from
// the first one that needs a look (needsLook's lowest bit) on are written
// again. Prompts are mostly plain ASCII with a newline every few dozen
// bytes; a byte-by-byte loop was a fifth of the CPU time of writing
// tic-tac-toe's samples, and copying the plain runs between escapes (a
// memmove call each) half of what was left.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	i := 0
	for i < len(s) {
		end := min(len(s), i+escapeStretch)
		if room := 6*(end-i) + 8; cap(dst)-len(dst) < room {
			// A shorter stretch when the spare room holds a fair one: a
			// buffer sized for s and a little more (a token path's
			// 20 KB prompt, presized) is then filled, not grown for six
			// times the stretch it will almost never need.
			if fit := (cap(dst) - len(dst) - 8) / 6; fit >= minStretch {
				end = i + fit
			} else {
				dst = slices.Grow(dst, room)
			}
		}
		out, j := dst[:cap(dst)], len(dst)
		for i < end {
			if i+8 <= len(s) {
				w := word8(s, i)
				binary.LittleEndian.PutUint64(out[j:], w)
				m := needsLook(w)
				if m == 0 {
					i, j = i+8, j+8
					continue
				}
				k := bits.TrailingZeros64(m) >> 3
				i, j = i+k, j+k
			}
			c := s[i]
			if c < utf8.RuneSelf {
				i++
				if c >= 0x20 && c != '"' && c != '\\' {
					out[j] = c
					j++
					continue
				}
				out[j] = '\\'
				switch c {
				case '"', '\\':
					out[j+1] = c
				case '\n':
					out[j+1] = 'n'
				case '\r':
					out[j+1] = 'r'
				case '\t':
					out[j+1] = 't'
				default:
					j += copy(out[j+1:], "u00") + 1
					out[j], out[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
				}
				j += 2
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				j += copy(out[j:], `\ufffd`)
			case r == '\u2028' || r == '\u2029':
				// Valid JSON, but they break JavaScript's line parsing.
				j += copy(out[j:], `\u202`)
				out[j] = hexDigits[r&0xf]
				j++
			default:
				j += copy(out[j:], s[i:i+size])
			}
			i += size
		}
		dst = out[:j]
	}
	return append(dst, '"')
}

// escapeStretch is how many bytes of a string appendString escapes into
// the room it grew at once: a long string does not make it reserve six
// times its length.
const escapeStretch = 4096

// minStretch is the shortest stretch appendString escapes into the spare
// room it has rather than grow dst: a word, so that the stretches shrink
// toward the end of a presized buffer (a sixth of the room each) until
// less than 56 bytes are left, and the 64 bytes of slack the token path's
// bodies leave hold a plain string whole.
const minStretch = 8
