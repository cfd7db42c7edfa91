package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var errBad = errors.New("bad move")

func read(text string) ([]string, error) {
	var keys []string
	dec := json.NewDecoder(strings.NewReader(text))
	err := ReadObject(dec, errBad, func(key string) error {
		keys = append(keys, key)
		var v any
		return dec.Decode(&v)
	})
	return keys, err
}

func TestReadObject(t *testing.T) {
	keys, err := read(`{"type":"walk","say":"bye"}`)
	if err != nil || strings.Join(keys, ",") != "type,say" {
		t.Fatalf("got %v, %v", keys, err)
	}
	for text, want := range map[string]string{
		`{"a":1,"a":2}`: `key "a" appears twice`,
		`[1]`:           "want a JSON object",
		``:              "EOF",
		`{"a":1`:        "EOF",
	} {
		_, err := read(text)
		if !errors.Is(err, errBad) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an errBad error containing %q", text, err, want)
		}
	}
}
