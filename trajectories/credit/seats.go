package credit

import (
	"fmt"

	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// Seats is one episode's credit seat by seat: what a learner playing a
// seat reads (an environment's per-agent reward and infos), beside the
// team's and the seat's side's rewards. It is made from a record and the
// credit the allocators gave it (SeatsOf: the credit of the output stage
// that writes the episode, so that no allocator runs twice); it holds no
// reference to either.
//
// Its values are those of trajectories.Credit, which `troupe run
// --episodes-out` writes: Seats[i].Turns[a] lists, in order, the values
// allocator a gave seat i's samples (its emitted turns), exactly.
//
// An episode still in play has no credit: every built-in allocator reads
// the episode's score, which a scenario gives once, at the end
// (env.Game.Score), and the counterfactual ones re-simulate the whole
// episode. A learner's reward is therefore 0 before the end and the
// seat's End credit at it.
type Seats struct {
	// Allocators are the allocators' names (trajectories.Credit's), in
	// order: Turns and End are indexed alike.
	Allocators []string
	// Scored says the episode has an outcome (it completed or was
	// truncated, and was scored). An aborted or failed one has none:
	// its rewards are 0, and its credit what the allocators give such an
	// episode (0, but G = 0 from team and equal-split).
	Scored bool
	// Team is the team reward G (Score.Team: in a scenario with sides,
	// the sum of the sides' rewards).
	Team float64
	// SideNames are the scenario's declared sides (episode.Record.Teams)
	// and Sides their rewards, indexed alike; both nil in a scenario with
	// one team.
	SideNames []string
	Sides     []float64
	// Seats are the episode's seats, in seat order.
	Seats []SeatCredit
}

// SeatCredit is one seat's part of an episode's credit.
type SeatCredit struct {
	Agent, Role string
	// Side is the seat's side (its index in Seats.SideNames, 0 with one
	// team), SideName its name ("" with one team).
	Side     int
	SideName string
	// Reward is its side's reward G_T, G with one team
	// (episode.Record.SeatReward): what the team allocator gives it.
	Reward float64
	// Score is its own score from the scenario, when HasScore
	// (episode.Record.AgentScore).
	Score    float64
	HasScore bool
	// Samples are what its samples are drawn from (episode.SampleRef:
	// its emitted turns, in order of play; several per tree-sampled
	// turn) and Steps those turns' steps.
	Samples []episode.SampleRef
	Steps   []int
	// Turns[a][k] is allocator a's value for the seat's k-th sample.
	Turns [][]float64
	// End[a] is allocator a's credit of the seat: its last sample's
	// value, which is every sample's for an allocator that values an
	// agent's turns alike (all but discount, at-grpo, a group key with
	// turn, and MAGRPO on tree-sampled turns); discount gives the last
	// turn its least discounted value (undiscounted with unit=turn). nil
	// when the seat has no sample.
	End []float64
}

// ScoreOr returns the seat's own score, else its side's reward: what the
// environment server has always rewarded a seat with (the scenario's own
// verdict on it).
func (s *SeatCredit) ScoreOr() float64 {
	if s.HasScore {
		return s.Score
	}
	return s.Reward
}

// SeatsOf splits c, the credit the allocators gave rec (nil: none), seat by
// seat. A credit whose values do not match rec's samples is an error
// wrapping ErrBadEpisode.
func SeatsOf(rec *episode.Record, c *trajectories.Credit) (*Seats, error) {
	scored := rec.Status == protocol.StatusCompleted || rec.Status == protocol.StatusTruncated
	out := &Seats{Scored: scored, Team: rec.Score.Team, Seats: make([]SeatCredit, len(rec.Seats))}
	if rec.Teams != nil {
		out.SideNames = append([]string(nil), rec.Teams...)
		out.Sides = make([]float64, len(rec.Teams))
		for t := range rec.Teams {
			out.Sides[t] = rec.Score.Of(t)
		}
	}
	for i, seat := range rec.Seats {
		sc := &out.Seats[i]
		sc.Agent, sc.Role, sc.Side, sc.SideName = seat.ID, seat.Role, seat.Team, rec.TeamName(seat.Team)
		sc.Reward = rec.SeatReward(i)
		sc.Score, sc.HasScore = rec.AgentScore(i)
	}
	refs := rec.SampleRefs(nil)
	// Every seat's slices are carved from a few arrays, one of each kind:
	// an environment splits every episode it ends.
	count := make([]int, len(rec.Seats))
	for _, ref := range refs {
		i := rec.Turns[ref.Turn].Seat
		if i < 0 || i >= len(rec.Seats) {
			return nil, fmt.Errorf("%w: episode %d of %s: turn %d names seat %d of %d", ErrBadEpisode, rec.Index, rec.Scenario, ref.Turn, i, len(rec.Seats))
		}
		count[i]++
	}
	na := 0
	if c != nil {
		na = len(c.Values)
		for a, vals := range c.Values {
			if len(vals) != len(refs) {
				return nil, fmt.Errorf("%w: episode %d of %s: allocator %s gave %d values to %d samples", ErrBadEpisode, rec.Index, rec.Scenario, c.Allocators[a], len(vals), len(refs))
			}
		}
		out.Allocators = append([]string(nil), c.Allocators...)
	}
	samples, steps := make([]episode.SampleRef, len(refs)), make([]int, len(refs))
	values, ends := make([]float64, na*len(refs)), make([]float64, na*len(rec.Seats))
	turns := make([][]float64, na*len(rec.Seats))
	off := 0
	for i := range out.Seats {
		sc, n := &out.Seats[i], count[i]
		if n > 0 {
			sc.Samples, sc.Steps = samples[off:off:off+n], steps[off:off:off+n]
		}
		if na > 0 {
			sc.Turns = turns[i*na : (i+1)*na : (i+1)*na]
			for a := range sc.Turns {
				at := a*len(refs) + off
				sc.Turns[a] = values[at : at : at+n]
			}
		}
		off += n
	}
	for k, ref := range refs {
		t := &rec.Turns[ref.Turn]
		sc := &out.Seats[t.Seat]
		sc.Samples = append(sc.Samples, ref)
		sc.Steps = append(sc.Steps, t.Step)
		for a := range na {
			sc.Turns[a] = append(sc.Turns[a], c.Values[a][k])
		}
	}
	if na == 0 {
		return out, nil
	}
	for i := range out.Seats {
		sc := &out.Seats[i]
		if len(sc.Samples) == 0 {
			continue
		}
		sc.End = ends[i*na : (i+1)*na : (i+1)*na]
		for a := range sc.End {
			sc.End[a] = sc.Turns[a][len(sc.Turns[a])-1]
		}
	}
	return out, nil
}

// Index returns the position of the allocator named name in s.Allocators,
// or -1.
func (s *Seats) Index(name string) int {
	for a, n := range s.Allocators {
		if n == name {
			return a
		}
	}
	return -1
}
