package verifiers

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/scenarios"
)

// FuzzRunPayload: whatever a run frame's payload holds, decoding it and
// planning its episode either succeed or fail with an error wrapping
// ErrBadRequest; never a panic.
func FuzzRunPayload(f *testing.F) {
	for _, seed := range []any{
		map[string]any{"task_data": map[string]any{"scenario": "tictactoe", "seed": 3, "params": map[string]any{}},
			"client": map[string]any{"type": "eval", "base_url": "http://127.0.0.1:8000/v1"}, "model": "m",
			"sampling": map[string]any{"temperature": 0.7, "max_tokens": nil, "reasoning_effort": nil}},
		map[string]any{"task_data": map[string]any{"scenario": "negotiation", "policies": map[string]any{"bob": "scripted"},
			"roles":      map[string]any{"alice": map[string]any{"model": "a", "sampling": map[string]any{"top_k": 5}}},
			"allocators": []any{"team", "rloo(key=role)"}, "limits": map[string]any{"max_turns": 4}, "prompt": "hi", "idx": 0},
			"client": map[string]any{"base_url": "x"}, "model": "m", "sampling": map[string]any{"max_completion_tokens": 9, "stop": []any{"\n"}}},
		map[string]any{"task_data": map[string]any{"scenario": 1}, "model": "m"},
		map[string]any{"task_data": nil},
		[]any{1, 2},
		"run",
	} {
		b, err := msgpack.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}) // a map claiming 4 billion entries
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}) // an array claiming as many
	s, err := New(Config{Rollouts: RollerFunc(nil), Scenarios: scenarios.Builtin(),
		Endpoint: func(string) (string, error) { return "", nil }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, err := DecodeRun(payload)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("an error not wrapping ErrBadRequest: %v", err)
			}
			return
		}
		if _, err := s.plan(req); err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("a plan error not wrapping ErrBadRequest: %v", err)
		}
	})
}

// FuzzCancelPayload: a cancel payload decodes or is refused, never panics.
func FuzzCancelPayload(f *testing.F) {
	b, _ := msgpack.Marshal(map[string]any{"request_id": "abc"})
	f.Add(b)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, payload []byte) {
		if _, err := decodeCancel(payload); err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("an error not wrapping ErrBadRequest: %v", err)
		}
	})
}
