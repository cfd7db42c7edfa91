package llm

import (
	"bytes"
	"fmt"

	"github.com/troupe-rl/troupe/internal/jsonscan"
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
	s := &scanner{jsonscan.Scanner{B: raw, Keys: jsonscan.KeysRaw, FloatRange: true}}
	if !s.Null() {
		s.Object(func(key []byte) {
			switch string(key) {
			case "prompt_token_ids":
				a.prompt = s.intsSpan(&a.spans)
			case "choices":
				if s.Null() {
					return
				}
				s.Array(func(i int) {
					a.choices++
					if i > 0 {
						s.Skip()
						return
					}
					s.choice(&a.choice, &a.spans)
				})
			default:
				s.Skip()
			}
		})
	}
	s.End()
	if why, at := s.Why(); s.Failed() {
		a.scanErr = fmt.Errorf("byte %d: %s", at, why)
	}
	return a
}

// scanner reads an answer: the keys troupe looks for have no escapes, and
// numbers it skips must fit a float64, as they must for go-openai.
type scanner struct{ jsonscan.Scanner }

func (s *scanner) choice(c *choiceTokens, spans *[][2]int) {
	if s.Null() {
		return
	}
	s.Object(func(key []byte) {
		switch string(key) {
		case "token_ids":
			c.tokenIDs = s.intsSpan(spans)
		case "prompt_token_ids":
			c.promptIDs = s.intsSpan(spans)
		case "logprobs":
			if s.Null() {
				return
			}
			start := s.I
			s.Object(func(key []byte) {
				if string(key) != "content" {
					s.Skip()
					return
				}
				if s.Null() {
					return
				}
				c.logprobs = true
				c.entries = c.entries[:0]
				s.Array(func(int) {
					var e logprobEntry
					if !s.Null() {
						s.Object(func(key []byte) { s.entry(&e, key) })
					}
					c.entries = append(c.entries, e)
				})
			})
			*spans = append(*spans, [2]int{start, s.I})
		default:
			s.Skip()
		}
	})
}

// entry reads the value of key in a log-prob entry.
func (s *scanner) entry(e *logprobEntry, key []byte) {
	switch string(key) {
	case "id":
		if !s.Null() {
			e.id = s.integer()
			e.hasID = !s.Failed()
		}
	case "token":
		e.textID, e.hasText, e.noText = s.tokenText()
	case "logprob":
		e.logprob = s.Float()
	default:
		s.Skip()
	}
}

// tokenText reads a token's text and, when it is vLLM's "token_id:N",
// returns N.
func (s *scanner) tokenText() (id int, isID, empty bool) {
	if s.Peek() != '"' {
		s.Skip() // not text: no id in it
		return 0, false, false
	}
	raw, _ := s.String()
	if s.Failed() {
		return 0, false, false
	}
	if len(raw) == 0 {
		return 0, false, true
	}
	rest, ok := bytes.CutPrefix(raw, []byte(vllmTokenPrefix))
	if !ok || len(rest) == 0 {
		return 0, false, false
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' || n > 1<<40 {
			return 0, false, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true, false
}

// maxID bounds the ids the scanner reads, as it always has: 2^62 with its
// last digit 9.
const maxID = (1<<62)/10*10 + 9

// integer reads a JSON integer of at most maxID.
func (s *scanner) integer() int {
	v, frac, ok := s.Int()
	switch {
	case s.Failed():
	case frac:
		s.Fail("want an integer, not a fraction")
	case !ok || v > maxID || v < -maxID:
		s.Fail("integer too large")
	}
	return int(v)
}

// intsSpan reads an array of integers, or null, and records the value's
// byte range.
func (s *scanner) intsSpan(spans *[][2]int) []int {
	s.Space()
	start := s.I
	if s.Null() {
		return nil
	}
	ids := make([]int, 0, s.count())
	s.Array(func(int) {
		if s.Null() {
			// encoding/json would read 0: a token id troupe would be
			// guessing.
			s.Fail("null in a token id array")
			return
		}
		ids = append(ids, s.integer())
	})
	*spans = append(*spans, [2]int{start, s.I})
	return ids
}

// count returns how many elements the array of numbers ahead of the
// scanner holds (a guess when it holds anything else), to size its slice.
func (s *scanner) count() int {
	n := 1
	for _, c := range s.B[min(s.I+1, len(s.B)):] {
		switch c {
		case ',':
			n++
		case ']', '[', '{', '"':
			return n
		}
	}
	return n
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
