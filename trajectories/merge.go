package trajectories

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
)

// Metadata keys of a merged sample (MergeTurns).
const (
	// MergedTurnsKey: how many of the agent's turns the sample holds.
	MergedTurnsKey = "merged_turns"
	// MergedFromKey: the agent's turn number the sample starts at (0
	// unless an earlier segment was cut off, see MergeTurns).
	MergedFromKey = "merged_from_turn"
	// MergedRewardKey: how the sample's reward was made of its turns'
	// rewards (a MergeReward: "sum", "mean" or "last").
	MergedRewardKey = "merged_reward"
)

// MergeReward is how a merged sample's reward is made of the rewards of
// the turns it holds, under every allocator of a dict reward alike.
//
// Mean is troupe's default (DefaultMergeReward; troupe run
// --merge-reward, a rollout request's merge_reward): under team and
// individual credit every turn of an agent carries the episode's reward,
// so the mean is that reward whatever the episode's length, the scale of
// the per-turn layout's samples, and a GRPO group compares episodes, not
// their lengths (summed, a won game of 4 turns scores 4 and one of 3
// turns 3). Sum is the return of per-turn credit that splits an
// episode's reward between its turns (a discounting or per-step
// allocator), and what merging did before the choice existed. Last is the
// last turn's credit: the outcome as the agent's final move was judged.
type MergeReward string

// The merged rewards.
const (
	MergeSum  MergeReward = "sum"
	MergeMean MergeReward = "mean"
	MergeLast MergeReward = "last"
)

// DefaultMergeReward is the merged reward a run gets when it names none
// (troupe run, troupe serve): MergeMean, see MergeReward. A run spec and
// an Output that name none sum, as they did before the choice existed.
const DefaultMergeReward = MergeMean

// ErrBadMergeReward is wrapped by ParseMergeReward's error.
var ErrBadMergeReward = errors.New("unknown merged reward")

// ParseMergeReward reads a MergeReward by name; "" is MergeSum.
func ParseMergeReward(s string) (MergeReward, error) {
	switch r := MergeReward(s); r {
	case "":
		return MergeSum, nil
	case MergeSum, MergeMean, MergeLast:
		return r, nil
	}
	return "", fmt.Errorf("%w %q: want sum, mean or last", ErrBadMergeReward, s)
}

// MergeTurns folds the per-turn samples of one episode into one sample per
// agent: the merged layout, which slime's own multi-turn agents write.
// Consecutive turns of an agent merge when each turn's prompt ids begin
// with the previous turn's prompt and response ids (an LLM policy with
// memory makes them so, token for token); the merged sample is then:
//
//   - tokens: the last turn's prompt and response ids, the agent's whole
//     conversation;
//   - prompt: the first turn's; response_length: every token after the
//     first turn's prompt (slime's "response" region of a multi-turn
//     sample), so loss_mask and rollout_log_probs have that length;
//   - loss_mask: each turn's own mask (1 on its sampled tokens) over its
//     response span, 0 on everything between them (the environment's and
//     the other agents' messages, the chat template's tokens);
//   - rollout_log_probs: each turn's over its span, 0.0 elsewhere; none
//     when a turn has none;
//   - reward: the sum of the turns' rewards, under each allocator for a
//     dict reward: the per-turn credit summed (an allocator that
//     discounts, credit's discount, makes it the discounted return);
//     MergeTurnsBy takes the mean or the last turn's instead;
//   - response: the turns' responses, one after the other, separated by a
//     blank line (for reward models and logs: the token region between
//     them is the environment's, which troupe does not detokenize);
//   - metadata: the last turn's, with Turn the first turn's number,
//     merged_turns (MergedTurnsKey), merged_from_turn (MergedFromKey)
//     and merged_reward (MergedRewardKey) in Extra, and "invalid" when
//     any turn was.
//
// A turn that does not extend the one before (its context was cut for the
// budget, its ids were tokenized anew, it has no token ids at all) starts
// a new sample of the agent, so that every token of a merged sample is one
// the model saw in that order; a text-only turn stays a sample of its
// own. The merged samples come in the order of their last turns. samples
// is changed in place: the result is its prefix, the rest cleared.
func MergeTurns(samples []protocol.Sample) []protocol.Sample {
	return MergeTurnsBy(samples, MergeSum)
}

// MergeTurnsBy is MergeTurns with the merged reward how: the sum, the
// mean or the last of the merged turns' rewards (a sample of one turn
// keeps its own, which is all three). "" is MergeSum.
func MergeTurnsBy(samples []protocol.Sample, how MergeReward) []protocol.Sample {
	if len(samples) < 2 {
		return samples
	}
	segs, next := segmentsOf(samples)
	if len(segs) == len(samples) {
		return samples
	}
	slices.SortStableFunc(segs, func(a, b segment) int { return a.last - b.last })
	out := make([]protocol.Sample, len(segs))
	for k, sg := range segs {
		if sg.first == sg.last {
			out[k] = samples[sg.first]
			continue
		}
		out[k] = merge(samples, sg.first, next, cmp.Or(how, MergeSum))
	}
	n := copy(samples, out)
	clear(samples[n:])
	return samples[:n]
}

// MergedCount is the number of samples MergeTurns makes of rec's samples
// (Samples): what a merged layout writes of the episode, before any
// placeholder.
func MergedCount(rec *episode.Record) int {
	samples := Samples(rec)
	if len(samples) < 2 {
		return len(samples)
	}
	segs, _ := segmentsOf(samples)
	return len(segs)
}

// segment is one merged sample's turns: samples[first] to samples[last],
// through next.
type segment struct{ first, last int }

// segmentsOf splits samples into the merged samples' segments, in the
// order of their first turns, and returns for each sample the next turn
// of its segment, or -1.
func segmentsOf(samples []protocol.Sample) ([]segment, []int) {
	open := map[string]int{} // agent -> its open segment's index in segs
	var segs []segment
	next := make([]int, len(samples))
	for i := range samples {
		next[i] = -1
		s := &samples[i]
		agent := s.Metadata.Agent
		if k, ok := open[agent]; ok && extends(&samples[segs[k].last], s) {
			next[segs[k].last] = i
			segs[k].last = i
			continue
		}
		if s.Metadata.TextOnly {
			delete(open, agent)
		} else {
			open[agent] = len(segs)
		}
		segs = append(segs, segment{i, i})
	}
	return segs, next
}

// extends reports whether s's prompt ids begin with prev's tokens.
func extends(prev, s *protocol.Sample) bool {
	if prev.Metadata.TextOnly || s.Metadata.TextOnly || len(prev.Tokens) == 0 {
		return false
	}
	prompt := s.Tokens[:len(s.Tokens)-s.ResponseLength]
	return len(prompt) > len(prev.Tokens) && slices.Equal(prompt[:len(prev.Tokens)], prev.Tokens)
}

// merge folds the segment that starts at samples[first] and goes on
// through next.
func merge(samples []protocol.Sample, first int, next []int, how MergeReward) protocol.Sample {
	f := &samples[first]
	start := len(f.Tokens) - f.ResponseLength // the first prompt's length
	last, turns := first, 1
	for i := next[first]; i >= 0; i = next[i] {
		last, turns = i, turns+1
	}
	l := &samples[last]
	m := *l
	m.Prompt = f.Prompt
	m.ResponseLength = len(l.Tokens) - start
	m.LossMask = make([]int, m.ResponseLength)
	logProbs := make([]float64, m.ResponseLength)
	var resp strings.Builder
	var invalid []string
	m.Reward = protocol.Reward{Kind: f.Reward.Kind}
	if f.Reward.Kind == protocol.RewardDict {
		m.Reward.Dict = make(map[string]float64, len(f.Reward.Dict))
	}
	for i := first; i >= 0; i = next[i] {
		s := &samples[i]
		at := len(s.Tokens) - s.ResponseLength - start
		if s.LossMask != nil {
			copy(m.LossMask[at:], s.LossMask)
		} else {
			for j := range s.ResponseLength {
				m.LossMask[at+j] = 1
			}
		}
		if s.RolloutLogProbs == nil {
			logProbs = nil
		} else if logProbs != nil {
			copy(logProbs[at:], s.RolloutLogProbs)
		}
		if resp.Len() > 0 {
			resp.WriteString("\n\n")
		}
		resp.WriteString(s.Response)
		switch s.Reward.Kind {
		case protocol.RewardScalar:
			if how == MergeLast {
				m.Reward.Value = 0
			}
			m.Reward.Value += s.Reward.Value
		case protocol.RewardDict:
			if how == MergeLast {
				clear(m.Reward.Dict)
			}
			for k, v := range s.Reward.Dict {
				m.Reward.Dict[k] += v
			}
		}
		if v, ok := s.Metadata.Extra["invalid"].(string); ok {
			invalid = append(invalid, v)
		}
		m.RemoveSample = m.RemoveSample || s.RemoveSample
	}
	if how == MergeMean {
		m.Reward.Value /= float64(turns)
		for k, v := range m.Reward.Dict {
			m.Reward.Dict[k] = v / float64(turns)
		}
	}
	for j, b := range m.LossMask {
		if b == 0 && logProbs != nil {
			logProbs[j] = 0 // slime's rule: 0.0 where nothing is trained
		}
	}
	m.RolloutLogProbs = logProbs
	m.Response = resp.String()
	m.Metadata.Turn = f.Metadata.Turn
	extra := make(map[string]any, len(l.Metadata.Extra)+4)
	maps.Copy(extra, l.Metadata.Extra)
	extra[MergedTurnsKey] = turns
	extra[MergedFromKey] = f.Metadata.Turn
	extra[MergedRewardKey] = string(how)
	delete(extra, "invalid")
	if len(invalid) > 0 {
		extra["invalid"] = strings.Join(invalid, "; ")
	}
	m.Metadata.Extra = extra
	return m
}
