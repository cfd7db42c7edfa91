package credit_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// SeatsOf splits, seat by seat, exactly the credit trajectories.Allocate
// gives the episode's samples, on both sides of a two-sided game, and its
// End is each seat's last sample's value.
func TestSeatsOfSplitsTheEpisodesCredit(t *testing.T) {
	sc := bargain.New()
	p, err := sc.Info().ParseParams(map[string]string{"rounds": "3", "pie": "12", "members": "2"})
	require.NoError(t, err)
	// Round 0 asks too much (no deal); round 1 strikes one.
	demands := map[string][]string{"east-0": {"9", "3"}, "east-1": {"9", "1"}, "west-0": {"9", "2"}, "west-1": {"9", "0"}}
	policy := func(s env.Seat) agents.Policy { return agents.Replay(demands[s.ID]...) }
	rec := env.RunEpisode(context.Background(), env.Setup{Play: env.Play{Scenario: sc, Params: p, Policy: policy}})
	require.Equal(t, "completed", string(rec.Status), rec.Err)
	var allocs []trajectories.Allocator
	for _, spec := range []string{"team", "individual", "difference", "shapley", "discount:gamma=0.5"} {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err)
		allocs = append(allocs, a)
	}
	ep := trajectories.NewEpisode(rec)
	require.NoError(t, trajectories.Allocate(t.Context(), []*trajectories.Episode{ep}, allocs, trajectories.RewardScalar))
	got, err := credit.SeatsOf(rec, ep.Credit)
	require.NoError(t, err)
	assert.Equal(t, ep.Credit.Allocators, got.Allocators)
	assert.True(t, got.Scored)
	assert.Equal(t, []string{"east", "west"}, got.SideNames)
	assert.Equal(t, rec.Score.Teams, got.Sides)
	assert.Equal(t, rec.Score.Team, got.Team)
	require.Len(t, got.Seats, 4)
	for k, s := range ep.Samples {
		i := 0
		for i < len(rec.Seats) && rec.Seats[i].ID != s.Metadata.Agent {
			i++
		}
		seat := &got.Seats[i]
		n := 0 // the sample's place among its seat's
		for _, o := range ep.Samples[:k] {
			if o.Metadata.Agent == s.Metadata.Agent {
				n++
			}
		}
		assert.Equal(t, s.Metadata.Step, seat.Steps[n])
		for a := range allocs {
			assert.Equal(t, ep.Credit.Values[a][k], seat.Turns[a][n], "%s, sample %d of %s", allocs[a].Name(), n, seat.Agent)
		}
	}
	for i, seat := range got.Seats {
		assert.Equal(t, rec.SeatReward(i), seat.Reward)
		assert.Equal(t, rec.Seats[i].ID, seat.Agent)
		assert.Len(t, seat.Turns[0], 2, "two rounds, two turns")
		for a := range allocs {
			assert.Equal(t, seat.Turns[a][1], seat.End[a])
		}
		assert.Equal(t, seat.End[0], seat.Reward, "team: the side's reward")
		assert.Equal(t, seat.End[1], seat.ScoreOr(), "individual: the seat's score")
		assert.Equal(t, seat.End[0], seat.End[4], "discount keeps the last turn's value whole")
		assert.Equal(t, seat.End[0]/2, seat.Turns[4][0])
	}
	assert.Equal(t, "east", got.Seats[0].SideName)
	assert.Equal(t, 1, got.Seats[3].Side)
	assert.Equal(t, 0, got.Index("team"))
	assert.Equal(t, -1, got.Index("rae"))
}

// A credit that does not fit the record's samples is refused.
func TestSeatsOfRefusesCreditOfAnotherEpisode(t *testing.T) {
	rec := &episode.Record{Seats: []episode.Seat{{ID: "a"}}, Turns: []episode.Turn{{Seat: 0, Emit: true}}}
	_, err := credit.SeatsOf(rec, &trajectories.Credit{Allocators: []string{"team"}, Values: [][]float64{{1, 2}}})
	require.ErrorIs(t, err, credit.ErrBadEpisode)
	s, err := credit.SeatsOf(rec, nil)
	require.NoError(t, err)
	assert.False(t, s.Scored)
	assert.Nil(t, s.Seats[0].End)
}

// BenchmarkSeatsOf: splitting an El Farol episode's credit (100 patrons, 7
// nights, team and difference) by seat, against the allocation itself.
func BenchmarkSeatsOf(b *testing.B) {
	var replays atomic.Int64
	ep := benchEpisodes(b, elfarol.New(), map[string]string{"agents": "100", "nights": "7"}, nil, 1, &replays)[0]
	allocs := []trajectories.Allocator{credit.Team{}, credit.Difference{}}
	b.Run("allocate", func(b *testing.B) {
		for b.Loop() {
			e := trajectories.RecordOnly(&ep.Record)
			if err := trajectories.Allocate(b.Context(), []*trajectories.Episode{e}, allocs, trajectories.RewardScalar); err != nil {
				b.Fatal(err)
			}
		}
	})
	e := trajectories.RecordOnly(&ep.Record)
	if err := trajectories.Allocate(b.Context(), []*trajectories.Episode{e}, allocs, trajectories.RewardScalar); err != nil {
		b.Fatal(err)
	}
	b.Run("split", func(b *testing.B) {
		for b.Loop() {
			if _, err := credit.SeatsOf(&ep.Record, e.Credit); err != nil {
				b.Fatal(err)
			}
		}
	})
}
