package trajectories_test

// The fixtures are prefixed fx so they cannot collide with the helpers of
// other test files of the package.

import (
	"fmt"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// fxSample returns the i-th turn of a rollout: text-only on even turns, with
// tokens, a loss mask and log-probs on odd ones, so both shapes are covered.
func fxSample(rollout, group int64, i int) protocol.Sample {
	s := protocol.Sample{
		GroupIndex: group,
		RolloutID:  rollout,
		Prompt:     protocol.TextPrompt(fmt.Sprintf("rollout %d turn %d: go or stay?\n\"quoted\" \u2028", rollout, i)),
		Response:   []string{"go", "stay"}[i%2],
		Reward:     protocol.Scalar(float64(i) / 4),
		Status:     protocol.StatusCompleted,
		Metadata: protocol.Metadata{
			Scenario:   "elfarol",
			Seed:       uint64(rollout) * 7,
			Episode:    rollout,
			Agent:      fmt.Sprintf("p%d", i%3),
			Role:       "patron",
			Turn:       i / 3,
			Step:       i,
			State:      "deciding",
			TeamReward: 0.75,
			Allocator:  "team",
			TextOnly:   true,
			End:        "terminated",
		},
	}
	if i%2 == 1 {
		s.Tokens = []int{1, 2, 3, 100 + i, 200 + i}
		s.ResponseLength = 2
		s.LossMask = []int{1, 1}
		s.RolloutLogProbs = []float64{-0.5, -1.25e-7}
		s.Metadata.TextOnly = false
	}
	return s
}

// fxEpisode returns an episode of n samples with indexes from firstIndex.
func fxEpisode(rollout, group int64, n int, firstIndex int64) *trajectories.Episode {
	ep := &trajectories.Episode{
		Record: episode.Record{
			Scenario:   "elfarol",
			Index:      rollout,
			RolloutID:  rollout,
			GroupIndex: group,
			Status:     protocol.StatusCompleted,
			End:        "terminated",
			Score:      episode.Score{Team: 0.75},
		},
	}
	for i := range n {
		s := fxSample(rollout, group, i)
		s.Index = firstIndex + int64(i)
		ep.Samples = append(ep.Samples, s)
	}
	return ep
}

// fxEpisodes returns rollouts 0..len(sizes)-1 with sizes[i] samples each and
// consecutive indexes, two rollouts per group.
func fxEpisodes(sizes ...int) []*trajectories.Episode {
	var out []*trajectories.Episode
	var next int64
	for i, n := range sizes {
		out = append(out, fxEpisode(int64(i), int64(i/2), n, next))
		next += int64(n)
	}
	return out
}

// fxSamplesOf returns the samples of eps, flattened, and the non-empty
// rollouts.
func fxSamplesOf(eps []*trajectories.Episode) ([]protocol.Sample, [][]protocol.Sample) {
	var flat []protocol.Sample
	var rollouts [][]protocol.Sample
	for _, ep := range eps {
		flat = append(flat, ep.Samples...)
		if len(ep.Samples) > 0 {
			rollouts = append(rollouts, ep.Samples)
		}
	}
	return flat, rollouts
}
