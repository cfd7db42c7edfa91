package env

import (
	"fmt"
	"github.com/troupe-rl/troupe/internal/finite"

	"github.com/troupe-rl/troupe/episode"
)

// Rescorer is an optional interface of a Game: a finished game that can
// work out, from its own final state, the score a frozen counterfactual
// replay of its episode would give, without playing it again.
//
// Counterfactual allocators replay an episode once per agent (difference
// rewards, leave-one-out) or once per coalition (Shapley). A game whose
// outcome is a simple function of its moves (El Farol: G = Σ_k φ(x_k), and
// an agent that stays home changes one x_k) can answer such a question in
// O(1) where a replay costs a whole episode.
//
// The engine's Replayer asks Rescore first, and plays the replay only when
// Rescore answers false. It asks only when
//
//   - the counterfactual is frozen (cf.Resimulate false, no cf.Reseed): no
//     policy is asked again, every agent it does not name keeps its
//     recorded actions;
//   - the episode completed by its own rules (not truncated by a limit,
//     failed, aborted, or ended by an invalid answer);
//   - Score has been called on the game.
//
// Rescore must return exactly what that replay would score, bit for bit:
// the team reward, and the per-agent scores when the game has them. It may
// leave Score.Agents nil when the caller wants the team reward only
// (Counterfactual.TeamOnly), which is what makes it O(1). It must answer
// false for anything it cannot work out, including seat indexes out of
// range: the replay then handles them as it always does.
//
// Rescore must not change the game: an episode's counterfactuals are
// rescored concurrently, from several goroutines.
type Rescorer interface {
	Rescore(cf episode.Counterfactual) (score Score, ok bool)
}

// rescore asks game, when it is a Rescorer, for the score of the frozen
// counterfactual cf of its episode, which has seats seats. ok false means
// the caller must replay. A Rescore that panics or answers with the wrong
// number of agent scores is a broken game: the error says so, rather than
// a silent fallback hiding the bug.
func rescore(game Game, info *Info, cf episode.Counterfactual, seats int) (score Score, ok bool, err error) {
	r, can := game.(Rescorer)
	if !can || cf.Resimulate || len(cf.Reseed) > 0 {
		return Score{}, false, nil
	}
	defer func() {
		if p := recover(); p != nil {
			score, ok, err = Score{}, false, fmt.Errorf("%w in Rescore: %v", ErrGamePanic, p)
		}
	}()
	score, ok = r.Rescore(cf)
	if !ok {
		return Score{}, false, nil
	}
	if score.Agents != nil && len(score.Agents) != seats {
		return Score{}, false, fmt.Errorf("%w: Rescore gave %d agent scores for %d seats", ErrBadSeats, len(score.Agents), seats)
	}
	if err := teamScore(info, &score); err != nil {
		return Score{}, false, fmt.Errorf("Rescore: %w", err)
	}
	return score, true, nil
}

// teamScore checks a game's score against its scenario's teams: one
// reward per declared team, each finite, and none without teams; with
// teams it sets Team to their sum (Score's contract).
func teamScore(info *Info, score *Score) error {
	switch n := len(info.Teams); {
	case n == 0 && score.Teams != nil:
		return fmt.Errorf("%w: Score has %d team rewards; scenario %s declares no teams (its reward is Score.Team)", ErrBadScore, len(score.Teams), info.Name)
	case n > 0 && len(score.Teams) != n:
		return fmt.Errorf("%w: Score has %d team rewards for the %d teams %v", ErrBadScore, len(score.Teams), n, info.Teams)
	case n > 0:
		sum := 0.0
		for t, v := range score.Teams {
			if !finite.Is(v) {
				return fmt.Errorf("%w: team %s scored %v", ErrBadScore, info.Teams[t], v)
			}
			sum += v
		}
		score.Team = sum
	}
	return nil
}

// teamsOf describes a scenario's teams for an error message.
func teamsOf(info *Info) string {
	if len(info.Teams) == 0 {
		return "no teams (every seat is on team 0)"
	}
	return fmt.Sprintf("the teams %v (0 to %d)", info.Teams, len(info.Teams)-1)
}

// OneOutRescorer is an optional interface of a Rescorer: it answers at
// once the counterfactuals that each take one seat out, which difference
// rewards and leave-one-out ask for every agent (episode.OneOutReplayer).
// A game that knows what one seat's leaving changes (El Farol: one night's
// attendance) answers them in O(seats) where one Rescore each costs
// O(seats) calls and checks.
type OneOutRescorer interface {
	Rescorer
	// RescoreOneOut writes into team[k] the team reward Rescore gives the
	// counterfactual {Null: {seats[k]}} when null is set, else {Absent:
	// {seats[k]}}, with TeamOnly set: the same value, bit for bit. It
	// reports false when Rescore would answer false for any of them
	// (including a seat out of range). It is called under the conditions
	// Rescore is, and must not change the game either. len(team) is
	// len(seats).
	RescoreOneOut(null bool, seats []int, team []float64) bool
}

// rescoreOneOut asks g for the one-out counterfactuals of seats; a panic
// is false, and the replays one by one then report it (rescore).
func rescoreOneOut(g OneOutRescorer, null bool, seats []int, team []float64) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return g.RescoreOneOut(null, seats, team)
}
