package episode

import (
	"bytes"
	"unsafe"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/protocol"
)

// Seat is one agent of an episode: its id, its role and its team. An
// episode's seats are in a fixed order; that order breaks every tie.
//
// Team is the index of the seat's side in the scenario's declared teams
// (Record.Teams, env.Info.Teams): every seat belongs to exactly one team
// per episode, which a game with hidden roles draws from its seed. It is 0
// in a scenario that declares no teams, where every seat is on the one
// team.
type Seat struct {
	ID   string
	Role string
	Team int
}

// SameSeats reports whether a and b are the same seats in the same order:
// slices.Equal, quick when a game hands out the same strings every episode
// (El Farol's hundred patrons), whose bytes then compare by address.
func SameSeats(a, b []Seat) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || sameWords(a, b) {
		return true
	}
	for i := range a {
		if a[i].Team != b[i].Team || !strcmp.Equal(a[i].ID, b[i].ID) || !strcmp.Equal(a[i].Role, b[i].Role) {
			return false
		}
	}
	return true
}

// sameWords reports whether a and b, of one length, hold the same string
// headers, word for word: then every ID and Role is the same string, at the
// same address. One vectorised comparison of the arrays' memory is much
// quicker than comparing the seats one by one, which an engine and a
// learner do for every episode.
func sameWords(a, b []Seat) bool {
	size := len(a) * int(unsafe.Sizeof(Seat{}))
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), size), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), size))
}

// Score is a scenario's verdict on a finished episode: the team rewards
// and, for scenarios that have them, per-agent scores in seat order (nil
// when the scenario has none).
//
// A scenario that declares no teams has one: Team is its reward G and
// Teams is nil. A scenario that declares teams (sides: villagers and
// wolves, the two benches of a debate) gives each its own reward in Teams,
// indexed like its declared team list (Record.Teams), zero-sum or
// general-sum alike; Team is then the sum of Teams, the episode's total
// welfare (0 in a zero-sum game), which the engine works out: a game sets
// Teams only. The reward of a seat is its team's (Of): every allocator
// splits that, among that team's members.
type Score struct {
	Team   float64
	Teams  []float64
	Agents []float64
}

// Of returns team t's reward: Teams[t] in a scenario with teams, Team in
// one without (whose only team is 0). A t out of range is 0.
func (s Score) Of(t int) float64 {
	if s.Teams == nil {
		if t == 0 {
			return s.Team
		}
		return 0
	}
	if t < 0 || t >= len(s.Teams) {
		return 0
	}
	return s.Teams[t]
}

// Message is one entry of an episode's message log: a message as the bus
// stamped it (Time, Seq) and the seats it was delivered to, in seat order.
// Recipients are fixed when the message is sent: for a channel, its members
// at that moment (none, for a channel everyone has left); a broadcast or
// channel message never reaches its sender. A quiet message
// (protocol.Message.Quiet) is logged and delivered like any other. A
// message sent in the episode's last step is in the log too, with the
// recipients it would have reached.
type Message struct {
	protocol.Message
	Recipients []int
}

// Turn is one agent turn as it was played. Every turn is recorded, also those
// of agents whose turns are not emitted as samples, so that an episode can
// be replayed exactly.
type Turn struct {
	Seat  int          // the acting seat, an index into Record.Seats
	Step  int          // the episode's logical time of the turn
	Turn  int          // the agent's own turn number, from 0
	State agents.State // the agent's state-machine state when it acted
	Seed  uint64       // the turn's policy seed

	// View is the scenario's rendering of the state, Legal the legal
	// actions (nil: free-form).
	View  string
	Legal []string
	// Inbox holds the positions in Record.Messages (equal to their Seq) of
	// the messages delivered to the agent since its previous turn, in
	// delivery order.
	Inbox []int

	// Action is the move the game read.
	Action string
	// Generation is how a model policy produced the answer (its chat,
	// what it wrote around the move, its tokens); nil for policies without
	// a model.
	Generation *agents.Generation
	// Invalid says why the answer was invalid (agents.Action.Invalid).
	Invalid string
	// Notes are the policy's notes about the answer and the facts the
	// game noted about the turn (env.Step.Note), the game's last.
	Notes map[string]any
	// Emit says whether the turn becomes a training sample.
	Emit bool
}

// SetGeneration records g as t's Generation: nil when g is nil or says
// nothing (no completion, prompt or tokens), so that a turn recorded by the
// engine and one decoded from any of its encodings, which write the two
// alike, are equal.
func (t *Turn) SetGeneration(g *agents.Generation) {
	if g != nil && *g == (agents.Generation{}) {
		g = nil
	}
	t.Generation = g
}

// Generated returns what t's Generation points to, and the zero
// Generation (no completion, prompt or tokens) when it is nil: for readers
// that treat the two alike.
func (t *Turn) Generated() agents.Generation {
	if t.Generation == nil {
		return agents.Generation{}
	}
	return *t.Generation
}

// Record is one finished episode.
type Record struct {
	Scenario   string
	Params     map[string]string // the scenario parameters, as given
	Seed       uint64            // scenario seed: equal for every episode of a group
	PolicySeed uint64            // the root of every turn's policy seed

	Index      int64 // episode number within the run, from 0
	RolloutID  int64 // shared by all of this episode's samples
	GroupIndex int64 // the episodes of one GRPO group share it

	Status protocol.Status
	End    string // why it ended: "terminated", "max_steps", "interrupted", ...
	Err    string // for aborted and failed episodes
	// Stack is, for an episode a panic failed, where the panic was raised:
	// the panicking code's frames, innermost first, one per line as
	// "function (file.go:LINE)", from the panic up to troupe's engine,
	// with no directories, addresses or goroutine ids, so that the same
	// source writes the same record on every machine and goroutine.
	// Empty otherwise.
	Stack string

	Steps int    // logical steps taken
	Seats []Seat // the agents, in seat order
	// Teams names the scenario's declared teams (sides), which Seat.Team
	// and Score.Teams index; nil for a scenario with one team.
	Teams    []string
	Turns    []Turn    // every turn, in order of play
	Messages []Message // every message sent on the bus, in Seq order
	// Transitions are the moves of the seats' state machines, in the
	// order they happened. A seat is in its role's initial state until
	// its first transition.
	Transitions []Transition
	Score       Score
	Label       string // the scenario's ground truth, if it has one

	// Tree, when not nil, says how the episode was tree-sampled, and
	// Candidates holds the candidates drawn for its tree-sampled turns,
	// in order of their turns, then of their Index (see Tree).
	Tree       *Tree
	Candidates []Candidate

	// Replay, when non-nil, re-runs this episode with some agents' actions
	// or presence changed; counterfactual allocators need it. The engine
	// sets it for episodes it can reproduce.
	Replay Replayer
}

// Transition is one move of a seat's state machine: the event fired at a
// step (0: the game's Start), the state it left and the one it entered
// (the same for a self-transition). A transition a before_ or leave_
// callback cancelled, or that the state did not allow, is not one: the
// machine did not move.
type Transition struct {
	Step  int
	Seat  int
	Event agents.Event
	From  agents.State
	To    agents.State
}

// TeamCount returns the number of the episode's teams: len(Teams), and 1
// for a scenario that declares none.
func (r *Record) TeamCount() int {
	return max(1, len(r.Teams))
}

// SeatReward returns the reward of seat i's team, G_T for the team T of
// seat i (Score.Of); 0 for a seat out of range.
func (r *Record) SeatReward(i int) float64 {
	if i < 0 || i >= len(r.Seats) {
		return 0
	}
	return r.Score.Of(r.Seats[i].Team)
}

// TeamName returns the name of team t, "" in a scenario with one team.
func (r *Record) TeamName(t int) string {
	if t < 0 || t >= len(r.Teams) {
		return ""
	}
	return r.Teams[t]
}

// Members appends to dst the seats of team t, in seat order.
func (r *Record) Members(dst []int, t int) []int {
	for i := range r.Seats {
		if r.Seats[i].Team == t {
			dst = append(dst, i)
		}
	}
	return dst
}

// AgentScore returns seat i's individual score and whether the scenario has
// one.
func (r *Record) AgentScore(i int) (float64, bool) {
	if i < 0 || i >= len(r.Score.Agents) {
		return 0, false
	}
	return r.Score.Agents[i], true
}

// Emitted returns the number of the episode's samples: its emitted turns,
// each counted once per candidate when it was tree-sampled (Candidates):
// len(SampleRefs).
func (r *Record) Emitted() int {
	n := 0
	for i := range r.Turns {
		if r.Turns[i].Emit {
			n++
		}
	}
	for i := range r.Candidates {
		c := &r.Candidates[i]
		if c.Turn < 0 || c.Turn >= len(r.Turns) || !r.Turns[c.Turn].Emit {
			continue
		}
		// A turn's first candidate is its sample, counted above; the
		// others add one each.
		if i > 0 && r.Candidates[i-1].Turn == c.Turn {
			n++
		}
	}
	return n
}

// SampleRef is what one sample of a record is drawn from: the turn
// r.Turns[Turn] and, for a tree-sampled turn, its candidate
// r.Candidates[Candidate] (-1 for a turn that has none).
type SampleRef struct {
	Turn, Candidate int
}

// SampleRefs appends to dst what each of r's samples is drawn from, in
// the samples' order: the emitted turns in order of play, a tree-sampled
// turn giving one sample per candidate in the candidates' order (the
// chosen one among them). It is the one definition of that order, which
// the projection into samples and the allocators follow.
func (r *Record) SampleRefs(dst []SampleRef) []SampleRef {
	c := 0
	for k := range r.Turns {
		for c < len(r.Candidates) && r.Candidates[c].Turn < k {
			c++
		}
		if !r.Turns[k].Emit {
			continue
		}
		if c >= len(r.Candidates) || r.Candidates[c].Turn != k {
			dst = append(dst, SampleRef{Turn: k, Candidate: -1})
			continue
		}
		for ; c < len(r.Candidates) && r.Candidates[c].Turn == k; c++ {
			dst = append(dst, SampleRef{Turn: k, Candidate: c})
		}
	}
	return dst
}

// Finished reports whether the episode has an outcome: it completed or was
// truncated, and was scored.
func (r *Record) Finished() bool {
	return r.Status == protocol.StatusCompleted || r.Status == protocol.StatusTruncated
}
