// Package env is troupe's environment: the scenario contract (Scenario,
// Game), the message bus, the deterministic episode engine, and the runner
// that plays many episodes in parallel and streams them to an Output.
//
// The engine's output is an episode.Record and nothing else: every turn,
// the bus's message log with each message's recipients, the outcome and the
// score. Executors return records, and the runner hands finished groups of
// records to its Output, in order. env imports nothing of the output layer:
// credit, samples and sinks are package trajectories' (trajectories.Output
// is the Output a run usually has; trajectories.Samples the projection of a
// record into samples).
//
// The engine is synchronous and owns no goroutines, clocks or I/O: an
// episode is a pure function of (scenario, parameters, seeds, policy
// answers). Goroutines live in the runner, at the edge.
//
// The agents' states drive the episode: at each step the engine asks the
// agents whose machines are in an acting state of their role (see
// Schedule), the game's Apply fires the events that move them (running the
// roles' callbacks synchronously, inside the step), and every sample
// records the state its turn was played in.
package env

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
)

// Schedule says how a scenario's agents take turns. In every schedule an
// agent is ready when it is present and its machine is in one of its
// role's acting states (agents.Role.Acting; all non-terminal states when the
// role declares none). A game that implements Scheduler may name the
// actors itself; otherwise the ready agents act.
type Schedule int

const (
	// Sequential: exactly one agent acts at each step, on the current
	// state: the one ready agent (a game passes the turn by firing events,
	// tic-tac-toe's to_move and waiting), or the one Next names.
	Sequential Schedule = iota + 1
	// Simultaneous: every ready agent acts at each step (or those Next
	// names); all observe the same state, then the game resolves their
	// moves together.
	Simultaneous
	// Async: agents act as the state and the messages say. An agent of a
	// role that declares acting states acts whenever it is in one; an agent
	// of a role that declares none acts when it has unread mail that is not
	// quiet (Step.HasMail; quiet messages, Step.Inform, inform without
	// waking, and wait in the inbox for the agent's next turn). Seats Next
	// names act too (to open the conversation). The episode ends by itself
	// once nobody is left to act.
	Async
)

func (s Schedule) String() string {
	switch s {
	case Sequential:
		return "sequential"
	case Simultaneous:
		return "simultaneous"
	case Async:
		return "async"
	}
	return "Schedule(" + strconv.Itoa(int(s)) + ")"
}

// Scenario is a parameterised definition of a multi-agent game.
type Scenario interface {
	// Info describes the scenario; it must return the same value every
	// time.
	Info() *Info
	// New builds one episode's game from validated parameters and the
	// episode's scenario seed. All randomness of the game must come from
	// seed.
	New(p Params, seed uint64) (Game, error)
}

// Renewer is implemented by scenarios whose finished games can be made
// into new ones. Renew must return what New(p, seed) would, and may reuse
// old, a game of this scenario whose episode is over and whose record and
// score nobody reads any more (the engine renews only the games of records
// given back to it: LocalExecutor.Recycle, a recycling run's), so that a
// run allocates no game per episode. A game it cannot reuse (other
// parameters) it leaves to New.
type Renewer interface {
	Renew(old Game, p Params, seed uint64) (Game, error)
}

// Define returns a Scenario made of an Info and a constructor.
func Define(info *Info, newGame func(p Params, seed uint64) (Game, error)) Scenario {
	return defined{info: info, newGame: newGame}
}

type defined struct {
	info    *Info
	newGame func(Params, uint64) (Game, error)
}

func (d defined) Info() *Info                             { return d.info }
func (d defined) New(p Params, seed uint64) (Game, error) { return d.newGame(p, seed) }

// StructuredActions is implemented by scenarios whose answers are JSON
// objects rather than one of a list of legal actions (an offer in a
// negotiation, a verdict with reasons). ActionSchema is the JSON schema of
// role's answers; CheckAnswer is the rules' verdict on one answer text, nil
// when it is a valid move. LLM policies use them to constrain the model's
// output (servers such as llama.cpp enforce the schema by grammar) and to
// re-ask when an answer breaks the rules.
type StructuredActions interface {
	ActionSchema(p Params, role string) string
	CheckAnswer(obs *agents.Observation, text string) error
}

// Info describes a scenario: what it is, how it is played, what it takes.
type Info struct {
	Name     string
	Summary  string // one line
	Doc      string // the rules, rewards and termination, in prose
	Schedule Schedule
	Roles    []*agents.Role
	// Teams names the scenario's sides, when it has more than one
	// (villagers and wolves; the proposition and the opposition): each
	// seat is on one of them (Seat.Team, an index into Teams, which a
	// game with hidden roles draws per episode from its seed), and the
	// game's Score gives each its own reward (Score.Teams, indexed like
	// Teams), zero-sum or general-sum. Every allocator then credits a
	// seat out of its own team's reward, among its team's members
	// (docs/credit.md). nil: one team, whose reward is Score.Team. Names
	// are distinct, non-empty, and hold no spaces, '=' or ','; a scenario
	// that declares teams declares at least two.
	Teams  []string
	Params []ParamSpec
	// Policies are the scenario's own named policies (a heuristic, a
	// scripted opponent), made by MakePolicy: a maker reads the request's
	// Params and Role (its Settings are always empty: MakePolicy refuses
	// settings for the scenario's own policies). "random" is always
	// available on top of them.
	Policies map[string]PolicyMaker
	// DefaultPolicy names the policy every role plays when the user names
	// none; empty means "random".
	DefaultPolicy string
	// PublicView says that at every step all seats see the same view:
	// Game.Observe returns the same View whatever the seat (a public
	// board, El Farol's week). The engine then observes the game once per
	// step, for its first actor, and gives every actor that view, rather
	// than calling Observe once per actor. scenariotest.Check verifies the
	// claim: its episodes with Setup.ObserveEachSeat are the same. A game
	// that is a StateObserver is observed seat by seat all the same.
	PublicView bool
	// StepLimit bounds the logical steps of an episode whose run sets no
	// Limits.MaxSteps: a scenario whose episodes may rightly run longer
	// than DefaultStepLimit raises it here. 0: DefaultStepLimit.
	StepLimit int
	// TextLimit bounds the text of an episode, in bytes: its turns'
	// views and answers and its messages' payloads (DefaultTextLimit
	// says why). A scenario whose episodes rightly hold more raises it
	// here. 0: DefaultTextLimit.
	TextLimit int64
	// Counterfactual, when set, says what "absent" and "null action" mean
	// for the scenario's roles; counterfactual allocators need it.
	Counterfactual *CounterfactualSpec
	// CheckParams, when set, vets combinations of parameter values that
	// each pass their own ParamSpec (say, more candidates than distinct
	// objects). ParseParams calls it, so a bad combination is rejected
	// before any episode runs.
	CheckParams func(p Params) error
}

// CounterfactualSpec declares how a scenario's roles behave when an agent
// is taken out of the coalition or plays a null action.
type CounterfactualSpec struct {
	// NullAction maps a role to the action text that stands for "doing
	// nothing" (a pass, staying home). A role missing here has none.
	NullAction map[string]string
	// NullActionIn maps a role to the null action of some of its states,
	// where doing nothing is said differently (passing while to move,
	// staying silent while asked); it wins over NullAction in those
	// states. Each state must be one the role acts in.
	NullActionIn map[string]map[agents.State]string
	// AbsentOK reports that the scenario's rules accept absent seats: the
	// game skips them and scores the episode without them.
	AbsentOK bool
	// Doc says what absence and the null action mean, in prose.
	Doc string
	// Resimulate says that the scenario's agents react to each other
	// (a listener to a speaker's word), so a counterfactual is meaningful
	// only when the other agents' policies are asked again rather than
	// their recorded actions replayed. Counterfactual allocators use it as
	// their default mode.
	Resimulate bool
}

// NullActionOf returns role's null action in every state (NullAction) and
// whether it has one; a nil spec declares none.
func (cf *CounterfactualSpec) NullActionOf(role string) (string, bool) {
	if cf == nil {
		return "", false
	}
	a, ok := cf.NullAction[role]
	return a, ok
}

// NullActionAt returns the null action of an agent of role in state:
// NullActionIn's for that state, else NullAction's.
func (cf *CounterfactualSpec) NullActionAt(role string, state agents.State) (string, bool) {
	if cf == nil {
		return "", false
	}
	if a, ok := cf.NullActionIn[role][state]; ok {
		return a, true
	}
	a, ok := cf.NullAction[role]
	return a, ok
}

// HasNullAction reports whether role has a null action in some state, so
// that a counterfactual may play it.
func (cf *CounterfactualSpec) HasNullAction(role string) bool {
	if cf == nil {
		return false
	}
	_, ok := cf.NullAction[role]
	return ok || len(cf.NullActionIn[role]) > 0
}

// ErrBadScenario is wrapped by Info.Validate's errors.
var ErrBadScenario = errors.New("bad scenario definition")

// Role returns the role called name, or nil.
func (in *Info) Role(name string) *agents.Role {
	for _, r := range in.Roles {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// PolicyNames lists the policies the scenario offers, sorted, "random"
// included.
func (in *Info) PolicyNames() []string {
	names := slices.Collect(maps.Keys(in.Policies))
	if _, ok := in.Policies["random"]; !ok {
		names = append(names, "random")
	}
	slices.Sort(names)
	return names
}

// Validate checks the definition: a name, a schedule, well-formed roles
// with distinct names, parameters with distinct names and defaults of their
// own kind, and a default policy that exists.
func (in *Info) Validate() error {
	if in == nil {
		return fmt.Errorf("%w: nil Info", ErrBadScenario)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: scenario %q: %s", ErrBadScenario, in.Name, fmt.Sprintf(format, args...))
	}
	if in.Name == "" {
		return fmt.Errorf("%w: a scenario has no name", ErrBadScenario)
	}
	if strings.ContainsAny(in.Name, " \t\n=,") {
		return bad("the name must not contain spaces, '=' or ','")
	}
	if in.StepLimit < 0 {
		return bad("StepLimit %d is negative (0: env.DefaultStepLimit)", in.StepLimit)
	}
	if in.TextLimit < 0 {
		return bad("TextLimit %d is negative (0: env.DefaultTextLimit)", in.TextLimit)
	}
	switch in.Schedule {
	case Sequential, Simultaneous, Async:
	default:
		return bad("schedule %v is not Sequential, Simultaneous or Async", in.Schedule)
	}
	if len(in.Roles) == 0 {
		return bad("no roles")
	}
	roles := map[string]bool{}
	for _, r := range in.Roles {
		if r == nil {
			return bad("a nil role")
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%w: scenario %q: %w", ErrBadScenario, in.Name, err)
		}
		if roles[r.Name] {
			return bad("two roles are called %q", r.Name)
		}
		roles[r.Name] = true
	}
	if len(in.Teams) == 1 {
		return bad("one team %q declared: a scenario with one team declares none", in.Teams[0])
	}
	for i, t := range in.Teams {
		if t == "" || strings.ContainsAny(t, " \t\n=,") {
			return bad("team %d is called %q: a team name is not empty and holds no spaces, '=' or ','", i, t)
		}
		if slices.Index(in.Teams, t) < i {
			return bad("two teams are called %q", t)
		}
	}
	params := map[string]bool{}
	for _, p := range in.Params {
		if p.Name == "" {
			return bad("a parameter has no name")
		}
		if params[p.Name] {
			return bad("two parameters are called %q", p.Name)
		}
		params[p.Name] = true
		if _, err := p.parse(p.Default); err != nil {
			return bad("default of parameter %q: %v", p.Name, err)
		}
	}
	if in.DefaultPolicy != "" && in.DefaultPolicy != "random" {
		if _, ok := in.Policies[in.DefaultPolicy]; !ok {
			return bad("default policy %q is not among its policies %v", in.DefaultPolicy, in.PolicyNames())
		}
	}
	if cf := in.Counterfactual; cf != nil {
		for role := range cf.NullAction {
			if !roles[role] {
				return bad("counterfactual null action for unknown role %q", role)
			}
		}
		for _, role := range slices.Sorted(maps.Keys(cf.NullActionIn)) {
			r := in.Role(role)
			if r == nil {
				return bad("counterfactual null action for unknown role %q", role)
			}
			for _, st := range slices.Sorted(maps.Keys(cf.NullActionIn[role])) {
				if !r.ActsIn(st) {
					return bad("counterfactual null action of role %q in state %q, in which it does not act", role, st)
				}
			}
		}
	}
	return nil
}

// Seat is an alias of episode.Seat, so that scenario code needs only
// env.
type Seat = episode.Seat

// Numbered returns n seats of role, whose IDs are the role's name and
// their number: "citizen-0" to "citizen-(n-1)" for role "citizen". A
// negative n panics, as make does.
func Numbered(role string, n int) []Seat {
	seats := make([]Seat, n)
	for i := range seats {
		seats[i] = Seat{ID: role + "-" + strconv.Itoa(i), Role: role}
	}
	return seats
}

// Score is an alias of episode.Score.
type Score = episode.Score

// stepLimit is the bound of an episode's steps when its run sets none.
// textLimit is the episode's text bound: TextLimit, else DefaultTextLimit.
func (in *Info) textLimit() int64 {
	if in.TextLimit > 0 {
		return in.TextLimit
	}
	return DefaultTextLimit
}

func (in *Info) stepLimit() int {
	if in.StepLimit > 0 {
		return in.StepLimit
	}
	return DefaultStepLimit
}
