package runspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/troupe-rl/troupe/agents"
)

// ReplayPolicy is the name of the policy that replays recorded moves, in
// every scenario that has no policy of that name: its settings are
// {"moves": {AGENT_ID: [MOVE, ...]}}, each agent's moves by its own turn
// number (agents.Replay). A spec of it plays again an episode whose moves
// came from elsewhere (an environment server's sessions), so that the two
// records can be compared byte for byte. An agent asked for a turn beyond
// its list fails the episode (agents.ErrReplayExhausted), as does an agent
// the settings do not name, unless the settings name a policy of the
// scenario's in "then" (its default: "scripted", ...), which then answers
// for it: the environment server's stand-in for a learner where a
// counterfactual asks its policy, so that such a spec credits an episode
// as the server did.
const ReplayPolicy = "replay"

// replaySettings are the replay policy's settings.
type replaySettings struct {
	Moves map[string][]string `json:"moves"`
	Then  string              `json:"then,omitempty"`
}

// replayOf makes the replay policy of settings.
func replayOf(settings json.RawMessage, then func(name string) (agents.Policy, error)) (agents.Policy, error) {
	var s replaySettings
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || s.Moves == nil {
		return nil, fmt.Errorf(`policy %q takes settings {"moves": {AGENT: [MOVE, ...]}}: %s (%v)`, ReplayPolicy, settings, err)
	}
	var next agents.Policy
	if s.Then != "" {
		p, err := then(s.Then)
		if err != nil {
			return nil, fmt.Errorf("policy %q: then: %w", ReplayPolicy, err)
		}
		next = p
	}
	byAgent := make(map[string]agents.Policy, len(s.Moves))
	for id, moves := range s.Moves {
		byAgent[id] = agents.Replay(moves...)
	}
	return agents.PolicyFunc(func(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
		p, ok := byAgent[obs.Agent]
		if !ok {
			if next != nil {
				return next.Act(ctx, obs)
			}
			return agents.Action{}, fmt.Errorf("replay: agent %q has no moves (the settings name %v): %w", obs.Agent, slices.Sorted(maps.Keys(byAgent)), agents.ErrReplayExhausted)
		}
		a, err := p.Act(ctx, obs)
		if next != nil && errors.Is(err, agents.ErrReplayExhausted) {
			return next.Act(ctx, obs)
		}
		return a, err
	}), nil
}
