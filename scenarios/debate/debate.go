// Package debate is collaborative problem solving with a verifier: a
// solver proposes an answer to a puzzle, a critic accepts it or objects,
// the solver revises, and the environment checks the final answer against
// the ground truth. It is the solver-critic loop of multi-agent debate
// (Du et al. 2023) with a rule-checked reward, as in RL from verifiable
// rewards.
//
// The episode's seed draws one puzzle with an integer answer (see
// NewPuzzle): multi-step arithmetic ("Compute 7 + 3 * (12 - 5)."), modular
// arithmetic ("Compute 37^45 mod 17.") or a linear equation ("Solve for
// the integer x: 3*x - 7 = 2*x + 5."), of kind `kind` (mixed draws one per
// episode) and difficulty `difficulty` (1 to 5). The answer, as a decimal
// integer, is the ground truth: the game is an env.Labeler, so every
// sample's label holds it. At time 0 the environment announces the puzzle
// to both agents.
//
// The agents move in turn (a Sequential schedule), solver first. The
// solver answers with one JSON object, {"answer": N, "explanation": "..."}
// (explanation optional), which goes to the critic. The critic answers
// {"verdict": "accept"}, which makes the answer final, or {"verdict":
// "object", "message": "..."}, which goes back to the solver for a
// revision. The solver has `rounds` answers in all; its last one is final
// without a review. The verifier then compares the final answer with the
// ground truth and announces the result. Team reward and both agents'
// scores: 1 if the final answer is right, 0 otherwise.
//
// An answer that breaks its role's grammar (see ParseAnswer and
// ParseVerdict) is noted in its sample's metadata as "illegal" with the
// reason, and announced. A solver's illegal answer is no answer: if it is
// final, the episode scores 0; the critic can still object to it. A
// critic's illegal verdict is no objection: the standing answer becomes
// final.
//
// Named policies: "scripted" (the default) plays both roles: its solver
// parses the puzzle and computes the answer correctly with probability
// `skill` at each attempt, independently, drawn from the turn's seed, and
// is otherwise off by 1 to 5; its critic computes the answer itself,
// accepts a right answer and objects to a wrong one. The pair succeeds with
// probability 1 - (1 - skill)^rounds. "random" answers a uniform integer
// from -20 to 99 and accepts half the time. Both always answer valid JSON.
//
// Counterfactuals: the critic's null action is accepting whatever it is
// shown, and an absent critic is the same: the solver's first answer is
// final. The solver has no null action; without it nothing is answered
// and the episode scores 0. The solver revises on the critic's objections,
// so counterfactuals must be re-simulated.
//
// The states are the turn: the solver acts only in solving, the critic
// only in reviewing; each move fires the events that hand the turn over.
// The solver's state machine:
//
//	stateDiagram-v2
//	    [*] --> solving
//	    solving --> waiting: answer
//	    waiting --> wrong: fail
//	    waiting --> solving: revise
//	    waiting --> correct: succeed
//
// The critic's:
//
//	stateDiagram-v2
//	    [*] --> waiting
//	    reviewing --> waiting: judge
//	    waiting --> wrong: fail
//	    waiting --> reviewing: review
//	    waiting --> correct: succeed
package debate

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/looplab/fsm"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// Roles, states, events and message kinds of the game.
const (
	RoleSolver = "solver"
	RoleCritic = "critic"

	Solving   agents.State = "solving"
	Waiting   agents.State = "waiting"
	Reviewing agents.State = "reviewing"
	Correct   agents.State = "correct"
	Wrong     agents.State = "wrong"

	AnswerEvent agents.Event = "answer"
	Revise      agents.Event = "revise"
	Review      agents.Event = "review"
	Judge       agents.Event = "judge"
	Succeed     agents.Event = "succeed"
	Fail        agents.Event = "fail"

	// KindPuzzle is the environment's announcement of the puzzle at time
	// 0; its payload is the question.
	KindPuzzle = "puzzle"
	// KindAnswer and KindVerdict carry the solver's answers and the
	// critic's verdicts, in canonical JSON, to the other agent.
	KindAnswer  = "answer"
	KindVerdict = "verdict"
	// KindIllegal announces an illegal answer; KindResult the verifier's
	// result.
	KindIllegal = "illegal"
	KindResult  = "result"

	// NullVerdict is the critic's null action: accept.
	NullVerdict = `{"verdict":"accept"}`

	solverSeat, criticSeat = 0, 1
)

// Scenario is the debate scenario. Its zero value is not usable; use New.
type Scenario struct {
	info  *env.Info
	seats []env.Seat // shared, read-only, by every episode
}

// New returns the debate scenario.
func New() *Scenario {
	s := &Scenario{seats: []env.Seat{{ID: RoleSolver, Role: RoleSolver}, {ID: RoleCritic, Role: RoleCritic}}}
	s.info = &env.Info{
		Name:    "debate",
		Summary: "a solver answers a generated puzzle, a critic accepts or objects, a verifier checks the final answer; both score 1 if right",
		Doc: "Sequential, solver first. The seed draws a puzzle with an integer answer (arithmetic, modular arithmetic or a linear " +
			`equation; the answer is every sample's label). The solver answers {"answer":N,"explanation":"..."}; the critic ` +
			`{"verdict":"accept"} (final) or {"verdict":"object","message":"..."} (the solver revises). The solver's rounds-th answer ` +
			"is final. Team reward and both scores: 1 if the final answer equals the label, else 0. An illegal answer is no answer; " +
			"an illegal verdict is no objection. Null action: the critic's accept.",
		Schedule: env.Sequential,
		Roles: []*agents.Role{
			{
				Name:    RoleSolver,
				Doc:     "answers the puzzle, and revises when the critic objects",
				Initial: Solving,
				Events: fsm.Events{
					agents.Edge(Solving, AnswerEvent, Waiting),
					agents.Edge(Waiting, Revise, Solving),
					agents.Edge(Waiting, Succeed, Correct),
					agents.Edge(Waiting, Fail, Wrong),
				},
				Terminal: []agents.State{Correct, Wrong},
				Acting:   []agents.State{Solving},
			},
			{
				Name:    RoleCritic,
				Doc:     "checks each answer and accepts it or objects",
				Initial: Waiting,
				Events: fsm.Events{
					agents.Edge(Waiting, Review, Reviewing),
					agents.Edge(Reviewing, Judge, Waiting),
					agents.Edge(Waiting, Succeed, Correct),
					agents.Edge(Waiting, Fail, Wrong),
				},
				Terminal: []agents.State{Correct, Wrong},
				Acting:   []agents.State{Reviewing},
			},
		},
		Params: []env.ParamSpec{
			env.String("kind", Mixed, "the puzzles: arithmetic, modular, linear, or mixed (one of them per episode)", Arithmetic, Modular, Linear, Mixed),
			env.Int("difficulty", 2, 1, 5, "more steps and larger numbers as it grows"),
			env.Int("rounds", 3, 1, 10, "answers the solver may give; the last is final without review"),
			env.Float("skill", 0.6, 0, 1, "the scripted solver's chance of computing each answer right"),
		},
		Policies: map[string]env.PolicyMaker{
			"scripted": scripted,
			"random":   random,
		},
		DefaultPolicy: "scripted",
		Counterfactual: &env.CounterfactualSpec{
			NullAction: map[string]string{RoleCritic: NullVerdict},
			AbsentOK:   true,
			Doc:        "a critic that accepts everything and an absent critic are the same: the solver's first answer is final; without the solver nothing is answered and the episode scores 0",
			// The solver revises on objections: a frozen solver would
			// answer objections that were never made.
			Resimulate: true,
		},
	}
	return s
}

// Info implements env.Scenario.
func (s *Scenario) Info() *env.Info { return s.info }

// ActionSchema returns the JSON Schema of role's answers (SolverSchema or
// CriticSchema), for a policy that can have its server enforce it; "" for
// an unknown role. The parameters do not change the grammar.
func (s *Scenario) ActionSchema(_ env.Params, role string) string {
	switch role {
	case RoleSolver:
		return SolverSchema
	case RoleCritic:
		return CriticSchema
	}
	return ""
}

// New implements env.Scenario: it draws the puzzle from seed.
func (s *Scenario) New(p env.Params, seed uint64) (env.Game, error) {
	rng := rand.New(rand.NewPCG(seed, 0x6465_6261_7465_0001))
	puzzle, err := NewPuzzle(rng, p.String("kind"), p.Int("difficulty"))
	if err != nil {
		return nil, err
	}
	return &game{seats: s.seats, puzzle: puzzle, rounds: p.Int("rounds")}, nil
}

type game struct {
	seats   []env.Seat
	puzzle  Puzzle
	rounds  int
	answers int    // answers given, legal or not
	answer  *int64 // the standing answer; nil when the latest was illegal or none was given
}

func (g *game) Seats() []env.Seat { return g.seats }

// Label implements env.Labeler: the ground truth.
func (g *game) Label() string { return normalAnswer(g.puzzle.Answer) }

// Start announces the puzzle. Without a solver nobody answers: the
// episode ends at once and scores 0.
func (g *game) Start(s *env.Step) error {
	if s.Absent(solverSeat) {
		s.End()
		return nil
	}
	return s.Announce(KindPuzzle, g.puzzle.Question)
}

func (g *game) Observe(seat int) env.View {
	var b strings.Builder
	fmt.Fprintf(&b, "Collaborative problem solving. A solver answers the puzzle, a critic checks each answer, and a verifier checks the final one: "+
		"you both score 1 if it is right, 0 otherwise.\nPuzzle: %s\n", g.puzzle.Question)
	if seat == solverSeat {
		fmt.Fprintf(&b, "You are the solver. This is your answer %d of %d", g.answers+1, g.rounds)
		if g.answers+1 == g.rounds {
			b.WriteString(": it is final")
		} else {
			b.WriteString("; the critic may accept it, which makes it final, or object, and you revise")
		}
		b.WriteString(".\nAnswer with exactly one JSON object: {\"answer\": <integer>, \"explanation\": \"<your reasoning, optional>\"}.")
		return env.View{Text: b.String()}
	}
	fmt.Fprintf(&b, "You are the critic. The solver's answer %d of %d: ", g.answers, g.rounds)
	if g.answer != nil {
		b.WriteString(normalAnswer(*g.answer))
	} else {
		b.WriteString("none (its answer was not valid)")
	}
	b.WriteString(".\nAnswer with exactly one JSON object: {\"verdict\": \"accept\"} to make it final, " +
		"or {\"verdict\": \"object\", \"message\": \"<what is wrong>\"} to send it back for revision.")
	return env.View{Text: b.String()}
}

func (g *game) Apply(s *env.Step, moves []env.Move) error {
	m := moves[0]
	if m.Seat == solverSeat {
		return g.solve(s, m.Action.Text)
	}
	return g.judge(s, m.Action.Text)
}

func (g *game) solve(s *env.Step, text string) error {
	if err := s.Fire(solverSeat, AnswerEvent); err != nil {
		return err
	}
	g.answers++
	g.answer = nil
	a, err := ParseAnswer(text)
	if err != nil {
		if err := g.illegal(s, solverSeat, err); err != nil {
			return err
		}
	} else {
		g.answer = &a.Value
		if err := s.Send(g.seats[solverSeat].ID, protocol.Broadcast, KindAnswer, a.Encode()); err != nil {
			return err
		}
	}
	if g.answers == g.rounds || s.Absent(criticSeat) {
		return g.finish(s)
	}
	return s.Fire(criticSeat, Review)
}

func (g *game) judge(s *env.Step, text string) error {
	if err := s.Fire(criticSeat, Judge); err != nil {
		return err
	}
	v, err := ParseVerdict(text)
	if err != nil {
		if err := g.illegal(s, criticSeat, err); err != nil {
			return err
		}
		return g.finish(s) // no objection
	}
	if err := s.Send(g.seats[criticSeat].ID, protocol.Broadcast, KindVerdict, v.Encode()); err != nil {
		return err
	}
	if v.Verdict == Accept {
		return g.finish(s)
	}
	return s.Fire(solverSeat, Revise)
}

func (g *game) illegal(s *env.Step, seat int, err error) error {
	s.Note(seat, "illegal", err.Error())
	return s.Announce(KindIllegal, fmt.Sprintf("%s's answer is illegal: %v", g.seats[seat].ID, err))
}

func (g *game) correct() bool { return g.answer != nil && *g.answer == g.puzzle.Answer }

// finish fires the outcome on every present seat, announces the verifier's
// result and ends the episode.
func (g *game) finish(s *env.Step) error {
	ev, result := Fail, "wrong"
	if g.correct() {
		ev, result = Succeed, "correct"
	}
	if err := s.FireAll(ev); err != nil {
		return err
	}
	final := "none"
	if g.answer != nil {
		final = normalAnswer(*g.answer)
	}
	s.End()
	return s.Announce(KindResult, fmt.Sprintf("%s: the final answer is %s, the right answer %s", result, final, normalAnswer(g.puzzle.Answer)))
}

func (g *game) Score() env.Score {
	r := 0.0
	if g.correct() {
		r = 1
	}
	return env.Score{Team: r, Agents: []float64{r, r}}
}
