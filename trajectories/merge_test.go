package trajectories_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// turn is one per-turn sample of agent: prompt ids, then response ids.
func turn(agent string, n int, prompt, resp []int, reward float64) protocol.Sample {
	lp := make([]float64, len(resp))
	for i := range lp {
		lp[i] = -float64(i + 1)
	}
	mask := make([]int, len(resp))
	for i := range mask {
		mask[i] = 1
	}
	return protocol.Sample{
		Tokens: append(append([]int{}, prompt...), resp...), ResponseLength: len(resp), LossMask: mask, RolloutLogProbs: lp,
		Response: "r" + string(rune('0'+n)), Reward: protocol.Scalar(reward), RolloutID: 7, Status: protocol.StatusCompleted,
		Prompt:   protocol.TextPrompt("p" + string(rune('0'+n))),
		Metadata: protocol.Metadata{Agent: agent, Turn: n},
	}
}

func TestMergeTurnsFoldsPrefixExtendingTurns(t *testing.T) {
	samples := []protocol.Sample{
		turn("a", 0, []int{1, 2}, []int{3}, 1),
		turn("b", 0, []int{9}, []int{8}, 5),
		turn("a", 1, []int{1, 2, 3, 4, 5}, []int{6, 7}, 2),
		turn("b", 1, []int{7, 7}, []int{6}, 1), // does not extend b's turn 0: a new sample
		turn("a", 2, []int{1, 2, 3, 4, 5, 6, 7, 8}, []int{9}, 4),
	}
	got := trajectories.MergeTurns(samples)
	require.Len(t, got, 3)
	b0, b1, a := got[0], got[1], got[2]
	assert.Equal(t, "b", b0.Metadata.Agent)
	assert.Equal(t, []int{9, 8}, b0.Tokens)
	assert.Equal(t, []int{7, 7, 6}, b1.Tokens)

	assert.Equal(t, "a", a.Metadata.Agent)
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, a.Tokens, "the last turn's tokens")
	assert.Equal(t, 7, a.ResponseLength, "everything after the first prompt")
	assert.Equal(t, []int{1, 0, 0, 1, 1, 0, 1}, a.LossMask, "1 on the three responses (3; 6, 7; 9), 0 between")
	assert.Equal(t, []float64{-1, 0, 0, -1, -2, 0, -1}, a.RolloutLogProbs)
	assert.Equal(t, 7.0, a.Reward.Value, "the turns' rewards summed")
	assert.Equal(t, "p0", a.Prompt.Text, "the first turn's prompt")
	assert.Equal(t, "r0\n\nr1\n\nr2", a.Response)
	assert.Equal(t, 0, a.Metadata.Turn)
	assert.Equal(t, 3, a.Metadata.Extra[trajectories.MergedTurnsKey])
	assert.Equal(t, int64(7), a.RolloutID)
	require.NoError(t, a.Validate())
}

func TestMergeTurnsKeepsTextOnlyTurnsApart(t *testing.T) {
	text := protocol.Sample{Response: "x", Metadata: protocol.Metadata{Agent: "a", Turn: 1, TextOnly: true}, Prompt: protocol.TextPrompt("p")}
	samples := []protocol.Sample{turn("a", 0, []int{1}, []int{2}, 0), text, turn("a", 2, []int{1, 2, 3}, []int{4}, 0)}
	got := trajectories.MergeTurns(samples)
	assert.Len(t, got, 3, "a text-only turn breaks the conversation")
}

// Output.Merge merges after the allocators: the merged reward is the sum
// of the per-turn credit, and the sink gets one sample per agent.
func TestOutputMergesAfterAllocation(t *testing.T) {
	rec := &episode.Record{RolloutID: 3, Status: protocol.StatusCompleted, Seats: []episode.Seat{{ID: "a", Role: "r"}},
		Score: episode.Score{Team: 2, Agents: []float64{2}}, Turns: make([]episode.Turn, 3)}
	for k := range rec.Turns {
		prompt := []int{1, 2}
		for j := range k {
			prompt = append(prompt, 10+j, 20+j)
		}
		rec.Turns[k] = episode.Turn{Seat: 0, Turn: k, Action: "x", Emit: true}
		rec.Turns[k].SetGeneration(&agents.Generation{Tokens: &agents.Tokens{Prompt: prompt, Response: []int{10 + k}}})
	}
	var col trajectories.Collector
	out := &trajectories.Output{Sink: &col, Merge: true, Allocators: []trajectories.Allocator{perTurn{}}}
	write, err := out.Finish(context.Background(), []*episode.Record{rec})
	require.NoError(t, err)
	n, err := write(0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	eps := col.Episodes()
	require.Len(t, eps, 1)
	require.Len(t, eps[0].Samples, 1)
	m := eps[0].Samples[0]
	assert.Equal(t, []int{1, 2, 10, 20, 11, 21, 12}, m.Tokens)
	assert.Equal(t, []int{1, 0, 1, 0, 1}, m.LossMask)
	assert.Equal(t, 6.0, m.Reward.Value, "1 + 2 + 3")
	assert.Equal(t, int64(0), m.Index)
	require.NoError(t, m.Validate())
}

type perTurn struct{}

func (perTurn) Name() string { return "per-turn" }
func (perTurn) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e := range group {
		for k := range dst[e] {
			dst[e][k] = float64(k + 1)
		}
	}
	return nil
}

// TestMergedCountIsMergeTurnsLength: MergedCount counts, from a record,
// the samples MergeTurns makes of its projection.
func TestMergedCountIsMergeTurnsLength(t *testing.T) {
	tokens := func(prompt ...int) *agents.Generation {
		return &agents.Generation{Tokens: &agents.Tokens{Prompt: prompt, Response: []int{prompt[len(prompt)-1] + 1}}}
	}
	a, b := 0, 1 // seats
	rec := &episode.Record{Status: protocol.StatusCompleted, Seats: []env.Seat{{ID: "a", Role: "r"}, {ID: "b", Role: "r"}}, Turns: []episode.Turn{
		{Seat: a, Emit: true, Generation: tokens(1)},
		{Seat: b, Emit: true, Generation: tokens(9)},
		{Seat: a, Emit: true, Generation: tokens(1, 2, 3)}, // extends a's turn 0
		{Seat: b, Emit: true, Generation: tokens(7)},       // does not extend b's turn 0
		{Seat: a, Emit: true},                              // text-only: a sample of its own
		{Seat: a, Emit: false, Generation: tokens(1, 2, 3, 4, 5)},
	}}
	assert.Equal(t, 4, trajectories.MergedCount(rec))
	assert.Len(t, trajectories.MergeTurns(trajectories.Samples(rec)), 4)
	assert.Equal(t, 0, trajectories.MergedCount(&episode.Record{}))
}

// TestMergeRewardIsExactAgainstPerTurnLayout: for the same episodes, a
// merged sample's reward under each choice is the sum, the mean or the
// last of the per-turn layout's rewards of the turns it holds, scalar and
// under every allocator of a dict reward, and its metadata names the
// choice.
func TestMergeRewardIsExactAgainstPerTurnLayout(t *testing.T) {
	// Two agents taking turns, each turn's prompt extending the agent's
	// last prompt and response: every agent's turns merge into one sample.
	rec := func() *episode.Record {
		r := &episode.Record{RolloutID: 3, Status: protocol.StatusCompleted,
			Seats: []episode.Seat{{ID: "a", Role: "r"}, {ID: "b", Role: "r"}},
			Score: episode.Score{Team: 1, Agents: []float64{1, -1}}, Turns: make([]episode.Turn, 7)}
		prev := map[int][]int{0: {1}, 1: {2}}
		for k := range r.Turns {
			seat := k % 2
			prompt := append(append([]int{}, prev[seat]...), 100+k)
			resp := []int{200 + k}
			prev[seat] = append(append([]int{}, prompt...), resp...)
			r.Turns[k] = episode.Turn{Seat: seat, Turn: k / 2, Action: "x", Emit: true}
			r.Turns[k].SetGeneration(&agents.Generation{Tokens: &agents.Tokens{Prompt: prompt, Response: resp}})
		}
		return r
	}
	play := func(t *testing.T, format trajectories.RewardFormat, merge bool, how trajectories.MergeReward) []protocol.Sample {
		var col trajectories.Collector
		out := &trajectories.Output{Sink: &col, Merge: merge, MergeReward: how, Format: format,
			Allocators: []trajectories.Allocator{oddTurns{}, perTurn{}}}
		write, err := out.Finish(context.Background(), []*episode.Record{rec()})
		require.NoError(t, err)
		_, err = write(0)
		require.NoError(t, err)
		return col.Episodes()[0].Samples
	}
	for _, format := range []trajectories.RewardFormat{trajectories.RewardScalar, trajectories.RewardDict} {
		turns := play(t, format, false, "")
		require.Len(t, turns, 7)
		for _, how := range []trajectories.MergeReward{trajectories.MergeSum, trajectories.MergeMean, trajectories.MergeLast} {
			t.Run(fmt.Sprint(format)+"/"+string(how), func(t *testing.T) {
				merged := play(t, format, true, how)
				require.Len(t, merged, 2, "one sample per agent")
				for _, m := range merged {
					var own []protocol.Reward
					for _, s := range turns {
						if s.Metadata.Agent == m.Metadata.Agent {
							own = append(own, s.Reward)
						}
					}
					assert.Equal(t, len(own), m.Metadata.Extra[trajectories.MergedTurnsKey])
					assert.Equal(t, string(how), m.Metadata.Extra[trajectories.MergedRewardKey])
					want := aggregate(own, how)
					assert.Equal(t, want, m.Reward, "agent %s", m.Metadata.Agent)
					require.NoError(t, m.Validate())
				}
			})
		}
	}
	// The default names mean; "" sums, as before the choice existed.
	assert.Equal(t, trajectories.MergeMean, trajectories.DefaultMergeReward)
	got, err := trajectories.ParseMergeReward("")
	require.NoError(t, err)
	assert.Equal(t, trajectories.MergeSum, got)
	_, err = trajectories.ParseMergeReward("median")
	require.ErrorIs(t, err, trajectories.ErrBadMergeReward)
	out := &trajectories.Output{Merge: true, MergeReward: "median"}
	_, err = out.Finish(context.Background(), []*episode.Record{rec()})
	require.ErrorIs(t, err, trajectories.ErrBadMergeReward)
}

// aggregate is how's reward of per-turn rewards rs, computed from the
// per-turn layout's samples: the reference MergeTurnsBy must equal.
func aggregate(rs []protocol.Reward, how trajectories.MergeReward) protocol.Reward {
	out := protocol.Reward{Kind: rs[0].Kind}
	if out.Kind == protocol.RewardDict {
		out.Dict = map[string]float64{}
	}
	for _, r := range rs {
		if how == trajectories.MergeLast {
			out.Value = 0
			clear(out.Dict)
		}
		out.Value += r.Value
		for k, v := range r.Dict {
			out.Dict[k] += v
		}
	}
	if how == trajectories.MergeMean {
		out.Value /= float64(len(rs))
		for k, v := range out.Dict {
			out.Dict[k] = v / float64(len(rs))
		}
	}
	return out
}

// oddTurns credits turn k with k/3 on odd turns, -k on even ones: rewards
// whose sum, mean and last all differ.
type oddTurns struct{}

func (oddTurns) Name() string { return "odd-turns" }
func (oddTurns) Allocate(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
	for e := range group {
		for k := range dst[e] {
			if k%2 == 1 {
				dst[e][k] = float64(k) / 3
			} else {
				dst[e][k] = -float64(k)
			}
		}
	}
	return nil
}
