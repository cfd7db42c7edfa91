package env_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/scenarios/werewolf"
)

// hiddenSetup is an episode of a scenario with hidden state, seeded seed.
func hiddenSetup(t testing.TB, sc env.Scenario, params map[string]string, seed uint64) env.Setup {
	t.Helper()
	p, err := sc.Info().ParseParams(params)
	require.NoError(t, err)
	return env.Setup{Play: env.Play{Scenario: sc, Params: p}, Seed: seed, PolicySeed: seed + 1}
}

// pendingOf is seat's entry of ep's pending seats, and whether it has one.
func pendingOf(ep *env.Episode, seat int) (env.PendingSeat, bool) {
	for _, o := range ep.Pending() {
		if o.Seat == seat {
			return o, true
		}
	}
	return env.PendingSeat{}, false
}

// An information-set fork never changes what the forking seat observes:
// at every decision point of many episodes of each scenario with hidden
// state, the seat's observation (view, legal actions, inbox, seen
// messages, state, turn, seed) is the same in the fork as in the original;
// the same seed gives the same fork; a Fork of the fork replays its
// re-draw; and the re-draws do change what the seat has not observed.
func TestForkForKeepsWhatTheSeatObserved(t *testing.T) {
	for _, c := range []struct {
		name     string
		sc       env.Scenario
		params   map[string]string
		episodes int
	}{
		{"werewolf", werewolf.New(), map[string]string{"players": "7", "wolves": "2"}, 25},
		{"committee", committee.New(), map[string]string{"informed": "2", "uninformed": "3", "options": "5"}, 60},
		{"signal", signal.New(), nil, 60},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forks, redrawn := 0, 0
			for seed := range uint64(c.episodes) {
				setup := hiddenSetup(t, c.sc, c.params, seed)
				ep, err := env.NewEpisode(setup)
				require.NoError(t, err)
				rng := rand.New(rand.NewPCG(seed, 7))
				for !ep.Done() {
					pending := ep.Pending()
					// Fork for every pending seat, at the step's start and
					// again once some seats have moved.
					for k, o := range pending {
						forks++
						fseed := seed<<8 | uint64(forks)
						f, err := ep.ForkFor(o.Seat, fseed)
						require.NoError(t, err)
						fo, ok := pendingOf(f, o.Seat)
						require.True(t, ok, "seed %d step %d: seat %d acts in the fork too", seed, ep.Time(), o.Seat)
						require.Equal(t, o, fo, "seed %d step %d: seat %d observes the same in the fork", seed, ep.Time(), o.Seat)

						again, err := ep.ForkFor(o.Seat, fseed)
						require.NoError(t, err)
						require.Equal(t, f.Seats(), again.Seats(), "the same seed, the same re-draw")
						require.Equal(t, f.Pending(), again.Pending())
						copied, err := f.Fork()
						require.NoError(t, err)
						require.Equal(t, f.Seats(), copied.Seats(), "a fork of the fork keeps its re-draw")
						require.Equal(t, f.Pending(), copied.Pending())

						// Play the fork and a perfect-information copy out
						// with the same moves: their records differ where
						// the re-draw changed the hidden state.
						truth, err := ep.Fork()
						require.NoError(t, err)
						if differs(t, f, truth, copied, rand.New(rand.NewPCG(fseed, 9))) {
							redrawn++
						}
						if k == 0 && len(pending) > 1 {
							// The first seat moves now: the others are
							// forked mid-step.
							require.NoError(t, ep.Act(o.Seat, agents.Action{Text: o.Legal[rng.IntN(len(o.Legal))]}))
						}
					}
					for _, o := range ep.Pending() {
						require.NoError(t, ep.Act(o.Seat, agents.Action{Text: o.Legal[rng.IntN(len(o.Legal))]}))
					}
				}
			}
			t.Logf("%d forks, %d re-drew what the seat had not observed", forks, redrawn)
			assert.Greater(t, redrawn, forks/10, "the re-draws change the hidden state")
		})
	}
}

// differs plays f (an information-set fork), truth (a perfect-information
// fork of the same point) and copied (a Fork of f) to their ends with the
// same moves, checks that copied's record is f's, and reports whether f's
// differs from truth's: its seats' roles, or its outcome.
func differs(t *testing.T, f, truth, copied *env.Episode, rng *rand.Rand) bool {
	t.Helper()
	for steps := 0; !f.Done(); steps++ {
		require.Less(t, steps, 1000)
		for _, o := range f.Pending() {
			a := agents.Action{Text: o.Legal[rng.IntN(len(o.Legal))]}
			require.NoError(t, f.Act(o.Seat, a))
			require.NoError(t, copied.Act(o.Seat, a))
			// The true game may wait for other seats (the re-dealt
			// wolves hunt at night): its moves are given where it can
			// take them.
			_ = truth.Act(o.Seat, a)
		}
	}
	require.True(t, copied.Done())
	assert.Equal(t, encode(t, f.Record()), encode(t, copied.Record()), "a Fork of the fork plays as the fork")
	if !truth.Done() {
		return true
	}
	a, b := f.Record(), truth.Record()
	if !assert.ObjectsAreEqual(a.Seats, b.Seats) || !assert.ObjectsAreEqual(a.Score, b.Score) {
		return true
	}
	return encode(t, a) != encode(t, b)
}

// A scenario that declares no hidden state has no information-set fork.
func TestForkForNeedsHiddenState(t *testing.T) {
	ep, err := env.NewEpisode(setupOf(t, "tictactoe", 0))
	require.NoError(t, err)
	_, err = ep.ForkFor(0, 1)
	require.ErrorIs(t, err, env.ErrNoHiddenState)
	playOut(t, ep, "")
}

// A committee decider that peeks: it forks once per option, decides that
// option in the fork and takes the first that scored. With Fork, a
// perfect-information copy, it is right every time; with ForkFor from its
// own seat, it is right no more often than chance, 1 in 5.
func TestPeekingDeciderLearnsNothingFromInformationSetForks(t *testing.T) {
	sc := committee.New()
	params := map[string]string{"informed": "1", "uninformed": "2", "options": "5"}
	const options = 5
	decide := func(t *testing.T, seed uint64, fork func(ep *env.Episode, seat int, j uint64) (*env.Episode, error)) bool {
		ep, err := env.NewEpisode(hiddenSetup(t, sc, params, seed))
		require.NoError(t, err)
		for !ep.Done() {
			for _, o := range ep.Pending() {
				if o.Role != committee.RoleDecider {
					// Advisers abstain: the decider has no advice.
					require.NoError(t, ep.Act(o.Seat, agents.Action{Text: committee.NullAction}))
					continue
				}
				pick := o.Legal[0]
				for j, option := range o.Legal {
					f, err := fork(ep, o.Seat, uint64(j))
					require.NoError(t, err)
					require.NoError(t, f.Act(o.Seat, agents.Action{Text: option}))
					require.True(t, f.Done())
					if f.Record().Score.Team == 1 {
						pick = option
						break
					}
				}
				require.NoError(t, ep.Act(o.Seat, agents.Action{Text: pick}))
			}
		}
		return ep.Record().Score.Team == 1
	}

	perfect := 0
	for seed := range uint64(40) {
		if decide(t, seed, func(ep *env.Episode, _ int, _ uint64) (*env.Episode, error) { return ep.Fork() }) {
			perfect++
		}
	}
	assert.Equal(t, 40, perfect, "Fork sees the right option")

	const n = 600
	bound := binomialBound(n, 1.0/options, 1e-6)
	wins := 0
	for seed := range uint64(n) {
		if decide(t, 1000+seed, func(ep *env.Episode, seat int, j uint64) (*env.Episode, error) {
			return ep.ForkFor(seat, seed*options+j)
		}) {
			wins++
		}
	}
	t.Logf("information-set forks: %d right of %d (chance %d; a false failure needs %d or more, p < 1e-6)", wins, n, n/options, bound)
	assert.Less(t, wins, bound, "the decider must win no more often than chance")
	assert.GreaterOrEqual(t, perfect*n/40, bound, "the bound fails a peeking decider")
}

// binomialBound is the least k with P(X >= k) < p for X ~ Binomial(n, q).
func binomialBound(n int, q, p float64) int {
	tail := 0.0
	for k := n; k >= 0; k-- {
		lg, _ := math.Lgamma(float64(n + 1))
		lk, _ := math.Lgamma(float64(k + 1))
		lnk, _ := math.Lgamma(float64(n - k + 1))
		tail += math.Exp(lg - lk - lnk + float64(k)*math.Log(q) + float64(n-k)*math.Log1p(-q))
		if tail >= p {
			return k + 1
		}
	}
	return 0
}
