package credit

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/trajectories"
)

// Source is the per-agent reward an allocator starts from.
type Source int

const (
	// SourceTeam is the team reward G, the same for every agent (its
	// team's, G_T, in a scenario with teams).
	SourceTeam Source = iota
	// SourceIndividual is the agent's own score L_i (Score.Agents); a
	// scenario without per-agent scores is an error.
	SourceIndividual
	// SourceAuto is L_i when the scenario gives per-agent scores, G (G_T)
	// otherwise.
	SourceAuto
)

var sourceNames = []string{"team", "individual", "auto"}

// String returns "team", "individual" or "auto", the values of the base
// parameter.
func (s Source) String() string {
	if s < 0 || int(s) >= len(sourceNames) {
		return fmt.Sprintf("Source(%d)", int(s))
	}
	return sourceNames[s]
}

// value returns seat i's reward under s, for a finished episode.
func (s Source) value(ep *trajectories.Episode, i int) (float64, error) {
	switch s {
	case SourceTeam:
		return ep.SeatReward(i), nil
	case SourceIndividual:
		return agentScore(ep, i)
	case SourceAuto:
		if v, ok := ep.AgentScore(i); ok {
			return v, nil
		}
		return ep.SeatReward(i), nil
	}
	return 0, fmt.Errorf("%w: unknown reward source %d", ErrBadAllocatorParam, int(s))
}

// Needs says what an allocator requires of a scenario and its episodes, so
// that a caller (the CLI) can check a scenario before a run rather than
// fail at its first group.
type Needs struct {
	AgentScores bool // per-agent scores (Score.Agents)
	Replay      bool // re-simulation (Episode.Replay)
	Absent      bool // absent agents (env.CounterfactualSpec.AbsentOK)
	Null        bool // a null action for the role of every seat (env.CounterfactualSpec.NullAction)
	// Group: the values compare the episodes of a group with each other
	// (GRPO with the team reward, MAGRPO): groups of one episode give
	// every sample 0, so a run must play groups of at least two.
	Group bool
}

// Or is what an allocator combining allocators with needs n and m needs:
// everything either does.
func (n Needs) Or(m Needs) Needs {
	return Needs{
		AgentScores: n.AgentScores || m.AgentScores,
		Replay:      n.Replay || m.Replay,
		Absent:      n.Absent || m.Absent,
		Null:        n.Null || m.Null,
		Group:       n.Group || m.Group,
	}
}

// Needer is implemented by allocators that need more than the episode's
// team reward.
type Needer interface {
	Needs() Needs
}

// NeedsOf returns a's needs; an allocator that does not say has none.
func NeedsOf(a trajectories.Allocator) Needs {
	if n, ok := a.(Needer); ok {
		return n.Needs()
	}
	return Needs{}
}

// Note keys the counterfactual allocators set (see Noter).
const (
	// NoteBudgetExhausted is true when a sampling estimator stopped early
	// because its re-simulation budget ran out; its value then rests on
	// fewer samples than asked for.
	NoteBudgetExhausted = "credit_budget_exhausted"
	// NoteSamplesUsed is the number of samples (permutations, alternative
	// actions per agent) such an estimator actually used.
	NoteSamplesUsed = "credit_samples_used"
)

// Noter is trajectories.Noter: trajectories.Allocate merges its notes into
// the samples' metadata.
type Noter = trajectories.Noter

// AllocateNoted runs a over group, collecting its notes when it is a Noter.
// It returns one map per episode (nil where there is nothing to say), or
// nil when a is not a Noter.
func AllocateNoted(ctx context.Context, a trajectories.Allocator, group []*trajectories.Episode, dst [][]float64) ([]map[string]any, error) {
	n, ok := a.(Noter)
	if !ok {
		return nil, a.Allocate(ctx, group, dst)
	}
	notes := make([]map[string]any, len(group))
	return notes, n.AllocateNoted(ctx, group, dst, notes)
}

// note sets notes[e][key] = value when the caller keeps notes.
func note(notes []map[string]any, e int, key string, value any) {
	if notes == nil {
		return
	}
	if notes[e] == nil {
		notes[e] = map[string]any{}
	}
	notes[e][key] = value
}
