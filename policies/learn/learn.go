// Package learn holds in-process learning policies: tabular action-value
// learners with ε-greedy or Boltzmann selection, a softmax policy-
// gradient learner (REINFORCE with a running-mean baseline), and softmax
// policies over a table, or over the scenario's numeric observations by a
// linear map or a one-hidden-layer network, trained by REINFORCE or
// PPO-clip (Softmax). They are the simple independent learners of the
// credit-assignment literature, in plain Go, and they make troupe's
// allocators comparable on a laptop in seconds.
//
// A learner is an agents.Policy that one run shares among its agents: it
// keeps a table per agent (Observation.Agent) and per state. It learns from
// finished episodes, one at a time (Learn): from the episode's record,
// which says who acted in which state and what they played, and the credit
// an allocator gave each of those turns (trajectories.Credit), which is
// what lets the same learner be trained on team, individual, difference or
// Shapley rewards and the results be compared. It needs no slime samples:
// a run that trains learners projects none (trajectories.Output's
// ObserveCredit).
//
// # States
//
// A state is a string: by default the turn's whole text prompt, the
// scenario's view followed by the messages received since the agent's
// previous turn (episode.RenderObservation; it is the prompt of the turn's
// sample). Options.State maps a prompt to a coarser state. At Act the
// learner renders the prompt from the observation, at Learn from the
// record (episode.Record.TextPrompt, the same text); both go through the
// same State function, so they agree by construction. A turn without
// messages renders nothing: its prompt is its view.
//
// # Determinism
//
// A learner draws its exploration from the turn's seed (Observation.Seed,
// streams 1 to 3), never from a clock or a global source: the same values
// and the same observation give the same action on any goroutine. Updates
// are plain arithmetic in the order of the record's emitted turns. A run is
// therefore reproducible when every episode is played after the previous
// one was learned, which is how experiment.Run drives it.
//
// # Concurrency
//
// Act and Learn are safe for concurrent use: a learner holds one mutex,
// taken for each Act and for each Learn. The learners are
// agents.BatchPolicy values too: the engine asks the agents of a step that
// share one in one ActBatch, under one lock. Concurrent episodes then see
// whatever was learned so far, which depends on timing: safe, but not
// reproducible.
package learn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/trajectories"
)

// Learner is a policy that learns from the credit allocators gave its
// agents' turns.
type Learner interface {
	agents.Policy
	// Learn updates the learner with a finished episode: its record and
	// the credit the allocators gave it (for each allocator, one value
	// per emitted turn, in order: what trajectories.Allocate computes).
	// It reads each emitted turn, in order of play: the agent from the
	// turn's seat, the state from its prompt (see States), the action,
	// and the reward from the credit (Options.RewardKey). Episodes that
	// did not finish (aborted, failed) are skipped: they have no outcome
	// to learn from. Credit that does not give every emitted turn a
	// finite reward is an error, and nothing is learned; a turn the
	// learner did not act for is an error, and the turns before it have
	// been learned.
	Learn(rec *episode.Record, credit *trajectories.Credit) error
}

// Errors of learners. They are wrapped with the agent, state and turn
// they concern.
var (
	// ErrBadConfig: a learner's parameters are out of range.
	ErrBadConfig = errors.New("bad learner configuration")
	// ErrUnknownTurn: Learn got a turn of an agent, state or action
	// this learner never acted for (a turn of another policy, or a State
	// function that does not give the same state at Act and Learn).
	ErrUnknownTurn = errors.New("turn the learner did not act for")
	// ErrNoReward: the credit has no reward for a turn (the run has no
	// allocator, or not the one Options.RewardKey names, or the credit
	// does not match the record), or a reward is not finite.
	ErrNoReward = errors.New("turn without a reward")
	// ErrLegalChanged: one state offered two different lists of legal
	// actions; the State function must tell such turns apart.
	ErrLegalChanged = errors.New("the legal actions of a state changed")
)

// Options are what every learner shares.
type Options struct {
	// State maps a turn's prompt to the state the learner keeps values
	// for. Nil uses the whole prompt. It must be a function of the prompt
	// alone: Act and Learn map the same prompt, Act does not map it again
	// while consecutive observations without messages share one view
	// string, and Learn does not map a turn's prompt again when Act
	// already found its row.
	State func(prompt string) string
	// RewardKey names the allocator whose credit a learner reads, as the
	// credit names it (trajectories.Credit.Allocators: the allocator's
	// name with its parameters, the key of a dict reward). Empty reads
	// the first allocator's: the scalar reward of the turns' samples.
	RewardKey string
}

func (o Options) state(prompt string) string {
	if o.State == nil {
		return prompt
	}
	return o.State(prompt)
}

// rewards returns the values of the allocator RewardKey names in c: one
// per emitted turn of the episode, which the caller checks.
func (o Options) rewards(c *trajectories.Credit) ([]float64, error) {
	a := 0
	if o.RewardKey != "" {
		a = -1
		if c != nil {
			a = slices.Index(c.Allocators, o.RewardKey)
		}
		if a < 0 {
			return nil, fmt.Errorf("%w %q", ErrNoReward, o.RewardKey)
		}
	}
	if c == nil || a >= len(c.Values) {
		return nil, fmt.Errorf("%w: the episode has no credit", ErrNoReward)
	}
	return c.Values[a], nil
}

// row is what a learner knows of one agent in one state: the legal
// actions and one number per action (an action value, or a preference).
type row struct {
	// The fields Act reads come first, then those Learn updates: 128
	// bytes, two cache lines where the row starts on one (agentTable).
	legal  []string
	values []float64
	best   int // the action of the largest value now (the first of equals)
	ties   int // how many actions have that value (1: best alone)
	// trace is, per action, the unbiased step-size trace ō of Values
	// with Unbiased (nil otherwise, and until the row's first update; see
	// traceOf).
	trace []float64
	// second, when secondOK, is the largest value of the other actions
	// (-Inf for a row of one): a fall of the best value that stays above
	// it leaves best as it is, without a scan.
	second float64
	// greedy is the action of the largest value (the first of equals)
	// after the row's first update, -1 before; switched is set when a
	// later update made another action the greedy one (see Lock).
	greedy   int
	updates  int     // rewards learned in this state
	baseline float64 // REINFORCE: mean reward so far
	secondOK bool
	switched bool
	// distinct says that no two legal actions are the same text: the
	// index Act chose is then the one Learn must find (playedIndex).
	distinct bool
}

// newRow returns a row of the legal actions, every value init.
func newRow(legal []string, init float64) *row {
	r := &row{}
	r.init(legal, init)
	return r
}

// init makes r, a zero row, a row of the legal actions, every value init.
func (r *row) init(legal []string, init float64) {
	*r = row{legal: legal, values: valuesWithRoom(len(legal)), greedy: -1, distinct: distinct(legal)}
	for i := range r.values {
		r.values[i] = init
	}
	r.scan()
}

// valuesWithRoom returns n zero values whose array has room for the
// trace after them, zeros too (traceOf): an update reads both, and one
// array is fewer cache lines than two. Every row's values are made so.
func valuesWithRoom(n int) []float64 { return make([]float64, n, 2*n) }

// traceOf returns r's trace, all zeros at first: the room after the
// values in their array (valuesWithRoom), or a new array for values made
// otherwise.
func (r *row) traceOf() []float64 {
	if r.trace == nil {
		if n := len(r.values); cap(r.values) >= 2*n {
			r.trace = r.values[n : 2*n : 2*n]
		} else {
			r.trace = make([]float64, n)
		}
	}
	return r.trace
}

// distinct reports whether no two of legal are the same text.
func distinct(legal []string) bool {
	if len(legal) > 64 {
		seen := make(map[string]bool, len(legal))
		for _, s := range legal {
			if seen[s] {
				return false
			}
			seen[s] = true
		}
		return true
	}
	for i, s := range legal {
		if slices.Contains(legal[i+1:], s) {
			return false
		}
	}
	return true
}

// scan sets best, ties and second from the values.
func (r *row) scan() {
	r.best, r.ties = 0, 1
	second := math.Inf(-1)
	for i := 1; i < len(r.values); i++ {
		switch v := r.values[i]; {
		case v > r.values[r.best]:
			second = r.values[r.best]
			r.best, r.ties = i, 1
		case v == r.values[r.best]:
			second = v
			r.ties++
		case v > second:
			second = v
		}
	}
	r.second, r.secondOK = second, true
}

// greedyAction is Greedy(r.values, obs), from the best action and ties
// that track keeps rather than a scan: the same action for the same seed.
func (r *row) greedyAction(obs *agents.Observation) int {
	if r.ties == 1 {
		return r.best
	}
	return Greedy(r.values, obs)
}

// track notes the row's greedy action after an update of action a, whose
// value was old, and keeps best, ties and second up to date. When the
// update changed action a's value alone (whole false: the action-value
// learners), only a fall of the best action's value below another one's
// can make that one best: second, the largest of the others, says whether
// it did, so the scan is rare; a rise or fall of another action moves
// best, ties or second by itself. An update of the whole row (the
// gradient learner's preferences) is scanned.
func (r *row) track(a int, old float64, whole bool) {
	v := r.values[a]
	switch {
	case whole:
		r.scan()
	case a == r.best:
		// Asked first, the question whose answer rarely changes: an
		// update of the best action usually leaves it above every other,
		// whether it rose or fell; which of the two is a coin toss that
		// would cost a mispredicted branch in most updates.
		switch {
		case r.secondOK && v > r.second:
			r.ties = 1 // above every other action
		case v > old:
			r.ties = 1 // above the actions it was tied with
		case v == old:
		default:
			r.scan()
		}
	default:
		top := r.values[r.best]
		switch {
		case v > top:
			r.best, r.ties = a, 1
			r.second, r.secondOK = top, true
		case v == top && old != top:
			r.ties++
			if a < r.best {
				r.best = a
			}
			r.second, r.secondOK = top, true
		case v < top && old == top:
			r.ties-- // it was tied with best, after it
			// With another action still tied, the others' largest is
			// top; without, it is not known until the next scan.
			r.second, r.secondOK = top, r.ties > 1
		case v == old:
		case !r.secondOK:
		case v > r.second:
			r.second = v
		case old == r.second && v < old:
			r.secondOK = false // it may have been the largest of the others
		}
	}
	if r.greedy < 0 {
		r.greedy = r.best
	}
	// Once switched, a row stays so: the branch on it is predictable,
	// where one on best != greedy is not.
	r.switched = r.switched || r.best != r.greedy
}

// Lock is what a learner says of lock-in: of the rows (agent and state)
// it learned in, how many ever changed their greedy action after their
// first update. A learner whose rows never change plays, but for its
// exploration, what its first rewards made it play.
type Lock struct {
	Rows     int `json:"rows"`
	Switched int `json:"switched"`
}

// LockedIn returns the share of rows that never switched, 0 for none.
func (l Lock) LockedIn() float64 {
	if l.Rows == 0 {
		return 0
	}
	return 1 - float64(l.Switched)/float64(l.Rows)
}

// Locker is implemented by the learners of this package.
type Locker interface {
	Lock() Lock
}

// Lock implements Locker.
func (b *book) Lock() Lock {
	b.mu.Lock()
	defer b.mu.Unlock()
	var l Lock
	for _, t := range b.agents {
		for _, r := range t.rows.all {
			if r.greedy >= 0 {
				l.Rows++
				if r.switched {
					l.Switched++
				}
			}
		}
	}
	return l
}

// agentTable holds one agent's rows, by state number (book.states). The
// last row used is cached: most scenarios ask an agent about the same
// state turn after turn, episode after episode.
type agentTable struct {
	// The first cache line: what Act reads of every table, the next
	// one's id and the cached row.
	id string
	// next is the agent that acted after this one the last time: agents
	// act in the same order episode after episode, so Act finds the next
	// table here without hashing its id.
	next      *agentTable
	last      *row
	lastState int
	// played holds, by turn number, what Act chose in the agent's latest
	// episode, for Learn to find a turn's row without rendering and
	// looking up its prompt again (see playedRow).
	played []playedTurn
	rows   stateRows
}

// playedTurn is one turn Act played: its observation's view, which had no
// messages, the row it chose from and the action it chose.
type playedTurn struct {
	view   string
	row    *row
	action int
}

// remember notes that Act chose from row r at the turn of obs. Only a turn
// without messages is noted: its prompt is its view, so a recorded turn
// whose view is the same string (the same bytes at the same address) had
// the same prompt, hence the same state and row. A turn with messages is
// looked up at Learn.
func (t *agentTable) remember(obs *agents.Observation, r *row, action int) {
	if obs.Turn < len(t.played) {
		t.played = t.played[:obs.Turn] // a new episode (or a replayed turn)
	}
	if len(obs.Inbox) > 0 || obs.Turn != len(t.played) {
		return
	}
	t.played = append(t.played, playedTurn{view: obs.View, row: r, action: action})
}

// playedRow returns the row of recorded turn rt when Act noted it
// (remember): the same turn number, no messages, the same view string.
// Otherwise nil, and Learn looks the turn's prompt up. A turn of a
// concurrent episode that matches had the same prompt, so its row is the
// same.
func (t *agentTable) playedRow(rt *episode.Turn) *playedTurn {
	if rt.Turn < 0 || rt.Turn >= len(t.played) || len(rt.Inbox) > 0 {
		return nil
	}
	if p := &t.played[rt.Turn]; strcmp.Same(p.view, rt.View) {
		return p
	}
	return nil
}

// playedIndex is the index of the recorded action of a turn whose row Act
// noted (playedRow): the noted one when the record holds the very string
// Act answered (the same bytes) and the row's legal actions are distinct,
// so that no earlier one is the same text; otherwise -1, and the action
// is looked up (indexOf).
func (p *playedTurn) playedIndex(action string) int {
	if r := p.row; r.distinct && strcmp.Same(r.legal[p.action], action) {
		return p.action
	}
	return -1
}

func (t *agentTable) find(state int) *row {
	if t.last != nil && t.lastState == state {
		return t.last
	}
	r := t.rows.get(state)
	if r != nil {
		t.lastState, t.last = state, r
	}
	return r
}

// stateRows is an agent's rows by state number: the first one in place,
// the others in a map made for the second. The agents of a many-agent
// scenario often see one state each (El Farol's patrons, the week's one
// view), and a map per agent would be most of what a learner allocates.
// It is not to be copied: its first row may be its own.
type stateRows struct {
	firstState int
	first      *row
	more       map[int]*row
	_          [40]byte // own on a cache line of its own: a table is 256 bytes
	// own is the first row's memory: one allocation with the table.
	own row
}

// get returns the row of state, or nil.
func (s *stateRows) get(state int) *row {
	if s.first != nil && s.firstState == state {
		return s.first
	}
	return s.more[state]
}

// add makes the row of state, which has none, with the legal actions and
// every value init, and returns it.
func (s *stateRows) add(state int, legal []string, init float64) *row {
	if s.first == nil {
		s.own.init(legal, init)
		s.firstState, s.first = state, &s.own
		return s.first
	}
	if s.more == nil {
		s.more = map[int]*row{}
	}
	r := newRow(legal, init)
	s.more[state] = r
	return r
}

// set makes r the row of state.
func (s *stateRows) set(state int, r *row) {
	if s.first == nil || s.firstState == state {
		s.firstState, s.first = state, r
		return
	}
	if s.more == nil {
		s.more = map[int]*row{}
	}
	s.more[state] = r
}

// len returns the number of rows.
func (s *stateRows) len() int {
	if s.first == nil {
		return 0
	}
	return 1 + len(s.more)
}

// all yields every row with its state, in no particular order.
func (s *stateRows) all(yield func(state int, r *row) bool) {
	if s.first == nil || !yield(s.firstState, s.first) {
		return
	}
	for state, r := range s.more {
		if !yield(state, r) {
			return
		}
	}
}

// book is the per-agent, per-state storage both learners share, with the
// mutex that makes them safe for concurrent use.
type book struct {
	mu     sync.Mutex
	opts   Options
	init   float64 // the values a new row starts with
	agents map[string]*agentTable
	// states numbers the states seen, lastKey and lastState being the
	// latest: the agents of a step usually share their state (El Farol's
	// patrons all see the week's one view).
	states    map[string]int
	lastKey   string
	lastState int
	// view and viewState are the view of the latest Act without messages
	// and its state (-1: none): the agents of a step that see the same
	// view string, without messages, have the same prompt, so Act
	// neither renders nor looks it up again.
	view      string
	viewState int
	// acted is the table of the latest Act.
	acted *agentTable
	// seats and tables are the seats of the latest episode learned and
	// their tables (nil: not looked up yet), kept for the next episode:
	// its seats are usually the same.
	seats  []episode.Seat
	tables []*agentTable
	// turns is readAll's buffer, reused from episode to episode.
	turns []learned
}

func newBook(opts Options, init float64) book {
	return book{opts: opts, init: init, agents: map[string]*agentTable{}, states: map[string]int{}, lastState: -1, viewState: -1}
}

// state returns the number of state key, numbering it when create is set;
// -1 when it is new and create is not.
func (b *book) state(key string, create bool) int {
	if b.lastState >= 0 && strcmp.Equal(b.lastKey, key) {
		if !strcmp.Same(b.lastKey, key) {
			// The caller's copy from now on: the agents after it in
			// the step share its bytes, which compare by address.
			b.lastKey = key
		}
		return b.lastState
	}
	n, ok := b.states[key]
	if !ok {
		if !create {
			return -1
		}
		n = len(b.states)
		b.states[key] = n
	}
	b.lastKey, b.lastState = key, n
	return n
}

// table returns agent's table, making it if need be.
func (b *book) table(agent string) *agentTable {
	if p := b.acted; p != nil {
		if p.next != nil && strcmp.Equal(p.next.id, agent) {
			b.acted = p.next
			return p.next
		}
		if strcmp.Equal(p.id, agent) {
			return p
		}
	}
	t := b.agents[agent]
	if t == nil {
		t = &agentTable{id: agent}
		b.agents[agent] = t
	}
	if b.acted != nil {
		b.acted.next = t
	}
	b.acted = t
	return t
}

// actRow returns the row of the observation's agent and state, creating it
// with the observation's legal actions. The caller holds b.mu.
func (b *book) actRow(obs *agents.Observation) (*agentTable, *row, error) {
	if len(obs.Legal) == 0 {
		return nil, nil, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, agents.ErrNoLegalActions)
	}
	t := b.table(obs.Agent)
	var state int
	if len(obs.Inbox) == 0 && b.viewState >= 0 && strcmp.Same(obs.View, b.view) {
		state = b.viewState
	} else {
		state = b.state(b.opts.state(episode.RenderObservation(obs.View, obs.Inbox)), true)
		b.view, b.viewState = "", -1
		if len(obs.Inbox) == 0 {
			b.view, b.viewState = obs.View, state
		}
	}
	r := t.find(state)
	if r == nil {
		// The view's own slice, which its game never changes (env.View)
		// and usually hands out again: sameStrings then compares one
		// pointer.
		r = t.rows.add(state, obs.Legal, b.init)
		t.lastState, t.last = state, r
		return t, r, nil
	}
	if !sameStrings(r.legal, obs.Legal) {
		key := b.opts.state(episode.RenderObservation(obs.View, obs.Inbox))
		return nil, nil, fmt.Errorf("agent %q state %.60q: %w: %q, then %q", obs.Agent, key, ErrLegalChanged, r.legal, obs.Legal)
	}
	return t, r, nil
}

// sameStrings is slices.Equal, quick when the scenario shares one slice
// among its turns.
func sameStrings(a, b []string) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// indexOf is slices.Index for a turn's action among its row's legal
// actions: the action a learner played is the legal string itself, whose
// bytes compare by pointer; another copy of it is found by its bytes.
func indexOf(legal []string, action string) int {
	for i, s := range legal {
		if strcmp.Same(s, action) {
			return i
		}
	}
	return slices.Index(legal, action)
}

// learned is one turn as a learner reads it.
type learned struct {
	row    *row
	action int
	reward float64
}

// learn reads every emitted turn of a finished episode, in order, into
// the row, action and reward it updates, and calls apply with them, holding
// b.mu. The turns are read first and applied after, so that the learner's
// update loop makes no call but track: in Go, every call in a loop costs
// its live values a spill. When a turn cannot be read, apply gets the
// turns before it, and learn returns the error.
func (b *book) learn(rec *episode.Record, c *trajectories.Credit, apply func(turns []learned)) error {
	if !rec.Finished() {
		return nil
	}
	rewards, err := b.opts.rewards(c)
	if err != nil {
		if rec.Emitted() == 0 {
			return nil // nothing to learn, and no credit needed
		}
		return fmt.Errorf("episode %d: %w", rec.Index, err)
	}
	if !finite.All(rewards) {
		for k, v := range rewards {
			if !finite.Is(v) {
				return fmt.Errorf("episode %d emitted turn %d: %w: the reward is %v", rec.Index, k, ErrNoReward, v)
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// The emitted turns are counted as they are read: an episode whose
	// credit has another number of values learns nothing.
	turns, n, err := b.readAll(rec, rewards)
	if n != len(rewards) {
		return fmt.Errorf("episode %d: %w: the credit has %d values for %d emitted turns", rec.Index, ErrNoReward, len(rewards), n)
	}
	apply(turns)
	return err
}

// readAll reads the emitted turns of rec into b.turns, each with its
// reward, and returns them: all of them, or those before the first that
// cannot be read, and its error. n is the number of emitted turns, all of
// them: when it is not len(rewards), the turns returned are not to be
// learned. The caller holds b.mu.
func (b *book) readAll(rec *episode.Record, rewards []float64) (out []learned, n int, err error) {
	tables := b.seatTables(rec.Seats)
	if cap(b.turns) < len(rewards) {
		b.turns = make([]learned, len(rewards))
	}
	// Written by index, not appended: as many as rewards, or fewer.
	out = b.turns[:len(rewards)]
	for i := range rec.Turns {
		t := &rec.Turns[i]
		if !t.Emit {
			continue
		}
		if n == len(out) {
			return out[:n], rec.Emitted(), nil // more turns than rewards
		}
		// The usual case, which read also handles but through a call:
		// the seat's table is known, and Act noted the turn (playedRow,
		// playedIndex).
		var l learned
		if uint(t.Seat) < uint(len(tables)) && tables[t.Seat] != nil {
			if p := tables[t.Seat].playedRow(t); p != nil {
				if a := p.playedIndex(t.Action); a >= 0 {
					l = learned{row: p.row, action: a}
				}
			}
		}
		if l.row == nil {
			if l, err = b.read(rec, tables, t); err != nil {
				return out[:n], rec.Emitted(), fmt.Errorf("episode %d turn %d (seat %d turn %d): %w", rec.Index, i, t.Seat, t.Turn, err)
			}
		}
		l.reward = rewards[n]
		out[n] = l
		n++
	}
	return out[:n], n, nil
}

// seatTables returns the table of each of seats, nil where not looked up
// yet (read does), reusing the previous episode's when its seats were the
// same. The caller holds b.mu.
func (b *book) seatTables(seats []episode.Seat) []*agentTable {
	if !episode.SameSeats(seats, b.seats) {
		b.seats = slices.Clone(seats)
		b.tables = make([]*agentTable, len(seats))
	}
	return b.tables
}

// read is the row and action of turn t, whose seat's table it looks up
// when tables has none yet.
func (b *book) read(rec *episode.Record, tables []*agentTable, t *episode.Turn) (learned, error) {
	if t.Seat < 0 || t.Seat >= len(tables) {
		return learned{}, fmt.Errorf("%w: the turn names seat %d of %d", ErrUnknownTurn, t.Seat, len(tables))
	}
	tab := tables[t.Seat]
	if tab == nil {
		if tab = b.agents[rec.Seats[t.Seat].ID]; tab == nil {
			return learned{}, fmt.Errorf("%w: agent %q, which it never played", ErrUnknownTurn, rec.Seats[t.Seat].ID)
		}
		tables[t.Seat] = tab
	}
	var r *row
	if p := tab.playedRow(t); p != nil {
		if a := p.playedIndex(t.Action); a >= 0 {
			return learned{row: p.row, action: a}, nil
		}
		r = p.row
	} else {
		key := b.opts.state(rec.TextPrompt(t))
		if state := b.state(key, false); state >= 0 {
			r = tab.find(state)
		}
		if r == nil {
			return learned{}, fmt.Errorf("%w: agent %q in state %.60q, in which it never acted", ErrUnknownTurn, tab.id, key)
		}
	}
	// The action is found in the row as before, whichever way the row
	// was: the first legal string that is the action's.
	a := indexOf(r.legal, t.Action)
	if a < 0 {
		return learned{}, fmt.Errorf("%w: agent %q played %q, not one of its legal actions %q", ErrUnknownTurn, tab.id, t.Action, r.legal)
	}
	return learned{row: r, action: a}, nil
}

// values returns a copy of agent's row in state: its legal actions and
// values, or false when the learner has none.
func (b *book) values(agent, state string) ([]string, []float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.agents[agent]
	n, ok := b.states[state]
	if t == nil || !ok {
		return nil, nil, false
	}
	r := t.rows.get(n)
	if r == nil {
		return nil, nil, false
	}
	return slices.Clone(r.legal), slices.Clone(r.values), true
}

// act picks an action for obs with sel, under b.mu.
func (b *book) act(obs *agents.Observation, sel Selector) (agents.Action, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var a agents.Action
	c := newChooser(sel)
	err := b.actInto(obs, &a, &c)
	return a, err
}

// actBatch is act for each of obs in turn, under one lock
// (agents.BatchPolicy).
func (b *book) actBatch(obs []agents.Observation, acts []agents.Action, errs []error, sel Selector) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := newChooser(sel)
	for k := range obs {
		errs[k] = b.actInto(&obs[k], &acts[k], &c)
	}
}

// chooser is a Selector, with ε-greedy's parameter taken out of it once
// for all the observations of a batch: ε-greedy, the default, is called
// directly, because through the interface it costs a call that cannot be
// inlined and a copy of its value, and its greedy action comes from the
// row (greedyAction), not a scan.
type chooser struct {
	sel     Selector
	greedy  bool    // sel is an EpsilonGreedy
	epsilon float64 // its Epsilon
}

func newChooser(sel Selector) chooser {
	eg, ok := sel.(EpsilonGreedy)
	return chooser{sel: sel, greedy: ok, epsilon: eg.Epsilon}
}

// actInto is act, writing the action into a (every field: the caller's
// buffer may hold an earlier answer); the caller holds b.mu.
func (b *book) actInto(obs *agents.Observation, a *agents.Action, c *chooser) error {
	// The usual case first, which actRow also handles but through a call:
	// the agent after the previous one (table), the same view without
	// messages (so the same state), the row's legal actions the same
	// slice as the observation's (sameStrings).
	var r *row
	t := b.acted
	if t != nil && t.next != nil && strcmp.Same(t.next.id, obs.Agent) && len(obs.Inbox) == 0 && b.viewState >= 0 && strcmp.Same(obs.View, b.view) {
		if next := t.next.find(b.viewState); next != nil && len(next.legal) == len(obs.Legal) && len(obs.Legal) > 0 && &next.legal[0] == &obs.Legal[0] {
			t, r = t.next, next
			b.acted = t
		}
	}
	if r == nil {
		var err error
		if t, r, err = b.actRow(obs); err != nil {
			*a = agents.Action{}
			return err
		}
	}
	var i int
	switch {
	case !c.greedy:
		// Without the room behind them, which holds the trace
		// (valuesWithRoom): a Selector that appended would overwrite it.
		i = c.sel.Select(r.values[:len(r.values):len(r.values)], obs)
	// obs.Float64(streamExplore), without its call.
	case c.epsilon > 0 && seeds.Float64(seeds.MixKeyed(obs.Seed, seeds.Key(streamExplore))) < c.epsilon:
		i = obs.Intn(streamRandom, len(r.values))
	default:
		i = r.greedyAction(obs)
	}
	t.remember(obs, r, i)
	*a = agents.Action{Text: r.legal[i]}
	return nil
}

// Seed streams of a turn (Observation.Float64/Intn) that learners draw
// from. Stream 0 is agents.Random's.
const (
	streamExplore = 1 // ε-greedy's coin, Boltzmann's and softmax's draw
	streamRandom  = 2 // ε-greedy's random action
	streamTie     = 3 // a tie among the best actions
)
