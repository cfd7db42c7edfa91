package trajectories_test

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// The hand-written episode encoder writes what encoding/json writes of the
// form's struct, byte for byte: for every built-in scenario's episodes,
// written one after the other by one writer (whose encoder remembers the
// last view and legal actions), and for a record that has every corner of
// the form.
func TestEpisodeEncoderMatchesEncodingJSON(t *testing.T) {
	for _, name := range scenarios.Builtin().Names() {
		t.Run(name, func(t *testing.T) {
			_, data := played(t, name, 6)
			recs, credits := readEpisodes(t, data)
			var want []byte
			for i, rec := range recs {
				var err error
				want, err = trajectories.AppendEpisodeJSONReflect(want, rec, credits[i])
				require.NoError(t, err)
			}
			assert.Equal(t, string(want), string(data))
		})
	}
	rec, c := cornerEpisode()
	var ew bytes.Buffer
	w := trajectories.NewEpisodeWriter(&ew)
	var want []byte
	for _, credit := range []*trajectories.Credit{c, nil, c, {}} {
		ep := &trajectories.Episode{Record: *rec, Credit: credit}
		require.NoError(t, w.WriteEpisode(ep))
		var err error
		want, err = trajectories.AppendEpisodeJSONReflect(want, rec, credit)
		require.NoError(t, err)
		got, err := trajectories.AppendEpisodeJSON(nil, rec, credit)
		require.NoError(t, err)
		ref, err := trajectories.AppendEpisodeJSONReflect(nil, rec, credit)
		require.NoError(t, err)
		require.Equal(t, string(ref), string(got))
	}
	require.NoError(t, w.Flush())
	assert.Equal(t, string(want), ew.String())
}

type noteStruct struct {
	A int     `json:"a"`
	B string  `json:"b,omitempty"`
	F float32 `json:"f"`
}

// cornerEpisode is a record and credit with every corner of the episode
// form: strings that need escaping, nil and empty lists and maps, notes of
// many kinds (some JSON cannot encode), non-finite numbers, generations.
func cornerEpisode() (*episode.Record, *trajectories.Credit) {
	odd := "a<b>&c \"q\" \\ \b\f\n\r\t\x00\x01\x1f\x7f é \u2028\u2029 \xff\xfe end"
	prompt := protocol.Prompt{Text: odd}
	chat := protocol.Prompt{Messages: []protocol.ChatMessage{{Role: "user", Content: odd}, {Role: "<sys>", Content: ""}}}
	empty := protocol.Prompt{Messages: []protocol.ChatMessage{}}
	rec := &episode.Record{
		Scenario: odd, Seed: math.MaxUint64, PolicySeed: 7, Index: -3, RolloutID: math.MaxInt64, GroupIndex: math.MinInt64,
		Status: protocol.StatusFailed, End: "max_steps", Err: odd, Stack: odd + "\nf (g.go:1)", Steps: 12, Label: odd,
		Seats: []episode.Seat{{ID: odd, Role: "r"}, {ID: "", Role: ""}},
		Turns: []episode.Turn{
			{Seat: 0, Step: 1, Turn: 0, State: "s<", Seed: 1 << 63, View: odd, Legal: []string{"a", odd}, Inbox: []int{0, 1}, Action: "a", Emit: true,
				Notes: map[string]any{
					"s": odd, "i": 3, "i64": int64(-9), "i32": int32(5), "u": uint(7), "f": 0.1, "big": 1e21, "small": 1e-7, "neg0": math.Copysign(0, -1),
					"f32": float32(0.1), "b": true, "nil": nil, "nan": math.NaN(), "inf": math.Inf(-1), "ch": make(chan int),
					"list": []any{1, "x<", nil, 2.5}, "map": map[string]any{"z": 1, "a": []int{1, 2}}, "struct": noteStruct{A: 1, F: 0.5},
					"raw": json.RawMessage(` { "x" : [1, 2] } `), odd: "key",
				}},
			{Seat: 1, Step: 1, Turn: 0, View: odd, Legal: []string{"a", odd}, Action: odd, Invalid: odd, Notes: map[string]any{}},
			{Seat: 1, Step: 2, Turn: 1, View: "other", Legal: []string{}, Inbox: []int{}, Generation: &agents.Generation{Completion: odd, Prompt: &prompt}, Emit: true},
			{Seat: 0, Step: 2, Turn: 1, View: "other", Legal: nil, Generation: &agents.Generation{Prompt: &chat, Tokens: &agents.Tokens{Prompt: []int{1, 2}, Response: []int{3}, LogProbs: []float64{-0.5, math.NaN(), math.Inf(1)}, LossMask: []int{1}}}, Emit: true},
			{Seat: 0, Step: 3, Turn: 2, View: "", Legal: nil, Generation: &agents.Generation{Prompt: &empty, Tokens: &agents.Tokens{}}, Notes: map[string]any{"only": 1.5}},
			{Seat: 1, Step: 3, Turn: 2, View: "", Legal: []string{}, Generation: &agents.Generation{}, Emit: true},
		},
		Messages: []episode.Message{
			{Message: protocol.Message{From: odd, To: protocol.Channel("c<"), Kind: odd, Payload: odd, Time: 1, Seq: 0}, Recipients: []int{1}},
			{Message: protocol.Message{From: "a", To: protocol.To("*"), Kind: "k", Time: 2, Seq: 1, Quiet: true}},
			{Message: protocol.Message{From: "a", To: protocol.To("b"), Time: 2, Seq: 2}, Recipients: []int{}},
		},
		Transitions: []episode.Transition{{Step: 0, Seat: 1, Event: "e<", From: "a", To: "b"}},
		Score:       episode.Score{Team: math.NaN(), Agents: []float64{math.Inf(1), math.Inf(-1), 1e-300, -2.5, 1e21, 123456789}},
	}
	c := &trajectories.Credit{
		Allocators: []string{"team", odd},
		Values:     [][]float64{{1, 2, 3, 4}, nil, {math.NaN()}},
		Notes:      map[string]any{"inf": math.Inf(1), "x": odd},
	}
	return rec, c
}

// A record with no params, seats, scores or credit notes writes the
// form's empty values as encoding/json did.
func TestEpisodeEncoderEmptyRecord(t *testing.T) {
	for _, rec := range []*episode.Record{{}, {Params: map[string]string{}, Seats: []episode.Seat{}, Score: episode.Score{Agents: []float64{}}}} {
		for _, c := range []*trajectories.Credit{nil, {}, {Allocators: []string{}, Values: [][]float64{}, Notes: map[string]any{}}} {
			got, err := trajectories.AppendEpisodeJSON(nil, rec, c)
			require.NoError(t, err)
			want, err := trajectories.AppendEpisodeJSONReflect(nil, rec, c)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		}
	}
}

// The episode encoder escapes every string as encoding/json does.
func FuzzEpisodeString(f *testing.F) {
	for _, s := range []string{"", "plain", "a<b>&c", "\u2028\u2029", "\xff", "\x00\x7f\b\f", "é\xc3", "\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(trajectories.AppendJSONString(nil, s)))
	})
}
