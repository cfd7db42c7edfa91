package credit_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// randomGroup is a group of n episodes of the same three seats (two of
// role "a", one of "b"), each seat taking 1 to 3 turns, with random team
// rewards and agent scores.
func randomGroup(rng *rand.Rand, n int) []*trajectories.Episode {
	group := make([]*trajectories.Episode, n)
	for e := range group {
		turns := []int{1 + rng.IntN(3), 1 + rng.IntN(3), 1 + rng.IntN(3)}
		scores := []float64{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()}
		group[e] = agentEpisode(rng.NormFloat64()*3, scores, seats("a", "a", "b"), turns)
	}
	return group
}

func meanStd(xs []float64) (float64, float64) {
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

// TestMAGRPOProperties checks, over random groups: every sample of a joint
// rollout gets the same advantage, G − mean G; the advantages of the
// group's rollouts are centred and, with std=true, have unit std; a group
// of one episode, and an unfinished episode, get 0.
func TestMAGRPOProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 2 + rng.IntN(5)
		group := randomGroup(rng, n)
		got, err := allocate(credit.MAGRPO{}, group...)
		require.NoError(t, err)
		gs := make([]float64, n)
		for e, ep := range group {
			gs[e] = ep.Score.Team
		}
		mean, std := meanStd(gs)
		perRollout := make([]float64, n)
		for e := range group {
			for _, v := range got[e] {
				assert.InDelta(t, gs[e]-mean, v, 1e-12, "every agent of a rollout shares its advantage")
			}
			perRollout[e] = got[e][0]
		}
		m, _ := meanStd(perRollout)
		assert.InDelta(t, 0, m, 1e-12)

		normed, err := allocate(credit.MAGRPO{Std: true, Eps: 0}, group...)
		require.NoError(t, err)
		for e := range group {
			assert.InDelta(t, (gs[e]-mean)/std, normed[e][0], 1e-9)
			perRollout[e] = normed[e][0]
		}
		_, s := meanStd(perRollout)
		assert.InDelta(t, 1, s, 1e-9, "std=true gives the rollouts unit std")
	}

	one, err := allocate(credit.MAGRPO{}, randomGroup(rng, 1)...)
	require.NoError(t, err)
	assert.Equal(t, make([]float64, len(one[0])), one[0], "a group of one has no baseline")

	group := randomGroup(rng, 3)
	group[1].Status = protocol.StatusFailed
	got, err := allocate(credit.MAGRPO{}, group...)
	require.NoError(t, err)
	mean := (group[0].Score.Team + group[2].Score.Team) / 2
	assert.InDelta(t, group[0].Score.Team-mean, got[0][0], 1e-12, "an unfinished episode is not in the mean")
	assert.Equal(t, make([]float64, len(got[1])), got[1])
	assert.True(t, credit.NeedsOf(credit.MAGRPO{}).Group)
}

// TestATGRPOGroupsTurnsOfOneAgent checks the agent- and turn-wise grouping:
// over random groups, the samples of one agent at one turn number, across
// the group's episodes, have mean 0 and unit std (when there are two or
// more with different rewards), and each is (R − mean)/(std + ε) of its
// own (agent, turn) group; an (agent, turn) met once gets 0.
func TestATGRPOGroupsTurnsOfOneAgent(t *testing.T) {
	a, err := credit.Builtin().Parse("at-grpo:base=individual,eps=0")
	require.NoError(t, err)
	assert.True(t, credit.NeedsOf(a).Group, "one episode holds one unit per key")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		group := randomGroup(rng, 2+rng.IntN(5))
		got, err := allocate(a, group...)
		require.NoError(t, err)
		type key struct {
			agent string
			turn  int
		}
		values, rewards := map[key][]float64{}, map[key][]float64{}
		for e, ep := range group {
			for s, sm := range ep.Samples {
				k := key{sm.Metadata.Agent, sm.Metadata.Turn}
				values[k] = append(values[k], got[e][s])
				seat := int(sm.Metadata.Agent[1] - '0')
				rewards[k] = append(rewards[k], ep.Score.Agents[seat])
			}
		}
		for k, vs := range values {
			if len(vs) < 2 {
				assert.Equal(t, []float64{0}, vs, "%v alone in its group", k)
				continue
			}
			m, s := meanStd(vs)
			assert.InDelta(t, 0, m, 1e-9, "%v", k)
			assert.InDelta(t, 1, s, 1e-9, "%v", k)
			rm, rs := meanStd(rewards[k])
			for i, v := range vs {
				assert.InDelta(t, (rewards[k][i]-rm)/rs, v, 1e-9, "%v", k)
			}
		}
	}
}

// TestGroupNeedsSaysWhenOneEpisodeIsZero: a team-based GRPO, or one keyed
// by agent, gives 0 to every sample of a lone episode, and says so; GRPO
// over individual scores by role does not need a group.
func TestGroupNeedsSaysWhenOneEpisodeIsZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	lone := randomGroup(rng, 1)
	for spec, needs := range map[string]bool{
		"grpo":                    true,
		"rloo":                    true,
		"dr-grpo:base=individual": false,
		"grpo:base=individual,key=scenario+group+agent": true,
		"magrpo":  true,
		"at-grpo": true,
	} {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err, spec)
		assert.Equal(t, needs, credit.NeedsOf(a).Group, spec)
		got, err := allocate(a, lone...)
		require.NoError(t, err)
		zero := true
		for _, v := range got[0] {
			zero = zero && v == 0
		}
		assert.Equal(t, needs, zero, "%s on one episode: all zero exactly when it needs a group", spec)
	}
}
