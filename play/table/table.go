// Package table is a shared episode: one env.Episode whose seats are
// played by several players at once, each from its own goroutine. A seat is
// either held by a Session (an outside learner, an agent harness, a PettingZoo
// controller behind a server) or played by the house: the troupe policy the
// episode's setup names for it (Setup.Play.Policy). The episode advances when
// the seats it waits for have moved; the house's moves are made at once, in
// seat order, by whichever call made them due.
//
// A Session holds one seat (one player per seat, each its own session) or
// several (one controller stepping every seat: PettingZoo's AEC and Parallel
// APIs). Observe blocks until one of its seats must act, or the episode is
// over; Act gives one seat's move, validated against the scenario's rules
// (the legal list, or a StructuredActions scenario's CheckAnswer) before it
// reaches the episode. A session that leaves hands its seats to the table's
// fallback: the house policy (the turns it plays say so in their notes) or
// a forfeit (the episode ends aborted, end "forfeit", the record naming the
// seat).
//
// The table is the stepped episode's driver and nothing more: it owns no
// goroutine and no clock (idle timeouts, transports and the output stage
// are its caller's). The same seeds and the same moves give the same
// record, byte for byte, whoever gave them and in whatever order the
// sessions' calls arrived: the episode applies a step's moves in seat
// order, and the house policies draw from each turn's own seed.
package table

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// EndForfeit is the end of an episode stopped because a session left a seat
// whose fallback is Forfeit (episode.Record.End).
const EndForfeit = "forfeit"

// NoteFallback is the note key of a turn the house played in a seat whose
// session left (FallbackPolicy): its value says which session and why.
const NoteFallback = "table_fallback"

// Fallback says what becomes of a seat whose session leaves before the
// episode is over.
type Fallback int

const (
	// FallbackPolicy plays the seat with the house policy the setup names
	// for it; every turn so played carries the note NoteFallback.
	FallbackPolicy Fallback = iota
	// Forfeit ends the episode at once, aborted, with end EndForfeit and
	// an error naming the seat and the reason.
	Forfeit
)

// String names the fallback as ParseFallback reads it.
func (f Fallback) String() string {
	switch f {
	case FallbackPolicy:
		return "policy"
	case Forfeit:
		return "forfeit"
	}
	return fmt.Sprintf("Fallback(%d)", int(f))
}

// ParseFallback reads "policy" or "forfeit".
func ParseFallback(s string) (Fallback, error) {
	switch s {
	case "policy", "":
		return FallbackPolicy, nil
	case "forfeit":
		return Forfeit, nil
	}
	return 0, fmt.Errorf("%w: fallback %q (policy or forfeit)", ErrBadConfig, s)
}

// Errors of a table; the sentinels wrap their detail.
var (
	// ErrBadConfig: a Config the table cannot play.
	ErrBadConfig = errors.New("bad table configuration")
	// ErrNoSeat: a seat the episode does not have, or one not open to
	// sessions (the house plays it).
	ErrNoSeat = errors.New("no such open seat")
	// ErrTaken: a seat another session holds, or held and left.
	ErrTaken = errors.New("seat taken")
	// ErrNotYours: a move for a seat the session does not hold.
	ErrNotYours = errors.New("the session does not hold the seat")
	// ErrIllegal: a move the scenario's rules refuse (not one of the legal
	// actions, or an answer its CheckAnswer rejects). Nothing changed.
	ErrIllegal = errors.New("illegal action")
	// ErrLeft: a call of a session that left.
	ErrLeft = errors.New("the session left the table")
	// ErrNotPending and ErrEpisodeOver are the episode's (env), for a
	// move out of turn and one after the end.
	ErrNotPending  = env.ErrNotPending
	ErrEpisodeOver = env.ErrEpisodeOver
)

// Config is one shared episode.
type Config struct {
	// Setup is the episode: scenario, parameters, limits, invalid rule,
	// seeds and ids, as a run would play it (play.Config.Request gives
	// a run's seeds and ids). Its Play.Policy plays the house seats and,
	// under FallbackPolicy, the seats whose session left; it may be nil
	// only when every seat is open and the fallback is Forfeit.
	Setup env.Setup
	// Open lists the seats sessions may take, by index. nil opens every
	// seat. The others are the house's from the start.
	Open []int
	// OpenAgents lists more open seats, by agent id: for a caller that
	// knows the ids before the episode seats its agents.
	OpenAgents []string
	// Fallback is what becomes of a seat whose session leaves.
	Fallback Fallback
	// PassIllegal hands moves that break the rules to the game, marked
	// invalid (agents.Action.Invalid), where they are otherwise refused
	// with ErrIllegal: the run's invalid rule and the game then judge
	// them, as they judge an LLM's unparseable answer.
	PassIllegal bool
}

// seat states
const (
	seatHouse = iota // played by the house policy from the start
	seatOpen         // open, no session yet
	seatHeld         // a session holds it
	seatLeft         // its session left: the fallback plays it
)

// Table is one shared episode. It is safe for concurrent use: sessions call
// it from their own goroutines.
type Table struct {
	cfg  Config
	info *env.Info
	// check is the scenario's CheckAnswer, for answers without a legal
	// list; nil when it has none.
	check func(obs *agents.Observation, text string) error

	mu       sync.Mutex
	ep       *env.Episode
	state    []int
	holder   []*Session
	why      []string // seatLeft: why the session left
	policies []agents.Policy
	// index is each seat's index by agent id: SeatOf in constant time,
	// so that naming each of n seats costs n, not n².
	index map[string]int
	// housed is the Episode.Decision whose house seats have all moved,
	// -1 when none (or a session left since): advance has nothing to
	// do until the step is applied, so a session's move costs nothing
	// more in a step of thousands of seats.
	housed int
	// changed is closed (and replaced) whenever the episode moves or a
	// session leaves: what blocked Observe calls wait for.
	changed chan struct{}
	done    chan struct{}
}

// New starts the shared episode of cfg and plays the house's moves up to
// the first decision of an open seat (or to the end). ctx is the house
// policies' for those moves. Its error is for a configuration it cannot
// play (wrapping ErrBadConfig, or env.NewEpisode's); a game that breaks is
// an episode that ended failed, in its record.
func New(ctx context.Context, cfg Config) (*Table, error) {
	if cfg.Setup.Scenario == nil {
		return nil, fmt.Errorf("%w: no scenario", ErrBadConfig)
	}
	if cfg.Fallback != FallbackPolicy && cfg.Fallback != Forfeit {
		return nil, fmt.Errorf("%w: fallback %d", ErrBadConfig, cfg.Fallback)
	}
	ep, err := env.NewEpisode(cfg.Setup)
	if err != nil {
		return nil, err
	}
	t := &Table{cfg: cfg, info: cfg.Setup.Scenario.Info(), ep: ep, changed: make(chan struct{}), done: make(chan struct{})}
	if sa, ok := cfg.Setup.Scenario.(env.StructuredActions); ok {
		t.check = sa.CheckAnswer
	}
	n := len(ep.Seats())
	t.state, t.holder, t.why, t.policies = make([]int, n), make([]*Session, n), make([]string, n), make([]agents.Policy, n)
	t.housed = -1
	t.index = make(map[string]int, n)
	for i, seat := range ep.Seats() {
		if _, dup := t.index[seat.ID]; !dup {
			t.index[seat.ID] = i // the first of a repeated id, as a scan finds
		}
	}
	for _, id := range cfg.OpenAgents {
		i, err := t.SeatOf(id)
		if err != nil {
			return nil, fmt.Errorf("%w: open: %w", ErrBadConfig, err)
		}
		t.state[i] = seatOpen
	}
	if cfg.Open == nil && cfg.OpenAgents == nil {
		for i := range t.state {
			t.state[i] = seatOpen
		}
	} else {
		for _, i := range cfg.Open {
			if i < 0 || i >= n {
				return nil, fmt.Errorf("%w: open seat %d of %d", ErrBadConfig, i, n)
			}
			t.state[i] = seatOpen
		}
	}
	needPolicy := cfg.Fallback == FallbackPolicy && n > 0 || slices.Contains(t.state, seatHouse)
	if needPolicy && cfg.Setup.Policy == nil {
		return nil, fmt.Errorf("%w: the house plays some seats (closed seats, or the policy fallback) but the setup names no policy", ErrBadConfig)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(ctx)
	return t, nil
}

// Info is the scenario's description.
func (t *Table) Info() *env.Info { return t.info }

// Setup is the episode's setup.
func (t *Table) Setup() env.Setup { return t.cfg.Setup }

// Seats returns the episode's seats, in seat order.
func (t *Table) Seats() []env.Seat { return t.ep.Seats() }

// SeatOf returns the index of the seat whose agent id or index (in
// decimal) is name.
func (t *Table) SeatOf(name string) (int, error) {
	if i, ok := t.index[name]; ok {
		return i, nil
	}
	seats := t.ep.Seats()
	if i, err := strconv.Atoi(name); err == nil && strconv.Itoa(i) == name && i >= 0 && i < len(seats) {
		return i, nil
	}
	ids := make([]string, len(seats))
	for i, s := range seats {
		ids[i] = s.ID
	}
	return 0, fmt.Errorf("%w: %q (the seats: %s)", ErrNoSeat, name, legalList(ids))
}

// Open returns the seats open to sessions that no session holds yet.
func (t *Table) Open() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var open []int
	for i, s := range t.state {
		if s == seatOpen {
			open = append(open, i)
		}
	}
	return open
}

// House returns the seats the house plays: those never open, and those
// whose session left (under FallbackPolicy).
func (t *Table) House() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var h []int
	for i, s := range t.state {
		if s == seatHouse || s == seatLeft && t.cfg.Fallback == FallbackPolicy {
			h = append(h, i)
		}
	}
	return h
}

// Join takes seats for a new session: open seats that no session holds.
// No seats takes every open seat (a controller of the whole episode). It
// refuses, taking nothing, a seat that is not open (ErrNoSeat) or that
// another session holds or held (ErrTaken).
func (t *Table) Join(seats ...int) (*Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(seats) == 0 {
		for i, s := range t.state {
			if s == seatOpen {
				seats = append(seats, i)
			}
		}
		if len(seats) == 0 {
			return nil, fmt.Errorf("%w: every open seat is taken", ErrTaken)
		}
	}
	seats = slices.Clone(seats)
	slices.Sort(seats)
	if i, ok := dup(seats); ok {
		return nil, fmt.Errorf("%w: seat %d given twice", ErrBadConfig, i)
	}
	for _, i := range seats {
		switch {
		case i < 0 || i >= len(t.state):
			return nil, fmt.Errorf("%w: seat %d of %d", ErrNoSeat, i, len(t.state))
		case t.state[i] == seatHouse:
			return nil, fmt.Errorf("%w: seat %d (%s) is played by the house", ErrNoSeat, i, t.ep.Seats()[i].ID)
		case t.state[i] != seatOpen:
			return nil, fmt.Errorf("%w: seat %d (%s)", ErrTaken, i, t.ep.Seats()[i].ID)
		}
	}
	s := &Session{t: t, seats: seats}
	for _, i := range seats {
		t.state[i], t.holder[i] = seatHeld, s
	}
	return s, nil
}

func dup(sorted []int) (int, bool) {
	for k := 1; k < len(sorted); k++ {
		if sorted[k] == sorted[k-1] {
			return sorted[k], true
		}
	}
	return 0, false
}

// Done is closed when the episode is over.
func (t *Table) Done() <-chan struct{} { return t.done }

// Record is the episode's record once it is over, nil before.
func (t *Table) Record() *episode.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ep.Record()
}

// Time is the logical time of the step the episode waits on.
func (t *Table) Time() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ep.Time()
}

// Features writes seat's numeric observation now into dst
// (env.Episode.Features).
func (t *Table) Features(seat int, dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ep.Features(seat, dst)
}

// State writes the game's global state now into dst (env.Episode.State).
func (t *Table) State(dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ep.State(dst)
}

// Waiting returns the seats whose moves the episode waits for, in seat
// order: none once it is over.
func (t *Table) Waiting() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w []int
	for _, o := range t.ep.Pending() {
		w = append(w, o.Seat)
	}
	return w
}

// Stop ends the episode now, as its driver decides (an idle timeout, a
// server shutting down): see env.Episode.Stop. It does nothing to an
// episode that is over.
func (t *Table) Stop(status protocol.Status, end string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ep.Done() {
		return
	}
	t.ep.Stop(status, end, err)
	t.moved()
}

// moved wakes the Observe calls; it closes done once the episode is over.
// t.mu is held.
func (t *Table) moved() {
	close(t.changed)
	t.changed = make(chan struct{})
	if t.ep.Done() {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

// advance plays the house's pending moves (house seats, and the seats
// whose session left) until the episode waits only for sessions, or ends.
// t.mu is held: the house's policies are asked under it, so that no
// session sees a half-played step. It wakes the observers when anything
// moved.
func (t *Table) advance(ctx context.Context) {
	defer t.moved()
	for !t.ep.Done() && t.ep.Decision() != t.housed {
		// The house moves its seats of this step in seat order; the
		// step is applied with the last pending seat's move, so the
		// step's pending seats are read once, not again after each
		// move (which cost a step of n house seats n² copies).
		pend := t.ep.Pending()
		played := 0
		for _, o := range pend {
			i := o.Seat
			if st := t.state[i]; st != seatHouse && st != seatLeft {
				continue
			}
			if t.state[i] == seatLeft && t.cfg.Fallback == Forfeit {
				t.ep.Stop(protocol.StatusAborted, EndForfeit, fmt.Errorf("seat %d (%s) forfeited: %s", i, o.Agent, t.why[i]))
				return
			}
			a, err := t.house(ctx, i, &o.Observation)
			if err != nil {
				status, end := protocol.StatusAborted, env.EndPolicyError
				if ctx.Err() != nil {
					end, err = env.EndInterrupted, context.Cause(ctx)
				}
				t.ep.Stop(status, end, err)
				return
			}
			if t.state[i] == seatLeft {
				a.Notes = withNote(a.Notes, NoteFallback, t.why[i])
			}
			if err := t.ep.Act(i, a); err != nil {
				// Unreachable: i is pending.
				t.ep.Stop(protocol.StatusFailed, env.EndGameError, err)
				return
			}
			played++
		}
		if played < len(pend) {
			// Sessions' seats are still to move (or none was the
			// house's): the step waits for them.
			t.housed = t.ep.Decision()
			return
		}
	}
}

// house asks seat i's house policy for its move on o, recovering a panic
// as the engine does (as a policy error).
func (t *Table) house(ctx context.Context, i int, o *agents.Observation) (agents.Action, error) {
	p := t.policies[i]
	if p == nil {
		p = t.cfg.Setup.Policy(t.ep.Seats()[i])
		if p == nil {
			return agents.Action{}, fmt.Errorf("agent %q: the setup gives its seat no policy", o.Agent)
		}
		t.policies[i] = p
	}
	if err := t.ep.FeaturesFor(p, i, o); err != nil {
		return agents.Action{}, fmt.Errorf("agent %q: %w", o.Agent, err)
	}
	return Ask(ctx, p, o)
}

// Ask asks p for its move on o as the engine does a policy of its own:
// a panic becomes an error wrapping env.ErrPolicyPanic, and an error is
// wrapped naming the agent, role and turn. Drivers that play house seats
// beside outside ones (a table, the environment server's vectors) ask
// through it, so that a house policy fails the same way everywhere.
func Ask(ctx context.Context, p agents.Policy, o *agents.Observation) (a agents.Action, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("agent %q: %w: %v", o.Agent, env.ErrPolicyPanic, r)
		}
	}()
	a, err = p.Act(ctx, o)
	if err != nil {
		return a, fmt.Errorf("agent %q (role %q) turn %d: %w", o.Agent, o.Role, o.Turn, err)
	}
	return a, nil
}

func withNote(notes map[string]any, k string, v any) map[string]any {
	m := make(map[string]any, len(notes)+1)
	maps.Copy(m, notes)
	m[k] = v
	return m
}

// Session is one player at a table: the seats it holds. Its methods are
// safe for concurrent use, though a player usually calls them from one
// goroutine.
type Session struct {
	t     *Table
	seats []int
	left  bool
}

// Seats returns the seats the session holds, in seat order.
func (s *Session) Seats() []int { return slices.Clone(s.seats) }

// holds reports whether seat is one of the session's (s.seats is sorted:
// a session of every seat of 100,000 checks each move in log time).
func (s *Session) holds(seat int) bool {
	_, ok := slices.BinarySearch(s.seats, seat)
	return ok
}

// Table is the session's table.
func (s *Session) Table() *Table { return s.t }

// Observe blocks until one of the session's seats must act, or the episode
// is over, and returns the session's seats that must act now and have not
// moved, in seat order (several at a simultaneous step of a session that
// holds several seats), each with its observation: PendingSeat.Seat is the
// seat Act takes. None once the episode is over. The observations are
// copies, the session's to keep. Its error is ctx's, or ErrLeft.
func (s *Session) Observe(ctx context.Context) ([]env.PendingSeat, error) {
	t := s.t
	for {
		t.mu.Lock()
		if s.left {
			t.mu.Unlock()
			return nil, ErrLeft
		}
		obs := s.pending()
		wait := t.changed
		done := t.ep.Done()
		t.mu.Unlock()
		if len(obs) > 0 || done {
			return obs, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// Pending is Observe without blocking: the observations of the session's
// seats that must act now (none when it waits for other seats, or the
// episode is over).
func (s *Session) Pending() []env.PendingSeat {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.pending()
}

// pending is Pending with t.mu held.
func (s *Session) pending() []env.PendingSeat {
	var out []env.PendingSeat
	for _, o := range s.t.ep.Pending() {
		if _, mine := slices.BinarySearch(s.seats, o.Seat); mine && s.t.holder[o.Seat] == s {
			out = append(out, env.PendingSeat{Seat: o.Seat, Observation: copyObs(o.Observation)})
		}
	}
	return out
}

// copyObs copies the episode's slices out of o: the episode's are valid
// only until its step is applied.
func copyObs(o agents.Observation) agents.Observation {
	o.Legal = slices.Clone(o.Legal)
	o.Inbox = slices.Clone(o.Inbox)
	o.Seen = slices.Clone(o.Seen)
	return o
}

// Act gives the move of seat, one of the session's, at this step, after
// checking it against the scenario's rules. It refuses, changing nothing: a
// seat the session does not hold (ErrNotYours), a seat that does not act
// now or has moved (ErrNotPending), any move once the episode is over
// (ErrEpisodeOver), and a move the rules refuse (ErrIllegal, unless the
// table passes illegal moves to the game). Once the step's moves are all
// in, the step is applied and the house's moves that fall due are made,
// with ctx for their policies, before Act returns.
func (s *Session) Act(ctx context.Context, seat int, a agents.Action) error {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	a, err := s.check(seat, a)
	if err != nil {
		return err
	}
	if err := t.ep.Act(seat, a); err != nil {
		return err
	}
	t.advance(ctx)
	return nil
}

// Check is Act's verdict on the move without making it: nil when Act
// would take it now. A caller that gives several seats' moves checks them
// all first, so that a refused one leaves the others ungiven.
func (s *Session) Check(seat int, a agents.Action) error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	_, err := s.check(seat, a)
	return err
}

// check is Check with t.mu held; it returns the action as Act gives it
// (marked invalid when the table passes illegal moves).
func (s *Session) check(seat int, a agents.Action) (agents.Action, error) {
	t := s.t
	switch {
	case s.left:
		return a, ErrLeft
	case !s.holds(seat):
		return a, fmt.Errorf("%w: seat %d (the session holds %v)", ErrNotYours, seat, s.seats)
	case t.ep.Done():
		return a, ErrEpisodeOver
	}
	o, ok := t.ep.Observation(seat)
	if !ok {
		return a, fmt.Errorf("%w: seat %d (%s) at step %d (waiting for %s)", ErrNotPending, seat, t.ep.Seats()[seat].ID, t.ep.Time(), t.waitingFor(t.ep.Pending()))
	}
	obs := &o
	if err := t.judge(obs, a.Text); err != nil {
		if !t.cfg.PassIllegal {
			return a, err
		}
		if a.Invalid == "" {
			a.Invalid = err.Error()
		}
	}
	return a, nil
}

// waitingFor names the seats of pend.
func (t *Table) waitingFor(pend []env.PendingSeat) string {
	if len(pend) == 0 {
		return "nobody"
	}
	ids := make([]string, len(pend))
	for k, o := range pend {
		ids[k] = o.Agent
	}
	return strings.Join(ids, ", ")
}

// judge checks text against obs's legal actions, or the scenario's
// CheckAnswer when actions are free-form; nil when it is a valid move.
func (t *Table) judge(obs *agents.Observation, text string) error {
	return Judge(t.check, obs, text)
}

// Judge is a table's verdict on text as the move of the seat that
// observes obs: nil when it is one of obs's legal actions, or, for
// free-form actions (no legal list), when check (the scenario's
// CheckAnswer; nil: none) accepts it; else an error wrapping ErrIllegal
// that names the seat and what it may play. A driver that steps episodes
// itself judges moves with it, so that a move it passes to the game,
// marked invalid, reads as the table's would.
func Judge(check func(obs *agents.Observation, text string) error, obs *agents.Observation, text string) error {
	if obs.Legal != nil {
		if slices.Contains(obs.Legal, text) {
			return nil
		}
		return fmt.Errorf("%w: %q is not one of agent %s's legal actions at step %d: %s", ErrIllegal, text, obs.Agent, obs.Step, legalList(obs.Legal))
	}
	if check != nil {
		if err := check(obs, text); err != nil {
			return fmt.Errorf("%w: agent %s at step %d: %w", ErrIllegal, obs.Agent, obs.Step, err)
		}
	}
	return nil
}

// legalList writes a legal list for an error, cut after 20 actions.
func legalList(legal []string) string {
	const most = 20
	if len(legal) == 0 {
		return "none"
	}
	if len(legal) <= most {
		return strings.Join(legal, ", ")
	}
	return fmt.Sprintf("%s, ... (%d in all)", strings.Join(legal[:most], ", "), len(legal))
}

// Leave gives the session's seats up to the table's fallback: the house
// policy plays them from now on, or the episode ends forfeited. why is
// written in the notes of the turns the fallback plays, or in the record's
// error. ctx is the house policies' for the moves that fall due. Leaving
// twice, or once the episode is over, does nothing but mark the session
// gone.
func (s *Session) Leave(ctx context.Context, why string) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.left {
		return
	}
	s.left = true
	if why == "" {
		why = "the session left"
	}
	for _, i := range s.seats {
		t.state[i], t.why[i] = seatLeft, why
	}
	t.housed = -1 // the house plays these seats now
	switch {
	case t.ep.Done():
		t.moved()
	case t.cfg.Fallback == Forfeit:
		i := s.seats[0]
		t.ep.Stop(protocol.StatusAborted, EndForfeit, fmt.Errorf("seat %d (%s) forfeited: %s", i, t.ep.Seats()[i].ID, why))
		t.moved()
	default:
		t.advance(ctx)
	}
}
