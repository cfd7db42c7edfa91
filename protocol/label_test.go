package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
)

// slime datasets carry labels of every JSON type; each must come back as
// the same value, compacted, and a reward model reading the JSONL must see
// the value it was given.
func TestLabelKeepsAnyJSONValue(t *testing.T) {
	for _, tc := range []struct {
		in, json, text string
	}{
		{`"42"`, `"42"`, "42"},
		{`42`, `42`, "42"},
		{`-1.5e3`, `-1.5e3`, "-1.5e3"},
		{`true`, `true`, "true"},
		{`{"answer": 3, "tests": ["a", "b"]}`, `{"answer":3,"tests":["a","b"]}`, `{"answer":3,"tests":["a","b"]}`},
		{` [1, {"x": null}] `, `[1,{"x":null}]`, `[1,{"x":null}]`},
		{`"<\u0026>"`, `"<\u0026>"`, "<&>"},
	} {
		l, err := protocol.RawLabel([]byte(tc.in))
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.json, l.JSON(), tc.in)
		text, ok := l.Text()
		assert.True(t, ok)
		assert.Equal(t, tc.text, text, tc.in)

		s := protocol.Sample{RolloutID: 1, Status: protocol.StatusCompleted, Label: l, Metadata: protocol.Metadata{TextOnly: true}}
		var m map[string]any
		require.NoError(t, json.Unmarshal(s.AppendJSON(nil), &m))
		var want any
		require.NoError(t, json.Unmarshal([]byte(tc.in), &want))
		assert.Equal(t, want, m["label"], tc.in)

		var back protocol.Sample
		require.NoError(t, json.Unmarshal(s.AppendJSON(nil), &back))
		assert.Equal(t, l, back.Label, "a label survives the round trip")
	}
}

func TestLabelNullAndErrors(t *testing.T) {
	for _, in := range []string{``, `null`, ` null `} {
		l, err := protocol.RawLabel([]byte(in))
		require.NoError(t, err)
		assert.True(t, l.IsNull())
		assert.Equal(t, "null", l.JSON())
		_, ok := l.Text()
		assert.False(t, ok)
	}
	assert.True(t, protocol.TextLabel("").IsNull(), "a game without ground truth leaves the label null")
	assert.Equal(t, protocol.TextLabel("o2"), mustLabel(t, `"o2"`))
	for _, in := range []string{`{`, `1 2`, `"a" "b"`, `nul`} {
		_, err := protocol.RawLabel([]byte(in))
		assert.ErrorIs(t, err, protocol.ErrBadLabel, in)
	}
}

func mustLabel(t *testing.T, raw string) protocol.Label {
	t.Helper()
	l, err := protocol.RawLabel([]byte(raw))
	require.NoError(t, err)
	return l
}

func TestMetadataActionRoundTrips(t *testing.T) {
	s := protocol.Sample{RolloutID: 1, Status: protocol.StatusCompleted, Response: "```json\n{\"move\":\"c1\"}\n```",
		Metadata: protocol.Metadata{TextOnly: true, Action: "c1"}}
	var back protocol.Sample
	require.NoError(t, json.Unmarshal(s.AppendJSON(nil), &back))
	assert.Equal(t, "c1", back.Metadata.Action)
	assert.Empty(t, back.Metadata.Extra, "action is troupe's own key, not an extra")
}
