package negotiation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/scenarios/internal/strictjson"
)

// The action types of the grammar.
const (
	Propose = "propose"
	Accept  = "accept"
	Walk    = "walk"
)

// MaxSay is the longest "say" text, in bytes, that an action may carry.
const MaxSay = 500

// Errors ParseAction and the game's rules wrap, so callers (and tests) can
// tell the ways an answer breaks the rules apart with errors.Is.
var (
	// ErrSyntax: the answer is not exactly one JSON object of the grammar
	// (bad JSON, trailing text, an unknown or repeated key, a value of the
	// wrong type, an unknown action type).
	ErrSyntax = errors.New("not an action of the grammar")
	// ErrItems: a proposal's "take" does not name every item of the pool
	// exactly once, or names an item the pool does not have.
	ErrItems = errors.New("the proposal does not list the pool's items")
	// ErrCount: a proposal takes a negative number of an item or more
	// than the pool holds.
	ErrCount = errors.New("the proposal takes a count the pool cannot give")
	// ErrNoOffer: accept when the other negotiator has no offer on the
	// table.
	ErrNoOffer = errors.New("there is no standing offer to accept")
)

// Action is a parsed negotiation move.
type Action struct {
	Type string // Propose, Accept or Walk
	// Take is, for a proposal, how many of each item of the pool (in pool
	// order) the proposer takes; the other negotiator gets the rest.
	Take []int
	// Say is free text for the other negotiator, passed on with the move.
	Say string
}

// Pool is the items on the table: item names and how many of each there
// are, in the pool's order.
type Pool struct {
	Items  []string
	Counts []int
}

// Rest returns what remains of the pool when take is taken from it.
func (p Pool) Rest(take []int) []int {
	rest := make([]int, len(p.Counts))
	for i, c := range p.Counts {
		rest[i] = c - take[i]
	}
	return rest
}

// Describe renders counts as "2 book, 0 hat, 1 ball".
func (p Pool) Describe(counts []int) string {
	parts := make([]string, len(p.Items))
	for i, it := range p.Items {
		parts[i] = strconv.Itoa(counts[i]) + " " + it
	}
	return strings.Join(parts, ", ")
}

// ParseAction reads an answer under the scenario's strict grammar: exactly
// one JSON object, surrounding white space allowed, of one of the forms
//
//	{"type":"propose","take":{"book":1,"hat":0,"ball":2}}
//	{"type":"accept"}
//	{"type":"walk"}
//
// each optionally with "say":"<text>" (at most MaxSay bytes). A proposal's
// "take" must name every item of pool exactly once, in any order, with an
// integer count between 0 and the pool's count. Keys are case-sensitive,
// repeated keys and unknown keys are errors, and so is anything after the
// object. The errors wrap ErrSyntax, ErrItems or ErrCount. Whether an
// accept has an offer to accept is the game's to judge (ErrNoOffer).
func ParseAction(text string, pool Pool) (Action, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	var a Action
	var take map[string]string // item to its raw JSON value
	var takeOrder []string
	err := strictjson.ReadObject(dec, ErrSyntax, func(key string) error {
		switch key {
		case "type":
			return readString(dec, &a.Type)
		case "say":
			if err := readString(dec, &a.Say); err != nil {
				return err
			}
			if len(a.Say) > MaxSay {
				return fmt.Errorf(`%w: "say" has %d bytes, at most %d are allowed`, ErrSyntax, len(a.Say), MaxSay)
			}
			return nil
		case "take":
			take = map[string]string{}
			return strictjson.ReadObject(dec, ErrSyntax, func(item string) error {
				// A raw value, not a json.Number: Number would also take
				// the string "1", and the grammar's counts are numbers.
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return fmt.Errorf("%w: take %q: %v", ErrSyntax, item, err)
				}
				take[item] = string(raw)
				takeOrder = append(takeOrder, item)
				return nil
			})
		}
		return fmt.Errorf("%w: unknown key %q (want type, take, say)", ErrSyntax, key)
	})
	if err != nil {
		return Action{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Action{}, fmt.Errorf("%w: text after the JSON object", ErrSyntax)
	}
	switch a.Type {
	case Propose:
		if take == nil {
			return Action{}, fmt.Errorf(`%w: a proposal needs "take"`, ErrSyntax)
		}
		a.Take = make([]int, len(pool.Items))
		for _, item := range takeOrder {
			if !slices.Contains(pool.Items, item) {
				return Action{}, fmt.Errorf("%w: the pool has no item %q (it has %s)", ErrItems, item, strings.Join(pool.Items, ", "))
			}
		}
		for i, item := range pool.Items {
			n, ok := take[item]
			if !ok {
				return Action{}, fmt.Errorf("%w: item %q is missing", ErrItems, item)
			}
			v, err := strconv.Atoi(n)
			if err != nil || strings.ContainsAny(n, "+_") {
				return Action{}, fmt.Errorf("%w: take %q is %s, not an integer", ErrSyntax, item, n)
			}
			if v < 0 || v > pool.Counts[i] {
				return Action{}, fmt.Errorf("%w: take %d %s, the pool has %d", ErrCount, v, item, pool.Counts[i])
			}
			a.Take[i] = v
		}
	case Accept, Walk:
		if take != nil {
			return Action{}, fmt.Errorf(`%w: %q takes no "take"`, ErrSyntax, a.Type)
		}
	case "":
		return Action{}, fmt.Errorf(`%w: "type" is missing`, ErrSyntax)
	default:
		return Action{}, fmt.Errorf("%w: type %q is not propose, accept or walk", ErrSyntax, a.Type)
	}
	return a, nil
}

func readString(dec *json.Decoder, dst *string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%w: want a string, got %v", ErrSyntax, tok)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: invalid UTF-8", ErrSyntax)
	}
	*dst = s
	return nil
}

// Encode renders a as the canonical JSON of the grammar: keys in the order
// type, take, say; items in pool order; no white space. ParseAction reads
// it back to a.
func (a Action) Encode(pool Pool) string {
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	strictjson.WriteString(&b, a.Type)
	if a.Type == Propose {
		b.WriteString(`,"take":{`)
		for i, it := range pool.Items {
			if i > 0 {
				b.WriteByte(',')
			}
			strictjson.WriteString(&b, it)
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(a.Take[i]))
		}
		b.WriteByte('}')
	}
	if a.Say != "" {
		b.WriteString(`,"say":`)
		strictjson.WriteString(&b, a.Say)
	}
	b.WriteByte('}')
	return b.String()
}

// ActionSchema returns a JSON Schema that every answer of the grammar for
// pool satisfies: a server that enforces it by grammar (llama.cpp's
// json_schema response format, vLLM's guided decoding) can only produce
// well-formed actions with counts in range. Whether an accept has an
// offer on the table is still the game's to judge.
func ActionSchema(pool Pool) string {
	var take bytes.Buffer
	take.WriteString(`{"type":"object","properties":{`)
	for i, it := range pool.Items {
		if i > 0 {
			take.WriteByte(',')
		}
		strictjson.WriteString(&take, it)
		fmt.Fprintf(&take, `:{"type":"integer","minimum":0,"maximum":%d}`, pool.Counts[i])
	}
	take.WriteString(`},"required":[`)
	for i, it := range pool.Items {
		if i > 0 {
			take.WriteByte(',')
		}
		strictjson.WriteString(&take, it)
	}
	take.WriteString(`],"additionalProperties":false}`)
	say := fmt.Sprintf(`{"type":"string","maxLength":%d}`, MaxSay)
	return `{"oneOf":[` +
		`{"type":"object","properties":{"type":{"const":"propose"},"take":` + take.String() + `,"say":` + say + `},"required":["type","take"],"additionalProperties":false},` +
		`{"type":"object","properties":{"type":{"const":"accept"},"say":` + say + `},"required":["type"],"additionalProperties":false},` +
		`{"type":"object","properties":{"type":{"const":"walk"},"say":` + say + `},"required":["type"],"additionalProperties":false}` +
		`]}`
}
