package wire_test

import (
	"context"
	"encoding/json"
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
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// played returns real episodes of every built-in scenario, with Replay
// cleared (it never travels). El Farol is kept small: large inputs slow the
// fuzzer to a crawl.
func played(t testing.TB) []*trajectories.Episode {
	t.Helper()
	reg := scenarios.Builtin()
	var out []*trajectories.Episode
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
			ep := trajectories.NewEpisode(env.RunEpisode(context.Background(), env.Setup{
				Scenario: sc, Params: params, Seed: seed, PolicySeed: seed + 100,
				Index: int64(seed), RolloutID: 7 + int64(seed), GroupIndex: 2,
				Policy: env.SamePolicy(agents.Random()),
			}))
			ep.Replay = nil
			out = append(out, ep)
		}
	}
	return out
}

func roundTrip(t testing.TB, ep *trajectories.Episode) (*trajectories.Episode, []byte) {
	t.Helper()
	data := wire.Encode(nil, ep)
	require.True(t, json.Valid(data), "the encoding is not valid JSON: %s", data)
	got, err := wire.Decode(data)
	require.NoError(t, err)
	return got, data
}

func TestRoundTripOfPlayedEpisodes(t *testing.T) {
	eps := played(t)
	sawMessages := false
	for _, ep := range eps {
		got, data := roundTrip(t, ep)
		require.Equal(t, withoutSampleParts(ep), got, "episode %s/%d", ep.Scenario, ep.Index)
		assert.Equal(t, string(data), string(wire.Encode(nil, got)), "the encoding is not stable")
		sawMessages = sawMessages || len(ep.Messages) > 0
	}
	assert.True(t, sawMessages, "no built-in scenario sent a message: the messages path is untested")
}

// TestRoundTripKeepsTheJSONLBytes is the property the distributed runner
// relies on: a decoded episode writes the same JSONL as the original.
// withoutSampleParts is ep as it arrives: the turns' prompts, tokens and
// notes travel in their samples only.
func withoutSampleParts(ep *trajectories.Episode) *trajectories.Episode {
	c := *ep
	c.Turns = slices.Clone(ep.Turns)
	for i := range c.Turns {
		c.Turns[i].Prompt, c.Turns[i].Tokens, c.Turns[i].Notes = nil, nil, nil
	}
	return &c
}

func TestRoundTripKeepsTheJSONLBytes(t *testing.T) {
	for _, ep := range append(played(t), edgeEpisode()) {
		got, _ := roundTrip(t, ep)
		assert.Equal(t, jsonl(t, ep), jsonl(t, got), "episode %s/%d", ep.Scenario, ep.Index)
	}
}

func jsonl(t testing.TB, ep *trajectories.Episode) string {
	t.Helper()
	var b []byte
	for i := range ep.Samples {
		b = ep.Samples[i].AppendJSON(b)
		b = append(b, '\n')
	}
	return string(b)
}

type ordered struct {
	Z int `json:"z"`
	A int `json:"a"`
}

// edgeEpisode holds what JSON cannot carry as it is: non-finite floats,
// bytes that are not UTF-8, metadata values whose JSON changes on a trip
// through an interface, and empty-but-present slices and maps.
func edgeEpisode() *trajectories.Episode {
	agentScore := math.Inf(-1)
	return &trajectories.Episode{
		Record: episode.Record{
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
			Steps:      2,
			Seats:      []trajectories.Seat{{ID: "a\u2028", Role: "r\"ole"}, {ID: "b", Role: "r"}},
			Turns: []episode.Turn{
				{Step: 1, Seat: 0, Turn: 0, Action: "\xc3\x28"},
				{Step: 1, Seat: 1, Turn: 0, Action: "line\nbreak\ttab\x01"},
			},
			Messages: []episode.Message{{Message: protocol.Message{From: "a", To: protocol.Channel("x"), Kind: "k", Payload: "p\xfe", Time: 1, Seq: 0}, Recipients: []int{1}}},
			Score:    trajectories.Score{Team: math.NaN(), Agents: []float64{math.Inf(1), math.Copysign(0, -1), 5e-324}},
		},
		Samples: []protocol.Sample{
			{
				RolloutID: math.MaxInt64,
				Prompt:    protocol.Prompt{Messages: []protocol.ChatMessage{}},
				Tokens:    []int{1, 2, 3},
				Response:  "r", ResponseLength: 2,
				Reward:          protocol.Reward{Kind: protocol.RewardDict, Dict: map[string]float64{"x": math.NaN(), "y": 1.5}},
				LossMask:        []int{1, 0},
				RolloutLogProbs: []float64{math.Inf(-1), -0.25},
				Status:          protocol.StatusCompleted,
				Metadata: protocol.Metadata{
					Scenario: "edge", TeamReward: math.NaN(), AgentScore: &agentScore,
					Extra: map[string]any{
						"struct": ordered{Z: 1, A: 2},
						"big":    uint64(1<<63 + 1),
						"flag":   true,
						"list":   []any{"a", 1.5},
					},
				},
			},
			{
				RolloutID: math.MaxInt64,
				Prompt:    protocol.TextPrompt(""),
				LossMask:  nil,
				Reward:    protocol.Scalar(math.Inf(1)),
				Status:    protocol.StatusCompleted,
				Metadata:  protocol.Metadata{TextOnly: true},
			},
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
	assert.Equal(t, ep.Turns, got.Turns)
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

	require.Len(t, got.Samples, 2)
	s := got.Samples[0]
	assert.NotNil(t, s.Prompt.Messages, "an empty chat prompt became a text prompt")
	assert.True(t, math.IsNaN(s.Reward.Dict["x"]))
	assert.Equal(t, 1.5, s.Reward.Dict["y"])
	assert.True(t, math.IsInf(s.RolloutLogProbs[0], -1))
	assert.True(t, math.IsNaN(s.Metadata.TeamReward))
	require.NotNil(t, s.Metadata.AgentScore)
	assert.True(t, math.IsInf(*s.Metadata.AgentScore, -1))
	assert.Equal(t, json.RawMessage(`{"z":1,"a":2}`), s.Metadata.Extra["struct"], "the struct's field order must survive")
	assert.Equal(t, json.RawMessage(`9223372036854775809`), s.Metadata.Extra["big"], "an integer beyond 2^53 must survive")
	assert.Equal(t, true, s.Metadata.Extra["flag"], "a plain value comes back as its plain Go value")
	assert.Equal(t, []any{"a", 1.5}, s.Metadata.Extra["list"])

	s = got.Samples[1]
	assert.True(t, math.IsInf(s.Reward.Value, 1))
	assert.Equal(t, protocol.RewardScalar, s.Reward.Kind)
	assert.Nil(t, s.LossMask)
}

func TestNilAndEmptyStayApart(t *testing.T) {
	empty := &trajectories.Episode{
		Record: episode.Record{
			Params:   map[string]string{},
			Seats:    []trajectories.Seat{},
			Turns:    []episode.Turn{},
			Messages: []episode.Message{},
			Score:    trajectories.Score{Agents: []float64{}},
		},
		Samples: []protocol.Sample{},
	}
	got, _ := roundTrip(t, empty)
	assert.Equal(t, empty, got)
	got, _ = roundTrip(t, &trajectories.Episode{})
	assert.Equal(t, &trajectories.Episode{}, got)
}

func TestDecodeRejects(t *testing.T) {
	for name, c := range map[string]struct {
		in, want string
	}{
		"not json":          {`{"v":1,`, "unexpected end"},
		"no version":        {`{}`, "no version"},
		"future version":    {`{"v":2}`, "version 2"},
		"bad status":        {`{"v":1,"status":"done"}`, `status "done"`},
		"bad sample":        {`{"v":1,"samples":[{"status":"completed"}]}`, "rollout_id"},
		"bad float":         {`{"v":1,"score":{"team":"big"}}`, `"big" is not a number`},
		"bad b64":           {`{"v":1,"raw_strings":[{"f":"err","b64":"%%"}]}`, "b64"},
		"raw unknown field": {`{"v":1,"raw_strings":[{"f":"colour","b64":""}]}`, "unknown field"},
		"raw action":        {`{"v":1,"actions":[],"raw_strings":[{"f":"action","i":2,"b64":""}]}`, "has 0 actions"},
		"raw seat":          {`{"v":1,"raw_strings":[{"f":"seat_id","i":-1,"b64":""}]}`, "has 0 seats"},
		"raw message":       {`{"v":1,"raw_strings":[{"f":"payload","b64":""}]}`, "has 0 messages"},
		"raw param":         {`{"v":1,"params":{"a":"b"},"raw_strings":[{"f":"param","k":"c","b64":""}]}`, `no parameter "c"`},
		"raw status":        {`{"v":1,"raw_strings":[{"f":"status","b64":"/w=="}]}`, "is not a slime status"},
		"string object":     {`{"v":1,"err":{"x":"y"}}`, "cannot unmarshal object"},
		"fix out of range":  {`{"v":1,"samples":[],"fixes":[{"s":0,"f":"team_reward","v":1}]}`, "has 0 samples"},
		"fix without value": {`{"v":1,"samples":[{"rollout_id":1,"status":"completed"}],"fixes":[{"s":0,"f":"team_reward"}]}`, "no value"},
		"fix unknown field": {`{"v":1,"samples":[{"rollout_id":1,"status":"completed"}],"fixes":[{"s":0,"f":"nope","v":1}]}`, "unknown field"},
		"fix log prob":      {`{"v":1,"samples":[{"rollout_id":1,"status":"completed"}],"fixes":[{"s":0,"f":"log_prob","i":3,"v":"NaN"}]}`, "log-prob 3 of 0"},
		"fix dict":          {`{"v":1,"samples":[{"rollout_id":1,"status":"completed"}],"fixes":[{"s":0,"f":"reward_dict","k":"a","v":1}]}`, "not a dict"},
		"fix scalar":        {`{"v":1,"samples":[{"rollout_id":1,"status":"completed","reward":1}],"fixes":[{"s":0,"f":"reward","v":"NaN"}]}`, "not null"},
		"fix extra":         {`{"v":1,"samples":[{"rollout_id":1,"status":"completed"}],"fixes":[{"s":0,"f":"extra","k":"a"}]}`, "no raw value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := wire.Decode([]byte(c.in))
			require.ErrorIs(t, err, wire.ErrDecode)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, ep := range append(played(f), edgeEpisode(), &trajectories.Episode{}) {
		f.Add(wire.Encode(nil, ep))
	}
	f.Add([]byte(`{"v":1,"samples":[{"rollout_id":1,"status":"completed","metadata":{"x":{"b":1,"a":2}}}],"fixes":[{"s":0,"f":"extra","k":"x","raw":{"b":1,"a":2}}]}`))
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

// llmEpisode is an episode the size an LLM run writes: 20 turns, each a
// sample of 1500 prompt and 500 response tokens with log-probs and a chat
// prompt of about 6 KB.
func llmEpisode() *trajectories.Episode {
	ep := &trajectories.Episode{Record: episode.Record{Scenario: "llm", Status: protocol.StatusCompleted, End: env.EndTerminated, Seats: []trajectories.Seat{{ID: "a", Role: "r"}}}}
	for turn := range 20 {
		s := protocol.Sample{
			RolloutID: 1,
			Prompt: protocol.Prompt{Messages: []protocol.ChatMessage{
				{Role: "system", Content: strings.Repeat("You are a careful negotiator. ", 100)},
				{Role: "user", Content: strings.Repeat("The other side offered 40 for the lamp. ", 75)},
			}},
			Response:       `{"action":"accept"}`,
			ResponseLength: 500,
			Status:         protocol.StatusCompleted,
			Metadata:       protocol.Metadata{Scenario: "llm", Agent: "a", Role: "r", Turn: turn, Step: turn + 1},
		}
		for i := range 2000 {
			s.Tokens = append(s.Tokens, 100+(i*7919)%150000)
		}
		for i := range 500 {
			s.LossMask = append(s.LossMask, 1)
			s.RolloutLogProbs = append(s.RolloutLogProbs, -float64(i%97)/37)
		}
		ep.Samples = append(ep.Samples, s)
		ep.Turns = append(ep.Turns, episode.Turn{Step: turn + 1, Turn: turn, Action: s.Response})
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
