package debate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-rl/troupe/scenarios/internal/strictjson"
)

// The critic's verdicts.
const (
	Accept = "accept"
	Object = "object"
)

// MaxText is the longest explanation or message, in bytes, an answer may
// carry.
const MaxText = 2000

// ErrSyntax is wrapped by ParseAnswer's and ParseVerdict's errors: the text
// is not exactly one JSON object of the role's grammar.
var ErrSyntax = errors.New("not an answer of the grammar")

// Answer is the solver's move.
type Answer struct {
	Value       int64
	Explanation string
}

// Verdict is the critic's move.
type Verdict struct {
	Verdict string // Accept or Object
	Message string // why it objects; optional with Accept
}

// ParseAnswer reads the solver's answer: exactly one JSON object
//
//	{"answer": -12, "explanation": "optional reasoning"}
//
// with an integer "answer" (a JSON number without fraction or exponent
// that fits in an int64) and an optional "explanation" of at most MaxText
// bytes. Surrounding white space is allowed; unknown keys, repeated keys
// and text after the object are errors.
func ParseAnswer(text string) (Answer, error) {
	var a Answer
	seen := false
	err := parseObject(text, func(dec *json.Decoder, key string) error {
		switch key {
		case "answer":
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%w: %v", ErrSyntax, err)
			}
			v, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				return fmt.Errorf("%w: answer %s is not an integer", ErrSyntax, raw)
			}
			a.Value, seen = v, true
			return nil
		case "explanation":
			return readText(dec, key, &a.Explanation)
		}
		return fmt.Errorf("%w: unknown key %q (want answer, explanation)", ErrSyntax, key)
	})
	if err != nil {
		return Answer{}, err
	}
	if !seen {
		return Answer{}, fmt.Errorf(`%w: "answer" is missing`, ErrSyntax)
	}
	return a, nil
}

// ParseVerdict reads the critic's verdict: exactly one JSON object
//
//	{"verdict": "accept"}
//	{"verdict": "object", "message": "the second step is wrong"}
//
// "message" (at most MaxText bytes) is required, and non-empty, with
// object, optional with accept. The same strictness as ParseAnswer.
func ParseVerdict(text string) (Verdict, error) {
	var v Verdict
	hasMessage := false
	err := parseObject(text, func(dec *json.Decoder, key string) error {
		switch key {
		case "verdict":
			return readText(dec, key, &v.Verdict)
		case "message":
			hasMessage = true
			return readText(dec, key, &v.Message)
		}
		return fmt.Errorf("%w: unknown key %q (want verdict, message)", ErrSyntax, key)
	})
	if err != nil {
		return Verdict{}, err
	}
	switch v.Verdict {
	case Accept:
	case Object:
		if !hasMessage || strings.TrimSpace(v.Message) == "" {
			return Verdict{}, fmt.Errorf(`%w: an objection needs a "message"`, ErrSyntax)
		}
	case "":
		return Verdict{}, fmt.Errorf(`%w: "verdict" is missing`, ErrSyntax)
	default:
		return Verdict{}, fmt.Errorf("%w: verdict %q is not accept or object", ErrSyntax, v.Verdict)
	}
	return v, nil
}

// parseObject decodes text as exactly one JSON object, calling field for
// each key with dec positioned at its value (see strictjson.ReadObject).
func parseObject(text string, field func(dec *json.Decoder, key string) error) error {
	dec := json.NewDecoder(strings.NewReader(text))
	if err := strictjson.ReadObject(dec, ErrSyntax, func(key string) error { return field(dec, key) }); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: text after the JSON object", ErrSyntax)
	}
	return nil
}

func readText(dec *json.Decoder, key string, dst *string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%w: %q must be a string, got %v", ErrSyntax, key, tok)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrSyntax, key)
	}
	if len(s) > MaxText {
		return fmt.Errorf("%w: %q has %d bytes, at most %d are allowed", ErrSyntax, key, len(s), MaxText)
	}
	*dst = s
	return nil
}

// Encode renders the answer as canonical JSON: "answer" first, no white
// space, "explanation" only when non-empty.
func (a Answer) Encode() string {
	var b bytes.Buffer
	b.WriteString(`{"answer":`)
	b.WriteString(strconv.FormatInt(a.Value, 10))
	if a.Explanation != "" {
		b.WriteString(`,"explanation":`)
		strictjson.WriteString(&b, a.Explanation)
	}
	b.WriteByte('}')
	return b.String()
}

// Encode renders the verdict as canonical JSON, "message" only when
// non-empty.
func (v Verdict) Encode() string {
	var b bytes.Buffer
	b.WriteString(`{"verdict":`)
	strictjson.WriteString(&b, v.Verdict)
	if v.Message != "" {
		b.WriteString(`,"message":`)
		strictjson.WriteString(&b, v.Message)
	}
	b.WriteByte('}')
	return b.String()
}

// JSON Schemas of the two roles' answers, for policies whose server can
// enforce them (llama.cpp's json_schema response format, vLLM's guided
// decoding). The game's rules still judge each answer: the schemas cannot
// say that an objection's message is non-blank.
const (
	SolverSchema = `{"type":"object","properties":{"answer":{"type":"integer"},"explanation":{"type":"string","maxLength":2000}},"required":["answer"],"additionalProperties":false}`
	CriticSchema = `{"oneOf":[` +
		`{"type":"object","properties":{"verdict":{"const":"accept"},"message":{"type":"string","maxLength":2000}},"required":["verdict"],"additionalProperties":false},` +
		`{"type":"object","properties":{"verdict":{"const":"object"},"message":{"type":"string","minLength":1,"maxLength":2000}},"required":["verdict","message"],"additionalProperties":false}` +
		`]}`
)
