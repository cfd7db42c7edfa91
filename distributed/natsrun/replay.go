package natsrun

import (
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play"
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
// It is the environment's own replayer (env.NewReplayer) over the run's
// setup and the recorded actions.
func replayer(cfg *play.Config, engines *env.EnginePool, ep *episode.Record) episode.Replayer {
	return env.NewReplayer(env.Setup{
		Play:       cfg.Play, // as a local episode's replays: the replay emits nothing whatever Emit says
		Drive:      cfg.Drive,
		Seed:       ep.Seed,
		PolicySeed: ep.PolicySeed,
		Index:      ep.Index,
		RolloutID:  ep.RolloutID,
		GroupIndex: ep.GroupIndex,
		Engines:    engines,
	}, ep.Seats, ep.Turns)
}
