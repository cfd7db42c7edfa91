package trajectories

import (
	"fmt"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// PlaceholderKey is the metadata key that marks a placeholder sample
// (Placeholder): true on it, absent on every other sample.
const PlaceholderKey = "troupe_placeholder"

// Placeholder is the one sample written for an episode that has none (an LLM
// server that failed before the first turn, or no turn of an emitted role),
// so that every episode of a run is in its sample file: its rollout_id,
// group_index and a sample index of its own, the episode's error, and its
// status in metadata. It is the placeholder troupe's slime adapter returns
// for such an episode, shaped so that slime's Sample.from_dict loads it and
// training takes nothing from it: status aborted, remove_sample true, one
// prompt and one response token (id 0, in every vocabulary), loss_mask [0],
// rollout_log_probs [0.0], reward 0 (under every allocator's name for dict
// rewards), and metadata troupe_placeholder true, troupe_status (the
// episode's own status), end and error. allocators are the run's allocator
// names, in order; none gives a scalar 0.
func Placeholder(rec *episode.Record, format RewardFormat, allocators []string) protocol.Sample {
	s := protocol.Sample{
		GroupIndex:      rec.GroupIndex,
		RolloutID:       rec.RolloutID,
		Tokens:          []int{0, 0},
		ResponseLength:  1,
		Label:           protocol.TextLabel(rec.Label),
		Reward:          protocol.Scalar(0),
		LossMask:        []int{0},
		RolloutLogProbs: []float64{0},
		RemoveSample:    true,
		Status:          protocol.StatusAborted,
		Metadata: protocol.Metadata{
			Scenario: rec.Scenario, Seed: rec.Seed, Episode: rec.Index,
			End: rec.End, Error: rec.Err, TeamReward: rec.Score.Team,
			Extra: map[string]any{PlaceholderKey: true, "troupe_status": string(rec.Status)},
		},
	}
	if s.Metadata.Error == "" {
		s.Metadata.Error = fmt.Sprintf("the episode produced no sample (status %s, end %s)", rec.Status, rec.End)
	}
	if len(allocators) > 0 {
		s.Metadata.Allocator = allocators[0]
		if format == RewardDict {
			s.Reward = protocol.Reward{Kind: protocol.RewardDict, Dict: make(map[string]float64, len(allocators))}
			for _, name := range allocators {
				s.Reward.Dict[name] = 0
			}
			s.Metadata.Allocator = strings.Join(allocators, " ")
		}
	}
	return s
}

// IsPlaceholder reports whether s is a Placeholder.
func IsPlaceholder(s *protocol.Sample) bool {
	v, ok := s.Metadata.Extra[PlaceholderKey].(bool)
	return ok && v
}
