package natsrun

import (
	"context"
	"fmt"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// replayer rebuilds, on the collector, the Replayer a local run would have
// given ep: it re-runs the episode from its recorded actions under a
// counterfactual, with the run's own scenario, parameters, policies and
// limits.
//
// Replays run here rather than on a worker because allocation happens here,
// per group, once every episode of the group is back; the collector has the
// scenario and the policies (it built the run), and replaying recorded
// actions costs only the game's own compute. A counterfactual that
// re-simulates asks the policies again, from this process.
//
// It mirrors the environment's own replayer: the same checks, then the same
// Setup with the counterfactual and the recorded actions, and no samples.
func replayer(cfg *env.RunConfig, engines *env.EnginePool, ep *trajectories.Episode) trajectories.Replayer {
	setup := env.Setup{
		Scenario:         cfg.Scenario,
		Params:           cfg.Params,
		Seed:             ep.Seed,
		PolicySeed:       ep.PolicySeed,
		Index:            ep.Index,
		RolloutID:        ep.RolloutID,
		GroupIndex:       ep.GroupIndex,
		Policy:           cfg.Policy,
		Limits:           cfg.Limits,
		Invalid:          cfg.Invalid,
		Emit:             func(env.Seat) bool { return false },
		ParallelPolicies: cfg.ParallelPolicies,
		Recorded:         ep.Actions,
		Engines:          engines,
	}
	seats := ep.Seats
	return trajectories.ReplayerFunc(func(ctx context.Context, cf trajectories.Counterfactual) (env.Score, error) {
		info := setup.Scenario.Info()
		spec := info.Counterfactual
		if len(cf.Absent) > 0 && (spec == nil || !spec.AbsentOK) {
			return env.Score{}, fmt.Errorf("scenario %s: %w", info.Name, env.ErrNoAbsence)
		}
		for _, i := range cf.Null {
			if i < 0 || i >= len(seats) {
				return env.Score{}, fmt.Errorf("counterfactual names seat %d of %d", i, len(seats))
			}
			role := seats[i].Role
			if spec == nil {
				return env.Score{}, fmt.Errorf("scenario %s role %q: %w", info.Name, role, env.ErrNoNullAction)
			}
			if _, ok := spec.NullAction[role]; !ok {
				return env.Score{}, fmt.Errorf("scenario %s role %q: %w", info.Name, role, env.ErrNoNullAction)
			}
		}
		s := setup
		s.Counterfactual = &cf
		eng := engines.Get()
		defer engines.Put(eng)
		out := eng.Run(ctx, s)
		switch out.Status {
		case protocol.StatusCompleted, protocol.StatusTruncated:
			return out.Score, nil
		}
		return env.Score{}, fmt.Errorf("%w: %s (%s): %s", env.ErrReplayFailed, out.Status, out.End, out.Err)
	})
}
