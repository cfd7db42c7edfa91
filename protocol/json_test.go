package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// slimeKeys are the top-level keys troupe writes, in the order it writes
// them: slime's field names, in the order of slime's dataclass.
var slimeKeys = []string{
	"group_index", "index", "rollout_id", "prompt", "tokens", "response",
	"response_length", "label", "reward", "loss_mask", "rollout_log_probs",
	"remove_sample", "status", "metadata",
}

// objectKeys returns the keys of the JSON object data, in the order they
// appear, and the raw value of each.
func objectKeys(t *testing.T, data []byte) ([]string, map[string]json.RawMessage) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok, "not an object: %s", data)
	var keys []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		key, ok := tok.(string)
		require.True(t, ok, "object key %v is not a string", tok)
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
		keys = append(keys, key)
		vals[key] = v
	}
	tok, err = dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('}'), tok)
	_, err = dec.Token()
	require.ErrorIs(t, err, io.EOF, "trailing data after the object")
	return keys, vals
}

// decodeMap parses data the way a Python json.loads would see it.
func decodeMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	require.True(t, json.Valid(data), "invalid JSON: %s", data)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func TestAppendJSONTextOnlyExact(t *testing.T) {
	s := textOnlySample()
	want := `{"group_index":2,"index":7,"rollout_id":3,` +
		`"prompt":"Week 4. Last week 61 of 100 went to the bar.\nGo or stay?",` +
		`"tokens":[],"response":"go","response_length":0,"label":null,"reward":0.5,` +
		`"loss_mask":null,"rollout_log_probs":null,"remove_sample":false,"status":"completed",` +
		`"metadata":{"scenario":"elfarol","seed":42,"episode":3,"agent":"a1","role":"patron",` +
		`"turn":3,"step":3,"state":"deciding","team_reward":1.25,"raw_reward":0.5,` +
		`"allocator":"team","text_only":true,"end":"terminated"}}`
	assert.Equal(t, want, string(s.AppendJSON(nil)))
}

func TestAppendJSONGolden(t *testing.T) {
	var got []byte
	for _, f := range fixtures() {
		got = f.sample.AppendJSON(got)
		got = append(got, '\n')
	}
	path := filepath.Join("testdata", "fixtures.golden.jsonl")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run TestAppendJSONGolden -update ./protocol/ to create it")
	assert.Equal(t, string(want), string(got), "encoding changed; if on purpose, rerun with -update and review the diff")
}

func TestAppendJSONKeyOrder(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			keys, vals := objectKeys(t, f.sample.AppendJSON(nil))
			assert.Equal(t, slimeKeys, keys)

			md := f.sample.Metadata
			wantMeta := []string{"scenario", "seed", "episode", "agent", "role", "turn", "step", "state", "team_reward"}
			if f.sample.Reward.Kind == protocol.RewardScalar {
				wantMeta = append(wantMeta, "raw_reward")
			}
			if md.AgentScore != nil {
				wantMeta = append(wantMeta, "agent_score")
			}
			wantMeta = append(wantMeta, "allocator", "text_only", "end")
			if md.Error != "" {
				wantMeta = append(wantMeta, "error")
			}
			if md.Action != "" {
				wantMeta = append(wantMeta, "action")
			}
			for k := range md.Extra {
				wantMeta = append(wantMeta, k)
			}
			// Extras follow troupe's keys, sorted byte-wise.
			slices.Sort(wantMeta[len(wantMeta)-len(md.Extra):])
			metaKeys, _ := objectKeys(t, vals["metadata"])
			assert.Equal(t, wantMeta, metaKeys)
		})
	}
}

func TestAppendJSONTypes(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			s := f.sample
			m := decodeMap(t, s.AppendJSON(nil))

			assert.Equal(t, float64(s.GroupIndex), m["group_index"])
			assert.Equal(t, float64(s.Index), m["index"])
			assert.Equal(t, float64(s.RolloutID), m["rollout_id"])
			assert.Equal(t, s.Response, m["response"])
			assert.Equal(t, float64(s.ResponseLength), m["response_length"])
			assert.Equal(t, s.RemoveSample, m["remove_sample"])

			status, ok := m["status"].(string)
			require.True(t, ok, "status is %T", m["status"])
			assert.Equal(t, strings.ToLower(status), status)
			assert.Equal(t, string(s.Status), status)

			if s.Prompt.Messages != nil {
				list, ok := m["prompt"].([]any)
				require.True(t, ok, "chat prompt is %T", m["prompt"])
				require.Len(t, list, len(s.Prompt.Messages))
				for i, e := range list {
					assert.Equal(t, map[string]any{"role": s.Prompt.Messages[i].Role, "content": s.Prompt.Messages[i].Content}, e)
				}
			} else {
				assert.Equal(t, s.Prompt.Text, m["prompt"])
			}

			tokens, ok := m["tokens"].([]any)
			require.True(t, ok, "tokens must be a list, even when empty; got %T", m["tokens"])
			require.Len(t, tokens, len(s.Tokens))
			for i, tok := range tokens {
				assert.Equal(t, float64(s.Tokens[i]), tok)
			}

			if s.Label.IsNull() {
				assert.Nil(t, m["label"])
			} else {
				var want any
				require.NoError(t, json.Unmarshal([]byte(s.Label.JSON()), &want))
				assert.Equal(t, want, m["label"])
			}
			assert.Contains(t, m, "label")

			switch s.Reward.Kind {
			case protocol.RewardNull:
				assert.Nil(t, m["reward"])
			case protocol.RewardScalar:
				assert.Equal(t, s.Reward.Value, m["reward"])
			case protocol.RewardDict:
				want := map[string]any{}
				for k, v := range s.Reward.Dict {
					want[k] = v
				}
				assert.Equal(t, want, m["reward"])
			}

			if s.LossMask == nil {
				assert.Nil(t, m["loss_mask"])
			} else {
				mask, ok := m["loss_mask"].([]any)
				require.True(t, ok, "loss_mask is %T", m["loss_mask"])
				require.Len(t, mask, len(s.LossMask))
				for i, v := range mask {
					assert.Equal(t, float64(s.LossMask[i]), v)
				}
			}
			if s.RolloutLogProbs == nil {
				assert.Nil(t, m["rollout_log_probs"])
			} else {
				lps, ok := m["rollout_log_probs"].([]any)
				require.True(t, ok, "rollout_log_probs is %T", m["rollout_log_probs"])
				require.Len(t, lps, len(s.RolloutLogProbs))
				for i, v := range lps {
					assert.Equal(t, s.RolloutLogProbs[i], v)
				}
			}

			md, ok := m["metadata"].(map[string]any)
			require.True(t, ok, "metadata is %T", m["metadata"])
			assert.Equal(t, s.Metadata.Scenario, md["scenario"])
			assert.Equal(t, float64(s.Metadata.Seed), md["seed"])
			assert.Equal(t, float64(s.Metadata.Episode), md["episode"])
			assert.Equal(t, s.Metadata.Agent, md["agent"])
			assert.Equal(t, s.Metadata.Role, md["role"])
			assert.Equal(t, float64(s.Metadata.Turn), md["turn"])
			assert.Equal(t, float64(s.Metadata.Step), md["step"])
			assert.Equal(t, s.Metadata.State, md["state"])
			assert.Equal(t, s.Metadata.TeamReward, md["team_reward"])
			if s.Reward.Kind == protocol.RewardScalar {
				assert.Equal(t, s.Reward.Value, md["raw_reward"], "slime's raw_reward is the reward trained on")
			} else {
				assert.NotContains(t, md, "raw_reward", "a dict reward has no trained value until --reward-key picks one")
			}
			assert.Equal(t, s.Metadata.Allocator, md["allocator"])
			assert.Equal(t, s.Metadata.TextOnly, md["text_only"])
			assert.Equal(t, s.Metadata.End, md["end"])
			if s.Metadata.AgentScore != nil {
				assert.Equal(t, *s.Metadata.AgentScore, md["agent_score"])
			} else {
				assert.NotContains(t, md, "agent_score")
			}
			if s.Metadata.Error != "" {
				assert.Equal(t, s.Metadata.Error, md["error"])
			} else {
				assert.NotContains(t, md, "error")
			}
			for k, v := range s.Metadata.Extra {
				assert.Equal(t, v, md[k], "metadata extra %q", k)
			}
		})
	}
}

// TestAppendJSONZeroSample checks the keys that Go encoders typically get
// wrong: a zero rollout_id, the status and an empty metadata must all be
// written, with the right JSON types.
func TestAppendJSONZeroSample(t *testing.T) {
	var s protocol.Sample
	data := s.AppendJSON(nil)
	keys, vals := objectKeys(t, data)
	assert.Equal(t, slimeKeys, keys)
	assert.JSONEq(t, `0`, string(vals["rollout_id"]))
	assert.JSONEq(t, `0`, string(vals["group_index"]))
	assert.JSONEq(t, `0`, string(vals["index"]))
	assert.JSONEq(t, `""`, string(vals["prompt"]))
	assert.JSONEq(t, `[]`, string(vals["tokens"]))
	assert.JSONEq(t, `null`, string(vals["label"]))
	assert.JSONEq(t, `null`, string(vals["reward"]))
	assert.JSONEq(t, `null`, string(vals["loss_mask"]))
	assert.JSONEq(t, `null`, string(vals["rollout_log_probs"]))
	assert.JSONEq(t, `false`, string(vals["remove_sample"]))
	assert.JSONEq(t, `""`, string(vals["status"]))
	md := decodeMap(t, vals["metadata"])
	assert.NotNil(t, md, "metadata must be an object, never null")
	assert.Contains(t, md, "scenario")
}

func TestAppendJSONPromptShapes(t *testing.T) {
	tests := []struct {
		name   string
		prompt protocol.Prompt
		want   string
	}{
		{"empty text", protocol.Prompt{}, `""`},
		{"text", protocol.TextPrompt("hi"), `"hi"`},
		{"empty chat", protocol.Prompt{Text: "ignored", Messages: []protocol.ChatMessage{}}, `[]`},
		{"chat wins over text", protocol.Prompt{Text: "ignored", Messages: []protocol.ChatMessage{{Role: "user", Content: "hi"}}}, `[{"role":"user","content":"hi"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := textOnlySample()
			s.Prompt = tt.prompt
			_, vals := objectKeys(t, s.AppendJSON(nil))
			assert.Equal(t, tt.want, string(vals["prompt"]))
		})
	}
}

func TestAppendJSONRewardShapes(t *testing.T) {
	tests := []struct {
		name   string
		reward protocol.Reward
		want   string
	}{
		{"null", protocol.Reward{}, `null`},
		{"scalar zero", protocol.Scalar(0), `0`},
		{"scalar", protocol.Scalar(-1.5), `-1.5`},
		{"empty dict", protocol.DictReward(map[string]float64{}), `{}`},
		{"nil dict", protocol.Reward{Kind: protocol.RewardDict}, `{}`},
		{"dict sorted", protocol.DictReward(map[string]float64{"z": 1, "a": 2, "m": 0.5, "B": 3}), `{"B":3,"a":2,"m":0.5,"z":1}`},
		{"dict key escaped", protocol.DictReward(map[string]float64{"a\"b": 1}), `{"a\"b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := textOnlySample()
			s.Reward = tt.reward
			_, vals := objectKeys(t, s.AppendJSON(nil))
			assert.Equal(t, tt.want, string(vals["reward"]))
		})
	}
}

func TestAppendJSONNonFiniteIsNull(t *testing.T) {
	score := math.Inf(-1)
	s := tokenSample()
	s.Reward = protocol.Scalar(math.NaN())
	s.RolloutLogProbs[0] = math.Inf(-1)
	s.Metadata.TeamReward = math.Inf(1)
	s.Metadata.AgentScore = &score
	m := decodeMap(t, s.AppendJSON(nil))
	assert.Nil(t, m["reward"])
	assert.Nil(t, m["rollout_log_probs"].([]any)[0])
	md := m["metadata"].(map[string]any)
	assert.Nil(t, md["team_reward"])
	assert.Nil(t, md["raw_reward"])
	assert.Nil(t, md["agent_score"])

	s.Reward = protocol.DictReward(map[string]float64{"a": math.NaN(), "b": 1})
	m = decodeMap(t, s.AppendJSON(nil))
	assert.Equal(t, map[string]any{"a": nil, "b": 1.0}, m["reward"])
}

func TestAppendJSONMetadataExtra(t *testing.T) {
	t.Run("sorted after troupe's keys", func(t *testing.T) {
		s := textOnlySample()
		s.Metadata.Extra = map[string]any{"b": 1, "a": 2, "_": 3, "Z": 4}
		_, vals := objectKeys(t, s.AppendJSON(nil))
		keys, _ := objectKeys(t, vals["metadata"])
		assert.Equal(t, []string{"Z", "_", "a", "b"}, keys[len(keys)-4:])
	})
	t.Run("a shadowing key is never written twice", func(t *testing.T) {
		s := textOnlySample()
		s.Metadata.Extra = map[string]any{"seed": "shadow", "raw_reward": 9, "error": "x", "agent_score": 1, "mine": 1}
		_, vals := objectKeys(t, s.AppendJSON(nil))
		keys, mvals := objectKeys(t, vals["metadata"])
		for _, k := range keys {
			assert.Equal(t, 1, strings.Count(string(vals["metadata"]), `"`+k+`":`), "key %q", k)
		}
		assert.NotContains(t, keys, "error")
		assert.NotContains(t, keys, "agent_score")
		assert.JSONEq(t, `42`, string(mvals["seed"]))
		assert.JSONEq(t, `1`, string(mvals["mine"]))
	})
	t.Run("an unencodable value keeps the output valid", func(t *testing.T) {
		s := textOnlySample()
		s.Metadata.Extra = map[string]any{"bad": math.NaN(), "fn": func() {}, "ok": "yes"}
		m := decodeMap(t, s.AppendJSON(nil))
		md := m["metadata"].(map[string]any)
		assert.Equal(t, "yes", md["ok"])
		for _, k := range []string{"bad", "fn"} {
			v, ok := md[k].(string)
			require.True(t, ok, "%s is %T", k, md[k])
			assert.True(t, strings.HasPrefix(v, "unencodable: "), "%s = %q", k, v)
		}
	})
	t.Run("empty extra writes nothing", func(t *testing.T) {
		s := textOnlySample()
		want := string(s.AppendJSON(nil))
		s.Metadata.Extra = map[string]any{}
		assert.Equal(t, want, string(s.AppendJSON(nil)))
	})
}

func TestAppendJSONEscaping(t *testing.T) {
	s := textOnlySample()
	s.Prompt = protocol.Prompt{Messages: []protocol.ChatMessage{{Role: "us\"er", Content: "a\x00b\x1f\\c\u2028d\u2029e\xff"}}}
	s.Response = "line1\nline2\r\t\"q\""
	s.Label = protocol.TextLabel("<&>")
	s.Metadata.Agent = "\x7f"
	data := s.AppendJSON(nil)
	assert.NotContains(t, string(data), "\n", "a sample must fit on one JSONL line")
	assert.NotContains(t, string(data), "\u2028")
	m := decodeMap(t, data)
	assert.Equal(t, []any{map[string]any{"role": "us\"er", "content": "a\x00b\x1f\\c\u2028d\u2029e\ufffd"}}, m["prompt"])
	assert.Equal(t, s.Response, m["response"])
	assert.Equal(t, "<&>", m["label"])
	assert.Equal(t, "\x7f", m["metadata"].(map[string]any)["agent"])
}

func TestAppendJSONAfterIndex(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			s := f.sample
			full := s.AppendJSON(nil)
			prefix := `{"group_index":` + jsonInt(s.GroupIndex) + `,"index":` + jsonInt(s.Index) + `,`
			assert.Equal(t, string(full), prefix+string(s.AppendJSONAfterIndex(nil)))
		})
	}
	t.Run("negative and large indexes", func(t *testing.T) {
		s := textOnlySample()
		s.GroupIndex, s.Index = -1, math.MaxInt64
		m := decodeMap(t, s.AppendJSON(nil))
		assert.Equal(t, -1.0, m["group_index"])
		assert.Contains(t, string(s.AppendJSON(nil)), `"index":9223372036854775807,`)
	})
}

func jsonInt(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestAppendJSONAppends(t *testing.T) {
	s := textOnlySample()
	dst := []byte("prefix|")
	out := s.AppendJSON(dst)
	assert.Equal(t, "prefix|"+string(s.AppendJSON(nil)), string(out))
	out = s.AppendJSONAfterIndex([]byte("x"))
	assert.Equal(t, "x"+string(s.AppendJSONAfterIndex(nil)), string(out))
}

// TestAppendJSONDeterministic encodes samples whose maps are rebuilt each
// time, so that a dependence on map iteration order would show.
func TestAppendJSONDeterministic(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			want := f.sample.AppendJSON(nil)
			for range 50 {
				s := f.sample
				if s.Reward.Dict != nil {
					s.Reward = protocol.DictReward(s.Reward.Dict)
				}
				if s.Metadata.Extra != nil {
					extra := map[string]any{}
					for k, v := range s.Metadata.Extra {
						extra[k] = v
					}
					s.Metadata.Extra = extra
				}
				require.Equal(t, string(want), string(s.AppendJSON(nil)))
			}
		})
	}
}

func TestMarshalJSON(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			s := f.sample
			want := s.AppendJSON(nil)
			got, err := json.Marshal(s)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			got, err = json.Marshal(&s)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			got, err = json.Marshal([]protocol.Sample{s, s})
			require.NoError(t, err)
			assert.Equal(t, "["+string(want)+","+string(want)+"]", string(got))
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			data := f.sample.AppendJSON(nil)
			var got protocol.Sample
			require.NoError(t, got.UnmarshalJSON(data))
			assert.Equal(t, f.sample, got)
			assert.Equal(t, string(data), string(got.AppendJSON(nil)), "re-encoding must be byte-identical")
		})
	}
	t.Run("list through encoding/json", func(t *testing.T) {
		var want []protocol.Sample
		for _, f := range fixtures() {
			want = append(want, f.sample)
		}
		data, err := json.Marshal(want)
		require.NoError(t, err)
		var got []protocol.Sample
		require.NoError(t, json.Unmarshal(data, &got))
		assert.Equal(t, want, got)
	})
}

// TestUnmarshalSlimeToDict decodes what slime's Sample.to_dict writes: every
// slime field, including the ones troupe does not model.
func TestUnmarshalSlimeToDict(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "slime_to_dict.json"))
	require.NoError(t, err)
	var s protocol.Sample
	require.NoError(t, json.Unmarshal(data, &s))
	want := protocol.Sample{
		GroupIndex:      5,
		Index:           40,
		RolloutID:       12,
		Prompt:          protocol.Prompt{Messages: []protocol.ChatMessage{{Role: "user", Content: "Go or stay?"}}},
		Tokens:          []int{1, 2, 3, 4},
		Response:        "stay",
		ResponseLength:  2,
		Label:           protocol.TextLabel("stay"),
		Reward:          protocol.DictReward(map[string]float64{"team": 1, "equal_split": 0.25}),
		LossMask:        []int{1, 1},
		RolloutLogProbs: []float64{-0.5, -0.125},
		Status:          protocol.StatusTruncated,
		Metadata: protocol.Metadata{
			Scenario:   "elfarol",
			Seed:       18446744073709551615,
			TeamReward: 1,
			Extra:      map[string]any{"round_number": 3.0, "source_name": "troupe"},
		},
	}
	assert.Equal(t, want, s)
	require.NoError(t, s.Validate())
}

func TestUnmarshalDefaults(t *testing.T) {
	var s protocol.Sample
	require.NoError(t, s.UnmarshalJSON([]byte(`{"rollout_id":0,"status":"pending"}`)))
	assert.Equal(t, protocol.Sample{Status: protocol.StatusPending}, s)

	s = protocol.Sample{}
	require.NoError(t, s.UnmarshalJSON([]byte(`{"group_index":null,"index":null,"rollout_id":9,"prompt":null,`+
		`"tokens":null,"label":null,"reward":null,"loss_mask":null,"rollout_log_probs":null,"status":"failed","metadata":null}`)))
	assert.Equal(t, protocol.Sample{RolloutID: 9, Status: protocol.StatusFailed}, s)

	// A null metadata value is the zero value; a null agent_score stays absent.
	s = protocol.Sample{}
	require.NoError(t, s.UnmarshalJSON([]byte(`{"rollout_id":1,"status":"completed","metadata":{"agent_score":null,"turn":null,"x":null}}`)))
	assert.Nil(t, s.Metadata.AgentScore)
	assert.Equal(t, map[string]any{"x": nil}, s.Metadata.Extra)
}

func TestUnmarshalErrors(t *testing.T) {
	const ok = `"rollout_id":1,"status":"completed"`
	tests := []struct {
		name  string
		input string
		field string // the error must name it
	}{
		{"not json", `{"rollout_id":1,`, ""},
		{"not an object", `[1,2]`, ""},
		{"missing rollout_id", `{"status":"completed"}`, "rollout_id"},
		{"null rollout_id", `{"rollout_id":null,"status":"completed"}`, "rollout_id"},
		{"string rollout_id", `{"rollout_id":"1","status":"completed"}`, "rollout_id"},
		{"fractional rollout_id", `{"rollout_id":1.5,"status":"completed"}`, "rollout_id"},
		{"missing status", `{"rollout_id":1}`, "status"},
		{"null status", `{"rollout_id":1,"status":null}`, "status"},
		{"upper-case status", `{"rollout_id":1,"status":"COMPLETED"}`, "COMPLETED"},
		{"unknown status", `{"rollout_id":1,"status":"done"}`, "done"},
		{"numeric status", `{"rollout_id":1,"status":2}`, "status"},
		{"tokens not a list", `{` + ok + `,"tokens":"1 2"}`, "tokens"},
		{"token not an int", `{` + ok + `,"tokens":[1,2.5]}`, "tokens"},
		{"response not a string", `{` + ok + `,"response":1}`, "response"},
		{"loss_mask not a list", `{` + ok + `,"loss_mask":{}}`, "loss_mask"},
		{"log-probs of strings", `{` + ok + `,"rollout_log_probs":["a"]}`, "rollout_log_probs"},
		{"remove_sample not a bool", `{` + ok + `,"remove_sample":"no"}`, "remove_sample"},
		{"prompt a number", `{` + ok + `,"prompt":5}`, "prompt"},
		{"prompt an object", `{` + ok + `,"prompt":{"role":"user"}}`, "prompt"},
		{"prompt list of strings", `{` + ok + `,"prompt":["hi"]}`, "prompt"},
		{"prompt role not a string", `{` + ok + `,"prompt":[{"role":1,"content":"x"}]}`, "prompt"},
		{"reward a string", `{` + ok + `,"reward":"1"}`, "reward"},
		{"reward a list", `{` + ok + `,"reward":[1]}`, "reward"},
		{"reward a bool", `{` + ok + `,"reward":true}`, "reward"},
		{"reward dict of strings", `{` + ok + `,"reward":{"a":"x"}}`, "reward"},
		{"metadata a list", `{` + ok + `,"metadata":[]}`, "metadata"},
		{"metadata a string", `{` + ok + `,"metadata":"x"}`, "metadata"},
		{"metadata seed negative", `{` + ok + `,"metadata":{"seed":-1}}`, "metadata.seed"},
		{"metadata turn a string", `{` + ok + `,"metadata":{"turn":"3"}}`, "metadata.turn"},
		{"metadata agent_score a string", `{` + ok + `,"metadata":{"agent_score":"x"}}`, "metadata.agent_score"},
		{"metadata text_only a number", `{` + ok + `,"metadata":{"text_only":1}}`, "metadata.text_only"},
		{"metadata team_reward a string", `{` + ok + `,"metadata":{"team_reward":"1"}}`, "metadata.team_reward"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := textOnlySample()
			before := s
			err := s.UnmarshalJSON([]byte(tt.input))
			require.Error(t, err)
			assert.ErrorIs(t, err, protocol.ErrDecode)
			assert.Contains(t, err.Error(), tt.field)
			assert.Equal(t, before, s, "a failed decode must leave the sample as it was")

			// The same error surfaces through encoding/json, which checks
			// the syntax itself before it calls UnmarshalJSON.
			if json.Valid([]byte(tt.input)) {
				var viaJSON protocol.Sample
				assert.ErrorIs(t, json.Unmarshal([]byte(tt.input), &viaJSON), protocol.ErrDecode)
			}
		})
	}
}

func TestUnmarshalNaNNotAccepted(t *testing.T) {
	// JSON has no NaN; the decoder must not invent one from a string.
	var s protocol.Sample
	err := s.UnmarshalJSON([]byte(`{"rollout_id":1,"status":"completed","reward":NaN}`))
	require.Error(t, err)
	assert.True(t, errors.Is(err, protocol.ErrDecode))
}

// TestEncoderMatchesAppendJSONAfterIndex encodes a sequence of samples
// that share some fields and differ in others (the same string in new
// memory, -0 and +0, NaN, a changed prompt, the next episode, another
// allocator, status or scenario) through one Encoder: every encoding
// equals AppendJSONAfterIndex's.
func TestEncoderMatchesAppendJSONAfterIndex(t *testing.T) {
	var samples []protocol.Sample
	for _, f := range fixtures() {
		samples = append(samples, f.sample, f.sample)
	}
	a, b := textOnlySample(), textOnlySample()
	b.Prompt = protocol.TextPrompt(string([]byte(a.Prompt.Text))) // equal text, other bytes
	c := textOnlySample()
	c.Prompt = protocol.TextPrompt("other \"quoted\"\n")
	c.Metadata.State, c.Metadata.End, c.Metadata.Role = "won", "max_steps", "x"
	d := c
	d.Reward, d.Metadata.TeamReward = protocol.Scalar(math.Copysign(0, -1)), 0
	e := d
	e.Reward, e.Metadata.TeamReward = protocol.Scalar(math.NaN()), 1e-9
	f := e
	f.Metadata.Seed = 7
	score := 0.25
	f.Metadata.AgentScore = &score
	g := f
	other := -0.25
	g.Metadata.AgentScore = &other
	h := g
	h.RolloutID, h.Metadata.Episode = g.RolloutID+1, g.Metadata.Episode+1 // the next episode's
	i := h
	i.Metadata.Allocator, i.Metadata.TextOnly = "difference:c=null", !h.Metadata.TextOnly
	j := i
	j.Status, j.Metadata.Scenario = protocol.StatusTruncated, "other"
	samples = append(samples, a, b, c, c, d, e, e, a, f, g, f, g, h, h, g, i, i, j, j, i)
	for k := range 40 { // more distinct scores than the encoder keeps
		h := f
		v := float64(k%20) / 7
		h.Metadata.AgentScore = &v
		samples = append(samples, h)
	}
	var enc protocol.Encoder
	for i := range samples {
		want := string(samples[i].AppendJSONAfterIndex(nil))
		got := string(enc.AppendAfterIndex([]byte("x"), &samples[i]))
		assert.Equal(t, "x"+want, got, "sample %d", i)
	}
}
