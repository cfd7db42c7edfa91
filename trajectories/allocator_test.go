package trajectories_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// fnAllocator is an Allocator built from a function.
type fnAllocator struct {
	name string
	fn   func(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error
}

func (a fnAllocator) Name() string { return a.name }
func (a fnAllocator) Allocate(ctx context.Context, group []*trajectories.Episode, dst [][]float64) error {
	return a.fn(ctx, group, dst)
}

// valueAllocator gives sample s of episode e the value base + 10*e + s, and
// checks that dst arrives zeroed and sized to the group.
func valueAllocator(t *testing.T, name string, base float64) fnAllocator {
	return fnAllocator{name: name, fn: func(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
		require.Len(t, dst, len(group))
		for e := range dst {
			require.Len(t, dst[e], len(group[e].Samples))
			for s := range dst[e] {
				assert.Zero(t, dst[e][s], "dst[%d][%d] must be zeroed for %s", e, s, name)
				dst[e][s] = base + float64(10*e+s)
			}
		}
		return nil
	}}
}

// seqAllocator is an Allocator that declares whether it is Sequential.
type seqAllocator struct {
	fnAllocator
	seq bool
}

func (a seqAllocator) Sequential() bool { return a.seq }

func TestAllocateScalar(t *testing.T) {
	group := fxEpisodes(2, 0, 3)
	allocs := []trajectories.Allocator{valueAllocator(t, "first", 100), valueAllocator(t, "second", 200)}
	require.NoError(t, trajectories.Allocate(context.Background(), group, allocs, trajectories.RewardScalar))
	for e, ep := range group {
		for s, sm := range ep.Samples {
			assert.Equal(t, protocol.Scalar(100+float64(10*e+s)), sm.Reward, "episode %d sample %d", e, s)
			assert.Equal(t, "first", sm.Metadata.Allocator)
		}
	}
}

func TestAllocateDict(t *testing.T) {
	group := fxEpisodes(2, 1)
	allocs := []trajectories.Allocator{valueAllocator(t, "team", 100), valueAllocator(t, "equal_split", 200), valueAllocator(t, "cf", 300)}
	require.NoError(t, trajectories.Allocate(context.Background(), group, allocs, trajectories.RewardDict))
	for e, ep := range group {
		for s, sm := range ep.Samples {
			off := float64(10*e + s)
			assert.Equal(t, protocol.DictReward(map[string]float64{"team": 100 + off, "equal_split": 200 + off, "cf": 300 + off}), sm.Reward)
			assert.Equal(t, "team equal_split cf", sm.Metadata.Allocator)
			v, ok := sm.Reward.Get("equal_split")
			assert.True(t, ok)
			assert.Equal(t, 200+off, v)
		}
	}
	// Each sample owns its dict.
	group[0].Samples[0].Reward.Dict["team"] = -1
	assert.Equal(t, 101.0, group[0].Samples[1].Reward.Dict["team"])
}

// TestAllocateReplacesRewards runs Allocate twice: the second run's rewards
// and allocator names replace the first's, in either format.
func TestAllocateReplacesRewards(t *testing.T) {
	group := fxEpisodes(2)
	ctx := context.Background()
	require.NoError(t, trajectories.Allocate(ctx, group, []trajectories.Allocator{valueAllocator(t, "a", 1), valueAllocator(t, "b", 2)}, trajectories.RewardDict))
	require.NoError(t, trajectories.Allocate(ctx, group, []trajectories.Allocator{valueAllocator(t, "c", 5)}, trajectories.RewardDict))
	assert.Equal(t, protocol.DictReward(map[string]float64{"c": 5}), group[0].Samples[0].Reward)
	assert.Equal(t, "c", group[0].Samples[0].Metadata.Allocator)
	require.NoError(t, trajectories.Allocate(ctx, group, []trajectories.Allocator{valueAllocator(t, "d", 7)}, trajectories.RewardScalar))
	assert.Equal(t, protocol.Scalar(8), group[0].Samples[1].Reward)
	assert.Equal(t, "d", group[0].Samples[1].Metadata.Allocator)
}

func TestAllocateNoAllocators(t *testing.T) {
	group := fxEpisodes(2)
	want := fxEpisodes(2)
	require.NoError(t, trajectories.Allocate(context.Background(), group, nil, trajectories.RewardDict))
	assert.Equal(t, want, group)
}

func TestAllocateEmptyGroup(t *testing.T) {
	called := false
	a := fnAllocator{name: "a", fn: func(_ context.Context, group []*trajectories.Episode, dst [][]float64) error {
		called = true
		assert.Empty(t, dst)
		return nil
	}}
	require.NoError(t, trajectories.Allocate(context.Background(), nil, []trajectories.Allocator{a}, trajectories.RewardScalar))
	assert.True(t, called)
}

func TestAllocatePassesContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "run-7")
	a := fnAllocator{name: "ctx", fn: func(ctx context.Context, _ []*trajectories.Episode, _ [][]float64) error {
		assert.Equal(t, "run-7", ctx.Value(key{}))
		return ctx.Err()
	}}
	require.NoError(t, trajectories.Allocate(ctx, fxEpisodes(1), []trajectories.Allocator{a}, trajectories.RewardScalar))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := trajectories.Allocate(cancelled, fxEpisodes(1), []trajectories.Allocator{a}, trajectories.RewardScalar)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestAllocateRejectsCreditThatIsNotANumber: an allocator that gives a
// sample NaN or an infinity fails the group, naming itself, the sample and
// the episode, rather than writing a reward of null.
func TestAllocateRejectsCreditThatIsNotANumber(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		broken := fnAllocator{name: "broken", fn: func(_ context.Context, _ []*trajectories.Episode, dst [][]float64) error {
			dst[1][2] = bad
			return nil
		}}
		err := trajectories.Allocate(context.Background(), fxEpisodes(3, 3), []trajectories.Allocator{broken}, trajectories.RewardScalar)
		require.ErrorIs(t, err, trajectories.ErrBadCredit)
		assert.Regexp(t, `allocator broken: .*: sample 2 of episode \d+ got `, err.Error())
	}
}

func TestAllocateErrorNamesAllocator(t *testing.T) {
	errNoReplay := errors.New("episode cannot be replayed")
	failing := fnAllocator{name: "counterfactual", fn: func(context.Context, []*trajectories.Episode, [][]float64) error {
		return errNoReplay
	}}
	for _, format := range []trajectories.RewardFormat{trajectories.RewardScalar, trajectories.RewardDict} {
		for _, allocs := range [][]trajectories.Allocator{
			{failing, valueAllocator(t, "team", 1)},
			{valueAllocator(t, "team", 1), failing},
		} {
			err := trajectories.Allocate(context.Background(), fxEpisodes(2), allocs, format)
			require.ErrorIs(t, err, errNoReplay)
			assert.Contains(t, err.Error(), "allocator counterfactual:")
		}
	}
}

func TestParseRewardFormat(t *testing.T) {
	for in, want := range map[string]trajectories.RewardFormat{
		"":       trajectories.RewardScalar,
		"scalar": trajectories.RewardScalar,
		"dict":   trajectories.RewardDict,
	} {
		got, err := trajectories.ParseRewardFormat(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"Dict", "SCALAR", "list", " dict"} {
		_, err := trajectories.ParseRewardFormat(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), `"`+in+`"`)
	}
}

func TestAnySequential(t *testing.T) {
	plain := valueAllocator(t, "plain", 0)
	no := seqAllocator{fnAllocator: valueAllocator(t, "no", 0), seq: false}
	yes := seqAllocator{fnAllocator: valueAllocator(t, "yes", 0), seq: true}
	tests := []struct {
		allocs []trajectories.Allocator
		want   bool
	}{
		{nil, false},
		{[]trajectories.Allocator{plain}, false},
		{[]trajectories.Allocator{plain, no}, false},
		{[]trajectories.Allocator{plain, no, yes}, true},
		{[]trajectories.Allocator{yes}, true},
	}
	for i, tt := range tests {
		assert.Equal(t, tt.want, trajectories.AnySequential(tt.allocs), "case %d", i)
	}
}

func TestAllocateRejectsDuplicateNames(t *testing.T) {
	ep := &trajectories.Episode{Record: episode.Record{}, Samples: make([]protocol.Sample, 2)}
	err := trajectories.Allocate(context.Background(), []*trajectories.Episode{ep},
		[]trajectories.Allocator{valueAllocator(t, "x", 1), valueAllocator(t, "x", 2)}, trajectories.RewardDict)
	require.ErrorIs(t, err, trajectories.ErrDuplicateAllocator)
	assert.ErrorContains(t, err, `"x" given twice`)
}

// notingAllocator leaves a note on the second episode of its group.
type notingAllocator struct{}

func (notingAllocator) Name() string { return "noting" }
func (notingAllocator) Allocate(ctx context.Context, g []*trajectories.Episode, dst [][]float64) error {
	return notingAllocator{}.AllocateNoted(ctx, g, dst, nil)
}
func (notingAllocator) AllocateNoted(_ context.Context, g []*trajectories.Episode, dst [][]float64, notes []map[string]any) error {
	if notes != nil {
		notes[1] = map[string]any{"budget": "exhausted"}
	}
	return nil
}

func TestAllocateMergesNotes(t *testing.T) {
	a := &trajectories.Episode{Record: episode.Record{}, Samples: make([]protocol.Sample, 2)}
	b := &trajectories.Episode{Record: episode.Record{}, Samples: make([]protocol.Sample, 2)}
	b.Samples[0].Metadata.Extra = map[string]any{"kept": 1}
	require.NoError(t, trajectories.Allocate(context.Background(), []*trajectories.Episode{a, b},
		[]trajectories.Allocator{notingAllocator{}}, trajectories.RewardScalar))
	assert.Nil(t, a.Samples[0].Metadata.Extra)
	assert.Equal(t, map[string]any{"kept": 1, "budget": "exhausted"}, b.Samples[0].Metadata.Extra)
	assert.Equal(t, map[string]any{"budget": "exhausted"}, b.Samples[1].Metadata.Extra)
}
