package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/distributed/wire"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// played returns real episodes of every built-in scenario, with Replay
// cleared (it never travels). El Farol is kept small: large inputs slow the
// fuzzer to a crawl.
func played(t testing.TB) []*episode.Record {
	t.Helper()
	reg := scenarios.Builtin()
	var out []*episode.Record
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		var given map[string]string
		if name == "elfarol" {
			given = map[string]string{"agents": "5", "nights": "3", "capacity": "2"}
		}
		params, err := sc.Info().ParseParams(given)
		require.NoError(t, err)
		for seed := range uint64(3) {
			ep := env.RunEpisode(context.Background(), env.Setup{
				Play:       env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())},
				Seed:       seed,
				PolicySeed: seed + 100,
				Index:      int64(seed),
				RolloutID:  7 + int64(seed),
				GroupIndex: 2,
			})
			ep.Replay = nil
			out = append(out, ep)
		}
	}
	// Tree-sampled episodes (AT-GRPO seat by seat, MAGRPO jointly) carry
	// their tree and candidates.
	for _, tc := range []struct {
		name  string
		given map[string]string
		tree  episode.Tree
	}{
		{"tictactoe", nil, episode.Tree{K: 2, Alpha: 0.5}},
		{"elfarol", map[string]string{"agents": "4", "nights": "2", "capacity": "2"}, episode.Tree{K: 3, Alpha: 1, Joint: true, Roles: []string{"patron"}}},
	} {
		sc, err := reg.Lookup(tc.name)
		require.NoError(t, err)
		params, err := sc.Info().ParseParams(tc.given)
		require.NoError(t, err)
		ep := env.PlayTree(context.Background(), env.Setup{
			Play: env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(agents.Random())}, Drive: env.Drive{Tree: &tc.tree},
			Seed: 5, PolicySeed: 6, Index: 9, RolloutID: 9,
		})
		require.NotEmpty(t, ep.Candidates, tc.name)
		ep.Replay = nil
		// A candidate's continuation lives in memory only: the wire does
		// not carry it.
		for i := range ep.Candidates {
			ep.Candidates[i].Fork = nil
		}
		out = append(out, ep)
	}
	return out
}

func roundTrip(t testing.TB, ep *episode.Record) (*episode.Record, []byte) {
	t.Helper()
	data := wire.Encode(nil, ep)
	got, err := wire.Decode(data)
	require.NoError(t, err)
	return got, data
}

func TestRoundTripOfPlayedEpisodes(t *testing.T) {
	eps := played(t)
	sawMessages, sawNotes := false, false
	for _, ep := range eps {
		got, data := roundTrip(t, ep)
		require.Equal(t, jsonNotes(t, ep), jsonNotes(t, got), "episode %s/%d", ep.Scenario, ep.Index)
		assert.Equal(t, string(data), string(wire.Encode(nil, got)), "the encoding is not stable")
		sawMessages = sawMessages || len(ep.Messages) > 0
		for _, turn := range ep.Turns {
			sawNotes = sawNotes || len(turn.Notes) > 0
		}
	}
	assert.True(t, sawMessages, "no built-in scenario sent a message: the messages path is untested")
	assert.True(t, sawNotes, "no built-in scenario noted a fact: the notes path is untested")
}

// jsonNotes is rec with its turns' notes as JSON values: a note's number
// comes back a float64, as the sample encoding would write it anyway.
func jsonNotes(t testing.TB, rec *episode.Record) *episode.Record {
	t.Helper()
	c := *rec
	c.Turns = slices.Clone(rec.Turns)
	for i := range c.Turns {
		if c.Turns[i].Notes == nil {
			continue
		}
		b, err := json.Marshal(c.Turns[i].Notes)
		require.NoError(t, err)
		c.Turns[i].Notes = nil
		require.NoError(t, json.Unmarshal(b, &c.Turns[i].Notes))
	}
	return &c
}

// TestRoundTripKeepsTheOutputBytes is the property the distributed runner
// relies on: a decoded record projects to the same samples, and writes the
// same episode line, as the original.
func TestRoundTripKeepsTheOutputBytes(t *testing.T) {
	for _, ep := range append(played(t), edgeEpisode()) {
		got, _ := roundTrip(t, ep)
		assert.Equal(t, jsonl(t, ep), jsonl(t, got), "episode %s/%d", ep.Scenario, ep.Index)
		if ep.Scenario == "edge" {
			continue // its NaN-free notes aside, it holds values an episode line refuses
		}
		want, err := trajectories.AppendEpisodeJSON(nil, ep, nil)
		require.NoError(t, err)
		line, err := trajectories.AppendEpisodeJSON(nil, got, nil)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(line), "episode %s/%d", ep.Scenario, ep.Index)
	}
}

func jsonl(t testing.TB, ep *episode.Record) string {
	t.Helper()
	var b []byte
	samples := trajectories.Samples(ep)
	for i := range samples {
		b = samples[i].AppendJSON(b)
		b = append(b, '\n')
	}
	return string(b)
}

type ordered struct {
	Z int `json:"z"`
	A int `json:"a"`
}

// edgeEpisode holds what JSON cannot carry as it is: non-finite floats,
// bytes that are not UTF-8, note values whose JSON changes on a trip
// through an interface, and empty-but-present slices and maps.
func edgeEpisode() *episode.Record {
	return &episode.Record{
		Scenario:   "edge",
		Params:     map[string]string{"mode": "a\xffb", "empty": ""},
		Seed:       math.MaxUint64,
		PolicySeed: 1 << 63,
		Index:      -3,
		RolloutID:  math.MaxInt64,
		GroupIndex: math.MinInt64,
		Status:     protocol.StatusCompleted,
		End:        env.EndTerminated,
		Err:        "bad \x80 byte",
		Stack:      "pkg.f (f.go:3)\npkg.g (g.go:9)",
		Steps:      2,
		Seats:      []episode.Seat{{ID: "a\u2028", Role: "r\"ole"}, {ID: "b", Role: "r"}},
		Turns: []episode.Turn{
			{
				Step: 1, Seat: 0, Turn: 0, Action: "\xc3\x28", Emit: true,
				Generation: &agents.Generation{
					Prompt: &protocol.Prompt{Messages: []protocol.ChatMessage{}},
					Tokens: &agents.Tokens{Prompt: []int{1}, Response: []int{2, 3}, LossMask: []int{1, 0}, LogProbs: []float64{math.Inf(-1), -0.25}},
				},
				Notes: map[string]any{
					"struct": ordered{Z: 1, A: 2},
					"big":    uint64(1<<63 + 1),
					"flag":   true,
					"list":   []any{"a", 1.5},
					"nan":    math.NaN(),
				},
			},
			{Step: 1, Seat: 1, Turn: 0, Action: "line\nbreak\ttab\x01", Emit: true, Generation: &agents.Generation{Prompt: &protocol.Prompt{}, Tokens: &agents.Tokens{}}, Notes: map[string]any{}},
		},
		Messages: []episode.Message{
			{Message: protocol.Message{From: "a", To: protocol.Channel("x"), Kind: "k", Payload: "p\xfe", Time: 1, Seq: 0}, Recipients: []int{1}},
			{Message: protocol.Message{From: protocol.EnvSender, To: protocol.To("b"), Kind: "hint", Payload: "informs", Time: 1, Seq: 1, Quiet: true}, Recipients: []int{1}},
		},
		Score: episode.Score{Team: math.NaN(), Agents: []float64{math.Inf(1), math.Copysign(0, -1), 5e-324}},
		Tree:  &episode.Tree{K: 2, Alpha: math.Copysign(0, -1), Roles: []string{}},
		Candidates: []episode.Candidate{
			{Turn: 1, Index: 0, Seed: math.MaxUint64, Action: "\xc3\x28", Invalid: "not \xff legal", Team: math.Inf(-1), Local: 5e-324, Reward: math.NaN(), Chosen: true,
				Generation: &agents.Generation{Completion: "c", Prompt: &protocol.Prompt{Text: ""}, Tokens: &agents.Tokens{Prompt: []int{7}, Response: []int{}, LogProbs: nil, LossMask: []int{1}}},
				Notes:      map[string]any{"struct": ordered{Z: 3, A: 4}}},
			{Turn: 1, Index: 1, Action: "", Notes: map[string]any{}},
		},
	}
}

func TestRoundTripOfEdgeCases(t *testing.T) {
	ep := edgeEpisode()
	got, data := roundTrip(t, ep)
	assert.Equal(t, string(data), string(wire.Encode(nil, got)), "the encoding is not stable")

	assert.Equal(t, ep.Params, got.Params)
	assert.Equal(t, ep.Err, got.Err)
	assert.Equal(t, ep.Seats, got.Seats)
	assert.Equal(t, ep.Messages, got.Messages)
	assert.Equal(t, ep.Seed, got.Seed)
	assert.Equal(t, ep.PolicySeed, got.PolicySeed)
	assert.Equal(t, ep.RolloutID, got.RolloutID)
	assert.Equal(t, ep.GroupIndex, got.GroupIndex)
	assert.True(t, math.IsNaN(got.Score.Team))
	require.Len(t, got.Score.Agents, 3)
	assert.True(t, math.IsInf(got.Score.Agents[0], 1))
	assert.True(t, math.Signbit(got.Score.Agents[1]), "-0 lost its sign")
	assert.Equal(t, 5e-324, got.Score.Agents[2])

	require.Len(t, got.Turns, 2)
	a := got.Turns[0].Generated()
	assert.Equal(t, ep.Turns[0].Action, got.Turns[0].Action, "an action's bytes must survive")
	require.NotNil(t, a.Prompt)
	assert.NotNil(t, a.Prompt.Messages, "an empty chat prompt became a text prompt")
	require.NotNil(t, a.Tokens)
	assert.Equal(t, ep.Turns[0].Generation.Tokens.Prompt, a.Tokens.Prompt)
	assert.Equal(t, ep.Turns[0].Generation.Tokens.LossMask, a.Tokens.LossMask)
	assert.True(t, math.IsInf(a.Tokens.LogProbs[0], -1))
	assert.Equal(t, -0.25, a.Tokens.LogProbs[1])
	assert.Equal(t, json.RawMessage(`{"z":1,"a":2}`), got.Turns[0].Notes["struct"], "the struct's field order must survive")
	assert.Equal(t, json.RawMessage(`9223372036854775809`), got.Turns[0].Notes["big"], "an integer beyond 2^53 must survive")
	assert.Equal(t, true, got.Turns[0].Notes["flag"], "a plain value comes back as its plain Go value")
	assert.Equal(t, []any{"a", 1.5}, got.Turns[0].Notes["list"])
	assert.Contains(t, got.Turns[0].Notes["nan"], "unencodable", "a note that does not encode arrives as the sample encoding writes it")

	b := got.Turns[1]
	assert.Equal(t, ep.Turns[1].Action, b.Action)
	assert.Equal(t, &protocol.Prompt{}, b.Generated().Prompt)
	assert.Equal(t, &agents.Tokens{}, b.Generated().Tokens)
	assert.Equal(t, map[string]any{}, b.Notes)

	require.NotNil(t, got.Tree)
	assert.Equal(t, 2, got.Tree.K)
	assert.True(t, math.Signbit(got.Tree.Alpha), "-0 lost its sign")
	assert.Equal(t, []string{}, got.Tree.Roles, "empty roles became none")
	require.Len(t, got.Candidates, 2)
	c, want := got.Candidates[0], ep.Candidates[0]
	assert.Equal(t, want.Seed, c.Seed)
	assert.Equal(t, want.Action, c.Action)
	assert.Equal(t, want.Invalid, c.Invalid)
	assert.Equal(t, want.Generation, c.Generation)
	assert.True(t, math.IsInf(c.Team, -1))
	assert.Equal(t, 5e-324, c.Local)
	assert.True(t, math.IsNaN(c.Reward))
	assert.True(t, c.Chosen)
	assert.Equal(t, json.RawMessage(`{"z":3,"a":4}`), c.Notes["struct"])
	assert.Nil(t, got.Candidates[1].Generation, "no generation became an empty one")
	assert.Equal(t, map[string]any{}, got.Candidates[1].Notes)
	assert.False(t, got.Candidates[1].Chosen)
}

func TestNilAndEmptyStayApart(t *testing.T) {
	empty := &episode.Record{
		Params:     map[string]string{},
		Seats:      []episode.Seat{},
		Turns:      []episode.Turn{{Legal: []string{}, Inbox: []int{}, Generation: &agents.Generation{Tokens: &agents.Tokens{Prompt: []int{}, Response: []int{}, LogProbs: []float64{}, LossMask: []int{}}}}},
		Messages:   []episode.Message{},
		Score:      episode.Score{Agents: []float64{}},
		Candidates: []episode.Candidate{},
	}
	got, _ := roundTrip(t, empty)
	assert.Equal(t, empty, got)
	got, _ = roundTrip(t, &episode.Record{})
	assert.Equal(t, &episode.Record{}, got)
}

func TestDecodeRejects(t *testing.T) {
	note := &episode.Record{Turns: []episode.Turn{{Notes: map[string]any{"flag": true}}}}
	badNote := wire.Encode(nil, note)
	k := bytes.Index(badNote, []byte("true"))
	require.Positive(t, k)
	badNote[k+3] = '!'
	for name, c := range map[string]struct {
		in   []byte
		want string
	}{
		"empty":           {nil, "no magic byte"},
		"json":            {[]byte(`{"v":3,"scenario":"elfarol"}`), "a JSON record (wire version 3 or older"},
		"no magic":        {[]byte{0x01, 4}, "no magic byte"},
		"other version":   {[]byte{0xB7, wire.Version + 1}, fmt.Sprintf("version %d, this build reads version %d", wire.Version+1, wire.Version)},
		"cut version":     {[]byte{0xB7, 0x80}, "a cut or overlong number"},
		"bad status":      {wire.Encode(nil, &episode.Record{Status: "done"}), `status "done"`},
		"transition seat": {wire.Encode(nil, &episode.Record{Transitions: []episode.Transition{{Event: "e", From: "a", To: "b"}}}), "transition 0 names seat 0 of 0"},
		"bad note":        {badNote, `note "flag"`},
		"trailing bytes":  {append(wire.Encode(nil, &episode.Record{}), 0), "1 bytes after the record"},
		"huge count":      {[]byte{0xB7, wire.Version, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, "items at byte"},
		"huge string":     {[]byte{0xB7, wire.Version, 0x7F}, "a string of 127 bytes"},
		"candidate turn":  {wire.Encode(nil, &episode.Record{Tree: &episode.Tree{K: 2}, Candidates: []episode.Candidate{{Turn: 0}}}), "candidate 0 is of turn 0 of 0"},
		"no tree":         {wire.Encode(nil, &episode.Record{Turns: []episode.Turn{{}}, Candidates: []episode.Candidate{{Turn: 0}}}), "1 candidates without a tree"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := wire.Decode(c.in)
			require.ErrorIs(t, err, wire.ErrDecode)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestDecodeRejectsEveryCut: no prefix of an encoding decodes, and none
// panics or allocates beyond what it holds.
func TestDecodeRejectsEveryCut(t *testing.T) {
	for _, ep := range append(played(t)[:4], edgeEpisode()) {
		data := wire.Encode(nil, ep)
		for n := range len(data) {
			_, err := wire.Decode(data[:n])
			require.ErrorIs(t, err, wire.ErrDecode, "%s/%d cut at %d of %d bytes", ep.Scenario, ep.Index, n, len(data))
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, ep := range append(played(f), edgeEpisode(), &episode.Record{}) {
		f.Add(wire.Encode(nil, ep))
	}
	f.Add([]byte(`{"v":3,"actions":[{"notes":{"x":{"b":1,"a":2}},"prompt":"p","tokens":{"log_probs":["NaN"]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ep, err := wire.Decode(data)
		if err != nil {
			require.ErrorIs(t, err, wire.ErrDecode)
			return
		}
		// Whatever decodes re-encodes to a fixed point.
		enc := wire.Encode(nil, ep)
		again, err := wire.Decode(enc)
		require.NoError(t, err, "re-encoding of %q", data)
		require.Equal(t, string(enc), string(wire.Encode(nil, again)))
	})
}

func BenchmarkEncode(b *testing.B) {
	eps := played(b)
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = wire.Encode(buf[:0], eps[i%len(eps)])
	}
}

func BenchmarkDecode(b *testing.B) {
	var data [][]byte
	for _, ep := range played(b) {
		data = append(data, wire.Encode(nil, ep))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := wire.Decode(data[i%len(data)]); err != nil {
			b.Fatal(err)
		}
	}
}

// llmEpisode is an episode the size an LLM run writes: 20 turns, each of
// 1500 prompt and 500 response tokens with log-probs and a chat prompt of
// about 6 KB.
func llmEpisode() *episode.Record {
	ep := &episode.Record{Scenario: "llm", Status: protocol.StatusCompleted, End: env.EndTerminated, Seats: []episode.Seat{{ID: "a", Role: "r"}}}
	for turn := range 20 {
		tk := &agents.Tokens{}
		for i := range 1500 {
			tk.Prompt = append(tk.Prompt, 100+(i*7919)%150000)
		}
		for i := range 500 {
			tk.Response = append(tk.Response, 100+(i*104729)%150000)
			tk.LossMask = append(tk.LossMask, 1)
			tk.LogProbs = append(tk.LogProbs, -float64(i%97)/37)
		}
		ep.Turns = append(ep.Turns, episode.Turn{
			Step: turn + 1, Turn: turn, Action: "accept", Emit: true,
			Generation: &agents.Generation{
				Completion: `{"action":"accept"}`,
				Prompt: &protocol.Prompt{Messages: []protocol.ChatMessage{
					{Role: "system", Content: strings.Repeat("You are a careful negotiator. ", 100)},
					{Role: "user", Content: strings.Repeat("The other side offered 40 for the lamp. ", 75)},
				}},
				Tokens: tk,
			},
		})
	}
	return ep
}

// BenchmarkLLMSizedEpisode measures encoding and decoding an episode the
// size an LLM run writes (see llmEpisode: about 600 KB encoded); MB/s is
// of the encoding.
func BenchmarkLLMSizedEpisode(b *testing.B) {
	ep := llmEpisode()
	data := wire.Encode(nil, ep)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var buf []byte
		for b.Loop() {
			buf = wire.Encode(buf[:0], ep)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := wire.Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
