package viewer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// scanner reads one JSON line without building it: the index pass needs a
// few fields of every line (rollout_id, status, rewards, ...) and must get
// through a file of a million samples in about a second, so it skips the
// rest (prompts, views, token ids) by finding where each value ends. It
// checks the syntax of what it skips well enough to refuse a cut or mangled
// line; what it accepts, the strict decoders (protocol.Sample,
// trajectories.DecodeEpisode) decode again when an episode is opened.
type scanner struct {
	b     []byte
	i     int
	depth int // nesting of the value being skipped
	err   error
}

// maxDepth bounds nesting, as encoding/json does, so that a line of a
// million brackets cannot exhaust the stack.
const maxDepth = 10000

// errSyntax is wrapped by the scanner's errors.
var errSyntax = errors.New("invalid JSON")

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w at byte %d: %s", errSyntax, s.i, fmt.Sprintf(format, args...))
	}
	s.i = len(s.b)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) bool {
	if s.peek() != c {
		s.fail("want %q", c)
		return false
	}
	s.i++
	return true
}

// end reports whether only spaces are left.
func (s *scanner) end() {
	if s.err == nil && s.peek() != 0 {
		s.fail("trailing data")
	}
}

// rawString returns the bytes of the string at the cursor, its quotes
// included, and whether it holds escapes.
func (s *scanner) rawString() ([]byte, bool) {
	if !s.expect('"') {
		return nil, false
	}
	start := s.i - 1
	escaped := false
	for {
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			s.fail("unterminated string")
			return nil, false
		}
		// Control characters, not allowed in a JSON string, are left to
		// the strict decoders: checking every byte here would double the
		// cost of the index pass.
		if !escaped && bytes.IndexByte(s.b[s.i:s.i+j], '\\') >= 0 {
			escaped = true
		}
		s.i += j + 1
		// The quote ends the string unless an odd number of backslashes
		// precede it.
		n := 0
		for k := s.i - 2; k > start && s.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return s.b[start:s.i], escaped
		}
	}
}

// str returns the decoded string at the cursor.
func (s *scanner) str() string {
	raw, escaped := s.rawString()
	if s.err != nil {
		return ""
	}
	if !escaped {
		return string(raw[1 : len(raw)-1])
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		s.fail("bad string: %v", err)
	}
	return out
}

// key reads an object key and its colon; it returns the key's bytes,
// decoded only when it holds escapes.
func (s *scanner) key() []byte {
	raw, escaped := s.rawString()
	if s.err != nil {
		return nil
	}
	k := raw[1 : len(raw)-1]
	if escaped {
		var out string
		if err := json.Unmarshal(raw, &out); err != nil {
			s.fail("bad key: %v", err)
			return nil
		}
		k = []byte(out)
	}
	s.expect(':')
	return k
}

// object calls fn for every key of the object at the cursor; fn must
// consume the value. A null is an empty object.
func (s *scanner) object(fn func(key []byte)) {
	if s.null() {
		return
	}
	if !s.expect('{') {
		return
	}
	if s.peek() == '}' {
		s.i++
		return
	}
	for s.err == nil {
		k := s.key()
		if s.err != nil {
			return
		}
		fn(k)
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return
		default:
			s.fail("want , or } in object")
		}
	}
}

// array calls fn for every element of the array at the cursor; fn must
// consume it. A null is an empty array.
func (s *scanner) array(fn func(i int)) {
	if s.null() {
		return
	}
	if !s.expect('[') {
		return
	}
	if s.peek() == ']' {
		s.i++
		return
	}
	for n := 0; s.err == nil; n++ {
		fn(n)
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return
		default:
			s.fail("want , or ] in array")
		}
	}
}

// null consumes a null and reports whether there was one.
func (s *scanner) null() bool {
	if s.peek() == 'n' && bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

func (s *scanner) literal(word string) {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		s.fail("bad literal")
		return
	}
	s.i += len(word)
}

// rawNumber returns the bytes of the number at the cursor.
func (s *scanner) rawNumber() []byte {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.i++
			continue
		}
		break
	}
	if s.i == start {
		s.fail("want a number")
		return nil
	}
	return s.b[start:s.i]
}

// float reads a number, or one of the strings "NaN", "+Inf", "-Inf" that
// troupe writes for the numbers JSON cannot hold; null is 0 and not ok.
func (s *scanner) float() (v float64, ok bool) {
	switch s.peek() {
	case 'n':
		s.literal("null")
		return 0, false
	case '"':
		switch str := s.str(); str {
		case "NaN":
			return math.NaN(), true
		case "+Inf":
			return math.Inf(1), true
		case "-Inf":
			return math.Inf(-1), true
		default:
			s.fail("want a number, got the string %q", str)
			return 0, false
		}
	}
	raw := s.rawNumber()
	if s.err != nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || !validNumber(raw) {
		s.fail("bad number %q", raw)
		return 0, false
	}
	return f, true
}

// validNumber checks JSON's number grammar, which ParseFloat is looser
// than (it takes "+1", "1.", ".5", "0x1p3", "Inf").
func validNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i == len(b)
}

// int reads an integer as encoding/json reads one into an int64: no
// fraction, no exponent. null is 0.
func (s *scanner) int() int64 {
	if s.null() {
		return 0
	}
	raw := s.rawNumber()
	if s.err != nil {
		return 0
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || !validNumber(raw) {
		s.fail("want an integer, got %q", raw)
	}
	return v
}

// uint reads an unsigned integer (a seed). null is 0.
func (s *scanner) uint() uint64 {
	if s.null() {
		return 0
	}
	raw := s.rawNumber()
	if s.err != nil {
		return 0
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || !validNumber(raw) {
		s.fail("want an unsigned integer, got %q", raw)
	}
	return v
}

// bool reads true or false; null is false.
func (s *scanner) bool() bool {
	switch s.peek() {
	case 't':
		s.literal("true")
		return true
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.fail("want a boolean")
	}
	return false
}

// skip consumes one value of any kind.
func (s *scanner) skip() {
	switch s.peek() {
	case '"':
		s.rawString()
	case '{', '[':
		if s.depth++; s.depth > maxDepth {
			s.fail("nested deeper than %d", maxDepth)
			return
		}
		if s.b[s.i] == '{' {
			s.object(func([]byte) { s.skip() })
		} else {
			s.array(func(int) { s.skip() })
		}
		s.depth--
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	case 0:
		s.fail("unexpected end of line")
	default:
		raw := s.rawNumber()
		if s.err == nil && !validNumber(raw) {
			s.fail("bad number %q", raw)
		}
	}
}
