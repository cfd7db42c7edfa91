package negotiation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// ErrUnbriefed is returned by the named policies when the observation
// holds no readable briefing (no KindValues message from the environment).
var ErrUnbriefed = errors.New("negotiation: the negotiator was not told its values")

// Table is what a negotiator knows when it is asked to move, read from its
// observation as a player would read it: its briefing and the standing
// offer.
type Table struct {
	Briefing
	// Offer is what the other negotiator's standing proposal leaves to
	// this one (the pool minus what the proposer takes); nil when no offer
	// of the other's is on the table.
	Offer []int
}

// ReadTable rebuilds a negotiator's table from its observation: the
// briefing from the environment's KindValues message, the standing offer
// from the last message of the other negotiator, when that is a proposal.
func ReadTable(obs *agents.Observation) (*Table, error) {
	t := &Table{}
	briefed := false
	var last string // payload of the other's latest proposal, "" if its latest move was not one
	for _, m := range obs.Seen {
		switch {
		case m.Kind == KindValues && m.From == protocol.EnvSender:
			if err := json.Unmarshal([]byte(m.Payload), &t.Briefing); err != nil {
				return nil, fmt.Errorf("agent %q: %w: %v", obs.Agent, ErrUnbriefed, err)
			}
			briefed = true
		case m.From != obs.Agent && m.From != protocol.EnvSender:
			last = ""
			if m.Kind == Propose {
				last = m.Payload
			}
		}
	}
	if !briefed || len(t.Items) == 0 || t.Total() <= 0 {
		return nil, fmt.Errorf("agent %q: %w", obs.Agent, ErrUnbriefed)
	}
	if last != "" {
		a, err := ParseAction(last, t.Pool)
		if err != nil {
			return nil, fmt.Errorf("agent %q: the other's proposal %q: %w", obs.Agent, last, err)
		}
		t.Offer = t.Rest(a.Take)
	}
	return t, nil
}

// tablePolicy adapts a decision over the table to a Policy.
func tablePolicy(decide func(t *Table, obs *agents.Observation) Action) agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		t, err := ReadTable(obs)
		if err != nil {
			return agents.Action{}, err
		}
		return agents.Action{Text: decide(t, obs).Encode(t.Pool)}, nil
	})
}

// The fair policy's targets: the share of its own pool value it demands on
// its first move and on its last, conceding linearly in between.
const (
	fairOpening = 0.8
	fairFloor   = 0.5
)

// Fair returns the "fair" policy: on its k-th move of n it targets
// fairOpening - (fairOpening - fairFloor)·k/(n-1) of its pool value,
// accepts a standing offer worth at least that, and otherwise proposes to
// keep its most valuable items (value per item, ties in pool order) until
// the target is met, giving the rest away.
func Fair() agents.Policy {
	return tablePolicy(func(t *Table, obs *agents.Observation) Action {
		target := fairOpening
		if t.Rounds > 1 {
			target -= (fairOpening - fairFloor) * float64(min(obs.Turn, t.Rounds-1)) / float64(t.Rounds-1)
		}
		need := target * float64(t.Total())
		if t.Offer != nil && float64(t.Worth(t.Offer)) >= need {
			return Action{Type: Accept}
		}
		return Action{Type: Propose, Take: t.keepUntil(need)}
	})
}

// keepUntil takes single items, most valuable first, until their value
// reaches need; items worth nothing are never kept.
func (t *Table) keepUntil(need float64) []int {
	order := make([]int, len(t.Items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return t.Values[b] - t.Values[a] })
	take := make([]int, len(t.Items))
	got := 0
	for _, i := range order {
		for take[i] < t.Counts[i] && float64(got) < need && t.Values[i] > 0 {
			take[i]++
			got += t.Values[i]
		}
	}
	return take
}

// Greedy returns the "greedy" policy: it demands every item it values and
// accepts only a standing offer that gives it all of them.
func Greedy() agents.Policy {
	return tablePolicy(func(t *Table, _ *agents.Observation) Action {
		if t.Offer != nil && t.Worth(t.Offer) == t.Total() {
			return Action{Type: Accept}
		}
		return Action{Type: Propose, Take: t.keepUntil(float64(t.Total()))}
	})
}

// Random returns the "random" policy: with an offer on the table it
// accepts one time in three; otherwise it walks away one time in ten and
// proposes a split drawn uniformly, item by item, the rest of the time.
// Its draws come from the turn's seed.
func Random() agents.Policy {
	return tablePolicy(func(t *Table, obs *agents.Observation) Action {
		if t.Offer != nil && obs.Intn(0, 3) == 0 {
			return Action{Type: Accept}
		}
		if obs.Intn(1, 10) == 0 {
			return Action{Type: Walk}
		}
		take := make([]int, len(t.Items))
		for i, c := range t.Counts {
			take[i] = obs.Intn(uint64(2+i), c+1)
		}
		return Action{Type: Propose, Take: take}
	})
}

// maker makes a named policy for either role.
func maker(policy func() agents.Policy) env.PolicyMaker {
	return func(req env.PolicyRequest) (agents.Policy, error) {
		if req.Role != RoleAlice && req.Role != RoleBob {
			return nil, fmt.Errorf("negotiation: no policy for role %q", req.Role)
		}
		return policy(), nil
	}
}

// CheckAnswer judges text as the game would judge it from obs's seat, and
// returns the reason it is illegal (wrapping ErrSyntax, ErrItems, ErrCount
// or ErrNoOffer), or nil: a policy that generates answers (an LLM) can
// check one before it commits to it, and retry with the reason. It reads
// the pool and the standing offer from the observation, as ReadTable
// does, and fails with ErrUnbriefed when it cannot.
func CheckAnswer(obs *agents.Observation, text string) error {
	t, err := ReadTable(obs)
	if err != nil {
		return err
	}
	a, err := ParseAction(text, t.Pool)
	if err != nil {
		return err
	}
	if a.Type == Accept && t.Offer == nil {
		return fmt.Errorf("%w: the other negotiator has made no offer", ErrNoOffer)
	}
	return nil
}

// CheckAnswer is the package's CheckAnswer, as a method, so that a caller
// holding only an env.Scenario (the command line wiring an LLM policy) can
// find it with a type assertion, next to ActionSchema.
func (s *Scenario) CheckAnswer(obs *agents.Observation, text string) error {
	return CheckAnswer(obs, text)
}
