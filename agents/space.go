package agents

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrNotInSpace is wrapped by the errors of ActionSpace.Parse: the text
// names no action of the space.
var ErrNotInSpace = errors.New("not a legal action")

// ActionSpace is a finite action space whose actions are numbered from 0
// and written as strings at the edge: the legal list an observation shows,
// the text a policy answers, the enum of an LLM's JSON schema. Games and
// policies work with the numbers; Legal, Text and Parse convert. IntRange
// and Enum are the two kinds.
type ActionSpace interface {
	// Legal lists every action's text in order. It is built once: the
	// same slice, which nobody may modify, is returned on every call, so a
	// View can hand it out every turn without allocating.
	Legal() []string
	// Len is the number of actions.
	Len() int
	// Text returns action i's text; it panics when i is out of range.
	Text(i int) string
	// Parse returns the number of the action whose text is text (exactly
	// as Legal writes it), or an error wrapping ErrNotInSpace.
	Parse(text string) (int, error)
}

// Ints is the integer action space lo..hi (both included), written in
// decimal: IntRange(0, 10) offers "0" to "10". Its action numbers are the
// integers themselves, not their offsets, so Text(7) is "7" and Parse("7")
// is 7. It is immutable and safe to share.
type Ints struct {
	lo, hi int
	legal  []string
}

// IntRange returns the integer action space lo..hi. It panics when hi < lo.
func IntRange(lo, hi int) *Ints {
	if hi < lo {
		panic(fmt.Sprintf("agents.IntRange(%d, %d): empty range", lo, hi))
	}
	s := &Ints{lo: lo, hi: hi, legal: make([]string, hi-lo+1)}
	for i := range s.legal {
		s.legal[i] = strconv.Itoa(lo + i)
	}
	return s
}

// Lo and Hi are the bounds of the space.
func (s *Ints) Lo() int { return s.lo }

// Hi is the upper bound of the space, included.
func (s *Ints) Hi() int { return s.hi }

// Legal returns "lo" to "hi", the same slice on every call.
func (s *Ints) Legal() []string { return s.legal }

// Len is hi-lo+1.
func (s *Ints) Len() int { return len(s.legal) }

// Contains reports whether lo <= v <= hi.
func (s *Ints) Contains(v int) bool { return v >= s.lo && v <= s.hi }

// Text returns v in decimal, without allocating; it panics when v is out of
// the range.
func (s *Ints) Text(v int) string {
	if !s.Contains(v) {
		panic(fmt.Sprintf("agents.Ints.Text(%d): out of %d..%d", v, s.lo, s.hi))
	}
	return s.legal[v-s.lo]
}

// Parse reads text as an integer of the range, written as Legal writes it
// (no sign on non-negative numbers, no leading zeros, no spaces).
func (s *Ints) Parse(text string) (int, error) {
	if v, ok := s.Digit(text); ok {
		return v, nil
	}
	return s.parse(text)
}

// Digit is Parse for the usual move of a small space, one decimal digit:
// text's value and true when text is one digit of the range, false for
// any other text (which Parse may still accept). It inlines where Parse is
// a call, for the loops that read every agent's move (a game's Apply, its
// metrics): they ask Digit first, and Parse only when it says false.
func (s *Ints) Digit(text string) (int, bool) {
	if len(text) == 1 {
		if v := int(text[0]) - '0'; uint(v) <= 9 && s.Contains(v) {
			return v, true
		}
	}
	return 0, false
}

// parse is Parse for anything but one digit of the range.
func (s *Ints) parse(text string) (int, error) {
	v, err := digits(text)
	if err == nil {
		// A run of digits is written as Legal writes it unless it has a
		// leading zero: no need to compare it with the legal text.
		if s.Contains(v) && (len(text) == 1 || text[0] != '0') {
			return v, nil
		}
	} else if v, err = strconv.Atoi(text); err == nil && s.Contains(v) && s.legal[v-s.lo] == text {
		return v, nil
	}
	return 0, fmt.Errorf("%w: %q is not an integer from %d to %d", ErrNotInSpace, text, s.lo, s.hi)
}

// errNotDigits: digits leaves the text to strconv.
var errNotDigits = errors.New("not a short run of digits")

// digits parses a short run of decimal digits, a move's usual text, without
// strconv's generality (signs, underscores, overflow); anything else is
// errNotDigits. Parse checks the text's canonical form after either.
func digits(text string) (int, error) {
	if len(text) == 0 || len(text) > 9 {
		return 0, errNotDigits
	}
	v := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c < '0' || c > '9' {
			return 0, errNotDigits
		}
		v = v*10 + int(c-'0')
	}
	return v, nil
}

// Scripted returns the policy that plays choose(obs), a number of the
// space, as its text.
func (s *Ints) Scripted(choose func(obs *Observation) int) Policy {
	return scripted(s, choose)
}

// Always returns the policy that always plays v.
func (s *Ints) Always(v int) Policy { return always(s.Text(v)) }

// Choices is the enumerated action space of named choices, numbered in
// order: Enum("cooperate", "defect") offers "cooperate" (0) and "defect"
// (1). It is immutable and safe to share.
type Choices struct {
	names []string
}

// Enum returns the space of the named choices. It panics when a name is
// empty or repeated, or when there is none: a space is declared once, in
// code.
func Enum(names ...string) *Choices {
	if len(names) == 0 {
		panic("agents.Enum: no choices")
	}
	for i, n := range names {
		if n == "" || slices.Contains(names[:i], n) {
			panic(fmt.Sprintf("agents.Enum: choice %d (%q) is empty or repeated", i, n))
		}
	}
	return &Choices{names: slices.Clone(names)}
}

// Legal returns the names, the same slice on every call.
func (c *Choices) Legal() []string { return c.names }

// Len is the number of choices.
func (c *Choices) Len() int { return len(c.names) }

// Text returns choice i's name; it panics when i is out of range.
func (c *Choices) Text(i int) string { return c.names[i] }

// Parse returns the number of the choice named text.
func (c *Choices) Parse(text string) (int, error) {
	if i := slices.Index(c.names, text); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("%w: %q is not one of %s", ErrNotInSpace, text, strings.Join(c.names, ", "))
}

// Scripted returns the policy that plays choose(obs), a choice's number,
// as its name.
func (c *Choices) Scripted(choose func(obs *Observation) int) Policy {
	return scripted(c, choose)
}

// Always returns the policy that always plays choice i.
func (c *Choices) Always(i int) Policy { return always(c.Text(i)) }

func scripted(s ActionSpace, choose func(obs *Observation) int) Policy {
	return Scripted(func(obs *Observation) string { return s.Text(choose(obs)) })
}

func always(text string) Policy {
	return Scripted(func(*Observation) string { return text })
}
