// Package strictjson reads the JSON moves of scenarios whose agents answer
// in JSON (negotiation offers, debate verdicts) more strictly than
// encoding/json does: a repeated key is an error rather than "the last one
// wins", because a rule checker must not guess which one a model meant.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// ReadObject reads one JSON object from dec, calling field for each key
// with the decoder positioned at its value; field must consume the value.
// Every error it makes itself wraps errSyntax, the caller's sentinel for
// malformed moves.
func ReadObject(dec *json.Decoder, errSyntax error, field func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", errSyntax, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w: want a JSON object, got %v", errSyntax, tok)
	}
	var seen []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", errSyntax, err)
		}
		key, _ := tok.(string) // inside an object the decoder yields only string keys
		if slices.Contains(seen, key) {
			return fmt.Errorf("%w: key %q appears twice", errSyntax, key)
		}
		seen = append(seen, key)
		if err := field(key); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return fmt.Errorf("%w: %v", errSyntax, err)
	}
	return nil
}

// WriteString writes s to b as a JSON string without HTML escaping, so a
// "say" of "a < b" or an explanation "x < 3" stays readable in prompts and
// transcripts.
func WriteString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
