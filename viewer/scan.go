package viewer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/troupe-rl/troupe/internal/jsonscan"
)

// scanner reads one JSON line without building it: the index pass needs a
// few fields of every line (rollout_id, status, rewards, ...) and must get
// through a file of a million samples in about a second, so it skips the
// rest (prompts, views, token ids) by finding where each value ends. It
// checks the syntax of what it skips well enough to refuse a cut or mangled
// line, but leaves control characters and bad escapes inside strings
// (jsonscan's Lax strings) to the strict decoders (protocol.Sample,
// trajectories.DecodeEpisode), which decode a line again when its episode
// is opened.
type scanner struct {
	jsonscan.Scanner
	err error // a line that is JSON but not what troupe writes
}

func newScanner(line []byte) scanner {
	return scanner{Scanner: jsonscan.Scanner{B: line, Lax: true, Keys: jsonscan.KeysDecode}}
}

// errSyntax is wrapped by the scanner's syntax errors.
var errSyntax = errors.New("invalid JSON")

func (s *scanner) fail(format string, args ...any) {
	s.Fail(fmt.Sprintf(format, args...))
}

// failWith ends the scan with err, unless it has failed already.
func (s *scanner) failWith(err error) {
	if !s.Failed() {
		s.err = err
	}
	s.Fail(err.Error())
}

// error returns why the scan failed, nil if it has not.
func (s *scanner) error() error {
	if s.err != nil || !s.Failed() {
		return s.err
	}
	why, at := s.Why()
	return fmt.Errorf("%w at byte %d: %s", errSyntax, at, why)
}

// str returns the decoded string at the cursor.
func (s *scanner) str() string {
	raw, escaped := s.String()
	if s.Failed() {
		return ""
	}
	if !escaped {
		return string(raw)
	}
	return s.unquote(raw)
}

// unquote decodes raw, the string just read, which holds escapes.
func (s *scanner) unquote(raw []byte) string {
	var out string
	if err := json.Unmarshal(s.Quoted(raw), &out); err != nil {
		s.fail("bad string: %v", err)
	}
	return out
}

// object calls fn for every key of the object at the cursor; fn must
// consume the value. A null is an empty object.
func (s *scanner) object(fn func(key []byte)) {
	if !s.Null() {
		s.Object(fn)
	}
}

// array calls fn for every element of the array at the cursor; fn must
// consume it. A null is an empty array.
func (s *scanner) array(fn func(i int)) {
	if !s.Null() {
		s.Array(fn)
	}
}

// float reads a number, or one of the strings "NaN", "+Inf", "-Inf" that
// troupe writes for the numbers JSON cannot hold; null is 0 and not ok.
func (s *scanner) float() (v float64, ok bool) {
	switch s.Peek() {
	case 'n':
		s.Literal("null")
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
	f := s.Float()
	return f, !s.Failed()
}

// int reads an integer as encoding/json reads one into an int64: no
// fraction, no exponent. null is 0.
func (s *scanner) int() int64 {
	if s.Null() {
		return 0
	}
	s.Space()
	start := s.I
	v, frac, ok := s.Int()
	if !s.Failed() && (frac || !ok) {
		s.fail("want an integer, got %q", s.B[start:s.I])
	}
	return v
}

// uint reads an unsigned integer (a seed). null is 0.
func (s *scanner) uint() uint64 {
	if s.Null() {
		return 0
	}
	s.Space()
	start := s.I
	v, ok := s.Uint()
	if !s.Failed() && !ok {
		s.fail("want an unsigned integer, got %q", s.B[start:s.I])
	}
	return v
}
