// Package jsonscan reads JSON from a byte slice in one pass without
// building it: the readers that must get through hundreds of megabytes a
// second (troupe check, the viewer's index, the LLM answer scanner) take
// the few fields they need and skip the rest by finding where each value
// ends. It checks the syntax of everything it reads or skips.
//
// A Scanner's failure is sticky: the first one is kept, with the byte at
// which it happened, and moves the cursor to the end so that every later
// read fails at once; callers check Failed once, after the value. Nothing
// allocates but the message of a failure.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// DefaultMaxDepth bounds nesting, as encoding/json does, so that a line of
// a million brackets cannot exhaust the stack.
const DefaultMaxDepth = 10000

// Keys says what Object does with a key that holds escapes.
type Keys uint8

const (
	// KeysFail fails the scan: the caller leaves such a line to a strict
	// decoder.
	KeysFail Keys = iota
	// KeysRaw passes the key's bytes undecoded: the keys the caller looks
	// for have no escapes.
	KeysRaw
	// KeysDecode decodes the key (it allocates).
	KeysDecode
)

// Scanner reads the JSON in B from I. The zero value, with B set, reads
// strictly with DefaultMaxDepth.
type Scanner struct {
	B []byte
	I int

	// MaxDepth bounds the nesting of objects and arrays; 0 is
	// DefaultMaxDepth.
	MaxDepth int
	// Keys is what Object does with escaped keys.
	Keys Keys
	// Lax strings are not checked for control characters and bad
	// escapes: checking every byte costs the viewer's index half its
	// speed, and the strict decoders check them when a line is opened.
	Lax bool
	// FloatRange makes Skip refuse a number out of a float64's range, as
	// encoding/json does when it decodes one into an any.
	FloatRange bool

	depth  int
	failed bool
	at     int
	why    string
}

// Fail records why the scan failed, unless it already has, and ends it.
func (s *Scanner) Fail(why string) {
	if !s.failed {
		s.failed, s.at, s.why = true, s.I, why
	}
	s.I = len(s.B)
}

// Failed reports whether the scan failed.
func (s *Scanner) Failed() bool { return s.failed }

// Why returns the first failure and the byte it happened at; "" when the
// scan has not failed.
func (s *Scanner) Why() (why string, at int) { return s.why, s.at }

// Space skips white space.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\r', '\n':
			s.I++
		default:
			return
		}
	}
}

// Peek returns the next byte that is not space, 0 at the end.
func (s *Scanner) Peek() byte {
	s.Space()
	if s.I >= len(s.B) {
		return 0
	}
	return s.B[s.I]
}

// Expect consumes c, the next byte that is not space, or fails.
func (s *Scanner) Expect(c byte) bool {
	if s.Peek() != c {
		s.want(c)
		return false
	}
	s.I++
	return true
}

// want fails for want of c; apart from Expect, which stays small enough
// to inline.
func (s *Scanner) want(c byte) { s.Fail(fmt.Sprintf("want %q", c)) }

// End fails unless only space is left.
func (s *Scanner) End() {
	if s.Space(); !s.failed && s.I < len(s.B) { // not Peek: a NUL byte is data
		s.Fail("trailing data")
	}
}

// Null consumes a null and reports whether there was one; anything else
// is left where it is.
func (s *Scanner) Null() bool {
	if s.Peek() == 'n' && len(s.B)-s.I >= 4 && string(s.B[s.I:s.I+4]) == "null" {
		s.I += 4
		return true
	}
	return false
}

// Literal consumes word or fails.
func (s *Scanner) Literal(word string) {
	s.Space()
	if !bytes.HasPrefix(s.B[s.I:], []byte(word)) {
		s.Fail("bad literal")
		return
	}
	s.I += len(word)
}

// Bool reads true, false or null (false).
func (s *Scanner) Bool() bool {
	switch s.Peek() {
	case 't':
		s.Literal("true")
		return true
	case 'f':
		s.Literal("false")
	case 'n':
		s.Literal("null")
	default:
		s.Fail("want a boolean")
	}
	return false
}

// stop marks the bytes a strict string's fast loop stops at: the closing
// quote, a backslash and the control characters JSON forbids in strings.
var stop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// String reads the string at the cursor and returns its bytes between the
// quotes, undecoded, and whether it holds escapes.
func (s *Scanner) String() ([]byte, bool) {
	if s.Space(); s.I >= len(s.B) || s.B[s.I] != '"' { // Expect, inlined
		s.want('"')
		return nil, false
	}
	s.I++
	if s.Lax {
		return s.laxString()
	}
	b, start, i := s.B, s.I, s.I
	escaped := false
	for {
		// Eight bytes a turn while none stops the loop.
		for i+8 <= len(b) && !stop[b[i]] && !stop[b[i+1]] && !stop[b[i+2]] && !stop[b[i+3]] &&
			!stop[b[i+4]] && !stop[b[i+5]] && !stop[b[i+6]] && !stop[b[i+7]] {
			i += 8
		}
		for i < len(b) && !stop[b[i]] {
			i++
		}
		if i >= len(b) {
			s.Fail("unterminated string")
			return nil, false
		}
		switch c := b[i]; {
		case c == '"':
			s.I = i + 1
			return b[start:i], escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				s.Fail("unterminated string")
				return nil, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					s.I = i
					s.Fail("bad escape in a string")
					return nil, false
				}
				i += 6
			default:
				s.I = i
				s.Fail("bad escape in a string")
				return nil, false
			}
		default:
			s.I = i
			s.Fail("control character in a string")
			return nil, false
		}
	}
}

// laxString finds the closing quote with bytes.IndexByte: a quote closes
// the string unless an odd number of backslashes precede it.
func (s *Scanner) laxString() ([]byte, bool) {
	start := s.I
	escaped := false
	for {
		j := bytes.IndexByte(s.B[s.I:], '"')
		if j < 0 {
			s.Fail("unterminated string")
			return nil, false
		}
		if !escaped && bytes.IndexByte(s.B[s.I:s.I+j], '\\') >= 0 {
			escaped = true
		}
		s.I += j + 1
		n := 0
		for k := s.I - 2; k >= start && s.B[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return s.B[start : s.I-1], escaped
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Quoted returns the string just read by String, its quotes included:
// what encoding/json decodes.
func (s *Scanner) Quoted(str []byte) []byte {
	return s.B[s.I-len(str)-2 : s.I]
}

// key reads an object key and its colon.
func (s *Scanner) key() []byte {
	k, escaped := s.String()
	if s.failed {
		return nil
	}
	if escaped {
		switch s.Keys {
		case KeysFail:
			s.Fail("escaped key")
			return nil
		case KeysDecode:
			var out string
			if err := json.Unmarshal(s.Quoted(k), &out); err != nil {
				s.Fail(fmt.Sprintf("bad key: %v", err))
				return nil
			}
			k = []byte(out)
		}
	}
	s.Expect(':')
	return k
}

// nest counts one more level of nesting, or fails.
func (s *Scanner) nest() bool {
	limit := s.MaxDepth
	if limit == 0 {
		limit = DefaultMaxDepth
	}
	if s.depth++; s.depth > limit {
		s.Fail(fmt.Sprintf("nested deeper than %d", limit))
		return false
	}
	return true
}

// Object calls fn for every key of the object at the cursor; fn must
// consume the value. (Depth is not restored after a failure: the scan is
// over.)
func (s *Scanner) Object(fn func(key []byte)) {
	if !s.Expect('{') || !s.nest() {
		return
	}
	if s.Peek() == '}' {
		s.I++
		s.depth--
		return
	}
	for !s.failed {
		k := s.key()
		if s.failed {
			return
		}
		fn(k)
		switch s.Peek() {
		case ',':
			s.I++
		case '}':
			s.I++
			s.depth--
			return
		default:
			s.Fail("want , or } in object")
		}
	}
}

// Array calls fn for every element of the array at the cursor, with its
// position; fn must consume it.
func (s *Scanner) Array(fn func(i int)) {
	if !s.Expect('[') || !s.nest() {
		return
	}
	if s.Peek() == ']' {
		s.I++
		s.depth--
		return
	}
	for n := 0; !s.failed; n++ {
		fn(n)
		switch s.Peek() {
		case ',':
			s.I++
		case ']':
			s.I++
			s.depth--
			return
		default:
			s.Fail("want , or ] in array")
		}
	}
}

// numeric marks the bytes numbers are made of.
var numeric = func() (t [256]bool) {
	for _, c := range []byte("0123456789+-.eE") {
		t[c] = true
	}
	return t
}()

// Number reads a number and returns its bytes, and whether it has a
// fraction or an exponent. A run of the bytes numbers are made of that is
// not a number of JSON's grammar (which strconv is looser than: it takes
// "+1", "1.", ".5", "01") fails the scan.
func (s *Scanner) Number() ([]byte, bool) {
	s.Space()
	b, start, i := s.B, s.I, s.I
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
		return s.badNumber(start)
	}
	frac := false
	if i < len(b) && b[i] == '.' {
		frac = true
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.badNumber(start)
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		frac = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return s.badNumber(start)
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && numeric[b[i]] {
		return s.badNumber(start)
	}
	s.I = i
	return b[start:i], frac
}

// badNumber fails the number at start, naming the run of numeric bytes
// there.
func (s *Scanner) badNumber(start int) ([]byte, bool) {
	end := start
	for end < len(s.B) && numeric[s.B[end]] {
		end++
	}
	if end == start {
		s.Fail("want a number")
	} else {
		s.Fail(fmt.Sprintf("bad number %q", s.B[start:end]))
	}
	return nil, false
}

// Int reads a number and, when it has neither a fraction nor an
// exponent (frac), returns its value as encoding/json parses one into an
// int64 and whether it fits (ok). It does not fail the scan for either.
func (s *Scanner) Int() (v int64, frac, ok bool) {
	raw, frac := s.Number()
	switch {
	case s.failed || frac:
		return 0, frac, false
	case len(raw) >= 19:
		v, err := strconv.ParseInt(string(raw), 10, 64)
		return v, false, err == nil
	case raw[0] == '-':
		return -short(raw[1:]), false, true
	}
	return short(raw), false, true
}

// short parses fewer than 19 digits, which always fit: in the caller, the
// hot path of token id arrays.
func short(digits []byte) (v int64) {
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	return v
}

// Uint reads a number as encoding/json parses one into a uint64, and
// reports whether it is one; it does not fail the scan if not.
func (s *Scanner) Uint() (uint64, bool) {
	raw, frac := s.Number()
	switch {
	case s.failed || frac || raw[0] == '-':
		return 0, false
	case len(raw) < 20: // fits: seeds are mostly 19 or 20 digits
		var v uint64
		for _, c := range raw {
			v = v*10 + uint64(c-'0')
		}
		return v, true
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	return v, err == nil
}

// Float reads a number as encoding/json parses one into a float64: one out
// of its range fails the scan.
func (s *Scanner) Float() float64 {
	raw, frac := s.Number()
	switch {
	case s.failed:
		return 0
	case !frac && len(raw) < 19 && raw[0] == '-': // exact in an int64
		return -float64(short(raw[1:])) // -0 included
	case !frac && len(raw) < 19:
		return float64(short(raw))
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		s.Fail(fmt.Sprintf("bad number %q", raw))
	}
	return f
}

// InFloatRange reports whether a number that Number returned fits a
// float64: without an exponent, and short, it always does.
func InFloatRange(raw []byte) bool {
	if len(raw) <= 300 {
		exp := false
		for _, c := range raw { // not bytes.IndexAny, which builds a set each call
			exp = exp || c == 'e' || c == 'E'
		}
		if !exp {
			return true
		}
	}
	_, err := strconv.ParseFloat(string(raw), 64)
	return err == nil
}

// Skip consumes one value of any kind.
func (s *Scanner) Skip() {
	switch s.Peek() {
	case '"':
		s.String()
	case '{':
		s.Object(func([]byte) { s.Skip() })
	case '[':
		s.Array(func(int) { s.Skip() })
	case 't':
		s.Literal("true")
	case 'f':
		s.Literal("false")
	case 'n':
		s.Literal("null")
	case 0:
		s.Fail("unexpected end")
	default:
		raw, _ := s.Number()
		if s.FloatRange && !s.failed && !InFloatRange(raw) {
			s.Fail(fmt.Sprintf("number out of range %q", raw))
		}
	}
}
