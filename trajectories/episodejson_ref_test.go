package trajectories

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
)

// appendEpisodeJSONReflect is the episode line as encoding/json writes an
// episodeLine, the form's definition: what AppendEpisodeJSON was before
// the hand-written encoder (episodeEncoder), which must match it byte for
// byte (episodejson_test.go).
func appendEpisodeJSONReflect(dst []byte, rec *episode.Record, credit *Credit) ([]byte, error) {
	l := episodeLine{
		Format: EpisodeFormat, Scenario: rec.Scenario, Params: rec.Params, Seed: rec.Seed, PolicySeed: rec.PolicySeed,
		Index: rec.Index, RolloutID: rec.RolloutID, GroupIndex: rec.GroupIndex,
		Status: rec.Status, End: rec.End, Error: rec.Err, Stack: rec.Stack, Steps: rec.Steps, Label: rec.Label,
		Seats:       make([]seatLine, len(rec.Seats)),
		Turns:       make([]turnLine, len(rec.Turns)),
		Messages:    make([]messageLine, len(rec.Messages)),
		Transitions: make([]transitionLine, len(rec.Transitions)),
		Teams:       rec.Teams,
		Score:       scoreLine{Team: jfloat(rec.Score.Team), Teams: jfloats(rec.Score.Teams), Agents: jfloats(rec.Score.Agents)},
	}
	for i, tr := range rec.Transitions {
		l.Transitions[i] = transitionLine{Step: tr.Step, Seat: tr.Seat, Event: string(tr.Event), From: string(tr.From), To: string(tr.To)}
	}
	if l.Params == nil {
		l.Params = map[string]string{}
	}
	for i, s := range rec.Seats {
		l.Seats[i] = seatLine{ID: s.ID, Role: s.Role, Team: rec.TeamName(s.Team)}
	}
	for i := range rec.Turns {
		t := &rec.Turns[i]
		tl := turnLine{
			Seat: t.Seat, Step: t.Step, Turn: t.Turn, State: string(t.State), Seed: t.Seed,
			View: t.View, Legal: t.Legal, Inbox: t.Inbox, Emit: t.Emit,
			answerLine: answerOf(t.Action, t.Generation, t.Invalid, t.Notes),
		}
		if tl.Inbox == nil {
			tl.Inbox = []int{}
		}
		l.Turns[i] = tl
	}
	for i := range rec.Messages {
		m := &rec.Messages[i]
		l.Messages[i] = messageLine{Seq: m.Seq, Time: m.Time, From: m.From, To: string(m.To), Kind: m.Kind, Payload: m.Payload, Recipients: m.Recipients, Quiet: m.Quiet}
		if l.Messages[i].Recipients == nil {
			l.Messages[i].Recipients = []int{}
		}
	}
	if credit != nil {
		cl := &creditLine{Allocators: credit.Allocators, Values: make([][]jfloat, len(credit.Values)), Notes: credit.Notes}
		for i, v := range credit.Values {
			cl.Values[i] = jfloats(v)
		}
		l.Credit = cl
	}
	if tr := rec.Tree; tr != nil {
		l.Tree = &treeLine{K: tr.K, Alpha: jfloat(tr.Alpha), Joint: tr.Joint, Roles: tr.Roles}
		for i := range rec.Candidates {
			c := &rec.Candidates[i]
			l.Candidates = append(l.Candidates, candidateLine{
				Turn: c.Turn, Index: c.Index, Seed: c.Seed,
				answerLine: answerOf(c.Action, c.Generation, c.Invalid, c.Notes),
				Team:       jfloat(c.Team), Local: jfloat(c.Local), Reward: jfloat(c.Reward), Chosen: c.Chosen,
			})
		}
	}
	b, err := json.Marshal(&l)
	if err != nil {
		// A note JSON cannot hold (NaN, a channel) must not cost the run
		// its record: such a value is written as the samples write it, the
		// string "unencodable: <why>", and the rest of the line as is.
		for i := range l.Turns {
			l.Turns[i].Notes = encodableNotes(l.Turns[i].Notes)
		}
		if l.Credit != nil {
			l.Credit.Notes = encodableNotes(l.Credit.Notes)
		}
		for i := range l.Candidates {
			l.Candidates[i].Notes = encodableNotes(l.Candidates[i].Notes)
		}
		if b, err = json.Marshal(&l); err != nil {
			return dst, fmt.Errorf("episode %d: %w", rec.Index, err)
		}
	}
	return append(append(dst, b...), '\n'), nil
}

// answerOf is an answer's line: a nil generation and nil notes as
// encoding/json is given them by the form (no prompt or tokens, {}).
func answerOf(action string, gen *agents.Generation, invalid string, notes map[string]any) answerLine {
	var g agents.Generation
	if gen != nil {
		g = *gen
	}
	a := answerLine{Action: action, Completion: g.Completion, Invalid: invalid, Notes: notes}
	if a.Notes == nil {
		a.Notes = map[string]any{}
	}
	if g.Prompt != nil {
		p := promptLine(*g.Prompt)
		a.Prompt = &p
	}
	if tk := g.Tokens; tk != nil {
		a.Tokens = &tokensLine{Prompt: tk.Prompt, Response: tk.Response, LogProbs: jfloats(tk.LogProbs), LossMask: tk.LossMask}
	}
	return a
}

// encodableNotes returns notes with every value that JSON cannot encode
// replaced by "unencodable: <why>", as protocol.Sample's encoder writes
// it; notes itself when all encode.
func encodableNotes(notes map[string]any) map[string]any {
	var out map[string]any
	for k, v := range notes {
		if _, err := json.Marshal(v); err != nil {
			if out == nil {
				out = maps.Clone(notes)
			}
			out[k] = "unencodable: " + err.Error()
		}
	}
	if out == nil {
		return notes
	}
	return out
}

func jfloats(v []float64) []jfloat {
	if v == nil {
		return nil
	}
	out := make([]jfloat, len(v))
	for i, x := range v {
		out[i] = jfloat(x)
	}
	return out
}
