package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
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

// Encoder is AppendJSONAfterIndex with a memory: it remembers how it
// encoded the last prompt text, scenario, role, state, allocator and end
// strings, the last seed and rewards, and a few agent scores, and copies
// those bytes when the next
// sample has the same value (the samples of an episode mostly do), instead
// of escaping the string or formatting the float again. The bytes are
// those AppendJSONAfterIndex writes. The zero value is ready; an Encoder
// is not safe for concurrent use.
type Encoder struct {
	strs   [nStrSlots]strMemo
	floats [nFloatSlots]floatMemo
	seed   floatMemo // bits holds the seed
	// scores remembers agent scores, by a hash of their bits: a game with
	// few outcomes (El Farol's nights) gives its agents few distinct ones.
	scores [nScoreSlots]floatMemo
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
	slotScenario
	slotRole
	slotState
	slotAllocator
	slotEnd
	nStrSlots
)

const (
	slotReward = iota
	slotTeamReward
	slotRawReward
	nFloatSlots
)

type strMemo struct {
	s   string
	enc []byte
	ok  bool
}

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
	if m.ok && m.s == s {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = appendString(dst, s)
	m.s, m.enc, m.ok = s, append(m.enc[:0], dst[start:]...), true
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

// uint appends the seed v in decimal, remembered.
func (e *Encoder) uint(dst []byte, v uint64) []byte {
	if e == nil {
		return strconv.AppendUint(dst, v, 10)
	}
	m := &e.seed
	if m.ok && m.bits == v {
		return append(dst, m.enc...)
	}
	start := len(dst)
	dst = strconv.AppendUint(dst, v, 10)
	m.bits, m.enc, m.ok = v, append(m.enc[:0], dst[start:]...), true
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
	dst = strconv.AppendInt(dst, s.RolloutID, 10)
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
	dst = append(dst, `,"tokens":[`...)
	for i, t := range s.Tokens {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(t), 10)
	}
	dst = append(dst, `],"response":`...)
	dst = appendString(dst, s.Response)
	dst = append(dst, `,"response_length":`...)
	dst = strconv.AppendInt(dst, int64(s.ResponseLength), 10)
	dst = append(dst, `,"label":`...)
	if s.Label.IsNull() {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, s.Label.raw...)
	}
	dst = append(dst, `,"reward":`...)
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
	dst = appendString(dst, string(s.Status))
	dst = append(dst, `,"metadata":`...)
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

func (m *Metadata) appendJSON(dst []byte, reward *Reward, e *Encoder) []byte {
	dst = append(dst, `{"scenario":`...)
	dst = e.str(dst, slotScenario, m.Scenario)
	dst = append(dst, `,"seed":`...)
	dst = e.uint(dst, m.Seed)
	dst = append(dst, `,"episode":`...)
	dst = strconv.AppendInt(dst, m.Episode, 10)
	dst = append(dst, `,"agent":`...)
	dst = appendString(dst, m.Agent)
	dst = append(dst, `,"role":`...)
	dst = e.str(dst, slotRole, m.Role)
	dst = append(dst, `,"turn":`...)
	dst = strconv.AppendInt(dst, int64(m.Turn), 10)
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, int64(m.Step), 10)
	dst = append(dst, `,"state":`...)
	dst = e.str(dst, slotState, m.State)
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
	dst = append(dst, `,"allocator":`...)
	dst = e.str(dst, slotAllocator, m.Allocator)
	dst = append(dst, `,"text_only":`...)
	dst = strconv.AppendBool(dst, m.TextOnly)
	dst = append(dst, `,"end":`...)
	dst = e.str(dst, slotEnd, m.End)
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
		{"state", &m.State}, {"team_reward", &m.TeamReward}, {"raw_reward", &raw_},
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

// plain8 reports whether the eight bytes of x, a word read from a string,
// are all printable ASCII other than '"' and '\\': bytes a JSON string
// holds as they are. Each test is a word-wide one that sets top bits where
// it finds a byte, and sets some if and only if the word holds one: a byte
// below 0x20, equal to '"' or to '\\' (zero after an XOR), or 0x80 and
// above.
func plain8(x uint64) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	q, b := x^'"'*ones, x^'\\'*ones
	return ((x-0x20*ones)&^x|(q-ones)&^q|(b-ones)&^b|x)&tops == 0
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
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a second look: prompts
		// are mostly plain ASCII, and a byte-by-byte test was a fifth of
		// the CPU time of writing tic-tac-toe's samples.
		for i+8 <= len(s) && plain8(word8(s, i)) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
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
		// U+2028 and U+2029 are valid JSON but break JavaScript line parsing.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
