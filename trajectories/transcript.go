package trajectories

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/protocol"
)

// Transcript returns WriteTranscript's rendering of ep.
func Transcript(ep *Episode) string {
	var b strings.Builder
	_ = WriteTranscript(&b, ep) // a strings.Builder never fails
	return b.String()
}

// WriteTranscript writes a human-readable account of the whole episode to w:
// what golden files hold and what a reviewer reads to see what happened.
//
// The layout, in order:
//   - a header: scenario, parameters (sorted by name), seeds, identity
//     (index, rollout_id, group_index) and the seats with their roles (and
//     their [team], in a scenario with teams);
//   - the timeline, grouped by logical time: at each time the turns taken
//     ("x turn 0: "b2"") then the messages sent ("#3 x -> * (move): "b2""),
//     in order of play and send order. Time 0 holds what Start sent;
//   - the outcome: status, end reason, error, steps, turns, messages, the
//     team reward (the sum of the teams' and then each team's, in a
//     scenario with teams) and each seat's score;
//   - every sample: who, when, its reward, allocator and flags, the
//     scenario's metadata extras (sorted, JSON-encoded), the prompt (one
//     "| " line per prompt line) and the response.
//
// Actions, payloads and responses are quoted with strconv.Quote, so empty
// and whitespace answers are visible. Floats use the shortest decimal that
// round-trips ('g' format), so the output is deterministic: equal episodes
// give equal bytes. Sample fields that merely repeat the episode's (status,
// rollout_id, scenario, seed, end, error, team reward) are written only when
// they disagree with it, which flags a bookkeeping bug.
func WriteTranscript(w io.Writer, ep *Episode) error {
	bw := bufio.NewWriter(w)
	t := transcript{w: bw, ep: ep}
	t.header()
	t.timeline()
	t.outcome()
	t.samples()
	return bw.Flush()
}

type transcript struct {
	w  *bufio.Writer
	ep *Episode
}

func (t *transcript) printf(format string, args ...any) { fmt.Fprintf(t.w, format, args...) }

// seat names seat i by its id, or by its index when the episode has no such
// seat (a broken record should still print).
func (t *transcript) seat(i int) string {
	if i >= 0 && i < len(t.ep.Seats) {
		return t.ep.Seats[i].ID
	}
	return "seat#" + strconv.Itoa(i)
}

func (t *transcript) header() {
	ep := t.ep
	t.printf("scenario %s\n", ep.Scenario)
	if len(ep.Params) > 0 {
		parts := make([]string, 0, len(ep.Params))
		for _, k := range slices.Sorted(maps.Keys(ep.Params)) {
			parts = append(parts, k+"="+ep.Params[k])
		}
		t.printf("params %s\n", strings.Join(parts, " "))
	}
	t.printf("seed %d  policy_seed %d\n", ep.Seed, ep.PolicySeed)
	t.printf("episode %d  rollout_id %d  group_index %d\n", ep.Index, ep.RolloutID, ep.GroupIndex)
	t.printf("seats")
	for i, s := range ep.Seats {
		t.printf("  %d:%s", i, s.ID)
		if s.Role != s.ID {
			t.printf("(%s)", s.Role)
		}
		if ep.Teams != nil {
			t.printf("[%s]", ep.TeamName(s.Team))
		}
	}
	t.printf("\n")
}

// timeline merges the turns and the messages by logical time. A turn at
// step t comes before the messages of time t: those are what Apply sent in
// answer to it.
func (t *transcript) timeline() {
	acts, msgs := t.ep.Turns, t.ep.Messages
	time := -1
	at := func(now int) {
		if now != time {
			time = now
			t.printf("\nt=%d\n", now)
		}
	}
	for len(acts) > 0 || len(msgs) > 0 {
		if len(acts) > 0 && (len(msgs) == 0 || acts[0].Step <= msgs[0].Time) {
			a := &acts[0]
			acts = acts[1:]
			at(a.Step)
			t.printf("  %s turn %d: %s\n", t.seat(a.Seat), a.Turn, strconv.Quote(a.Action))
			continue
		}
		m := msgs[0]
		msgs = msgs[1:]
		at(m.Time)
		t.printf("  #%d %s -> %s (%s): %s\n", m.Seq, m.From, m.To, m.Kind, strconv.Quote(m.Payload))
	}
}

func (t *transcript) outcome() {
	ep := t.ep
	t.printf("\nend %s (%s) after %d steps, %d turns, %d messages\n", ep.Status, ep.End, ep.Steps, len(ep.Turns), len(ep.Messages))
	if ep.Err != "" {
		t.printf("error %s\n", ep.Err)
	}
	t.printf("team %s", formatFloat(ep.Score.Team))
	for k, v := range ep.Score.Teams {
		t.printf("  %s %s", ep.TeamName(k), formatFloat(v))
	}
	for i, v := range ep.Score.Agents {
		t.printf("  %s %s", t.seat(i), formatFloat(v))
	}
	t.printf("\n")
}

func (t *transcript) samples() {
	ep := t.ep
	for k := range ep.Samples {
		s := &ep.Samples[k]
		md := &s.Metadata
		t.printf("\nsample %d  index %d  %s", k, s.Index, md.Agent)
		if md.Role != md.Agent {
			t.printf("(%s)", md.Role)
		}
		t.printf(" turn %d step %d state %s\n", md.Turn, md.Step, md.State)

		t.printf("  reward %s", formatReward(s.Reward))
		if md.Allocator != "" {
			t.printf(" (%s)", md.Allocator)
		}
		if md.AgentScore != nil {
			t.printf("  agent_score %s", formatFloat(*md.AgentScore))
		}
		if md.TextOnly {
			t.printf("  text_only")
		}
		if s.RemoveSample {
			t.printf("  remove_sample")
		}
		t.printf("\n")
		t.disagreements(s)
		if text, ok := s.Label.Text(); ok {
			t.printf("  label %s\n", strconv.Quote(text))
		}
		if len(md.Extra) > 0 {
			t.printf("  extra")
			for _, key := range slices.Sorted(maps.Keys(md.Extra)) {
				v, err := json.Marshal(md.Extra[key])
				if err != nil {
					v = []byte("<unencodable: " + err.Error() + ">")
				}
				t.printf(" %s=%s", key, v)
			}
			t.printf("\n")
		}
		if len(s.Tokens) > 0 {
			t.printf("  tokens %v  response_length %d\n", s.Tokens, s.ResponseLength)
			if s.LossMask != nil {
				t.printf("  loss_mask %v\n", s.LossMask)
			}
			if s.RolloutLogProbs != nil {
				t.printf("  rollout_log_probs [%s]\n", joinFloats(s.RolloutLogProbs))
			}
		}
		t.prompt(s.Prompt)
		t.printf("  response %s\n", strconv.Quote(s.Response))
	}
}

// disagreements writes the sample fields that should equal the episode's
// but do not.
func (t *transcript) disagreements(s *protocol.Sample) {
	ep, md := t.ep, &s.Metadata
	var bad []string
	if s.Status != ep.Status {
		bad = append(bad, "status "+string(s.Status))
	}
	if s.RolloutID != ep.RolloutID {
		bad = append(bad, "rollout_id "+strconv.FormatInt(s.RolloutID, 10))
	}
	if s.GroupIndex != ep.GroupIndex {
		bad = append(bad, "group_index "+strconv.FormatInt(s.GroupIndex, 10))
	}
	if md.Scenario != ep.Scenario {
		bad = append(bad, "scenario "+md.Scenario)
	}
	if md.Seed != ep.Seed {
		bad = append(bad, "seed "+strconv.FormatUint(md.Seed, 10))
	}
	if md.Episode != ep.Index {
		bad = append(bad, "episode "+strconv.FormatInt(md.Episode, 10))
	}
	if md.End != ep.End {
		bad = append(bad, "end "+md.End)
	}
	if md.Error != ep.Err {
		bad = append(bad, "error "+strconv.Quote(md.Error))
	}
	want := ep.Score.Team
	if ep.Teams != nil {
		// The agent's side's reward.
		want = 0
		for i, seat := range ep.Seats {
			if seat.ID == md.Agent {
				want = ep.SeatReward(i)
			}
		}
	}
	if md.TeamReward != want {
		bad = append(bad, "team_reward "+formatFloat(md.TeamReward))
	}
	if len(bad) > 0 {
		t.printf("  DIFFERS FROM EPISODE: %s\n", strings.Join(bad, ", "))
	}
}

func (t *transcript) prompt(p protocol.Prompt) {
	if p.Messages == nil {
		t.printf("  prompt\n")
		t.block(p.Text)
		return
	}
	t.printf("  prompt (chat, %d messages)\n", len(p.Messages))
	for _, m := range p.Messages {
		t.printf("   [%s]\n", m.Role)
		t.block(m.Content)
	}
}

// block writes text one "    | line" per line, so that blank lines stay
// visible and indentation is unambiguous. A blank line is a bare "    |":
// golden files then carry no trailing spaces for editors to strip.
func (t *transcript) block(text string) {
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" {
			t.printf("    |\n")
			continue
		}
		t.printf("    | %s\n", line)
	}
}

// formatFloat is the transcript's one float format: the shortest decimal
// that round-trips. NaN and infinities print as such, so a broken score is
// visible rather than hidden.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func joinFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = formatFloat(f)
	}
	return strings.Join(parts, " ")
}

func formatReward(r protocol.Reward) string {
	switch r.Kind {
	case protocol.RewardScalar:
		return formatFloat(r.Value)
	case protocol.RewardDict:
		parts := make([]string, 0, len(r.Dict))
		for _, k := range slices.Sorted(maps.Keys(r.Dict)) {
			parts = append(parts, k+"="+formatFloat(r.Dict[k]))
		}
		return "{" + strings.Join(parts, " ") + "}"
	}
	return "null"
}
