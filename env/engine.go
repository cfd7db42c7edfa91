package env

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/finite"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/internal/strcmp"
	"github.com/troupe-rl/troupe/protocol"
)

// DefaultStepLimit bounds the steps of an episode whose run sets no
// Limits.MaxSteps and whose scenario declares no Info.StepLimit: a game
// that never ends (a bug, usually) ends truncated, with end "step_limit"
// and an error that says how to raise the bound, instead of running on.
const DefaultStepLimit = 100_000

// DefaultTextLimit bounds the text of an episode whose scenario declares
// no Info.TextLimit: its turns' views and answers and its messages'
// payloads, in bytes, each turn's view counted as its sample holds it
// (once per turn). What an episode holds in memory, its record, the
// samples made of it and their encoding, grows with that text; a game
// whose views grow every step (a transcript in the view) and that never
// ends would otherwise hold gigabytes before DefaultStepLimit ends it. It
// ends truncated then, with end "text_limit" and an error saying how to
// raise the bound. 256 MiB is some 1,700 times the text of an El Farol
// week of 1,000 patrons (150 bytes a turn), and more than one of
// 1,000,000 holds (150 MB).
const DefaultTextLimit = 256 << 20

// Limits bound an episode, counted inside it: a zero field means no limit.
// Hitting a limit truncates the episode (status truncated), which is
// distinct from the rules terminating it (status completed). Wall time is
// not counted inside an episode: it is its driver's (Drive.Timeout).
type Limits struct {
	MaxSteps    int // logical steps
	MaxTurns    int // agent turns, all agents together
	MaxMessages int // messages sent on the bus
}

// Why an episode ended, as written to episode.Record.End (and each sample's
// metadata "end").
const (
	EndTerminated  = "terminated"     // the rules ended it
	EndQuiescent   = "quiescent"      // async: nobody had anything left to answer
	EndNoSeats     = "no_seats"       // no seat was present and non-terminal: nobody could act
	EndMaxSteps    = "max_steps"      // Limits.MaxSteps
	EndStepLimit   = "step_limit"     // no Limits.MaxSteps, and the scenario's StepLimit (or DefaultStepLimit) reached
	EndMaxTurns    = "max_turns"      // Limits.MaxTurns
	EndMaxMessages = "max_messages"   // Limits.MaxMessages
	EndTextLimit   = "text_limit"     // the scenario's TextLimit (or DefaultTextLimit) reached
	EndDeadline    = "deadline"       // Drive.Timeout
	EndInterrupted = "interrupted"    // the run was cancelled
	EndPolicyError = "policy_error"   // a policy returned an error
	EndGameError   = "game_error"     // the scenario broke a rule of its own or panicked
	EndInvalid     = "invalid_action" // an agent's answer was invalid and InvalidRule ends the episode
)

// InvalidMode says what happens when a policy gives an invalid answer
// (agents.Action.Invalid set).
type InvalidMode int

const (
	// InvalidPass hands the move to the game as it is: the scenario's own
	// rules for illegal moves judge it.
	InvalidPass InvalidMode = iota
	// InvalidEnd ends the episode at once (status completed, end
	// "invalid_action"): every offender scores Penalty, every other agent
	// Bonus, and the team reward is the sum of those scores.
	InvalidEnd
)

// InvalidRule is a run's rule for invalid answers. The zero value passes
// them to the game. Forfeit and SPIRAL's penalty are both InvalidEnd rules:
// {InvalidEnd, -1, 1} and {InvalidEnd, -1.5, 0.5}.
type InvalidRule struct {
	Mode    InvalidMode
	Penalty float64 // the offender's score
	Bonus   float64 // every other agent's score
}

// Forfeit is the rule under which an invalid answer loses the game: the
// offender scores -1, the others +1.
var Forfeit = InvalidRule{Mode: InvalidEnd, Penalty: -1, Bonus: 1}

// SpiralPenalty is SPIRAL's rule (arXiv 2506.24119): the offender scores
// -1.5, the others +0.5.
var SpiralPenalty = InvalidRule{Mode: InvalidEnd, Penalty: -1.5, Bonus: 0.5}

// PolicyFor chooses the policy of each seat of an episode. It must be a
// function of the seat: the same seat gets the same policy every time, so
// that an engine may ask once for the seats of many episodes and keep the
// answers (LocalExecutor's episodes do). It may be called concurrently.
type PolicyFor func(seat Seat) agents.Policy

// SamePolicy plays p in every seat: self-play.
func SamePolicy(p agents.Policy) PolicyFor { return func(Seat) agents.Policy { return p } }

// EmitFilter chooses whose turns become samples. Like PolicyFor, it must
// be a function of the seat.
type EmitFilter func(seat Seat) bool

// EmitRoles emits the turns of the given roles only (the learners, when
// they play fixed opponents).
func EmitRoles(roles ...string) EmitFilter {
	return func(seat Seat) bool { return slices.Contains(roles, seat.Role) }
}

// Play describes how episodes are played, as the episode itself reads it:
// the scenario and its parameters, who plays each seat, what bounds an
// episode and judges an invalid answer, and whose turns become samples.
// It is the one description of play: Setup (one episode), LocalExecutor
// and play.Config embed it, and a run spec resolves into one (package
// runspec). What only a driver reads (its clock, how it asks the
// policies, tree sampling) is apart, in Drive.
type Play struct {
	Scenario Scenario
	Params   Params
	// Policy chooses each seat's policy. A stepped Episode, whose moves
	// come from its driver, asks it only for the counterfactual replays of
	// its record; it may be nil there.
	Policy PolicyFor
	// Limits bound an episode in steps, turns and messages.
	Limits Limits
	// Invalid is the rule for invalid answers; the zero value passes them
	// to the game.
	Invalid InvalidRule
	// Emit chooses whose turns become samples; nil emits every turn.
	Emit EmitFilter
}

// Drive is what a driver of episodes reads and the episode does not: the
// wall clock, how the policies are asked, and tree sampling. Engine.Run,
// LocalExecutor and play.Run read it; a stepped Episode, whose caller is
// its driver, refuses a Setup that sets it (NewEpisode).
type Drive struct {
	// Timeout bounds an episode's wall time (0: none). It is the driver's
	// clock, read between steps: an episode cut by it ends truncated with
	// end "deadline", and is not reproducible.
	Timeout time.Duration
	// ParallelPolicies asks the policies of a step's actors concurrently
	// (LLM calls). Their answers are applied in seat order all the same.
	ParallelPolicies bool
	// Tree, when set, plays every episode with tree sampling (PlayTree):
	// K candidates per turn of the tree-sampled seats, each scored by a
	// continuation, the best kept, all of them recorded and emitted.
	Tree *episode.Tree
}

// Setup is everything one episode needs: how it is played, its seeds and
// its identity in the run.
type Setup struct {
	Play
	Drive
	Seed       uint64 // scenario seed
	PolicySeed uint64 // root of every turn's policy seed

	Index, RolloutID, GroupIndex int64

	// ObserveEachSeat observes every actor with Game.Observe even when the
	// scenario declares Info.PublicView: episodes must not change with it
	// (scenariotest.Check runs both ways to verify the claim).
	ObserveEachSeat bool
	// Counterfactual, when set, re-runs a recorded episode differently
	// (see episode.Counterfactual); Recorded holds the original turns.
	// A counterfactual run records no turns: only its outcome and score.
	Counterfactual *episode.Counterfactual
	Recorded       []episode.Turn
	// recordedBySeat is Recorded split by seat and turn, computed once per
	// episode by its replayer rather than once per replay.
	recordedBySeat [][]string
	// Engines, when set, lends engines to the episode's replays, so
	// counterfactual re-simulations reuse their state machines.
	Engines *EnginePool
	// onState, when set (States), is called with the game after its start
	// (step 0) and after every step's moves.
	onState func(step int, g Game)
	// stepped is set by NewEpisode: the episode's driver asks the
	// policies itself, whatever they are, so every seat keeps its history
	// (agents.Remembers).
	stepped bool
	// records, when set, lends the episode its record and the arrays
	// behind it (see RecyclingOutput).
	records *recordPool
	// policyKey, when not nil, says that every setup with the same key
	// has the same Policy and Emit, so that an engine may keep their
	// answers for the same seats (Engine.seatPolicies). LocalExecutor
	// sets it to itself, and replays keep their episode's.
	policyKey any
}

// Engine runs episodes. It keeps its agents' state machines and buffers
// between episodes, so a worker that runs many episodes should keep one
// Engine; an Engine runs one episode at a time.
type Engine struct {
	bus      Bus
	mem      *MemBus // bus, when it is the in-process one
	pool     map[*agents.Role][]*agents.Machine
	setup    *Setup
	info     *Info
	rec      *episode.Record
	seats    []Seat
	machines []*agents.Machine
	policies []agents.Policy
	absent   []bool
	turns    []int // per seat: turns taken
	cursor   []int // per seat: mailbox entries already observed
	// hist is, per seat, its turns so far (agents.Observation.History).
	// The arrays are reused by the next episodes: policies keep nothing
	// of an observation once they answered.
	hist [][]agents.Turn
	// remember is, per seat, whether its policy reads the history
	// (agents.Remembers): the engine keeps hist[i] only then. baseRemember
	// is base's answers, kept with them; remember is this episode's,
	// cfRemember when a counterfactual changes a seat's policy.
	remember, baseRemember, cfRemember []bool
	// sessions is the episode's base of its agents' session keys
	// (agents.Observation.Session): seat i's is sessions + (i+1)·
	// sessionGamma, one mix per episode rather than one per seat, which a
	// game of one turn per seat would pay at every turn.
	sessions uint64
	// lastTurn is, per seat, 1 + the index in rec.Turns of its latest
	// turn, or 0 before its first: zero, as resize leaves it.
	lastTurn []int
	// base and emit are setup.Policy's and setup.Emit's answers for the
	// seats, asked for policyKey's episodes (seatPolicies); policies are
	// the policies of this episode: base, or cfPolicies, base changed by
	// the counterfactual, with frozen as the replayed seats' policies.
	base []agents.Policy
	// batch numbers the runs of consecutive seats whose base policy is one
	// agents.BatchPolicy (the number is the run's first seat), -1 for the
	// other seats: act asks each run's actors of a step in one call.
	batch      []int
	batched    bool            // some seat's policy is a BatchPolicy
	acts       []agents.Action // the step's actions, which moves point to
	cfPolicies []agents.Policy
	frozen     []frozen
	// policyKey and emitKey are the Setup.policyKey that base and emit
	// were asked for, or nil.
	policyKey, emitKey any
	// replaying is the setup of the counterfactual replay being played;
	// an episode's own setup is in its replayer.
	replaying Setup
	// checked are the last seats checked, ids their ids: seats equal to
	// them (El Farol hands out the same ones every episode) are not
	// checked again, which for N agents costs N map inserts; comparing
	// strings that share their bytes is one pointer comparison each.
	checked     []Seat
	checkedInfo *Info
	ids         []string
	// seated says that machines are those of the checked seats, bound to
	// them: the next episode with the same seats reuses them as they are.
	seated bool
	named  []int // actors' buffer
	// turnHint is about the largest number of turns of the last episodes
	// played (not replays): the next one's turns start with that capacity
	// instead of growing, copy after copy, to it.
	turnHint int
	// transitionHint is turnHint for the record's transitions.
	transitionHint int
	// inbox collects the recorded turns' Inbox positions during an
	// episode, spans where each turn's are; at the end they are copied
	// into one array of the exact size, which the turns' Inbox slice.
	// The buffers are the engine's, reused by every episode.
	inbox  []int
	spans  []inboxSpan
	emit   []bool
	ended  bool
	played int // turns asked for so far, all seats together (Limits.MaxTurns)
	// text is the bytes of the episode's views, answers and message
	// payloads so far (Info.TextLimit); logged is how many of the bus's
	// messages it counts.
	text      int64
	logged    int
	out       outcome // how the episode ended, once a phase ended it (over)
	offenders []int   // seats whose invalid answers ended the episode
	// asking is set while askOne waits for a policy's answer: a panic that
	// play recovers meanwhile is the policy's.
	asking  bool
	step    Step
	obs     []agents.Observation
	moves   []Move
	errs    []error
	current Game
	// scheduler and byState are current's optional interfaces, or nil.
	scheduler Scheduler
	byState   StateObserver
	// public says that current is observed once per step (Info.PublicView).
	public bool
	// anyFeatures says that current writes numeric observations and some
	// seat's policy reads them (agents.ReadsFeatures): readsFeatures says
	// which, and observe has featureGame (current) write them into
	// features[i], the seat's buffer, kept from episode to episode.
	// baseFeatures is, per seat, whether base[i] reads them, asked with
	// base (seatPolicies), baseAnyFeatures whether any does; cfFeatures
	// is the same for a counterfactual's policies.
	// wroteFeatures says that some observation was given features: from
	// then on observeFeatures clears the others'.
	anyFeatures, baseAnyFeatures, wroteFeatures bool
	readsFeatures, baseFeatures, cfFeatures     []bool
	features                                    [][]float32
	featureGame                                 FeatureGame
	// arena is the record of the episode being played, with its arrays;
	// nil in a replay.
	arena *record
	// scratch is the record of the replay being played (see run).
	scratch episode.Record
	// busArraysFree says that the bus's current log and recipients
	// arrays belong to no record (the last episode was a replay), so the
	// next replay may write over them.
	busArraysFree bool
	// spares are records taken from sparesOf for the next episodes (see
	// spareRecord).
	spares   []*record
	sparesOf *recordPool
}

// NewEngine returns an engine with an in-process bus.
func NewEngine() *Engine { return NewEngineWithBus(NewMemBus()) }

// NewEngineWithBus returns an engine whose episodes use bus.
func NewEngineWithBus(bus Bus) *Engine {
	e := &Engine{bus: bus, pool: map[*agents.Role][]*agents.Machine{}}
	e.mem, _ = bus.(*MemBus)
	e.step.e = e
	return e
}

// The bus calls of every step and turn go straight to an in-process bus,
// where the compiler can inline them, rather than through the interface.

func (e *Engine) deliver() {
	if e.mem != nil {
		e.mem.Deliver()
		return
	}
	e.bus.Deliver()
}

func (e *Engine) mailbox(seat int) []protocol.Message {
	if e.mem != nil {
		return e.mem.Mailbox(seat)
	}
	return e.bus.Mailbox(seat)
}

func (e *Engine) send(from string, to protocol.Address, kind, payload string, quiet bool, time int) error {
	if e.mem != nil {
		return e.mem.post(from, to, kind, payload, quiet, time)
	}
	return e.bus.Send(protocol.Message{From: from, To: to, Kind: kind, Payload: payload, Quiet: quiet}, time)
}

// Errors an episode can record; they are wrapped in Record.Err's text and
// returned by Replay.
var (
	ErrBadSeats    = errors.New("bad seats")
	ErrNoActor     = errors.New("the game named no agent to act")
	ErrGamePanic   = errors.New("game panicked")
	ErrPolicyPanic = errors.New("policy panicked")
	ErrBadScore    = errors.New("bad score")
)

// RunEpisode runs one episode with a fresh engine.
func RunEpisode(ctx context.Context, setup Setup) *episode.Record {
	return NewEngine().Run(ctx, setup)
}

// Run plays one episode to its end and returns its record: the turns, the
// message log with recipients, the outcome and the score. It is the
// standard driver of the stepped episode (see Episode): at each step it
// asks the policies of the seats that act (setup.Policy; those that share
// an agents.BatchPolicy in one call, all at once under ParallelPolicies),
// applies their answers in seat order, and reads the wall clock
// (setup.Timeout, ctx) between steps. It never returns nil and never
// panics because of the game or a policy: whatever goes wrong is recorded
// in the record's Status, End and Err.
//
//   - completed: the rules ended it (or, async, nobody had mail left; or
//     no seat was left that could act: End "no_seats");
//   - truncated: a limit of setup.Limits, or setup.Timeout, ended it;
//   - aborted: ctx was cancelled (End "interrupted") or a policy failed;
//   - failed: the game broke (an error from Start or Apply, an impossible
//     transition, bad seats, a panic).
func (e *Engine) Run(ctx context.Context, setup Setup) *episode.Record {
	ep := e.run(ctx, setup)
	if ep == &e.scratch {
		// A replay's record is the engine's own (see run): the caller gets
		// a copy.
		rec := *ep
		return &rec
	}
	return ep
}

// run is Run, except that a counterfactual replay's record is the engine's
// scratch record, valid until the engine's next episode: a replayer reads
// its score and drops it, and allocates nothing for it.
//
// It is the standard driver of the engine's stepped episode: open, begin,
// then decide, observe, ask and apply step after step, and finish (the
// phases Episode drives from outside), with the policies asked in between
// and the wall clock (Drive.Timeout, ctx) read before every step.
func (e *Engine) run(ctx context.Context, setup Setup) *episode.Record {
	ep := e.open(&setup)
	defer e.release()
	runCtx := ctx
	if setup.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, setup.Timeout)
		defer cancel()
	}
	var status protocol.Status
	var end string
	var err error
	if setup.Policy == nil && setup.Counterfactual == nil {
		// A replay of an episode its driver played needs none (the
		// record's moves): seat says which seat lacks one.
		status, end, err = protocol.StatusFailed, EndGameError, fmt.Errorf("%w: no policy", ErrBadSeats)
	} else {
		status, end, err = e.play(ctx, runCtx)
	}
	e.finish(status, end, err)
	return ep
}

// open readies the engine for the episode of setup and returns its record,
// empty: the stepped episode's first phase.
func (e *Engine) open(setup *Setup) *episode.Record {
	info := setup.Scenario.Info()
	// The record and its replayer, which holds the episode's setup (the
	// engine reads it through e.setup meanwhile), are one allocation, or
	// none when the run recycles records. A replay records no replayer and
	// keeps its setup in the engine.
	var ep *episode.Record
	if setup.Counterfactual == nil {
		r := e.newRecord(setup)
		e.arena = r
		ep = &r.rec
		if cap(ep.Turns) < e.turnHint {
			ep.Turns = make([]episode.Turn, 0, e.turnHint)
		}
		if cap(ep.Transitions) < e.transitionHint {
			ep.Transitions = make([]episode.Transition, 0, e.transitionHint)
		}
		e.inbox, e.spans = e.inbox[:0], e.spans[:0]
		e.setup = &r.rp.setup
		if mb := e.mem; mb != nil {
			mb.lend(r.log, r.recipients)
		}
	} else {
		e.scratch = episode.Record{}
		ep = &e.scratch
		e.replaying = *setup
		e.setup = &e.replaying
		if mb := e.mem; mb != nil && e.busArraysFree {
			// A replay keeps no log: the last replay's arrays serve again.
			log, recipients := mb.arrays()
			mb.lend(log, recipients)
		}
	}
	ep.Scenario, ep.Params, ep.Seed, ep.PolicySeed = info.Name, setup.Params.raw, setup.Seed, setup.PolicySeed
	ep.Teams = info.Teams
	ep.Index, ep.RolloutID, ep.GroupIndex = setup.Index, setup.RolloutID, setup.GroupIndex
	e.info, e.rec = info, ep
	return ep
}

// release forgets the episode the engine played, once its record is
// finished: the engine keeps only what serves its next episodes.
func (e *Engine) release() {
	e.setup, e.rec, e.current, e.scheduler, e.byState, e.arena = nil, nil, nil, nil, nil, nil
	e.replaying = Setup{}
}

// finish ends the episode with the outcome its last phase gave (status,
// end and err), scores it, and completes its record: the message log, the
// turns' inboxes, the label and the replayer.
func (e *Engine) finish(status protocol.Status, end string, err error) {
	ep := e.rec
	ep.Status, ep.End = status, end
	if err != nil {
		ep.Err, ep.Stack = err.Error(), stackOf(err)
	}
	switch {
	case end == EndInvalid:
		ep.Score = e.invalidScore()
	case status == protocol.StatusCompleted || status == protocol.StatusTruncated:
		if score, err := e.score(); err != nil {
			ep.Status, ep.End, ep.Err, ep.Stack = protocol.StatusFailed, EndGameError, err.Error(), stackOf(err)
		} else {
			ep.Score = score
		}
	}
	if e.setup.Counterfactual != nil {
		e.busArraysFree = true
		return
	}
	r := e.arena
	e.inboxes(r)
	// Messages still queued (sent in a step that failed) get the
	// recipients they would have reached.
	e.bus.Deliver()
	ep.Messages = e.bus.Log()
	if mb := e.mem; mb != nil {
		r.log, r.recipients = mb.arrays()
	}
	e.busArraysFree = false
	ep.Label = e.label()
	// A game that ended by its own rules can answer frozen
	// counterfactuals from its final state (Rescorer): the replayer
	// keeps it for that.
	var done Game
	if ep.Status == protocol.StatusCompleted && (ep.End == EndTerminated || ep.End == EndQuiescent || ep.End == EndNoSeats) {
		done = e.current
	}
	r.rp.seats, r.rp.recorded, r.rp.done = e.seats, ep.Turns, done
	r.game, r.gameOf = e.current, e.info
	e.turnHint = hint(e.turnHint, len(ep.Turns))
	e.transitionHint = hint(e.transitionHint, len(ep.Transitions))
}

func (e *Engine) score() (score Score, err error) {
	defer func() {
		if r := recover(); r != nil {
			p := panicAt()
			err = p.wrap(fmt.Errorf("%w in Score: %v (at %s)", ErrGamePanic, r, p.site))
		}
	}()
	score = e.current.Score()
	if score.Agents != nil && len(score.Agents) != len(e.seats) {
		return Score{}, fmt.Errorf("%w: Score has %d agent scores for %d seats", ErrBadSeats, len(score.Agents), len(e.seats))
	}
	if err := teamScore(e.info, &score); err != nil {
		return Score{}, err
	}
	// A reward that is not a number fails the episode here, named, rather
	// than every mean and every learner it would reach downstream.
	if !finite.Is(score.Team) {
		return Score{}, fmt.Errorf("%w: the team reward is %v", ErrBadScore, score.Team)
	}
	if !finite.All(score.Agents) {
		for i, v := range score.Agents {
			if !finite.Is(v) {
				return Score{}, fmt.Errorf("%w: seat %d (%s) scored %v", ErrBadScore, i, e.seats[i].ID, v)
			}
		}
	}
	return score, nil
}

func (e *Engine) play(ctx, runCtx context.Context) (status protocol.Status, end string, err error) {
	defer func() {
		// Cleared whether or not anything panicked: a policy that calls
		// runtime.Goexit (t.FailNow) leaves askOne without a panic.
		asking := e.asking
		e.asking = false
		if r := recover(); r != nil {
			p := panicAt()
			status, end, err = gamePanic(r, p)
			if asking {
				// A lone actor's policy (askOne), as act would have
				// returned its panic.
				status, end, err = e.askFailed(ctx, runCtx, e.policyPanic(0, r, p))
			}
		}
	}()
	if e.begin() {
		return e.out.status, e.out.end, e.out.err
	}
	timed := runCtx != ctx // Timeout: runCtx is ctx's child
	for {
		if ctx.Err() != nil {
			return protocol.StatusAborted, EndInterrupted, context.Cause(ctx)
		}
		if timed && runCtx.Err() != nil {
			return protocol.StatusTruncated, EndDeadline, nil
		}
		actors := e.decide()
		if actors == nil {
			return e.out.status, e.out.end, e.out.err
		}
		e.observe(actors)
		if err := e.ask(runCtx, actors); err != nil {
			return e.askFailed(ctx, runCtx, err)
		}
		if e.apply(actors) {
			return e.out.status, e.out.end, e.out.err
		}
	}
}

// gamePanic is the outcome of an episode whose game panicked with r at p
// (panicAt).
func gamePanic(r any, p panicked) (protocol.Status, string, error) {
	return protocol.StatusFailed, EndGameError, p.wrap(fmt.Errorf("%w: %v (at %s)", ErrGamePanic, r, p.site))
}

// panicked is where a recovered panic was raised: its site, the first
// frame below it outside the runtime, and its stack (Record.Stack).
type panicked struct{ site, stack string }

// wrap is err carrying the panic's stack, which the episode's record keeps
// (finish).
func (p panicked) wrap(err error) error { return &panicError{err: err, stack: p.stack} }

// panicError is an error that a panic caused, with the panic's stack.
type panicError struct {
	err   error
	stack string
}

func (e *panicError) Error() string { return e.err.Error() }
func (e *panicError) Unwrap() error { return e.err }

// stackOf is the stack of the first panic err holds, or "".
func stackOf(err error) string {
	if pe, ok := errors.AsType[*panicError](err); ok {
		return pe.stack
	}
	return ""
}

// panicSite names where the panic being recovered was raised, for its
// error: the first function below the panic that is not the runtime's (the
// scenario's or the policy's own code, not the map assignment or the index
// check that raised it), as "file.go:LINE in FUNCTION". It must be called
// from the deferred function that recovers, whose stack still holds the
// panicking frames. No stack trace: it names goroutines, and episodes must
// be byte-identical whatever goroutine ran them; and the file is named
// without its directory, so that the same source gives the same text on
// every machine (a NATS worker's records are a local run's, byte for byte).
//
// The stack goes from the panic to the function that recovers it (the
// deferred function's own), and no further: the engine's frames below it
// are the same for every panic.
func panicAt() panicked {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	p := panicked{site: "an unknown place"}
	var stack strings.Builder
	recovering, below := "", false
	for {
		f, more := frames.Next()
		switch {
		case recovering == "":
			// The deferred function that called panicAt: its enclosing
			// function is where the stack ends.
			recovering = f.Function
			if i := strings.LastIndex(recovering, ".func"); i > 0 {
				recovering = recovering[:i]
			}
		case f.Function == "runtime.gopanic":
			below = true
		case !below || strings.HasPrefix(f.Function, "runtime."):
		case f.Function == recovering:
			more = false
		default:
			if stack.Len() == 0 {
				p.site = fmt.Sprintf("%s:%d in %s", filepath.Base(f.File), f.Line, f.Function)
			} else {
				stack.WriteByte('\n')
			}
			fmt.Fprintf(&stack, "%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			p.stack = stack.String()
			return p
		}
	}
}

// The phases of a stepped episode, which play (the standard driver) and
// Episode (a driver outside) call in this order: begin; then decide,
// observe and apply, step after step, with the moves asked in between;
// then finish. Each reports whether it ended the episode, whose outcome it
// then left in e.out (over). None recovers a panic of the game: the driver
// does, once around them all.

// outcome is how an episode ended: its status, why, and the error, if any.
type outcome struct {
	status protocol.Status
	end    string
	err    error
}

// over ends the episode with the given outcome, in e.out, and reports
// true: what a phase that ends the episode returns.
func (e *Engine) over(status protocol.Status, end string, err error) bool {
	e.out = outcome{status, end, err}
	return true
}

// begin makes the game, seats its agents and starts it (logical time 0).
func (e *Engine) begin() bool {
	setup := e.setup
	e.current, e.seats = nil, nil
	e.ended = false
	e.played = 0
	e.text, e.logged = 0, 0
	e.offenders = e.offenders[:0]
	e.step.time = 0
	game, err := e.newGame(setup)
	if err != nil {
		return e.over(protocol.StatusFailed, EndGameError, fmt.Errorf("new game: %w", err))
	}
	e.current = game
	e.scheduler, _ = game.(Scheduler)
	e.byState, _ = game.(StateObserver)
	e.public = e.info.PublicView && e.byState == nil && !setup.ObserveEachSeat
	if err := e.seat(game.Seats()); err != nil {
		return e.over(protocol.StatusFailed, EndGameError, err)
	}
	e.readFeatures(game)
	if err := game.Start(&e.step); err != nil {
		return e.over(protocol.StatusFailed, EndGameError, fmt.Errorf("start: %w", err))
	}
	e.deliver()
	if h := setup.onState; h != nil {
		h(0, game)
	}
	return false
}

// readFeatures readies, for each seat whose policy reads numeric
// observations (agents.ReadsFeatures), a buffer of the size its role's
// space declares, which observe has game write at each of its turns. The
// buffers are kept from episode to episode. A game that writes none, or
// whose scenario declares none, gives every seat nil: its policies see
// no Features, and say so if they need them. It costs an episode whose
// policies read none one test.
func (e *Engine) readFeatures(game Game) {
	e.anyFeatures = false
	if !e.baseAnyFeatures {
		// The usual case, replays included: a counterfactual's policies
		// read features only where base's do (its frozen seats' live
		// policies are base's; its constant and null ones read none).
		return
	}
	reads := e.baseFeatures
	if e.setup.Counterfactual != nil {
		e.cfFeatures = resize(e.cfFeatures, len(e.seats))
		reads = e.cfFeatures
		for i, p := range e.policies {
			reads[i] = e.baseFeatures[i] && p != nil && agents.ReadsFeatures(p)
		}
	}
	fg, writes := game.(FeatureGame)
	fs, declared := e.setup.Scenario.(Features)
	if !writes || !declared {
		return
	}
	e.anyFeatures, e.readsFeatures, e.featureGame = true, reads, fg
	if cap(e.features) < len(reads) {
		e.features = slices.Grow(e.features[:cap(e.features)], len(reads)-cap(e.features))
	}
	e.features = e.features[:len(reads)]
	for i, r := range reads {
		if !r {
			continue
		}
		size := fs.ObservationSpace(e.setup.Params, e.seats[i].Role).Size()
		if cap(e.features[i]) < size {
			e.features[i] = make([]float32, size)
		}
		e.features[i] = e.features[i][:size]
	}
}

// decide starts the next step: it ends the episode when the rules ended it,
// nobody can act or a limit is reached, and otherwise returns the step's
// actors, in seat order.
func (e *Engine) decide() []int {
	if e.ended {
		_ = e.over(protocol.StatusCompleted, EndTerminated, nil)
		return nil
	}
	if !e.anyActive() {
		// Nobody can act: every seat is absent (the empty coalition
		// of a counterfactual) or in a terminal state. The episode is
		// over by itself, and Score scores it as it stands, so v(∅) is
		// the score of the game with no moves played.
		_ = e.over(protocol.StatusCompleted, EndNoSeats, nil)
		return nil
	}
	lim := e.setup.Limits
	t := e.step.time + 1
	if lim.MaxSteps > 0 {
		if t > lim.MaxSteps {
			_ = e.over(protocol.StatusTruncated, EndMaxSteps, nil)
			return nil
		}
	} else if bound := e.info.stepLimit(); t > bound {
		_ = e.over(protocol.StatusTruncated, EndStepLimit, fmt.Errorf("%w: the episode did not end within %d steps, scenario %s's bound (Info.StepLimit, else env.DefaultStepLimit); a game that never ends? A run's --max-steps (Limits.MaxSteps) sets another", ErrRunaway, bound, e.info.Name))
		return nil
	}
	e.step.time = t
	actors, err := e.actors(e.current)
	if err != nil {
		_ = e.over(protocol.StatusFailed, EndGameError, err)
		return nil
	}
	if len(actors) == 0 {
		if e.info.Schedule == Async {
			_ = e.over(protocol.StatusCompleted, EndQuiescent, nil)
			return nil
		}
		_ = e.over(protocol.StatusFailed, EndGameError, fmt.Errorf("step %d: %w and did not end the episode", t, ErrNoActor))
		return nil
	}
	if lim.MaxTurns > 0 && e.played+len(actors) > lim.MaxTurns {
		_ = e.over(protocol.StatusTruncated, EndMaxTurns, nil)
		return nil
	}
	e.played += len(actors)
	return actors
}

// apply records the step's turns (the actors' observations, e.obs, and
// answers, e.acts), applies their moves (e.moves) with the game's rules,
// and delivers the messages they caused.
func (e *Engine) apply(actors []int) bool {
	if e.setup.Counterfactual == nil {
		e.record(actors)
	}
	turns, hist, obs, acts := e.turns, e.hist, e.obs, e.acts
	for k, i := range actors {
		turns[i]++
		o := &obs[k]
		e.text += int64(len(o.View) + len(acts[k].Text) + len(acts[k].Invalid))
		if e.remember[i] {
			hist[i] = append(hist[i], agents.Turn{Step: o.Step, State: o.State, View: o.View, Inbox: o.Inbox, Legal: o.Legal, Action: acts[k]})
		}
		if e.acts[k].Invalid != "" {
			e.offenders = append(e.offenders, i)
		}
	}
	if len(e.offenders) > 0 && e.setup.Invalid.Mode == InvalidEnd {
		return e.over(protocol.StatusCompleted, EndInvalid, nil)
	}
	t := e.step.time
	if err := e.current.Apply(&e.step, e.moves); err != nil {
		return e.over(protocol.StatusFailed, EndGameError, fmt.Errorf("step %d: apply: %w", t, err))
	}
	e.deliver()
	if h := e.setup.onState; h != nil {
		h(t, e.current)
	}
	e.rec.Steps = t
	log := e.bus.Log()
	if lim := e.setup.Limits.MaxMessages; lim > 0 && len(log) > lim && !e.ended {
		return e.over(protocol.StatusTruncated, EndMaxMessages, nil)
	}
	for _, m := range log[min(e.logged, len(log)):] {
		e.text += int64(len(m.Payload))
	}
	e.logged = len(log)
	if bound := e.info.textLimit(); e.text > bound && !e.ended {
		return e.over(protocol.StatusTruncated, EndTextLimit, fmt.Errorf("%w: the episode's text (views, answers and messages) passed %d bytes after step %d, scenario %s's bound (Info.TextLimit, else env.DefaultTextLimit); a game that never ends, or whose views grow every step?", ErrRunaway, bound, t, e.info.Name))
	}
	return false
}

// askFailed is how an episode ends whose policies failed to answer with
// err: interrupted, out of time, a game error for a policy that panicked,
// else a policy error.
func (e *Engine) askFailed(ctx, runCtx context.Context, err error) (protocol.Status, string, error) {
	switch {
	case ctx.Err() != nil:
		return protocol.StatusAborted, EndInterrupted, context.Cause(ctx)
	case runCtx.Err() != nil:
		return protocol.StatusTruncated, EndDeadline, nil
	case errors.Is(err, ErrPolicyPanic):
		return protocol.StatusFailed, EndGameError, err
	}
	return protocol.StatusAborted, EndPolicyError, err
}

// newGame makes the episode's game: the finished game of the record the
// episode writes into, renewed, when the record was given back, its game
// is this scenario's and the scenario is a Renewer; else a new one.
func (e *Engine) newGame(setup *Setup) (Game, error) {
	if r := e.arena; r != nil && r.game != nil {
		old, of := r.game, r.gameOf
		r.game, r.gameOf = nil, nil
		if rn, ok := setup.Scenario.(Renewer); ok && of == e.info {
			return rn.Renew(old, setup.Params, setup.Seed)
		}
	}
	return setup.Scenario.New(setup.Params, setup.Seed)
}

// seat checks the game's seats and readies machines, bus and bookkeeping.
func (e *Engine) seat(seats []Seat) error {
	if len(seats) == 0 {
		return fmt.Errorf("%w: the game has no seats", ErrBadSeats)
	}
	if !episode.SameSeats(seats, e.checked) || e.info != e.checkedInfo {
		// A fresh ids slice, never reused for other seats: the bus may
		// keep it (MemBus.Reset skips its index when given the same one).
		ids := make([]string, len(seats))
		seen := make(map[string]bool, len(seats))
		for i, s := range seats {
			switch {
			case s.ID == "" || s.ID == protocol.EnvSender || s.ID == string(protocol.Broadcast) || strings.HasPrefix(s.ID, "#"):
				return fmt.Errorf("%w: seat %d has the reserved or empty id %q", ErrBadSeats, i, s.ID)
			case seen[s.ID]:
				return fmt.Errorf("%w: two seats are called %q", ErrBadSeats, s.ID)
			case e.info.Role(s.Role) == nil:
				return fmt.Errorf("%w: seat %q has role %q, which scenario %s does not declare", ErrBadSeats, s.ID, s.Role, e.info.Name)
			case s.Team < 0 || s.Team >= max(1, len(e.info.Teams)):
				return fmt.Errorf("%w: seat %q is on team %d; scenario %s declares %s", ErrBadSeats, s.ID, s.Team, e.info.Name, teamsOf(e.info))
			}
			seen[s.ID] = true
			ids[i] = s.ID
		}
		// A copy: a game may reuse its slice for other seats.
		e.checked, e.checkedInfo, e.ids = slices.Clone(seats), e.info, ids
		e.seated, e.policyKey, e.emitKey = false, nil, nil
	}
	ids := e.ids
	n := len(seats)
	e.seats = seats
	e.rec.Seats = seats
	e.bus.Reset(ids)
	if e.seated {
		// The same seats as the last episode: the same machines, which
		// are bound to the same seats already.
		for i, m := range e.machines {
			m.Reset(seats[i].ID)
		}
	} else {
		e.machines = e.machines[:0]
		used := make(map[*agents.Role]int, len(e.info.Roles))
		for _, s := range seats {
			role := e.info.Role(s.Role)
			k := used[role]
			used[role]++
			if k < len(e.pool[role]) {
				m := e.pool[role][k]
				m.Reset(s.ID)
				e.machines = append(e.machines, m)
				continue
			}
			m := role.NewMachine(s.ID)
			e.pool[role] = append(e.pool[role], m)
			e.machines = append(e.machines, m)
		}
		for i, m := range e.machines {
			m.Bind(i, &e.step)
		}
		e.seated = true
	}
	e.absent = resize(e.absent, n)
	e.turns = resize(e.turns, n)
	e.cursor = resize(e.cursor, n)
	e.lastTurn = resize(e.lastTurn, n)
	if cap(e.hist) < n {
		e.hist = slices.Grow(e.hist[:cap(e.hist)], n-cap(e.hist))
	}
	e.hist = e.hist[:n]
	for i, h := range e.hist {
		if len(h) > 0 {
			clear(h) // the last episode's pointers
			e.hist[i] = h[:0]
		}
	}
	e.sessions = seeds.Mix2(e.setup.PolicySeed, sessionStream, 0)
	if err := e.seatPolicies(seats); err != nil {
		return err
	}
	cf := e.setup.Counterfactual
	if cf == nil {
		e.policies = e.base
		e.remember = e.baseRemember
		return nil
	}
	var recorded [][]string
	if !cf.Resimulate {
		recorded = e.setup.recordedBySeat
		if len(recorded) != n {
			recorded = splitBySeat(e.setup.Recorded, n)
		}
	}
	e.cfPolicies = append(e.cfPolicies[:0], e.base...)
	e.policies = e.cfPolicies
	e.cfRemember = append(e.cfRemember[:0], e.baseRemember...)
	e.remember = e.cfRemember
	e.frozen = grow(e.frozen, n)
	for i, s := range seats {
		if slices.Contains(cf.Absent, i) {
			e.absent[i] = true
		}
		if slices.Contains(cf.Null, i) {
			spec := e.info.Counterfactual
			if !spec.HasNullAction(s.Role) {
				return fmt.Errorf("scenario %s role %q: %w", e.info.Name, s.Role, episode.ErrNoNullAction)
			}
			if null, ok := spec.NullActionOf(s.Role); ok && len(spec.NullActionIn[s.Role]) == 0 {
				e.policies[i] = constant(null)
			} else {
				e.policies[i] = nullPolicy{spec}
			}
		} else if text, ok := cf.Replace[i]; ok {
			e.policies[i] = constant(text)
		} else if _, ok := cf.Reseed[i]; ok {
			// keep the live policy: act() salts its seeds
		} else if recorded != nil {
			e.frozen[i] = frozen{actions: recorded[i], live: e.base[i]}
			e.policies[i] = &e.frozen[i]
		}
		if e.policies[i] == nil && !e.absent[i] {
			// A seat played afresh in an episode its driver played.
			return fmt.Errorf("seat %q: %w", s.ID, ErrNoLivePolicy)
		}
		if !e.setup.stepped && e.setup.Policy != nil {
			e.remember[i] = agents.Remembers(e.policies[i])
		}
	}
	return nil
}

// seatPolicies asks setup.Policy and setup.Emit about every seat, into
// e.base and e.emit, unless the engine holds their answers for these seats
// and this executor already: a PolicyFor and an EmitFilter answer the same
// for the same seat every time (see PolicyFor), and LocalExecutor's
// episodes share both (Setup.policyKey). A replay's Emit (emitNone) is
// never asked: it records no turn.
func (e *Engine) seatPolicies(seats []Seat) error {
	key := e.setup.policyKey
	n := len(seats)
	if e.setup.Policy == nil {
		// A stepped episode's driver gives the moves: no policy to ask.
		// It asks the policies itself, so every seat remembers.
		e.policyKey = nil
		e.base = resize(e.base, n)
		e.batch = resize(e.batch, n)
		e.batched = false
		e.baseRemember = resize(e.baseRemember, n)
		for i := range e.baseRemember {
			e.baseRemember[i] = true
		}
		e.baseFeatures, e.baseAnyFeatures = resize(e.baseFeatures, n), false
	} else if key == nil || key != e.policyKey {
		e.policyKey = nil
		e.base = resize(e.base, n)
		e.batch = resize(e.batch, n)
		e.batched = false
		e.baseRemember = resize(e.baseRemember, n)
		e.baseFeatures, e.baseAnyFeatures = resize(e.baseFeatures, n), false
		for i, s := range seats {
			e.base[i] = e.setup.Policy(s)
			if e.base[i] == nil {
				return fmt.Errorf("%w: no policy for seat %q (role %q)", ErrBadSeats, s.ID, s.Role)
			}
			e.baseRemember[i] = e.setup.stepped || agents.Remembers(e.base[i])
			e.baseFeatures[i] = agents.ReadsFeatures(e.base[i])
			e.baseAnyFeatures = e.baseAnyFeatures || e.baseFeatures[i]
			e.batch[i] = -1
			// The value, not only its type, must compare: a struct
			// holding an interface may hold an uncomparable one.
			if _, ok := e.base[i].(agents.BatchPolicy); ok && reflect.ValueOf(e.base[i]).Comparable() {
				e.batch[i], e.batched = i, true
				if i > 0 && e.batch[i-1] >= 0 && e.base[i-1] == e.base[i] {
					e.batch[i] = e.batch[i-1]
				}
			}
		}
		e.policyKey = key
	}
	if e.setup.Counterfactual == nil && (key == nil || key != e.emitKey) {
		e.emitKey = nil
		e.emit = resize(e.emit, n)
		for i, s := range seats {
			e.emit[i] = e.setup.Emit == nil || e.setup.Emit(s)
		}
		e.emitKey = key
	}
	return nil
}

// splitBySeat lists each seat's recorded actions in turn order.
func splitBySeat(turns []episode.Turn, n int) [][]string {
	out := make([][]string, n)
	for k := range turns {
		t := &turns[k]
		if t.Seat >= 0 && t.Seat < n && t.Turn == len(out[t.Seat]) {
			out[t.Seat] = append(out[t.Seat], t.Action)
		}
	}
	return out
}

// grow returns s with length n, reusing its array when it can; unlike
// resize, it leaves the old elements in place for the caller to overwrite.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// extend returns s one element longer, reusing its array when it can. The
// new element is left as the array held it (a recycled record's, say): the
// caller writes every field of it, in place, where appending a literal
// would build it aside and copy it, pointers and all.
func extend[T any](s []T) []T {
	if n := len(s); n < cap(s) {
		return s[:n+1]
	}
	var zero T
	return append(s, zero)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// actors returns the seats that act at the current step, in seat order:
// those the game's Scheduler names, or else those whose state says they
// act (see Schedule).
func (e *Engine) actors(game Game) ([]int, error) {
	var named []int
	sch, scheduled := e.scheduler, e.scheduler != nil
	if scheduled {
		// The game's own list is checked as the game gave it, before the
		// async schedule merges in the agents that have mail: a seat named
		// twice or out of order is the game's error, not something to
		// tidy away.
		named = sch.Next(&e.step)
		if err := e.checkNamed(named); err != nil {
			return nil, err
		}
	}
	switch e.info.Schedule {
	case Sequential, Simultaneous:
		if named == nil {
			named = e.ready(false)
		}
		if e.info.Schedule == Sequential && len(named) != 1 {
			if scheduled {
				return nil, fmt.Errorf("step %d: sequential game named %d agents to act, want 1", e.step.time, len(named))
			}
			return nil, fmt.Errorf("step %d: sequential game has %d agents in acting states, want 1: %s", e.step.time, len(named), e.who(named))
		}
	case Async:
		if len(named) == 0 {
			named = e.ready(true)
		} else {
			named = append(slices.Clone(named), e.ready(true)...)
			slices.Sort(named)
			named = slices.Compact(named) // a named seat may also have mail
		}
	}
	return named, nil
}

// checkNamed checks the seats a Scheduler named: in range, in seat order,
// each once, present and in one of its role's acting states.
func (e *Engine) checkNamed(named []int) error {
	for k, i := range named {
		if i < 0 || i >= len(e.seats) {
			return fmt.Errorf("step %d: the game named seat %d of %d", e.step.time, i, len(e.seats))
		}
		if k > 0 && named[k-1] >= i {
			return fmt.Errorf("step %d: the game named seats out of order or twice: %v", e.step.time, named)
		}
		m := e.machines[i]
		if !e.step.Active(i) {
			return fmt.Errorf("step %d: the game named agent %q, which is absent or in terminal state %q", e.step.time, e.seats[i].ID, m.State())
		}
		if !m.Acting() {
			return fmt.Errorf("step %d: the game named agent %q, whose role %q does not act in state %q", e.step.time, e.seats[i].ID, e.seats[i].Role, m.State())
		}
	}
	return nil
}

// anyActive reports whether some seat is present and not in a terminal
// state.
func (e *Engine) anyActive() bool {
	for i := range e.machines {
		if e.step.Active(i) {
			return true
		}
	}
	return false
}

// ready lists the present seats whose machines are in an acting state, in
// seat order. Under async, a seat of a role that declares no acting states
// is ready only with unread mail: the messages make it act.
func (e *Engine) ready(async bool) []int {
	named, absent := e.named[:0], e.absent
	for i, m := range e.machines {
		if absent[i] || !m.Acting() {
			continue
		}
		if async && !m.Role().DeclaresActing() && !e.step.HasMail(i) {
			continue
		}
		named = append(named, i)
	}
	e.named = named
	return named
}

// who describes the seats of actors and their states, for an error.
func (e *Engine) who(actors []int) string {
	ids := make([]string, len(actors))
	for k, i := range actors {
		ids[k] = fmt.Sprintf("%s in %s", e.seats[i].ID, e.machines[i].State())
	}
	return "[" + strings.Join(ids, ", ") + "]"
}

// observe has every actor observe the state, before any of them acts,
// into e.obs, and readies their moves (e.moves), whose actions are e.acts.
func (e *Engine) observe(actors []int) {
	n := len(actors)
	// obs and moves are written whole below: not cleared first,
	// which for pointerful elements costs a write barrier per word.
	e.obs = grow(e.obs, n)
	e.moves = grow(e.moves, n)
	e.acts = grow(e.acts, n)
	// errs is all nil between steps (cleared when a step fails), so it is
	// not cleared at every step: that too costs a write barrier per word.
	e.errs = grow(e.errs, n)
	// The engine's slices are read into locals once: the writes through o
	// would otherwise make the compiler load them again for every actor.
	game, byState, seats, machines, turns, cursor, obs, moves, acts := e.current, e.byState, e.seats, e.machines, e.turns, e.cursor, e.obs[:n], e.moves[:n], e.acts[:n]
	now, policySeed, replay, public := e.step.time, e.setup.PolicySeed, e.setup.Counterfactual != nil, e.public
	var v View // the step's view, when it is public
	if public {
		v = game.Observe(actors[0])
	}
	for k, i := range actors {
		state := machines[i].State()
		switch {
		case public:
		case byState != nil:
			v = byState.ObserveIn(i, state)
		default:
			v = game.Observe(i)
		}
		// Field by field, in place: a composite literal is built aside and
		// copied, pointers and all.
		o := &obs[k]
		o.Agent, o.Role = seats[i].ID, seats[i].Role
		o.State = state
		o.Turn, o.Step = turns[i], now
		o.History = e.hist[i]
		o.View, o.Legal = v.Text, v.Legal
		if mail := e.mailbox(i); len(mail) == 0 {
			o.Inbox, o.Seen = mail, mail // and the cursor is at 0
		} else {
			o.Inbox, o.Seen = mail[cursor[i]:], mail
			cursor[i] = len(mail)
		}
		// The turn's seed: from the policy seed, the seat and the turn,
		// salted for seats a counterfactual reseeds.
		o.Seed = seeds.Mix2(policySeed, uint64(i), uint64(turns[i]))
		o.Session = e.sessions + uint64(i+1)*sessionGamma
		if replay {
			o.Seed = e.reseed(i, o.Seed)
		}
		mv := &moves[k]
		mv.Seat, mv.Action = i, &acts[k]
	}
	if e.anyFeatures || e.wroteFeatures {
		e.observeFeatures(actors)
	}
}

// observeFeatures writes the numeric observation of each actor whose
// policy reads it into its observation (readFeatures), and makes the
// others' nil: an observation buffer may hold an earlier episode's. Out of
// observe's loop, so that an engine that never wrote features pays one
// test a step.
func (e *Engine) observeFeatures(actors []int) {
	for k, i := range actors {
		o := &e.obs[k]
		if e.anyFeatures && e.readsFeatures[i] {
			o.Features = e.features[i]
			e.featureGame.ObserveFeatures(i, o.Features)
			e.wroteFeatures = true
		} else {
			o.Features = nil
		}
	}
}

// sessionStream separates the agents' session keys
// (agents.Observation.Session) from the turns' seeds, which mix the seat
// first.
const sessionStream = 0x5e5510_4e7

// sessionGamma steps from one seat's session key to the next: odd, so the
// keys of an episode's seats are distinct (a Weyl sequence); two seats of
// different episodes share one with a chance of about 2^-64 per pair.
const sessionGamma = 0x9e3779b97f4a7c15

// ask asks the policies of the step's actors (those that share an
// agents.BatchPolicy in one call) for their answers, into e.acts.
func (e *Engine) ask(ctx context.Context, actors []int) error {
	n := len(actors)
	replay := e.setup.Counterfactual != nil
	if e.setup.ParallelPolicies && n > 1 {
		var g errgroup.Group
		for k := range n {
			g.Go(func() error { e.askFrom(ctx, actors, k, k+1); return nil })
		}
		_ = g.Wait()
	} else if batch := e.batch; e.batched && !replay && n > 1 {
		// Each run of actors that share a BatchPolicy is asked in one
		// call; the others one by one. A replay's policies are not base's.
		for k := 0; k < n; {
			b, j := batch[actors[k]], k+1
			for j < n && batch[actors[j]] == b {
				j++
			}
			if b >= 0 && j-k > 1 {
				e.askBatch(ctx, actors, k, j)
				k = j
				continue
			}
			for k < j {
				k = e.askFrom(ctx, actors, k, j)
			}
		}
	} else if n == 1 {
		e.askOne(ctx, actors[0])
	} else {
		for k := 0; k < n; {
			k = e.askFrom(ctx, actors, k, n)
		}
	}
	for _, err := range e.errs {
		if err != nil {
			err = errors.Join(e.errs...)
			clear(e.errs)
			return err
		}
	}
	return nil
}

// askFrom asks the policies of actors[k:end] in turn for their moves into
// e.moves, and records an error or a panic in e.errs.
// It returns the index of the next actor to ask: end, or the one after a
// policy that panicked, so that the caller asks the rest as well. One
// deferred recover serves the whole range rather than one per turn. A
// method, not a closure: a closure that the parallel branch hands to
// goroutines would be allocated at every step.
func (e *Engine) askFrom(ctx context.Context, actors []int, k, end int) (next int) {
	// asked says that no policy panicked, without the call to recover
	// that finds it out.
	asked := false
	defer func() {
		if asked {
			return
		}
		if r := recover(); r != nil {
			e.errs[next] = e.policyPanic(next, r, panicAt())
			next++
		}
	}()
	for next = k; next < end; next++ {
		a, err := e.policies[actors[next]].Act(ctx, &e.obs[next])
		e.acts[next] = a
		if err != nil {
			e.errs[next] = e.policyError(next, err)
		}
	}
	asked = true
	return end
}

// askOne is askFrom for a lone actor, seat i (a board game's step), without
// its deferred recover, which would cost every turn more than the rest of
// the call: a panic of the policy goes up to play's, which makes of it
// what act would have returned (asking says it was the policy's).
func (e *Engine) askOne(ctx context.Context, i int) {
	e.asking = true
	a, err := e.policies[i].Act(ctx, &e.obs[0])
	e.asking = false
	e.acts[0] = a
	if err != nil {
		e.errs[0] = e.policyError(0, err)
	}
}

// askBatch asks actors[k:end], which share a BatchPolicy, for their moves
// in one call, with the outcome askFrom would have: when the policy
// panics, the actor it was answering (the first whose error slot it had
// not set) is named, and the actors after it are asked one by one.
func (e *Engine) askBatch(ctx context.Context, actors []int, k, end int) {
	for m := k; m < end; m++ {
		e.errs[m] = errUnanswered
	}
	p, r, at := e.callBatch(ctx, actors, k, end)
	for m := k; m < p; m++ {
		if err := e.errs[m]; err != nil { // errUnanswered too: a slot the policy left
			e.errs[m] = e.policyError(m, err)
		}
	}
	if p == end {
		return
	}
	e.errs[p] = e.policyPanic(p, r, at)
	clear(e.errs[p+1 : end])
	for m := p + 1; m < end; {
		m = e.askFrom(ctx, actors, m, end)
	}
}

// errUnanswered marks the error slots of a batch that its policy has not
// set yet (askBatch): a slot it leaves so is that agent's error.
var errUnanswered = errors.New("the batch policy gave no answer")

// callBatch calls the BatchPolicy of actors[k:end]. It returns end, or,
// when the policy panicked, the index of the actor it was answering, what
// it panicked with and where (panicAt).
func (e *Engine) callBatch(ctx context.Context, actors []int, k, end int) (p int, r any, at panicked) {
	defer func() {
		if r = recover(); r != nil {
			at = panicAt()
			p = k
			for p < end-1 && e.errs[p] != errUnanswered {
				p++
			}
		}
	}()
	e.policies[actors[k]].(agents.BatchPolicy).ActBatch(ctx, e.obs[k:end], e.acts[k:end], e.errs[k:end])
	return end, nil, panicked{}
}

// policyError is the error err of actor k's policy, naming the actor.
func (e *Engine) policyError(k int, err error) error {
	return fmt.Errorf("agent %q (role %q) turn %d: %w", e.obs[k].Agent, e.obs[k].Role, e.obs[k].Turn, err)
}

// policyPanic is the error of actor k's policy, which panicked with r at
// p (panicAt).
func (e *Engine) policyPanic(k int, r any, p panicked) error {
	return p.wrap(fmt.Errorf("agent %q: %w: %v (at %s)", e.obs[k].Agent, ErrPolicyPanic, r, p.site))
}

// invalidScore scores an episode ended by invalid answers under
// setup.Invalid.
func (e *Engine) invalidScore() Score {
	rule := e.setup.Invalid
	score := Score{Agents: make([]float64, len(e.seats))}
	if n := len(e.info.Teams); n > 0 {
		// Each side's reward is the sum of its members'.
		score.Teams = make([]float64, n)
	}
	for i := range score.Agents {
		score.Agents[i] = rule.Bonus
		if slices.Contains(e.offenders, i) {
			score.Agents[i] = rule.Penalty
		}
		score.Team += score.Agents[i]
		if score.Teams != nil {
			score.Teams[e.seats[i].Team] += score.Agents[i]
		}
	}
	return score
}

// reseed is seed, seat i's for its turn, salted when the counterfactual
// reseeds the seat. A turn's seed is derived from the policy seed, the seat
// and the turn (act does it inline), then reseeded.
func (e *Engine) reseed(i int, seed uint64) uint64 {
	if e.setup.Counterfactual == nil {
		return seed
	}
	if salt, ok := e.setup.Counterfactual.Reseed[i]; ok {
		return seeds.Mix1(seed, salt)
	}
	return seed
}

// inboxSpan says that e.inbox[lo:hi] are the Inbox of turn rec.Turns[turn].
type inboxSpan struct{ turn, lo, hi int }

// hint is the capacity to give the next episode's buffer, after one that
// used n: the largest recent size, forgotten slowly, so that episodes of
// varying length do not grow their buffers again and again.
func hint(prev, n int) int { return max(n, prev-prev/8) }

// inboxes gives the recorded turns their Inbox: the positions collected
// during the episode, copied into the record's inbox array.
func (e *Engine) inboxes(r *record) {
	if len(e.spans) == 0 {
		return
	}
	r.inbox = append(r.inbox[:0], e.inbox...)
	all := r.inbox
	for _, sp := range e.spans {
		e.rec.Turns[sp.turn].Inbox = all[sp.lo:sp.hi:sp.hi]
	}
}

// record appends the turns of the step's actors to the episode's record:
// their observations (e.obs) and answers (e.acts), in order.
func (e *Engine) record(actors []int) {
	// The turns are written in place, in one stretch grown at once:
	// copying a Turn, all pointers, costs write barriers. Every field is
	// written: the array's elements past its length may hold a recycled
	// record's turns (recordPool.put does not clear them). The slices are
	// read into locals, which the writes through t would otherwise make
	// the compiler load again for every actor, but not resliced: a step
	// of one actor (a board game's) would pay more for the reslicing.
	rec := e.rec
	first, n := len(rec.Turns), len(rec.Turns)+len(actors)
	if n > cap(rec.Turns) {
		rec.Turns = slices.Grow(rec.Turns, len(actors))
	}
	rec.Turns = rec.Turns[:n]
	turns, obs, acts, emit, lastTurn := rec.Turns, e.obs, e.acts, e.emit, e.lastTurn
	for k, i := range actors {
		o, a, t := &obs[k], &acts[k], &turns[first+k]
		if len(o.Inbox) > 0 {
			start := len(e.inbox)
			for m := range o.Inbox {
				e.inbox = append(e.inbox, o.Inbox[m].Seq)
			}
			e.spans = append(e.spans, inboxSpan{turn: first + k, lo: start, hi: len(e.inbox)})
		}
		lastTurn[i] = first + k + 1
		t.Seat, t.Step, t.Turn, t.State, t.Seed = i, o.Step, o.Turn, o.State, o.Seed
		t.View, t.Legal = o.View, o.Legal
		t.Action, t.Invalid = a.Text, a.Invalid
		t.SetGeneration(a.Generation)
		t.Emit = emit[i]
		t.Inbox = nil // set by inboxes at the episode's end
		t.Notes = nil
		if len(a.Notes) > 0 {
			t.Notes = maps.Clone(a.Notes)
		}
	}
}

// RenderObservation is the text prompt of a turn: the scenario's view,
// followed by the messages delivered since the agent's previous turn, one
// per line as "[t=TIME] FROM -> TO (KIND): PAYLOAD". It is
// episode.RenderObservation.
func RenderObservation(view string, inbox []protocol.Message) string {
	return episode.RenderObservation(view, inbox)
}

// label asks the game for its ground truth; a panicking Label is a game
// bug that must not take the worker down, and leaves the label empty.
func (e *Engine) label() (label string) {
	defer func() {
		if recover() != nil {
			label = ""
		}
	}()
	if l, ok := e.current.(Labeler); ok {
		return l.Label()
	}
	return ""
}

// NewReplayer returns the Replayer of an episode played with setup by the
// given seats, whose turns were recorded: it re-runs the same setup under a
// counterfactual, recording no turns. The engine gives every episode it
// plays one; an executor that gets episodes from elsewhere (another
// machine) builds theirs with it.
func NewReplayer(setup Setup, seats []Seat, recorded []episode.Turn) episode.Replayer {
	return replayer(setup, seats, recorded, nil)
}

// replayer is NewReplayer, plus done: when not nil, the episode's finished
// game, which is asked frozen counterfactuals first (Rescorer); they are
// replayed only when it cannot answer.
func replayer(setup Setup, seats []Seat, recorded []episode.Turn, done Game) episode.Replayer {
	return &replay{setup: setup, seats: seats, recorded: recorded, done: done}
}

// replay is an episode's Replayer (see replayer). The engine makes it at
// the start of the episode, and reads the episode's setup from it.
type replay struct {
	setup    Setup
	seats    []Seat
	recorded []episode.Turn
	done     Game
	// owner is the record this replayer was allocated with (record), nil
	// for one made by NewReplayer.
	owner *record
	// Replays run concurrently (counterfactual allocators fan out), so the
	// per-seat split of the record is made once, by whichever comes first.
	once   sync.Once
	bySeat [][]string
}

// Replay implements episode.Replayer.
func (r *replay) Replay(ctx context.Context, cf episode.Counterfactual) (Score, error) {
	score, _, err := r.ReplaySteps(ctx, cf)
	return score, err
}

// ReplaySteps implements episode.StepReplayer: a counterfactual the
// finished game rescored counts the recorded steps, one replayed the
// steps its episode took.
func (r *replay) ReplaySteps(ctx context.Context, cf episode.Counterfactual) (Score, int, error) {
	setup, seats := &r.setup, r.seats
	info := setup.Scenario.Info()
	spec := info.Counterfactual
	if len(cf.Absent) > 0 && (spec == nil || !spec.AbsentOK) {
		return Score{}, 0, fmt.Errorf("scenario %s: %w", info.Name, episode.ErrNoAbsence)
	}
	for _, i := range cf.Null {
		if i < 0 || i >= len(seats) {
			return Score{}, 0, fmt.Errorf("counterfactual names seat %d of %d", i, len(seats))
		}
		if !spec.HasNullAction(seats[i].Role) {
			return Score{}, 0, fmt.Errorf("scenario %s role %q: %w", info.Name, seats[i].Role, episode.ErrNoNullAction)
		}
	}
	if r.done != nil {
		if score, ok, err := rescore(r.done, info, cf, len(seats)); err != nil || ok {
			return score, episode.RecordedSteps(r.recorded), err
		}
	}
	s := *setup
	replayed := cf // taking cf's address would move it to the heap on every call
	s.Counterfactual = &replayed
	s.Recorded = r.recorded
	r.once.Do(func() { r.bySeat = splitBySeat(r.recorded, len(seats)) })
	s.recordedBySeat = r.bySeat
	// The replay keeps its episode's policyKey: the same policies, and
	// the Emit filter does not matter to a replay, which records no turn.
	s.Emit = emitNone
	eng := setup.Engines.Get()
	defer setup.Engines.Put(eng)
	ep := eng.run(ctx, s)
	switch ep.Status {
	case protocol.StatusCompleted, protocol.StatusTruncated:
		return ep.Score, ep.Steps, nil
	}
	return Score{}, ep.Steps, fmt.Errorf("%w: %s (%s): %s", ErrReplayFailed, ep.Status, ep.End, ep.Err)
}

// ReplayOneOut implements episode.OneOutReplayer: a finished game that is
// a OneOutRescorer answers for all the seats at once, after the checks
// Replay makes of each of those counterfactuals. Anything else is false,
// and the caller replays them one by one.
func (r *replay) ReplayOneOut(null bool, seats []int, team []float64) bool {
	g, ok := r.done.(OneOutRescorer)
	if !ok || len(team) != len(seats) {
		return false
	}
	spec := r.setup.Scenario.Info().Counterfactual
	if null {
		// A role's seats usually follow each other: its check is made
		// once per run of them.
		checked := ""
		for k, i := range seats {
			if i < 0 || i >= len(r.seats) {
				return false
			}
			role := r.seats[i].Role
			if k > 0 && strcmp.Equal(role, checked) {
				continue
			}
			if !spec.HasNullAction(role) {
				return false
			}
			checked = role
		}
	} else if spec == nil || !spec.AbsentOK {
		return false
	}
	return rescoreOneOut(g, null, seats, team)
}

// emitNone emits no turn: replays record none.
func emitNone(Seat) bool { return false }

// ErrNoLivePolicy is the error of a counterfactual replay that needs a
// move the record does not hold (a turn beyond it, or a seat played
// afresh) of an episode whose driver gave its moves with no Play.Policy to
// ask.
var ErrNoLivePolicy = errors.New("no policy to ask for a move beyond the record (the episode's driver gave its moves)")

// ErrRunaway is the error of an episode that reached its scenario's step
// bound with no limit of its run's (EndStepLimit), or its text bound
// (EndTextLimit).
var ErrRunaway = errors.New("runaway episode")

// ErrReplayFailed is returned by a counterfactual replay that did not
// finish. A replay the scenario does not declare the meaning of fails with
// episode.ErrNoAbsence or episode.ErrNoNullAction.
var ErrReplayFailed = errors.New("counterfactual replay did not finish")

// EnginePool lends engines to concurrent episodes, so that the state
// machines and buffers an engine keeps are reused. Unlike a sync.Pool it
// keeps its engines across garbage collections: it holds at most as many
// as were ever in use at once. The zero value is ready; a nil pool makes a
// new engine for every Get.
type EnginePool struct {
	mu   sync.Mutex
	free []*Engine
}

// Get takes an idle engine or makes one.
func (p *EnginePool) Get() *Engine {
	if p == nil {
		return NewEngine()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		eng := p.free[n-1]
		p.free = p.free[:n-1]
		return eng
	}
	return NewEngine()
}

// Put returns an engine that has finished its episode.
func (p *EnginePool) Put(eng *Engine) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, eng)
}

// constant is the policy that always plays text.
type constant string

func (c constant) Act(context.Context, *agents.Observation) (agents.Action, error) {
	return agents.Action{Text: string(c)}, nil
}

// nullPolicy plays the null action of the agent's role in its state.
type nullPolicy struct{ spec *CounterfactualSpec }

func (p nullPolicy) Act(_ context.Context, obs *agents.Observation) (agents.Action, error) {
	if null, ok := p.spec.NullActionAt(obs.Role, obs.State); ok {
		return agents.Action{Text: null}, nil
	}
	return agents.Action{}, fmt.Errorf("role %q in state %q: %w", obs.Role, obs.State, episode.ErrNoNullAction)
}

// frozen replays an agent's recorded actions, turn by turn, and asks the
// agent's own policy (with the same seeds) for turns beyond the record. The
// engine keeps one per seat (Engine.frozen), so a replay allocates none.
type frozen struct {
	actions []string
	live    agents.Policy
}

// Remembers: the turns it replays are history the live policy reads beyond
// the record.
func (f *frozen) Remembers() bool { return f.live != nil && agents.Remembers(f.live) }

// ReadsFeatures: the live policy acts beyond the record.
func (f *frozen) ReadsFeatures() bool { return f.live != nil && agents.ReadsFeatures(f.live) }

func (f *frozen) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	if obs.Turn < len(f.actions) {
		return agents.Action{Text: f.actions[obs.Turn]}, nil
	}
	if f.live == nil {
		// An episode its driver played (Episode) with no Play.Policy.
		return agents.Action{}, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, ErrNoLivePolicy)
	}
	return f.live.Act(ctx, obs)
}
