package episode_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

func TestTextPromptRendersTheInboxFromTheLog(t *testing.T) {
	log := []episode.Message{
		{Message: protocol.Message{From: "env", To: "a", Kind: "brief", Payload: "red", Time: 0, Seq: 0}, Recipients: []int{0}},
		{Message: protocol.Message{From: "a", To: protocol.Broadcast, Kind: "word", Payload: "hi", Time: 1, Seq: 1}, Recipients: []int{1}},
	}
	rec := &episode.Record{Messages: log, Turns: []episode.Turn{
		{Seat: 0, View: "v0", Inbox: []int{0}, Emit: true},
		{Seat: 1, View: "", Inbox: []int{1}},
		{Seat: 0, View: "v2"},
	}}
	for k, want := range []string{
		episode.RenderObservation("v0", []protocol.Message{log[0].Message}),
		episode.RenderObservation("", []protocol.Message{log[1].Message}),
		"v2",
	} {
		if got := rec.TextPrompt(&rec.Turns[k]); got != want {
			t.Errorf("turn %d: TextPrompt = %q, want %q", k, got, want)
		}
	}
	if got, want := episode.RenderObservation("v", []protocol.Message{log[1].Message}), "v\nMessages:\n[t=1] a -> * (word): hi"; got != want {
		t.Errorf("RenderObservation = %q, want %q", got, want)
	}
	if n := rec.Emitted(); n != 1 {
		t.Errorf("Emitted = %d, want 1", n)
	}
	if _, ok := rec.AgentScore(0); ok {
		t.Error("AgentScore of a record without agent scores")
	}
}

// TestSameSeats: the same seats in the same order, whether their strings
// are the same ones or copies; anything else is not.
func TestSameSeats(t *testing.T) {
	seats := []episode.Seat{{ID: "a", Role: "r"}, {ID: "bb", Role: "r"}, {ID: "c", Role: "s"}}
	copied := make([]episode.Seat, len(seats))
	for i, s := range seats {
		copied[i] = episode.Seat{ID: strings.Clone(s.ID), Role: strings.Clone(s.Role)}
	}
	for _, c := range []struct {
		a, b []episode.Seat
		want bool
	}{
		{seats, seats, true},
		{seats, slices.Clone(seats), true},
		{seats, copied, true},
		{nil, []episode.Seat{}, true},
		{seats, seats[:2], false},
		{seats, []episode.Seat{{ID: "a", Role: "r"}, {ID: "bb", Role: "r"}, {ID: "c", Role: "r"}}, false},
		{seats, []episode.Seat{{ID: "a", Role: "r"}, {ID: "b", Role: "r"}, {ID: "c", Role: "s"}}, false},
		{seats, []episode.Seat{seats[1], seats[0], seats[2]}, false},
	} {
		if got := episode.SameSeats(c.a, c.b); got != c.want {
			t.Errorf("SameSeats(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// A turn records a Generation that says nothing as none, as its decoders
// read it back, and keeps one that says something as it was given.
func TestSetGenerationRecordsAnEmptyOneAsNone(t *testing.T) {
	var turn episode.Turn
	turn.SetGeneration(&agents.Generation{})
	if turn.Generation != nil {
		t.Fatalf("an empty generation was recorded: %+v", turn.Generation)
	}
	g := &agents.Generation{Completion: "{\"action\":\"b2\"}"}
	turn.SetGeneration(g)
	if turn.Generation != g {
		t.Fatalf("recorded %p, want the policy's %p", turn.Generation, g)
	}
	if got := turn.Generated(); got != *g {
		t.Fatalf("Generated() = %+v, want %+v", got, *g)
	}
	turn.SetGeneration(nil)
	if turn.Generation != nil || turn.Generated() != (agents.Generation{}) {
		t.Fatalf("nil was not recorded as none: %+v", turn.Generation)
	}
}
