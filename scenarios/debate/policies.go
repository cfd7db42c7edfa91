package debate

import (
	"context"
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// ErrNoPuzzle is returned by the scripted policies when the observation
// holds no puzzle they can read.
var ErrNoPuzzle = errors.New("debate: no readable puzzle in the observation")

// puzzleOf returns the answer of the puzzle the environment announced.
func puzzleOf(obs *agents.Observation) (int64, error) {
	for _, m := range obs.Seen {
		if m.Kind == KindPuzzle && m.From == protocol.EnvSender {
			v, err := Solve(m.Payload)
			if err != nil {
				return 0, fmt.Errorf("agent %q: %w: %w", obs.Agent, ErrNoPuzzle, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("agent %q: %w", obs.Agent, ErrNoPuzzle)
}

// standing returns the solver's answer under review, as the critic sees it
// in its messages: the payload of the solver's latest answer, unless the
// environment announced an illegal answer after it; ok is false when there
// is no valid answer to review.
func standing(obs *agents.Observation) (Answer, bool) {
	var a Answer
	ok := false
	for _, m := range obs.Seen {
		switch {
		case m.Kind == KindAnswer && m.From != protocol.EnvSender:
			parsed, err := ParseAnswer(m.Payload)
			a, ok = parsed, err == nil
		case m.Kind == KindIllegal && m.From == protocol.EnvSender:
			ok = false
		}
	}
	return a, ok
}

// ScriptedSolver returns the scripted solver: it computes the puzzle's
// answer with Solve, and at each attempt gives it with probability skill;
// otherwise it is off by 1 to 5 either way. Its draws come from the turn's
// seed.
func ScriptedSolver(skill float64) agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		v, err := puzzleOf(obs)
		if err != nil {
			return agents.Action{}, err
		}
		a := Answer{Value: v, Explanation: "computed step by step"}
		if obs.Float64(0) >= skill {
			off := int64(1 + obs.Intn(1, 5))
			if obs.Intn(2, 2) == 0 {
				off = -off
			}
			a = Answer{Value: v + off, Explanation: "computed in a hurry"}
		}
		return agents.Action{Text: a.Encode()}, nil
	})
}

// Checker returns the scripted critic: it computes the answer itself,
// accepts a right answer and objects to a wrong or missing one, without
// telling the right answer.
func Checker() agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		v, err := puzzleOf(obs)
		if err != nil {
			return agents.Action{}, err
		}
		a, ok := standing(obs)
		switch {
		case !ok:
			return agents.Action{Text: Verdict{Verdict: Object, Message: "there is no valid answer to check; answer with the JSON object"}.Encode()}, nil
		case a.Value == v:
			return agents.Action{Text: Verdict{Verdict: Accept}.Encode()}, nil
		}
		return agents.Action{Text: Verdict{Verdict: Object, Message: fmt.Sprintf("%d is wrong; check each step again", a.Value)}.Encode()}, nil
	})
}

// RandomSolver answers a uniform integer from -20 to 99, drawn from the
// turn's seed.
func RandomSolver() agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: Answer{Value: int64(obs.Intn(0, 120) - 20)}.Encode()}, nil
	})
}

// RandomCritic accepts or objects with equal chance, drawn from the
// turn's seed.
func RandomCritic() agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		if obs.Intn(0, 2) == 0 {
			return agents.Action{Text: NullVerdict}, nil
		}
		return agents.Action{Text: Verdict{Verdict: Object, Message: "I doubt it"}.Encode()}, nil
	})
}

func scripted(req env.PolicyRequest) (agents.Policy, error) {
	switch req.Role {
	case RoleSolver:
		return ScriptedSolver(req.Params.Float("skill")), nil
	case RoleCritic:
		return Checker(), nil
	}
	return nil, fmt.Errorf("debate: no scripted policy for role %q", req.Role)
}

func random(req env.PolicyRequest) (agents.Policy, error) {
	switch req.Role {
	case RoleSolver:
		return RandomSolver(), nil
	case RoleCritic:
		return RandomCritic(), nil
	}
	return nil, fmt.Errorf("debate: no random policy for role %q", req.Role)
}

// CheckAnswer judges text as the game would judge it from a seat of obs's
// role: ParseAnswer for the solver, ParseVerdict for the critic. It returns
// the reason it is illegal (wrapping ErrSyntax) or nil, so that a policy
// that generates answers (an LLM) can check one before it commits to it.
func CheckAnswer(obs *agents.Observation, text string) error {
	var err error
	switch obs.Role {
	case RoleSolver:
		_, err = ParseAnswer(text)
	case RoleCritic:
		_, err = ParseVerdict(text)
	default:
		err = fmt.Errorf("debate: no role %q", obs.Role)
	}
	return err
}

// CheckAnswer is the package's CheckAnswer, as a method, so that a caller
// holding only an env.Scenario (the command line wiring an LLM policy) can
// find it with a type assertion, next to ActionSchema.
func (s *Scenario) CheckAnswer(obs *agents.Observation, text string) error {
	return CheckAnswer(obs, text)
}
