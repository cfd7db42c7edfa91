package trajectories

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// EpisodeFormat is the value of the "format" key that opens every line of
// an episode file: the name and version of the form below.
//
// Version 1 had no "transitions".
const EpisodeFormat = "troupe.episode/v2"

// The episode JSONL form (troupe.episode/v2) holds one episode per line: its
// record and its credit, the input of analysis tools and of the episode
// viewer. `troupe run --episodes-out PATH` writes it beside the samples:
// the same episodes, in the same order, whole lines only. The keys of a
// line, in order:
//
//   - "format": "troupe.episode/v2", always first;
//   - "scenario", "params" (an object of strings), "seed" (the scenario
//     seed), "policy_seed", "index" (the episode's number in the run),
//     "rollout_id", "group_index": the episode's identity;
//   - "status" (slime's: completed, truncated, aborted, failed), "end" (why
//     it ended: terminated, quiescent, no_seats, max_steps, ...), "error"
//     (empty unless aborted or failed), "stack" (only for an episode a
//     panic failed: where it was raised, episode.Record.Stack), "steps"
//     (logical steps taken), "label" (the scenario's ground truth, empty
//     if none);
//   - "teams": the names of the scenario's declared teams (sides), only
//     for a scenario that declares them (env.Info.Teams);
//   - "seats": [{"id", "role"}], in seat order: a seat number below is an
//     index into this list; in a scenario with teams each also has "team",
//     the name of its side in this episode (hidden roles are drawn per
//     episode);
//   - "turns": every turn in order of play, emitted or not, each with
//     "seat", "step" (logical time), "turn" (the agent's own number, from
//     0), "state" (its state-machine state), "seed" (the turn's policy
//     seed), "view" (the scenario's rendering), "legal" (the legal actions,
//     null for free-form), "inbox" (positions in "messages" of the
//     messages delivered since the agent's previous turn), "action" (the
//     move the game read), "completion" (what a model wrote around it,
//     empty if the same), "prompt" (only when the policy recorded the chat
//     it sent: a string or a list of {"role", "content"}; otherwise the
//     prompt is the view followed by the inbox messages, as in the
//     samples), "tokens" (only for policies with token ids: {"prompt",
//     "response", "log_probs", "loss_mask"}), "invalid" (why the answer was
//     invalid, empty if it was not), "notes" (the policy's and the game's
//     facts about the turn, an object), "emit" (whether the turn is a
//     sample);
//   - "messages": the bus log in send order, each with "seq" (its position),
//     "time" (the step that sent it; delivered at its end), "from", "to"
//     (an agent id, "*" for everyone, "#name" for a channel), "kind",
//     "payload", "recipients" (the seats it was delivered to, in seat
//     order: a channel's members when it was sent, never the sender), and
//     "quiet": true for a message that informs without waking (absent
//     otherwise; see protocol.Message.Quiet);
//   - "transitions": the moves of the seats' state machines in the order
//     they happened, each with "step" (0: the game's start), "seat",
//     "event", "from" and "to" (equal for a self-transition); a seat is in
//     its role's initial state before its first;
//   - "score": {"team", "agents"}: the team reward and the per-agent scores
//     in seat order (null when the scenario has none); in a scenario with
//     teams, "teams" between them holds each team's reward in the order
//     of "teams" (absent when the episode was not scored), and "team" is
//     their sum;
//   - "credit": null without allocators, else {"allocators": names in run
//     order, "values": per allocator one list with a value per sample, in
//     order (the k-th emitted turn is the episode's k-th sample, but for a
//     tree-sampled episode, whose sampled turns are K samples each:
//     episode.Record.SampleRefs), "notes": the allocators' notes, an
//     object or null};
//   - "tree" and "candidates", only for a tree-sampled episode
//     (episode.Tree): {"k", "alpha", "joint", "roles"}, and every
//     candidate in order of its turn and index, with "turn" (its index in
//     "turns"), "index", "seed", the answer's keys of a turn ("action" to
//     "notes"), "team", "local", "reward" and "chosen".
//
// Numbers that JSON cannot hold (NaN, +Inf, -Inf) are written as the
// strings "NaN", "+Inf" and "-Inf". Notes are JSON values: a number comes
// back as a float64 (so an integer beyond 2^53 or a struct's field order
// does not survive a decode), and a value JSON cannot encode is written as
// the string "unencodable: <why>", as in the samples. ReadEpisode is strict: unknown keys, another format or
// trailing data are errors.
type episodeLine struct {
	Format      string            `json:"format"`
	Scenario    string            `json:"scenario"`
	Params      map[string]string `json:"params"`
	Seed        uint64            `json:"seed"`
	PolicySeed  uint64            `json:"policy_seed"`
	Index       int64             `json:"index"`
	RolloutID   int64             `json:"rollout_id"`
	GroupIndex  int64             `json:"group_index"`
	Status      protocol.Status   `json:"status"`
	End         string            `json:"end"`
	Error       string            `json:"error"`
	Stack       string            `json:"stack,omitempty"`
	Steps       int               `json:"steps"`
	Label       string            `json:"label"`
	Teams       []string          `json:"teams,omitempty"`
	Seats       []seatLine        `json:"seats"`
	Turns       []turnLine        `json:"turns"`
	Messages    []messageLine     `json:"messages"`
	Transitions []transitionLine  `json:"transitions"`
	Score       scoreLine         `json:"score"`
	Credit      *creditLine       `json:"credit"`
	// Tree and Candidates are a tree-sampled episode's (episode.Tree):
	// absent from the lines of every other episode.
	Tree       *treeLine       `json:"tree,omitempty"`
	Candidates []candidateLine `json:"candidates,omitempty"`
}

type treeLine struct {
	K     int      `json:"k"`
	Alpha jfloat   `json:"alpha"`
	Joint bool     `json:"joint"`
	Roles []string `json:"roles"`
}

type candidateLine struct {
	Turn  int    `json:"turn"`
	Index int    `json:"index"`
	Seed  uint64 `json:"seed"`
	answerLine
	Team   jfloat `json:"team"`
	Local  jfloat `json:"local"`
	Reward jfloat `json:"reward"`
	Chosen bool   `json:"chosen"`
}

// generationOf is the generation a turn or candidate line records.
func generationOf(completion string, prompt *promptLine, tokens *tokensLine) *agents.Generation {
	g := agents.Generation{Completion: completion}
	if prompt != nil {
		p := protocol.Prompt(*prompt)
		g.Prompt = &p
	}
	if tk := tokens; tk != nil {
		g.Tokens = &agents.Tokens{Prompt: tk.Prompt, Response: tk.Response, LogProbs: floats(tk.LogProbs), LossMask: tk.LossMask}
	}
	return &g
}

// decodeTree reads a line's tree and candidates into rec, checking that
// every candidate names a turn of the line, in order, with its index.
func decodeTree(l *episodeLine, rec *episode.Record) error {
	if l.Tree == nil {
		if len(l.Candidates) > 0 {
			return fmt.Errorf("%w: %d candidates without a tree", ErrEpisodeLine, len(l.Candidates))
		}
		return nil
	}
	if l.Tree.K < 2 {
		return fmt.Errorf("%w: tree of %d candidates per turn (want at least 2)", ErrEpisodeLine, l.Tree.K)
	}
	rec.Tree = &episode.Tree{K: l.Tree.K, Alpha: float64(l.Tree.Alpha), Joint: l.Tree.Joint, Roles: l.Tree.Roles}
	if len(l.Candidates) == 0 {
		return nil
	}
	rec.Candidates = make([]episode.Candidate, len(l.Candidates))
	for i, cl := range l.Candidates {
		if cl.Turn < 0 || cl.Turn >= len(rec.Turns) {
			return fmt.Errorf("%w: candidate %d names turn %d of %d", ErrEpisodeLine, i, cl.Turn, len(rec.Turns))
		}
		if cl.Index < 0 || cl.Index >= l.Tree.K {
			return fmt.Errorf("%w: candidate %d has index %d of %d", ErrEpisodeLine, i, cl.Index, l.Tree.K)
		}
		if i > 0 {
			if p := l.Candidates[i-1]; cl.Turn < p.Turn || (cl.Turn == p.Turn && cl.Index <= p.Index) {
				return fmt.Errorf("%w: candidate %d (turn %d, index %d) is out of order", ErrEpisodeLine, i, cl.Turn, cl.Index)
			}
		}
		c := episode.Candidate{
			Turn: cl.Turn, Index: cl.Index, Seed: cl.Seed, Action: cl.Action, Invalid: cl.Invalid,
			Team: float64(cl.Team), Local: float64(cl.Local), Reward: float64(cl.Reward), Chosen: cl.Chosen,
		}
		if len(cl.Notes) > 0 {
			c.Notes = cl.Notes
		}
		g := generationOf(cl.Completion, cl.Prompt, cl.Tokens)
		if *g != (agents.Generation{}) {
			c.Generation = g
		}
		rec.Candidates[i] = c
	}
	// Every sampled turn went on with one of its candidates.
	for lo := 0; lo < len(rec.Candidates); {
		hi, chosen := lo, 0
		for ; hi < len(rec.Candidates) && rec.Candidates[hi].Turn == rec.Candidates[lo].Turn; hi++ {
			if rec.Candidates[hi].Chosen {
				chosen++
			}
		}
		if chosen != 1 {
			return fmt.Errorf("%w: turn %d has %d chosen candidates (want 1)", ErrEpisodeLine, rec.Candidates[lo].Turn, chosen)
		}
		lo = hi
	}
	return nil
}

// checkTeams checks a line's teams: distinct names, at least two when
// any; every seat on one of them (and none on a team when there are
// none); a reward per team or none.
func checkTeams(l *episodeLine) error {
	if l.Teams == nil {
		for i, s := range l.Seats {
			if s.Team != "" {
				return fmt.Errorf("%w: seat %d is on team %q, and the episode declares no teams", ErrEpisodeLine, i, s.Team)
			}
		}
		if l.Score.Teams != nil {
			return fmt.Errorf("%w: the score has %d team rewards, and the episode declares no teams", ErrEpisodeLine, len(l.Score.Teams))
		}
		return nil
	}
	if len(l.Teams) < 2 {
		return fmt.Errorf("%w: %d teams declared (a scenario with teams has at least two)", ErrEpisodeLine, len(l.Teams))
	}
	for t, name := range l.Teams {
		if name == "" || slices.Index(l.Teams, name) < t {
			return fmt.Errorf("%w: team %d is called %q: team names are distinct and not empty", ErrEpisodeLine, t, name)
		}
	}
	for i, s := range l.Seats {
		if !slices.Contains(l.Teams, s.Team) {
			return fmt.Errorf("%w: seat %d is on team %q, not one of the teams %q", ErrEpisodeLine, i, s.Team, l.Teams)
		}
	}
	if l.Score.Teams != nil && len(l.Score.Teams) != len(l.Teams) {
		return fmt.Errorf("%w: the score has %d team rewards for %d teams", ErrEpisodeLine, len(l.Score.Teams), len(l.Teams))
	}
	return nil
}

type seatLine struct {
	ID   string `json:"id"`
	Role string `json:"role"`
	Team string `json:"team,omitempty"`
}

type turnLine struct {
	Seat  int      `json:"seat"`
	Step  int      `json:"step"`
	Turn  int      `json:"turn"`
	State string   `json:"state"`
	Seed  uint64   `json:"seed"`
	View  string   `json:"view"`
	Legal []string `json:"legal"`
	Inbox []int    `json:"inbox"`
	answerLine
	Emit bool `json:"emit"`
}

// answerLine is a policy's answer, as a turn and a candidate write it.
type answerLine struct {
	Action     string         `json:"action"`
	Completion string         `json:"completion"`
	Prompt     *promptLine    `json:"prompt,omitempty"`
	Tokens     *tokensLine    `json:"tokens,omitempty"`
	Invalid    string         `json:"invalid"`
	Notes      map[string]any `json:"notes"`
}

type messageLine struct {
	Seq        int    `json:"seq"`
	Time       int    `json:"time"`
	From       string `json:"from"`
	To         string `json:"to"`
	Kind       string `json:"kind"`
	Payload    string `json:"payload"`
	Recipients []int  `json:"recipients"`
	Quiet      bool   `json:"quiet,omitempty"`
}

type transitionLine struct {
	Step  int    `json:"step"`
	Seat  int    `json:"seat"`
	Event string `json:"event"`
	From  string `json:"from"`
	To    string `json:"to"`
}

type scoreLine struct {
	Team   jfloat   `json:"team"`
	Teams  []jfloat `json:"teams,omitempty"`
	Agents []jfloat `json:"agents"`
}

type tokensLine struct {
	Prompt   []int    `json:"prompt"`
	Response []int    `json:"response"`
	LogProbs []jfloat `json:"log_probs"`
	LossMask []int    `json:"loss_mask"`
}

type creditLine struct {
	Allocators []string       `json:"allocators"`
	Values     [][]jfloat     `json:"values"`
	Notes      map[string]any `json:"notes"`
}

// promptLine is a recorded prompt: a JSON string, or a list of chat
// messages.
type promptLine protocol.Prompt

func (p promptLine) MarshalJSON() ([]byte, error) {
	if p.Messages == nil {
		return json.Marshal(p.Text)
	}
	return json.Marshal(p.Messages)
}

func (p *promptLine) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		*p = promptLine{}
		return json.Unmarshal(data, &p.Text)
	}
	var msgs []protocol.ChatMessage
	if err := strictUnmarshal(data, &msgs); err != nil {
		return err
	}
	if msgs == nil {
		return errors.New("prompt: want a string or a list of chat messages")
	}
	*p = promptLine{Messages: msgs}
	return nil
}

// jfloat is a float64 whose non-finite values are JSON strings.
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *jfloat) UnmarshalJSON(data []byte) error {
	switch string(data) {
	case `"NaN"`:
		*f = jfloat(math.NaN())
	case `"+Inf"`:
		*f = jfloat(math.Inf(1))
	case `"-Inf"`:
		*f = jfloat(math.Inf(-1))
	default:
		var v float64
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		*f = jfloat(v)
	}
	return nil
}

func floats(v []jfloat) []float64 {
	if v == nil {
		return nil
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// AppendEpisodeJSON appends the episode JSONL line of rec and its credit
// (nil: none), newline included, to dst. A note that JSON cannot encode is
// written as the samples write it, the string "unencodable: <why>", so
// the error is always nil.
func AppendEpisodeJSON(dst []byte, rec *episode.Record, credit *Credit) ([]byte, error) {
	var e episodeEncoder
	return e.appendEpisode(dst, rec, credit), nil
}

// ErrEpisodeLine is wrapped by DecodeEpisode's errors: the line is not a
// troupe.episode/v2 episode.
var ErrEpisodeLine = errors.New("not a troupe episode line")

// DecodeEpisode decodes one line of the episode JSONL form (without its
// newline). The record's Replay is nil; credit is nil when the line has
// none.
func DecodeEpisode(line []byte) (*episode.Record, *Credit, error) {
	var probe struct {
		Format *string `json:"format"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEpisodeLine, err)
	}
	switch {
	case probe.Format == nil:
		return nil, nil, fmt.Errorf("%w: no format", ErrEpisodeLine)
	case *probe.Format != EpisodeFormat:
		return nil, nil, fmt.Errorf("%w: format %q, this build reads %q", ErrEpisodeLine, *probe.Format, EpisodeFormat)
	}
	var l episodeLine
	if err := strictUnmarshal(line, &l); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEpisodeLine, err)
	}
	if !l.Status.Valid() {
		return nil, nil, fmt.Errorf("%w: status %q is not a slime status", ErrEpisodeLine, l.Status)
	}
	rec := &episode.Record{
		Scenario: l.Scenario, Params: l.Params, Seed: l.Seed, PolicySeed: l.PolicySeed,
		Index: l.Index, RolloutID: l.RolloutID, GroupIndex: l.GroupIndex,
		Status: l.Status, End: l.End, Err: l.Error, Stack: l.Stack, Steps: l.Steps, Label: l.Label,
		Score: episode.Score{Team: float64(l.Score.Team), Teams: floats(l.Score.Teams), Agents: floats(l.Score.Agents)},
		Teams: l.Teams,
	}
	if err := checkTeams(&l); err != nil {
		return nil, nil, err
	}
	if l.Seats != nil {
		rec.Seats = make([]episode.Seat, len(l.Seats))
		for i, s := range l.Seats {
			rec.Seats[i] = episode.Seat{ID: s.ID, Role: s.Role}
			if s.Team != "" {
				rec.Seats[i].Team = slices.Index(l.Teams, s.Team)
			}
		}
	}
	var err error
	if rec.Turns, err = decodeTurns(&l); err != nil {
		return nil, nil, err
	}
	if err := decodeTree(&l, rec); err != nil {
		return nil, nil, err
	}
	if rec.Messages, err = decodeMessages(&l); err != nil {
		return nil, nil, err
	}
	if rec.Transitions, err = decodeTransitions(&l); err != nil {
		return nil, nil, err
	}
	credit, err := decodeCredit(&l, rec.Emitted())
	if err != nil {
		return nil, nil, err
	}
	return rec, credit, nil
}

// decodeTurns returns l's turns (nil for none), refusing one whose seat,
// or a message of whose inbox, the line does not have.
func decodeTurns(l *episodeLine) ([]episode.Turn, error) {
	if l.Turns == nil {
		return nil, nil
	}
	turns := make([]episode.Turn, len(l.Turns))
	for i, tl := range l.Turns {
		if !l.hasSeat(tl.Seat) {
			return nil, fmt.Errorf("%w: turn %d names seat %d of %d", ErrEpisodeLine, i, tl.Seat, len(l.Seats))
		}
		for _, k := range tl.Inbox {
			if k < 0 || k >= len(l.Messages) {
				return nil, fmt.Errorf("%w: turn %d's inbox names message %d of %d", ErrEpisodeLine, i, k, len(l.Messages))
			}
		}
		t := episode.Turn{
			Seat: tl.Seat, Step: tl.Step, Turn: tl.Turn, State: agents.State(tl.State), Seed: tl.Seed,
			View: tl.View, Legal: tl.Legal, Action: tl.Action,
			Invalid: tl.Invalid, Emit: tl.Emit,
		}
		if len(tl.Inbox) > 0 {
			t.Inbox = tl.Inbox
		}
		if len(tl.Notes) > 0 {
			t.Notes = tl.Notes
		}
		t.SetGeneration(generationOf(tl.Completion, tl.Prompt, tl.Tokens))
		turns[i] = t
	}
	return turns, nil
}

// decodeMessages returns l's messages (nil for none), refusing one out of
// sequence or sent to a seat the line does not have.
func decodeMessages(l *episodeLine) ([]episode.Message, error) {
	if l.Messages == nil {
		return nil, nil
	}
	msgs := make([]episode.Message, len(l.Messages))
	for i, ml := range l.Messages {
		if ml.Seq != i {
			return nil, fmt.Errorf("%w: message %d has seq %d", ErrEpisodeLine, i, ml.Seq)
		}
		for _, r := range ml.Recipients {
			if !l.hasSeat(r) {
				return nil, fmt.Errorf("%w: message %d names recipient seat %d of %d", ErrEpisodeLine, i, r, len(l.Seats))
			}
		}
		msgs[i] = episode.Message{
			Message:    protocol.Message{From: ml.From, To: protocol.Address(ml.To), Kind: ml.Kind, Payload: ml.Payload, Time: ml.Time, Seq: ml.Seq, Quiet: ml.Quiet},
			Recipients: ml.Recipients,
		}
	}
	return msgs, nil
}

// decodeTransitions returns l's transitions (nil for none), refusing one
// of a seat the line does not have.
func decodeTransitions(l *episodeLine) ([]episode.Transition, error) {
	if l.Transitions == nil {
		return nil, nil
	}
	trs := make([]episode.Transition, len(l.Transitions))
	for i, tl := range l.Transitions {
		if !l.hasSeat(tl.Seat) {
			return nil, fmt.Errorf("%w: transition %d names seat %d of %d", ErrEpisodeLine, i, tl.Seat, len(l.Seats))
		}
		trs[i] = episode.Transition{Step: tl.Step, Seat: tl.Seat, Event: agents.Event(tl.Event), From: agents.State(tl.From), To: agents.State(tl.To)}
	}
	return trs, nil
}

// decodeCredit returns l's credit, nil when it has none, refusing one
// without a value list per allocator, or a list without a value per
// sample (emitted).
func decodeCredit(l *episodeLine, emitted int) (*Credit, error) {
	cl := l.Credit
	if cl == nil {
		return nil, nil
	}
	if len(cl.Values) != len(cl.Allocators) {
		return nil, fmt.Errorf("%w: credit has %d value lists for %d allocators", ErrEpisodeLine, len(cl.Values), len(cl.Allocators))
	}
	credit := &Credit{Allocators: cl.Allocators, Values: make([][]float64, len(cl.Values)), Notes: cl.Notes}
	for i, v := range cl.Values {
		if len(v) != emitted {
			return nil, fmt.Errorf("%w: allocator %q has %d values for %d samples", ErrEpisodeLine, cl.Allocators[i], len(v), emitted)
		}
		credit.Values[i] = floats(v)
		if credit.Values[i] == nil {
			credit.Values[i] = []float64{}
		}
	}
	if len(credit.Notes) == 0 {
		credit.Notes = nil
	}
	return credit, nil
}

// hasSeat reports whether the line has a seat i.
func (l *episodeLine) hasSeat(i int) bool { return i >= 0 && i < len(l.Seats) }

// strictUnmarshal decodes data into v, refusing unknown keys and trailing
// data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the episode")
	}
	return nil
}

// EpisodeReader reads an episode JSONL file, line by line.
type EpisodeReader struct {
	r lineReader
}

// NewEpisodeReader returns a reader of r.
func NewEpisodeReader(r io.Reader) *EpisodeReader {
	return &EpisodeReader{r: newLineReader(r)}
}

// Next returns the next episode and its credit. At the end of input it
// returns io.EOF; a last line cut short is ErrTruncated. Errors name the
// line.
func (r *EpisodeReader) Next() (*episode.Record, *Credit, error) {
	for {
		line, err := r.r.readLine()
		if err != nil {
			return nil, nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		rec, credit, err := DecodeEpisode(line)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", r.r.line, err)
		}
		return rec, credit, nil
	}
}

// EpisodeWriter is the sink of the episode JSONL form: one line per
// episode, written like JSONLWriter's samples (whole groups only, buffered,
// a failed write of a regular file truncated back to where it began).
type EpisodeWriter struct {
	lineWriter
	enc episodeEncoder
}

// NewEpisodeWriter returns a writer of episode lines to w.
func NewEpisodeWriter(w io.Writer) *EpisodeWriter {
	return &EpisodeWriter{lineWriter: lineWriter{w: w, what: "episodes"}}
}

// WriteEpisode implements Sink: it writes ep's record and credit as one
// line.
func (ew *EpisodeWriter) WriteEpisode(ep *Episode) error {
	if ew.err != nil {
		return ew.err
	}
	ew.buf = ew.enc.appendEpisode(ew.buf, &ep.Record, ep.Credit)
	return nil
}

// NeedsSamples implements SampleNeeder: the records are all it writes.
func (ew *EpisodeWriter) NeedsSamples() bool { return false }
