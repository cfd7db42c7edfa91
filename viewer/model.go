package viewer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Episode is one decoded episode as the pages show it: built from an
// episode record (everything: the bus log, every turn, the credit) or from
// its samples (the emitted turns and their rewards; no bus log).
type Episode struct {
	Info *EpisodeInfo

	Scenario                string
	Params                  []KV
	Seed, PolicySeed        uint64
	Index, RolloutID, Group int64
	Status, End, Err, Label string
	Steps                   int
	Team                    float64
	Scored                  bool
	// Sides are the teams of a scenario that declares them (werewolf's
	// village and wolves): each one's reward and its members' credit;
	// nil for a scenario with one team.
	Sides []SideView

	Seats    []SeatView
	Turns    []TurnView
	Messages []MessageView
	// HasBus says whether the file holds the message log (episode
	// records do; samples hold only what each agent was shown).
	HasBus bool
	// Transitions are the moves of the seats' state machines in the
	// order they happened (episode records; samples have none).
	Transitions []TransitionView

	Allocators  []string
	CreditNotes []KV
	// Others is set on an episode cut down to a few of its agents
	// (subset) when a message it draws comes from an agent not shown.
	Others bool

	// States are the game's state after its start and after every step,
	// for a scenario the binary knows whose game draws it
	// (env.StateRenderer), from a replay of the record; StatesErr says why
	// a replay could not give them.
	States    []env.StepState
	StatesErr string
	// Empty is, per allocator, v(∅) for the Shapley allocators (whose
	// values sum to G − v(∅) over the agents): the team reward of a replay
	// with every seat absent (or playing its null action), NaN when it
	// could not be computed or for the other allocators.
	Empty []float64
	// record is the decoded record, until the viewer has replayed it.
	record *episode.Record
}

// KV is a note or parameter, its value as JSON text.
type KV struct{ Key, Value string }

// SideView is one team of an episode with teams.
type SideView struct {
	Name    string
	Reward  float64
	Members int
	// Credit is, per allocator, the sum over the side's members of their
	// value per sample; for a Shapley allocator whose Empty is known, the
	// side's Reward − Empty, which counts the members without samples.
	Credit []float64
	// Empty is, per allocator, v_T(∅) for the Shapley allocators: the
	// side's reward in a replay with its members absent (or null) and the
	// other sides present; NaN when it could not be computed or for the
	// other allocators.
	Empty []float64
}

// SeatView is one agent of an episode.
type SeatView struct {
	Seat     int
	ID, Role string
	Team     string // its team, in a scenario with teams
	Score    float64
	HasScore bool
	Samples  int
	// Credit is, per allocator, what the agent's samples got.
	Credit []AgentCredit
}

// AgentCredit sums one agent's values under one allocator.
type AgentCredit struct {
	N              int
	Sum, Min, Max  float64
	Counterfactual string // what a counterfactual allocator compared, derived from the value; "" if none
	// Derived is, for an agent without samples under an efficient
	// allocator (Shapley), its value implied by G − v(∅) and the other
	// agents' values; "" if none.
	Derived string
}

// Mean is the value per sample.
func (c AgentCredit) Mean() float64 {
	if c.N == 0 {
		return 0
	}
	return c.Sum / float64(c.N)
}

// Varies reports whether the agent's samples got different values.
func (c AgentCredit) Varies() bool { return c.N > 1 && c.Min != c.Max }

// TurnView is one turn.
type TurnView struct {
	N           int // position in the episode's turns
	Seat        int
	Agent, Role string
	Step, Turn  int
	State       string
	Emit        bool
	Sample      int // the emitted turn's sample position, -1 if not emitted

	View       string                 // the scenario's private view (records only)
	Prompt     string                 // the text prompt, when it is one
	Chat       []protocol.ChatMessage // the chat an LLM was sent
	Inbox      []int
	Legal      []string
	Action     string
	Completion string
	Invalid    string
	Notes      []KV
	Attempts   int      // llm_attempts: answers asked for
	Rejected   []string // llm_rejected: why earlier answers were refused
	// PromptTokens and CompletionTokens are the server's counts
	// (llm_prompt_tokens, llm_completion_tokens), -1 when absent.
	PromptTokens, CompletionTokens int
	PromptIDs, ResponseIDs         int // token ids recorded
	LogProbs                       []float64
	Credit                         []float64 // per allocator, for emitted turns
}

// Response is what the agent wrote.
func (t *TurnView) Response() string {
	if t.Completion != "" {
		return t.Completion
	}
	return t.Action
}

// TransitionView is one move of a seat's state machine: the event fired at
// a step (0: the game's start), the state it left and the one it entered
// (the same for a self-transition). K is its position in the record.
type TransitionView struct {
	K, Step, Seat   int
	Event, From, To string
}

// MessageView is one message of the bus log.
type MessageView struct {
	Seq, Time      int
	From, To, Kind string
	Payload        string
	Quiet          bool
	Recipients     []int
	FromSeat       int    // -1 when the sender is not a seat (the environment)
	Mode           string // direct, broadcast or channel
	Channel        string
	RecipientIDs   []string
}

// fromRecord builds the view of a decoded episode record.
func fromRecord(info *EpisodeInfo, rec *episode.Record, credit *trajectories.Credit) *Episode {
	e := &Episode{
		Info: info, Scenario: rec.Scenario, Params: paramKVs(rec.Params), Seed: rec.Seed, PolicySeed: rec.PolicySeed,
		Index: rec.Index, RolloutID: rec.RolloutID, Group: rec.GroupIndex,
		Status: string(rec.Status), End: rec.End, Err: rec.Err, Label: rec.Label, Steps: rec.Steps,
		Team: rec.Score.Team, Scored: rec.Finished(), HasBus: true, record: rec,
	}
	seatOf := map[string]int{}
	for i, s := range rec.Seats {
		sv := SeatView{Seat: i, ID: s.ID, Role: s.Role, Team: rec.TeamName(s.Team)}
		sv.Score, sv.HasScore = rec.AgentScore(i)
		e.Seats = append(e.Seats, sv)
		seatOf[s.ID] = i
	}
	if credit != nil {
		e.Allocators = credit.Allocators
		e.CreditNotes = noteKVs(credit.Notes)
	}
	// A turn's sample: its own, or for a tree-sampled turn its chosen
	// candidate's, among the K its candidates are (SampleRefs).
	sampleOf := make([]int, len(rec.Turns))
	for s, ref := range rec.SampleRefs(nil) {
		if ref.Candidate < 0 || rec.Candidates[ref.Candidate].Chosen {
			sampleOf[ref.Turn] = s
		}
	}
	for i := range rec.Turns {
		t := &rec.Turns[i]
		g := t.Generated()
		tv := TurnView{
			N: i, Seat: t.Seat, Agent: rec.Seats[t.Seat].ID, Role: rec.Seats[t.Seat].Role,
			Step: t.Step, Turn: t.Turn, State: string(t.State), Emit: t.Emit, Sample: -1,
			View: t.View, Inbox: t.Inbox, Legal: t.Legal, Action: t.Action, Completion: g.Completion, Invalid: t.Invalid,
		}
		if g.Prompt != nil && g.Prompt.Messages != nil {
			tv.Chat = g.Prompt.Messages
		} else if g.Prompt != nil {
			tv.Prompt = g.Prompt.Text
		} else {
			tv.Prompt = rec.TextPrompt(t)
		}
		tv.setNotes(t.Notes)
		if tk := g.Tokens; tk != nil {
			tv.PromptIDs, tv.ResponseIDs, tv.LogProbs = len(tk.Prompt), len(tk.Response), tk.LogProbs
		}
		if t.Emit {
			tv.Sample = sampleOf[i]
			if credit != nil {
				for a := range credit.Allocators {
					v, _ := credit.Value(a, tv.Sample)
					tv.Credit = append(tv.Credit, v)
				}
			}
		}
		e.Turns = append(e.Turns, tv)
	}
	for i := range rec.Messages {
		m := &rec.Messages[i]
		mv := MessageView{
			Seq: m.Seq, Time: m.Time, From: m.From, To: string(m.To), Kind: m.Kind, Payload: m.Payload,
			Quiet: m.Quiet, Recipients: m.Recipients, FromSeat: -1, Mode: "direct",
		}
		if s, ok := seatOf[m.From]; ok {
			mv.FromSeat = s
		}
		if m.To.IsBroadcast() {
			mv.Mode = "broadcast"
		} else if ch, ok := m.To.ChannelName(); ok {
			mv.Mode, mv.Channel = "channel", ch
		}
		for _, r := range m.Recipients {
			mv.RecipientIDs = append(mv.RecipientIDs, rec.Seats[r].ID)
		}
		e.Messages = append(e.Messages, mv)
	}
	for k, tr := range rec.Transitions {
		e.Transitions = append(e.Transitions, TransitionView{K: k, Step: tr.Step, Seat: tr.Seat, Event: string(tr.Event), From: string(tr.From), To: string(tr.To)})
	}
	e.sumCredit()
	e.sides(rec)
	return e
}

// sides fills Sides for a record of a scenario with teams, once the seats'
// credit is summed.
func (e *Episode) sides(rec *episode.Record) {
	for t, name := range rec.Teams {
		sv := SideView{Name: name, Reward: rec.Score.Of(t), Credit: make([]float64, len(e.Allocators)), Empty: make([]float64, len(e.Allocators))}
		for a := range sv.Empty {
			sv.Empty[a] = math.NaN()
		}
		for i := range e.Seats {
			if rec.Seats[i].Team != t {
				continue
			}
			sv.Members++
			for a := range sv.Credit {
				if a < len(e.Seats[i].Credit) {
					sv.Credit[a] += e.Seats[i].Credit[a].Mean()
				}
			}
		}
		e.Sides = append(e.Sides, sv)
	}
}

// fromSamples builds the view of an episode stored as samples: one turn
// per sample, the agents in order of their first sample.
func fromSamples(info *EpisodeInfo, samples []protocol.Sample) *Episode {
	e := &Episode{Info: info}
	if len(samples) == 0 {
		return e
	}
	first := &samples[0]
	md := &first.Metadata
	e.Scenario, e.Seed, e.Index, e.RolloutID, e.Group = md.Scenario, md.Seed, md.Episode, first.RolloutID, first.GroupIndex
	e.Status, e.End, e.Err, e.Team = string(first.Status), md.End, md.Error, md.TeamReward
	e.Scored = scored(string(first.Status))
	if text, ok := first.Label.Text(); ok {
		e.Label = text
	} else if !first.Label.IsNull() {
		e.Label = first.Label.JSON()
	}
	e.Allocators = sampleAllocators(samples)
	seatOf := map[string]int{}
	for k := range samples {
		s := &samples[k]
		seat, ok := seatOf[s.Metadata.Agent]
		if !ok {
			seat = len(e.Seats)
			seatOf[s.Metadata.Agent] = seat
			sv := SeatView{Seat: seat, ID: s.Metadata.Agent, Role: s.Metadata.Role}
			if s.Metadata.AgentScore != nil {
				sv.Score, sv.HasScore = *s.Metadata.AgentScore, true
			}
			e.Seats = append(e.Seats, sv)
		}
		tv := TurnView{
			N: k, Seat: seat, Agent: s.Metadata.Agent, Role: s.Metadata.Role, Step: s.Metadata.Step, Turn: s.Metadata.Turn,
			State: s.Metadata.State, Emit: true, Sample: k, Action: s.Response,
		}
		e.Steps = max(e.Steps, s.Metadata.Step)
		if s.Metadata.Action != "" {
			tv.Action, tv.Completion = s.Metadata.Action, s.Response
		}
		if s.Prompt.Messages != nil {
			tv.Chat = s.Prompt.Messages
		} else {
			tv.Prompt = s.Prompt.Text
		}
		notes := s.Metadata.Extra
		if inv, ok := notes["invalid"].(string); ok {
			tv.Invalid = inv
			notes = maps.Clone(notes)
			delete(notes, "invalid")
		}
		tv.setNotes(notes)
		if n := s.ResponseLength; n > 0 && n <= len(s.Tokens) {
			tv.PromptIDs, tv.ResponseIDs, tv.LogProbs = len(s.Tokens)-n, n, s.RolloutLogProbs
		}
		for _, a := range e.Allocators {
			v, _ := s.Reward.Get(a) // a scalar is its one allocator's
			tv.Credit = append(tv.Credit, v)
		}
		e.Turns = append(e.Turns, tv)
	}
	e.sumCredit()
	return e
}

// sampleAllocators names the allocators of an episode's sample rewards:
// metadata.allocator's order, then any other dict key in order of
// appearance.
func sampleAllocators(samples []protocol.Sample) []string {
	var out []string
	for k := range samples {
		s := &samples[k]
		switch s.Reward.Kind {
		case protocol.RewardScalar:
			name := strings.Fields(s.Metadata.Allocator)
			if len(name) == 0 {
				name = []string{"reward"}
			}
			out = appendNew(out, name[0])
		case protocol.RewardDict:
			for _, name := range strings.Fields(s.Metadata.Allocator) {
				if _, ok := s.Reward.Dict[name]; ok && !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
			out = appendNew(out, slices.Sorted(maps.Keys(s.Reward.Dict))...)
		}
	}
	return out
}

// setNotes keeps a turn's notes, reading the LLM's from them.
func (t *TurnView) setNotes(notes map[string]any) {
	t.Notes = noteKVs(notes)
	num := func(key string) int {
		if v, ok := notes[key].(float64); ok {
			return int(v)
		}
		if v, ok := notes[key].(int); ok {
			return v
		}
		return -1
	}
	t.PromptTokens, t.CompletionTokens = num("llm_prompt_tokens"), num("llm_completion_tokens")
	t.Attempts = max(num("llm_attempts"), 0)
	switch r := notes["llm_rejected"].(type) {
	case []any:
		for _, x := range r {
			t.Rejected = append(t.Rejected, fmt.Sprint(x))
		}
	case []string:
		t.Rejected = r
	}
}

// sumCredit fills every seat's samples and credit sums, and the
// counterfactual values the allocators compared where the credit implies
// them.
func (e *Episode) sumCredit() {
	for i := range e.Seats {
		e.Seats[i].Credit = make([]AgentCredit, len(e.Allocators))
	}
	for i := range e.Turns {
		t := &e.Turns[i]
		if !t.Emit {
			continue
		}
		s := &e.Seats[t.Seat]
		s.Samples++
		for a, v := range t.Credit {
			c := &s.Credit[a]
			if c.N == 0 || v < c.Min {
				c.Min = v
			}
			if c.N == 0 || v > c.Max {
				c.Max = v
			}
			c.N++
			c.Sum += v
		}
	}
	if !e.Scored {
		return
	}
	for a, name := range e.Allocators {
		what := counterfactualOf(name)
		if what == "" {
			continue
		}
		for i := range e.Seats {
			c := &e.Seats[i].Credit[a]
			if c.N > 0 && !c.Varies() {
				c.Counterfactual = fmt.Sprintf("G = %s against %s = G − value = %s", num(e.Team), what, num(e.Team-c.Min))
			}
		}
	}
}

// counterfactualOf says what an allocator of troupe's compares the team
// reward G with, when its value is G minus that (so the record, which
// keeps the value, implies it); "" for the others.
func counterfactualOf(name string) string {
	base, params, _ := strings.Cut(name, ":")
	switch base {
	case "difference":
		if strings.Contains(params, "c=average") {
			return "Σ_a p(a)·G(z with i playing a), the role's average action"
		}
		return "G(z with i playing its null action)"
	case "leave-one-out":
		if strings.Contains(params, "mode=null") {
			return "v(N \\ {i}), i playing its null action"
		}
		return "v(N \\ {i}), i absent"
	case "coma":
		return "the mean of G over i's alternative actions"
	}
	return ""
}

// paramKVs sorts a scenario's parameters.
func paramKVs(p map[string]string) []KV {
	out := make([]KV, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		out = append(out, KV{k, p[k]})
	}
	return out
}

// noteKVs sorts notes, each value as indented JSON.
func noteKVs(notes map[string]any) []KV {
	out := make([]KV, 0, len(notes))
	for _, k := range slices.Sorted(maps.Keys(notes)) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(notes[k]); err != nil {
			out = append(out, KV{k, fmt.Sprint(notes[k])})
			continue
		}
		out = append(out, KV{k, strings.TrimSpace(b.String())})
	}
	return out
}

// num formats a value for pages: up to 6 significant digits.
func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "−Inf"
	}
	s := fmt.Sprintf("%.6g", v)
	if s == "-0" {
		return "0"
	}
	return s
}
