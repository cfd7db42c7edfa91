package viewer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// seedLines adds the lines of trajectories' golden episode files, and the
// samples projected from them, to f's corpus.
func seedLines(f *testing.F) {
	for _, name := range []string{"episode-signal.jsonl", "episode-tictactoe.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "trajectories", "testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			f.Add(bytes.TrimSpace(line))
			rec, credit, err := trajectories.DecodeEpisode(bytes.TrimSpace(line))
			if err != nil {
				f.Fatal(err)
			}
			ep := trajectories.NewEpisode(rec)
			trajectories.ApplyCredit(ep, credit, trajectories.RewardDict)
			for i := range ep.Samples {
				f.Add(ep.Samples[i].AppendJSON(nil))
			}
		}
	}
	// A tree-sampled episode: turn 0 is two samples.
	f.Add([]byte(`{"format":"troupe.episode/v2","scenario":"s","params":{},"seed":1,"policy_seed":2,"index":0,"rollout_id":0,"group_index":0,"status":"completed","end":"terminated","error":"","steps":1,"label":"","seats":[{"id":"a","role":"r"}],"turns":[{"seat":0,"step":1,"turn":0,"state":"","seed":0,"view":"","legal":null,"inbox":[],"action":"x","completion":"","invalid":"","notes":{},"emit":true}],"messages":[],"transitions":[],"score":{"team":1,"agents":null},"credit":{"allocators":["at-grpo"],"values":[[0.7,-0.7]],"notes":null},"tree":{"k":2,"alpha":1,"joint":false,"roles":[]},"candidates":[{"turn":0,"index":0,"seed":0,"action":"x","completion":"","invalid":"","notes":{},"team":1,"local":0,"reward":1,"chosen":true},{"turn":0,"index":1,"seed":5,"action":"y","completion":"","invalid":"","notes":{},"team":0,"local":0,"reward":0,"chosen":false}]}`))
	for _, s := range []string{"{}", `{"rollout_id":1,"status":"completed","reward":{"a":1,"b":"NaN"}}`, `{"format":"x"}`, `[`, `{"a":"\"}`, `{"rollout_id":-0,"status":"failed","metadata":null}`} {
		f.Add([]byte(s))
	}
}

// foldedDuplicate reports whether a top-level key of data matches one of
// fields only case-insensitively: encoding/json takes it for the field,
// the index (which reads troupe's own keys) does not.
func foldedDuplicate(data []byte, fields ...string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return true
	}
	for k := range m {
		for _, f := range fields {
			if k != f && strings.EqualFold(k, f) {
				return true
			}
		}
	}
	return false
}

// FuzzScanSample: the index's sample scanner never panics, and on every
// line that protocol's strict decoder reads, it reads the same identity,
// outcome, agent and reward.
func FuzzScanSample(f *testing.F) {
	seedLines(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var got sampleFacts
		s := newScanner(data)
		s.scanSample(&got, interner{})
		s.End()
		var want protocol.Sample
		if err := want.UnmarshalJSON(data); err != nil || got.Record {
			return
		}
		if foldedDuplicate(data, "rollout_id", "group_index", "status", "reward", "metadata", "format") || !utf8.Valid(data) {
			return
		}
		if s.Failed() {
			t.Fatalf("the strict decoder reads %q, the scanner fails: %v", data, s.error())
		}
		if got.RolloutID != want.RolloutID || got.GroupIndex != want.GroupIndex || got.Status != string(want.Status) {
			t.Fatalf("identity: scanned %+v, decoded %+v", got, want)
		}
		md := want.Metadata
		if got.Scenario != md.Scenario || got.Agent != md.Agent || got.Role != md.Role || got.End != md.End || got.Episode != md.Episode || got.Seed != md.Seed {
			t.Fatalf("metadata: scanned %+v, decoded %+v", got, md)
		}
		if got.HasScore != (md.AgentScore != nil) || (md.AgentScore != nil && got.AgentScore != *md.AgentScore) {
			t.Fatalf("agent_score: scanned %v %v, decoded %v", got.HasScore, got.AgentScore, md.AgentScore)
		}
		if got.Reward != want.Reward.Kind {
			t.Fatalf("reward kind: scanned %v, decoded %v", got.Reward, want.Reward.Kind)
		}
		switch got.Reward {
		case protocol.RewardScalar:
			if got.Value != want.Reward.Value {
				t.Fatalf("reward: scanned %v, decoded %v", got.Value, want.Reward.Value)
			}
		case protocol.RewardDict:
			last := map[string]float64{}
			for i, n := range got.DictNames {
				last[n] = got.DictValues[i]
			}
			if len(last) != len(want.Reward.Dict) {
				t.Fatalf("reward: scanned %v, decoded %v", last, want.Reward.Dict)
			}
			for k, v := range want.Reward.Dict {
				if last[k] != v {
					t.Fatalf("reward %q: scanned %v, decoded %v", k, last[k], v)
				}
			}
		}
	})
}

// FuzzScanEpisode: the episode scanner never panics, and on every line
// trajectories' strict decoder reads, it reads the same identity, seats,
// emitted turns, score and credit.
func FuzzScanEpisode(f *testing.F) {
	seedLines(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var got episodeFacts
		s := newScanner(data)
		s.scanEpisode(&got, interner{})
		s.End()
		rec, credit, err := trajectories.DecodeEpisode(data)
		if err != nil || !utf8.Valid(data) || foldedDuplicate(data, "format", "scenario", "params", "seed", "policy_seed", "index", "rollout_id", "group_index",
			"status", "end", "error", "steps", "label", "seats", "turns", "messages", "score", "credit") {
			return
		}
		if s.Failed() {
			t.Fatalf("the strict decoder reads %q, the scanner fails: %v", data, s.error())
		}
		if got.RolloutID != rec.RolloutID || got.Index != rec.Index || got.Status != string(rec.Status) || got.Scenario != rec.Scenario ||
			len(got.SeatRoles) != len(rec.Seats) || got.Turns != len(rec.Turns) || len(got.EmitSeats) != rec.Emitted() || got.Messages != len(rec.Messages) {
			t.Fatalf("scanned %+v, decoded %+v", got, rec)
		}
		if got.Team != rec.Score.Team && !(got.Team != got.Team && rec.Score.Team != rec.Score.Team) {
			t.Fatalf("team: scanned %v, decoded %v", got.Team, rec.Score.Team)
		}
		if credit != nil && len(got.Allocators) != len(credit.Allocators) {
			t.Fatalf("allocators: scanned %v, decoded %v", got.Allocators, credit.Allocators)
		}
	})
}

// FuzzOpen indexes arbitrary files and opens every episode found: no
// panic, Load either decodes an episode or names its line, and its page
// (its timelines and diagrams, whatever its transitions say) renders.
func FuzzOpen(f *testing.F) {
	seedLines(f)
	// One viewer and one file path for the whole run: parsing the
	// templates and making a directory per input cost most of an input's
	// time (4.2k inputs a minute); the viewer's state is reset for each.
	path := filepath.Join(f.TempDir(), "f.jsonl")
	v, err := New([]*File{{Name: "f.jsonl"}}, scenarios.Builtin())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		x, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		v.reset([]*File{x})
		for k := range x.Len() {
			if ep, err := x.Load(k); err == nil && ep.Info.Ordinal != k {
				t.Fatalf("episode %d loaded as %d", k, ep.Info.Ordinal)
			} else if err != nil && !strings.Contains(err.Error(), "line ") {
				t.Fatalf("episode %d: an error that names no line: %v", k, err)
			}
			if err := v.render(io.Discard, fmt.Sprintf("run-0/ep-%d.html", k), nil); err != nil {
				t.Fatalf("episode %d's page: %v", k, err)
			}
		}
		_ = x.Overview()
	})
}
