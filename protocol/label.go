package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Label is a sample's ground truth (slime's Sample.label) as a JSON value.
// slime's field is typed str, but its datasets load whatever the label
// column holds (an int answer, a dict of test cases), and a reward model
// reads it back as loaded: so troupe keeps the value's JSON, not a string
// made of it. The zero Label is null. Labels are comparable; two labels
// are equal when their compact JSON is.
type Label struct {
	raw string // compact JSON text; "" is null
}

// ErrBadLabel is wrapped by RawLabel's errors.
var ErrBadLabel = errors.New("label must be one JSON value")

// TextLabel is the label holding the string s; the empty string is null,
// as a scenario with no ground truth leaves it.
func TextLabel(s string) Label {
	if s == "" {
		return Label{}
	}
	return Label{raw: string(appendString(nil, s))}
}

// RawLabel is the label holding the JSON value raw, compacted. JSON null
// and empty input give the null label.
func RawLabel(raw []byte) (Label, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return Label{}, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return Label{}, fmt.Errorf("%w: %w", ErrBadLabel, err)
	}
	return Label{raw: buf.String()}, nil
}

// IsNull reports whether l is null.
func (l Label) IsNull() bool { return l.raw == "" }

// JSON returns the label's compact JSON text ("null" for the null label).
func (l Label) JSON() string {
	if l.raw == "" {
		return "null"
	}
	return l.raw
}

// Text returns the label's string when it is a JSON string, and otherwise
// its JSON text (a number's digits, an object's JSON), so that a scenario
// parameter or a transcript can carry any label; ok is false for null.
func (l Label) Text() (text string, ok bool) {
	if l.raw == "" {
		return "", false
	}
	if l.raw[0] == '"' {
		var s string
		if json.Unmarshal([]byte(l.raw), &s) == nil {
			return s, true
		}
	}
	return l.raw, true
}

// MarshalJSON implements json.Marshaler.
func (l Label) MarshalJSON() ([]byte, error) { return []byte(l.JSON()), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (l *Label) UnmarshalJSON(data []byte) error {
	v, err := RawLabel(data)
	if err != nil {
		return err
	}
	*l = v
	return nil
}
