// Package seats seats outside agent harnesses (the OpenAI Agents SDK, a
// Claude-Code-style agent, LangChain: programs that bring their own loop
// and tools) at a shared episode (play/table), and makes their turns
// trainable samples.
//
// A Seat is one seat of a table held for one harness. It serves the
// harness two things over HTTP (Seat.Handler):
//
//   - its model, through OpenAI's chat completions and Responses APIs,
//     streamed (server-sent events) or not: every call the harness makes
//     is forwarded to the real model server as a chat completion
//     (llm.Client.Forward: llama.cpp, vLLM, SGLang; a Responses request
//     is made one, decodeResponses) and recorded with the server's own
//     prompt ids, response ids and log-probs, never re-tokenised,
//     validated on ingest; a stream is written from the whole answer,
//     recorded before its first event;
//   - its tools, observe and act, over MCP (the official Go SDK's
//     streamable HTTP transport, at /mcp) and as plain function tools
//     (their OpenAI definitions at GET /tools, a call at POST
//     /tools/{name}).
//
// The calls a harness makes between two of its seat's moves belong to the
// turn the second move ends: when act takes a move, the seat builds the
// turn's Generation from them (turnGeneration: one sample per turn, the
// last call's, merged with the earlier calls it extends token for token)
// and gives the move to the table with it. The episode's record, and so
// its samples, carry the seat's turns like any policy's: the output stage
// (trajectories.Output, the allocators' credit) is the table's caller's.
// A server that returns no token ids makes text-only samples, marked
// text_only, with NoteEvalOnly and the reason in their metadata: fit for
// evaluation, never trained on.
//
// A harness that never acts is bounded by Options.ActTimeout: once its
// seat has waited that long for a move, the seat leaves the table, whose
// fallback plays the seat with the house policy (its turns then say so) or
// forfeits the episode.
package seats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
)

// Errors of a seat.
var (
	// ErrBadMove: act's arguments are not a move (wrong shape).
	ErrBadMove = errors.New("bad move")
	// ErrTimeout: the seat left the table because its harness did not
	// move within Options.ActTimeout.
	ErrTimeout = errors.New("no move in time")
)

// Options configure a Seat.
type Options struct {
	// ActTimeout bounds the wait for a move once the seat must act: when
	// it passes, the seat leaves the table (the table's fallback decides
	// what becomes of it) with the reason "no move within ...". 0: no
	// bound.
	ActTimeout time.Duration
	// ObserveWait bounds how long the observe tool waits for the seat's
	// turn before answering that it is not the seat's turn yet; 0 means
	// 60 seconds.
	ObserveWait time.Duration
	// MaxBody bounds a model request's body; 0 means 16 MiB.
	MaxBody int64
	// LLM, when set, is the model and sampling the seat's calls ask for
	// in place of its client's (llm.ForwardOptions.Config): one model
	// server serves the seats of several roles, each role its own model.
	// Make it from the client's Config, whose Kind it must keep.
	LLM *llm.Config
}

// Stats counts a seat's model calls.
type Stats struct {
	Calls     int // model calls (chat completions, Responses) forwarded and answered 2xx
	Trainable int // of which with the server's token ids
	EvalOnly  int // of which evaluation-only
	Refused   int // requests refused (400) or failed upstream
	Moves     int // moves the table took
	Orphaned  int // calls made after the seat's last move: no turn to belong to
	Dropped   int // streamed answers the harness stopped reading before their end (their calls are recorded all the same)
}

// Seat is one seat of a table, held for one outside agent harness. It is
// safe for concurrent use: the harness's model calls and tool calls may
// arrive at once.
type Seat struct {
	tb     *table.Table
	sess   *table.Session
	seat   int
	id     string
	role   string
	client *llm.Client
	opts   Options
	schema json.RawMessage // act's input schema
	moveIn string          // act's argument: "move" (a JSON move) or "action" (text)

	actMu    sync.Mutex // one move at a time
	mu       sync.Mutex
	calls    []*llm.Capture // captured since the last move
	asked    int            // calls asked since the last move, answered or not
	answered int            // Responses calls answered, for their ids
	stats    Stats
	moved    chan struct{} // a move was taken (buffered, 1)
	stop     context.CancelFunc
	done     chan struct{} // closed when the watcher returns
}

// New joins seat of tb for an outside harness whose model calls go to
// client. ctx bounds the seat's watcher, the goroutine that enforces
// ActTimeout; Close stops it.
func New(ctx context.Context, tb *table.Table, seat int, client *llm.Client, opts Options) (*Seat, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no model client", table.ErrBadConfig)
	}
	if opts.ActTimeout < 0 || opts.ObserveWait < 0 || opts.MaxBody < 0 {
		return nil, fmt.Errorf("%w: negative seat option", table.ErrBadConfig)
	}
	if opts.LLM != nil && opts.LLM.Kind != client.Config().Kind {
		return nil, fmt.Errorf("%w: the seat's model config is of kind %s, its client's of kind %s", table.ErrBadConfig, opts.LLM.Kind, client.Config().Kind)
	}
	if opts.ObserveWait == 0 {
		opts.ObserveWait = 60 * time.Second
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = 16 << 20
	}
	sess, err := tb.Join(seat)
	if err != nil {
		return nil, err
	}
	st := tb.Seats()[seat]
	s := &Seat{tb: tb, sess: sess, seat: seat, id: st.ID, role: st.Role, client: client, opts: opts,
		moved: make(chan struct{}, 1), done: make(chan struct{})}
	s.schema, s.moveIn = actSchema(tb, st.Role)
	wctx, cancel := context.WithCancel(ctx)
	s.stop = cancel
	go s.watch(wctx)
	return s, nil
}

// Close stops the seat's watcher. The seat stays at the table (Leave gives
// it up).
func (s *Seat) Close() {
	s.stop()
	<-s.done
}

// Leave gives the seat up to the table's fallback, with why.
func (s *Seat) Leave(ctx context.Context, why string) { s.sess.Leave(ctx, why) }

// ID is the seat's agent id; Role its role; Index its index at the table.
func (s *Seat) ID() string   { return s.id }
func (s *Seat) Role() string { return s.role }
func (s *Seat) Index() int   { return s.seat }

// Table returns the seat's table.
func (s *Seat) Table() *table.Table { return s.tb }

// Stats returns the seat's counters.
func (s *Seat) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// watch enforces ActTimeout: each time the seat must act, it waits for a
// move, and leaves the table when none comes in time.
func (s *Seat) watch(ctx context.Context) {
	defer close(s.done)
	if s.opts.ActTimeout == 0 {
		return
	}
	for {
		obs, err := s.sess.Observe(ctx)
		if err != nil || len(obs) == 0 {
			return
		}
		t := time.NewTimer(s.opts.ActTimeout)
		select {
		case <-s.moved:
			t.Stop()
		case <-t.C:
			s.sess.Leave(context.WithoutCancel(ctx), fmt.Sprintf("%v: the harness made no move within %v", ErrTimeout, s.opts.ActTimeout))
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// seatSeedStream separates the seeds of a seat's forwarded calls from every
// other use of a turn's seed.
const seatSeedStream = 0x5ea7

// callSeed is the seed a forwarded call gets when the harness sends none:
// drawn from the turn's seed and the number of calls asked in the turn
// before it (answered or not: a harness that asks again after an error
// gets a new draw), so that a replayed episode asks the same. nil when the
// seat does not act now.
func (s *Seat) callSeed() *int {
	obs := s.sess.Pending()
	if len(obs) == 0 {
		return nil
	}
	s.mu.Lock()
	k := s.asked
	s.asked++
	s.mu.Unlock()
	v := int(seeds.Mix(obs[0].Seed, seatSeedStream, uint64(k)) >> 33)
	return &v
}

// record keeps a call for the seat's next move.
func (s *Seat) record(c *llm.Capture) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Calls++
	if c.Trainable() {
		s.stats.Trainable++
	} else {
		s.stats.EvalOnly++
	}
	select {
	case <-s.tb.Done():
		s.stats.Orphaned++
		return
	default:
	}
	s.calls = append(s.calls, c)
}

// Observation is what the observe tool tells the harness, in JSON.
type Observation struct {
	Agent string `json:"agent"`
	Role  string `json:"role"`
	// Turn says whether the seat must act now; Done whether the episode
	// is over (then Status, End and Score say how it ended).
	Turn     bool     `json:"your_turn"`
	Done     bool     `json:"done"`
	State    string   `json:"state,omitempty"`
	Number   int      `json:"turn_number"`
	Step     int      `json:"step"`
	View     string   `json:"view,omitempty"`
	Legal    []string `json:"legal,omitempty"`
	Messages []string `json:"messages,omitempty"` // the inbox: delivered since the seat's previous turn
	Status   string   `json:"status,omitempty"`
	End      string   `json:"end,omitempty"`
	Score    *float64 `json:"score,omitempty"`
	// Text is the observation as the model reads it (the tool's text
	// content).
	Text string `json:"text"`
}

// Observe waits, at most ObserveWait, until the seat must act or the
// episode is over, and returns what the seat observes; Turn false and Done
// false mean the wait ran out.
func (s *Seat) Observe(ctx context.Context) (*Observation, error) {
	wctx, cancel := context.WithTimeout(ctx, s.opts.ObserveWait)
	defer cancel()
	obs, err := s.sess.Observe(wctx)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		o := &Observation{Agent: s.id, Role: s.role}
		o.Text = fmt.Sprintf("It is not your turn yet (waited %v): call observe again.", s.opts.ObserveWait)
		return o, nil
	case err != nil:
		return nil, err
	case len(obs) == 0:
		return s.ended(), nil
	}
	return s.observation(&obs[0].Observation), nil
}

// ended is the observation of an episode that is over.
func (s *Seat) ended() *Observation {
	o := &Observation{Agent: s.id, Role: s.role, Done: true}
	rec := s.tb.Record()
	if rec == nil {
		o.Text = "The episode is over."
		return o
	}
	o.Status, o.End = string(rec.Status), rec.End
	if s.seat < len(rec.Score.Agents) {
		v := rec.Score.Agents[s.seat]
		o.Score = &v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The episode is over (%s, %s).", o.Status, o.End)
	if o.Score != nil {
		fmt.Fprintf(&b, " Your score: %g.", *o.Score)
	}
	o.Text = b.String()
	return o
}

// observation renders a pending observation for the harness.
func (s *Seat) observation(ob *agents.Observation) *Observation {
	o := &Observation{Agent: s.id, Role: s.role, Turn: true, State: string(ob.State), Number: ob.Turn, Step: ob.Step, View: ob.View, Legal: ob.Legal}
	var b strings.Builder
	fmt.Fprintf(&b, "You are %s (role %s). It is your turn (your turn %d, step %d, state %s).\n", s.id, s.role, ob.Turn, ob.Step, ob.State)
	if len(ob.Inbox) > 0 {
		b.WriteString("\nMessages since your last turn:\n")
		for i := range ob.Inbox {
			var m strings.Builder
			episode.WriteMessage(&m, &ob.Inbox[i])
			o.Messages = append(o.Messages, m.String())
			b.WriteString(m.String())
			b.WriteByte('\n')
		}
	}
	if ob.View != "" {
		b.WriteString("\n")
		b.WriteString(ob.View)
		b.WriteString("\n")
	}
	if s.moveIn == "move" {
		b.WriteString("\nCall act with your move, a JSON object, as \"move\".")
	} else if ob.Legal != nil {
		fmt.Fprintf(&b, "\nLegal actions: %s. Call act with one of them as \"action\".", strings.Join(ob.Legal, ", "))
	} else {
		b.WriteString("\nCall act with your action as \"action\".")
	}
	o.Text = b.String()
	return o
}

// actSchema is act's input schema for role: a "move" that is the
// scenario's JSON move (env.StructuredActions), which servers such as
// llama.cpp then enforce by grammar, or an "action" string (actionArgs).
// The move's wrapper stays a literal: it splices the scenario's schema
// in as the scenario wrote it, which decoding it into a
// jsonschema.Schema and encoding it again would not keep byte for byte.
func actSchema(tb *table.Table, role string) (json.RawMessage, string) {
	setup := tb.Setup()
	if sa, ok := setup.Scenario.(env.StructuredActions); ok {
		if m := sa.ActionSchema(setup.Params, role); m != "" && json.Valid([]byte(m)) {
			return json.RawMessage(`{"type":"object","properties":{"move":` + m + `},"required":["move"],"additionalProperties":false}`), "move"
		}
	}
	return argSchemas().action, "action"
}

// moveText reads act's arguments: the move's text as the scenario reads
// it.
func (s *Seat) moveText(args json.RawMessage) (string, error) {
	var a map[string]json.RawMessage
	if err := json.Unmarshal(args, &a); err != nil || a == nil {
		return "", fmt.Errorf("%w: the arguments are not a JSON object", ErrBadMove)
	}
	v, ok := a[s.moveIn]
	if !ok {
		return "", fmt.Errorf("%w: no %q argument", ErrBadMove, s.moveIn)
	}
	if s.moveIn == "move" {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return "", fmt.Errorf("%w: move: %v", ErrBadMove, err)
		}
		return c.String(), nil
	}
	var text string
	if err := json.Unmarshal(v, &text); err != nil {
		return "", fmt.Errorf("%w: action must be a string", ErrBadMove)
	}
	return text, nil
}

// Act gives the seat's move, text, to the table, with the turn's model
// calls (turnGeneration) and the tool it came through (NoteTool). A move
// the table refuses (not the seat's turn, illegal, the episode over)
// changes nothing: the calls stay for the next try.
func (s *Seat) Act(ctx context.Context, text, tool string) error {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()
	g, notes, err := turnGeneration(ctx, s.client, calls, text)
	if err != nil {
		return err
	}
	if tool != "" {
		notes[NoteTool] = tool
	}
	if err := s.sess.Act(ctx, s.seat, agents.Action{Text: text, Generation: g, Notes: notes}); err != nil {
		return err
	}
	s.mu.Lock()
	s.calls = s.calls[len(calls):] // those that came in meanwhile are the next turn's
	s.asked = len(s.calls)
	s.stats.Moves++
	s.mu.Unlock()
	select {
	case s.moved <- struct{}{}:
	default:
	}
	return nil
}
