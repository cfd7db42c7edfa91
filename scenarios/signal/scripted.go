package signal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
)

// ErrUnbriefed is returned by the scripted speaker when its observation
// holds no target message, or one that names no object of the game.
var ErrUnbriefed = errors.New("signal: the speaker was not told the target")

// scripted makes the "scripted" policy for the request's role: a speaker that names the
// target's rarest value, a listener that picks the first candidate with the
// value it heard. With vocab=symbols both use the convention that symbol k
// stands for word k.
func (s *Scenario) scripted(req env.PolicyRequest) (agents.Policy, error) {
	r, err := vocabulary(s.values, req.Params)
	if err != nil {
		return nil, err
	}
	switch req.Role {
	case RoleSpeaker:
		return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			target, candidates := "", ""
			for _, m := range obs.Seen {
				switch m.Kind {
				case KindTarget:
					target = m.Payload
				case KindCandidates:
					candidates = m.Payload
				}
			}
			if target == "" {
				return agents.Action{}, fmt.Errorf("agent %q: %w", obs.Agent, ErrUnbriefed)
			}
			word := rarest(target, strings.Split(candidates, ", "))
			i := slices.Index(r.words, word)
			if i < 0 {
				return agents.Action{}, fmt.Errorf("agent %q: target %q: %w", obs.Agent, target, ErrUnbriefed)
			}
			return agents.Action{Text: r.vocab[i]}, nil
		}), nil
	case RoleListener:
		return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
			if len(obs.Legal) == 0 {
				return agents.Action{}, fmt.Errorf("agent %q: %w", obs.Agent, agents.ErrNoLegalActions)
			}
			word := ""
			for _, m := range obs.Seen {
				if m.Kind == KindWord {
					word = m.Payload
				}
			}
			if i := slices.Index(r.vocab, word); i >= 0 {
				word = r.words[i]
			}
			for _, c := range obs.Legal {
				if slices.Contains(strings.Fields(c), word) {
					return agents.Action{Text: c}, nil
				}
			}
			return agents.Action{Text: obs.Legal[0]}, nil
		}), nil
	}
	return nil, fmt.Errorf("signal: no scripted policy for role %q", req.Role)
}

// rarest returns the value of target that the fewest candidates share; on
// a tie, the one target lists first.
func rarest(target string, candidates []string) string {
	best, fewest := "", len(candidates)+1
	for _, v := range strings.Fields(target) {
		n := 0
		for _, c := range candidates {
			if slices.Contains(strings.Fields(c), v) {
				n++
			}
		}
		if n < fewest {
			best, fewest = v, n
		}
	}
	return best
}
