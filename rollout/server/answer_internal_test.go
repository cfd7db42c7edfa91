package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
)

// rolloutOf is ep's rollout as the wire type declares it.
func rolloutOf(ep *trajectories.Episode) rollout.Rollout {
	r := rollout.Rollout{
		RolloutID: ep.RolloutID, GroupIndex: ep.GroupIndex, Episode: int(ep.Index),
		Seed: ep.Seed, PolicySeed: ep.PolicySeed, Status: ep.Status, End: ep.End, Error: ep.Err,
		TeamReward: ep.Score.Team, AgentScores: ep.Score.Agents,
		Seats: make([]rollout.Seat, len(ep.Seats)), Steps: ep.Steps, Turns: len(ep.Turns), Samples: ep.Samples,
	}
	if ep.Teams != nil {
		r.Teams = make([]rollout.TeamReward, len(ep.Teams))
		for t, name := range ep.Teams {
			r.Teams[t] = rollout.TeamReward{Team: name, Reward: ep.Score.Of(t)}
		}
	}
	for k, s := range ep.Seats {
		r.Seats[k] = rollout.Seat{ID: s.ID, Role: s.Role}
		if ep.Teams != nil {
			r.Seats[k].Team = ep.TeamName(s.Team)
		}
	}
	return r
}

// answerEpisodes plays requests on a service of bargain (teams) and
// tic-tac-toe (none) and returns their episodes, rebuilt from the
// answers: what the answer writer is given.
func answerEpisodes(t testing.TB, requests ...string) []*trajectories.Episode {
	t.Helper()
	reg, err := env.NewRegistry(bargain.New(), tictactoe.New())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Scenarios: reg})
	if err != nil {
		t.Fatal(err)
	}
	var eps []*trajectories.Episode
	for _, body := range requests {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, rollout.PathRollouts, strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		var res rollout.Response
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Rollouts {
			ep := &trajectories.Episode{Samples: r.Samples}
			ep.RolloutID, ep.GroupIndex, ep.Index = r.RolloutID, r.GroupIndex, int64(r.Episode)
			ep.Seed, ep.PolicySeed, ep.Status, ep.End, ep.Err = r.Seed, r.PolicySeed, r.Status, r.End, r.Error
			ep.Score.Team, ep.Score.Agents, ep.Steps, ep.Turns = r.TeamReward, r.AgentScores, r.Steps, make([]episode.Turn, r.Turns)
			team := map[string]int{}
			if r.Teams != nil {
				ep.Teams = []string{}
				for i, tr := range r.Teams {
					ep.Teams, ep.Score.Teams = append(ep.Teams, tr.Team), append(ep.Score.Teams, tr.Reward)
					team[tr.Team] = i
				}
			}
			for _, seat := range r.Seats {
				ep.Seats = append(ep.Seats, episode.Seat{ID: seat.ID, Role: seat.Role, Team: team[seat.Team]})
			}
			eps = append(eps, ep)
		}
	}
	return eps
}

var answerRequests = []string{
	`{"scenario":"tictactoe","n":8,"seed":1,"policy":"random"}`,
	`{"scenario":"bargain","n":8,"seed":3,"policy":"random"}`,
}

// TestAnswerWriterIsEncodingJSON: the answer writer's hand-written
// envelope is, byte for byte, encoding/json's over rollout.Response, the
// wire type, so that the two cannot drift. (It also writes what
// encoding/json refuses: a NaN or infinite reward as null.)
func TestAnswerWriterIsEncodingJSON(t *testing.T) {
	eps := answerEpisodes(t, answerRequests...)
	w := newAnswerWriter(nil, 1<<30)
	var res rollout.Response
	for _, ep := range eps {
		if err := w.WriteEpisode(ep); err != nil {
			t.Fatal(err)
		}
		res.Rollouts = append(res.Rollouts, rolloutOf(ep))
	}
	got, _ := w.end()
	want, err := encodeJSON(nil, res)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the answer writer and encoding/json differ at byte %d:\n got …%.200s\nwant …%.200s", i, got[max(0, i-100):], want[max(0, i-100):])
	}
}

// encodeJSON appends res to dst as encoding/json writes it, HTML
// characters unescaped (as the answer writer and slime's reader have
// them), with Encode's newline.
func encodeJSON(dst []byte, res rollout.Response) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(res)
	return b.Bytes(), err
}

// BenchmarkAnswerEncode compares the answer writer with encoding/json over
// rollout.Response (the samples by their MarshalJSON, AppendJSON), for
// the same 16 episodes.
func BenchmarkAnswerEncode(b *testing.B) {
	eps := answerEpisodes(b, answerRequests...)
	b.Run("appender", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			w := newAnswerWriter(buf[:0], 1<<30)
			for _, ep := range eps {
				if err := w.WriteEpisode(ep); err != nil {
					b.Fatal(err)
				}
			}
			buf, _ = w.end()
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			res := rollout.Response{Rollouts: make([]rollout.Rollout, len(eps))}
			for i, ep := range eps {
				res.Rollouts[i] = rolloutOf(ep)
			}
			var err error
			if buf, err = encodeJSON(buf[:0], res); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(buf)))
	})
}
