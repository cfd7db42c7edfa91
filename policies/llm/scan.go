package llm

import (
	"fmt"
	"strconv"
)

// answerTokens is what a chat answer says about its tokens, in the fields
// go-openai's structs drop, before the server kind is taken into account.
type answerTokens struct {
	prompt  []int // top level "prompt_token_ids" (vLLM)
	choices int
	choice  choiceTokens // choices[0]
	// spans are the byte ranges of the values troupe reads itself: the id
	// arrays and choice 0's log-probs.
	spans   [][2]int
	scanErr error
}

type choiceTokens struct {
	tokenIDs  []int // "token_ids" (vLLM, SGLang)
	promptIDs []int // "prompt_token_ids" (SGLang)
	logprobs  bool  // "logprobs" is an object with "content"
	entries   []logprobEntry
}

type logprobEntry struct {
	id      int // "id" (llama.cpp)
	hasID   bool
	textID  int // N of a "token_id:N" token text (vLLM)
	hasText bool
	// noText: the token's text is "" (llama.cpp writes a control token,
	// such as the end-of-generation token, so).
	noText  bool
	logprob float64
}

// scanAnswer reads the token fields of a raw chat answer in one pass,
// without reflection: answers carry the prompt's ids, thousands of numbers
// per turn, and encoding/json's reflective decoding of them cost more CPU
// than the rest of a turn together. It checks the JSON syntax of what it
// reads and skips the rest structurally; go-openai validates the whole
// answer anyway.
func scanAnswer(raw []byte) (a answerTokens) {
	s := &scanner{b: raw}
	if s.null() {
		a.scanErr = s.end()
		return a
	}
	a.scanErr = s.object(func(key []byte) error {
		switch string(key) {
		case "prompt_token_ids":
			ids, err := s.intsSpan(&a.spans)
			a.prompt = ids
			return err
		case "choices":
			if s.null() {
				return nil
			}
			return s.array(func(i int) error {
				a.choices++
				if i > 0 {
					return s.skip()
				}
				return s.choice(&a.choice, &a.spans)
			})
		}
		return s.skip()
	})
	if a.scanErr == nil {
		a.scanErr = s.end()
	}
	return a
}

// end checks that nothing but space follows the value read.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.errorf("data after the answer")
	}
	return nil
}

func (s *scanner) choice(c *choiceTokens, spans *[][2]int) error {
	if s.null() {
		return nil
	}
	return s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "token_ids":
			c.tokenIDs, err = s.intsSpan(spans)
		case "prompt_token_ids":
			c.promptIDs, err = s.intsSpan(spans)
		case "logprobs":
			if s.null() {
				return nil
			}
			start := s.i
			defer func() { *spans = append(*spans, [2]int{start, s.i}) }()
			err = s.object(func(key []byte) error {
				if string(key) != "content" {
					return s.skip()
				}
				if s.null() {
					return nil
				}
				c.logprobs = true
				c.entries = c.entries[:0]
				return s.array(func(int) error {
					var e logprobEntry
					if s.null() {
						c.entries = append(c.entries, e)
						return nil
					}
					err := s.object(func(key []byte) error {
						var err error
						switch string(key) {
						case "id":
							if !s.null() {
								e.id, err = s.integer()
								e.hasID = err == nil
							}
						case "token":
							e.textID, e.hasText, e.noText, err = s.tokenText()
						case "logprob":
							e.logprob, err = s.float()
						default:
							err = s.skip()
						}
						return err
					})
					c.entries = append(c.entries, e)
					return err
				})
			})
		default:
			err = s.skip()
		}
		return err
	})
}

// scanner is a minimal JSON reader over a byte slice.
type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth bounds the nesting the scanner follows, as encoding/json does,
// so that a hostile answer cannot exhaust the stack.
const maxDepth = 10000

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("byte %d: %s", s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) consume(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	s.ws()
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

func (s *scanner) null() bool { return s.literal("null") }

// object reads an object, calling member for each key with the scanner on
// the value, which member must consume.
func (s *scanner) object(member func(key []byte) error) error {
	if !s.consume('{') {
		return s.errorf("want an object")
	}
	if s.depth++; s.depth > maxDepth {
		return s.errorf("nested deeper than %d", maxDepth)
	}
	defer func() { s.depth-- }()
	if s.consume('}') {
		return nil
	}
	for {
		key, err := s.rawString()
		if err != nil {
			return err
		}
		if !s.consume(':') {
			return s.errorf("want ':'")
		}
		if err := member(key); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return nil
		}
		return s.errorf("want ',' or '}'")
	}
}

// array reads an array, calling elem for each element.
func (s *scanner) array(elem func(i int) error) error {
	if !s.consume('[') {
		return s.errorf("want an array")
	}
	if s.depth++; s.depth > maxDepth {
		return s.errorf("nested deeper than %d", maxDepth)
	}
	defer func() { s.depth-- }()
	if s.consume(']') {
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return nil
		}
		return s.errorf("want ',' or ']'")
	}
}

// rawString reads a string and returns its bytes between the quotes,
// escapes undecoded; keys troupe looks for have none.
func (s *scanner) rawString() ([]byte, error) {
	if !s.consume('"') {
		return nil, s.errorf("want a string")
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], nil
		case c == '\\':
			s.i += 2
		case c < 0x20:
			return nil, s.errorf("control character in a string")
		default:
			s.i++
		}
	}
	return nil, s.errorf("unterminated string")
}

// tokenText reads a token's text and, when it is vLLM's "token_id:N",
// returns N.
func (s *scanner) tokenText() (id int, isID, empty bool, err error) {
	if s.peek() != '"' {
		return 0, false, false, s.skip() // not text: no id in it
	}
	raw, err := s.rawString()
	if err != nil {
		return 0, false, false, err
	}
	if len(raw) == 0 {
		return 0, false, true, nil
	}
	rest, ok := cutPrefix(raw, vllmTokenPrefix)
	if !ok || len(rest) == 0 {
		return 0, false, false, nil
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' || n > 1<<40 {
			return 0, false, false, nil
		}
		n = n*10 + int(c-'0')
	}
	return n, true, false, nil
}

func cutPrefix(b []byte, prefix string) ([]byte, bool) {
	if len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix {
		return b[len(prefix):], true
	}
	return nil, false
}

// integer reads a JSON integer that fits an int.
func (s *scanner) integer() (int, error) {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if n > (1<<62)/10 {
			return 0, s.errorf("integer too large")
		}
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	switch {
	case s.i == start:
		return 0, s.errorf("want an integer")
	case s.b[start] == '0' && s.i-start > 1:
		return 0, s.errorf("integer with a leading zero")
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, s.errorf("want an integer, not a fraction")
	}
	if neg {
		n = -n
	}
	return n, nil
}

// intsSpan reads an array of integers, or null, and records the value's
// byte range.
func (s *scanner) intsSpan(spans *[][2]int) ([]int, error) {
	s.ws()
	start := s.i
	if s.null() {
		return nil, nil
	}
	ids := make([]int, 0, s.count())
	err := s.array(func(int) error {
		if s.null() {
			// encoding/json would read 0: a token id troupe would be
			// guessing.
			return s.errorf("null in a token id array")
		}
		n, err := s.integer()
		ids = append(ids, n)
		return err
	})
	*spans = append(*spans, [2]int{start, s.i})
	return ids, err
}

// count returns how many elements the array of numbers ahead of the
// scanner holds (a guess when it holds anything else), to size its slice.
func (s *scanner) count() int {
	n := 1
	for _, c := range s.b[min(s.i+1, len(s.b)):] {
		switch c {
		case ',':
			n++
		case ']', '[', '{', '"':
			return n
		}
	}
	return n
}

// float reads a JSON number.
func (s *scanner) float() (float64, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
		s.i++
	}
	if s.i == start {
		return 0, s.errorf("want a number")
	}
	f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	if err != nil {
		return 0, s.errorf("bad number %q", s.b[start:s.i])
	}
	return f, nil
}

// skip skips one value of any kind, checking its syntax.
func (s *scanner) skip() error {
	switch s.peek() {
	case '{':
		return s.object(func([]byte) error { return s.skip() })
	case '[':
		return s.array(func(int) error { return s.skip() })
	case '"':
		_, err := s.rawString()
		return err
	case 't':
		if s.literal("true") {
			return nil
		}
	case 'f':
		if s.literal("false") {
			return nil
		}
	case 'n':
		if s.null() {
			return nil
		}
	default:
		_, err := s.float()
		return err
	}
	return s.errorf("want a JSON value")
}

// blank empties the id arrays in raw, in place, by overwriting their
// elements with spaces, so that go-openai, which ignores these fields, does
// not scan thousands of numbers it would throw away; its result is the
// same. It does nothing to an answer the scanner could not read.
func (a *answerTokens) blank(raw []byte) {
	if a.scanErr != nil {
		return
	}
	for _, sp := range a.spans {
		for i := sp[0] + 1; i < sp[1]-1; i++ {
			raw[i] = ' '
		}
	}
}
