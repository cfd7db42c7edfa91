package env_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/protocol"
)

// playInTurn plays n episodes on x one after the other, giving each record
// back once read, and returns what each one's seats played and scored.
func playInTurn(t *testing.T, x *env.LocalExecutor, n int) []string {
	t.Helper()
	got, err := played(x, n)
	require.NoError(t, err)
	return got
}

// played is playInTurn for any goroutine: an episode that did not
// complete is its error.
func played(x *env.LocalExecutor, n int) ([]string, error) {
	var got []string
	for i := range n {
		rec := x.Execute(context.Background(), env.Request{Seed: uint64(i), PolicySeed: uint64(100 + i), Index: int64(i)})
		if rec.Status != protocol.StatusCompleted {
			return got, fmt.Errorf("episode %d %s: %s", i, rec.Status, rec.Err)
		}
		s := strconv.FormatFloat(rec.Score.Team, 'g', -1, 64) + ":"
		for _, tr := range rec.Turns {
			s += tr.Action
		}
		got = append(got, s)
		x.Recycle(rec)
	}
	return got, nil
}

func countingParams(t *testing.T, sc env.Scenario, turns int) env.Params {
	t.Helper()
	p, err := sc.Info().ParseParams(map[string]string{"turns": strconv.Itoa(turns)})
	require.NoError(t, err)
	return p
}

// Executors that share a Reuse, one after another, play what each would
// have played alone, with its own parameters and policies (an engine
// another executor used asks the new one's Policy again), and a fresh
// executor finds the engine, the records and the games the one before it
// warmed: it allocates next to nothing.
func TestExecutorsSharingAReusePlayAsAlone(t *testing.T) {
	sc := renewedCounting{countingScenario()}
	three := agents.PolicyFunc(func(context.Context, *agents.Observation) (agents.Action, error) {
		return agents.Action{Text: "3"}, nil
	})
	executors := func(reuse *env.Reuse) []*env.LocalExecutor {
		return []*env.LocalExecutor{
			{Play: env.Play{Scenario: sc, Params: countingParams(t, sc, 10), Policy: env.SamePolicy(pick)}, Reuse: reuse},
			{Play: env.Play{Scenario: sc, Params: countingParams(t, sc, 20), Policy: env.SamePolicy(three)}, Reuse: reuse},
			{Play: env.Play{Scenario: sc, Params: countingParams(t, sc, 10), Policy: env.SamePolicy(pick)}, Reuse: reuse},
		}
	}
	reuse := &env.Reuse{}
	alone, shared := executors(nil), executors(reuse)
	for k := range alone {
		assert.Equal(t, playInTurn(t, alone[k], 20), playInTurn(t, shared[k], 20), "executor %d", k)
	}
	assert.Equal(t, "20:"+strings.Repeat("3", 20), playInTurn(t, shared[1], 1)[0], "the second executor's policy plays")

	if testing.CoverMode() != "" {
		return // coverage instrumentation counts differently
	}
	p := countingParams(t, sc, 10)
	// Played and given back, nothing else: what allocates is the executor.
	recycled := func(reuse *env.Reuse, n int) float64 {
		return testing.AllocsPerRun(20, func() {
			x := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Reuse: reuse}
			for i := range n {
				x.Recycle(x.Execute(context.Background(), env.Request{Seed: uint64(i)}))
			}
		})
	}
	fresh, warm5, warm10 := recycled(nil, 5), recycled(reuse, 5), recycled(reuse, 10)
	t.Logf("allocations of an executor playing 5 episodes: %v alone, %v sharing a warm Reuse", fresh, warm5)
	assert.Equal(t, warm5, warm10, "an executor sharing a warm Reuse allocates nothing per episode")
	assert.LessOrEqual(t, warm5, 3.0, "a few for the executor and its PolicyFor")
	assert.Greater(t, fresh, 20.0, "alone, an executor makes its engine, records and games")
}

// otherCounting is another scenario of the counting game, renewed too,
// whose games are of a type of its own: given a game of another scenario,
// its Renew would panic.
type otherCounting struct{ env.Scenario }

type otherGame struct{ *counting }

func newOtherCounting() otherCounting {
	base := countingScenario()
	info := *base.Info()
	info.Name = "other-counting"
	return otherCounting{env.Define(&info, func(p env.Params, seed uint64) (env.Game, error) {
		g, err := base.New(p, seed)
		return otherGame{g.(*counting)}, err
	})}
}

func (s otherCounting) Renew(old env.Game, p env.Params, seed uint64) (env.Game, error) {
	g := old.(otherGame) // panics on another scenario's game
	*g.counting = counting{seats: countingSeats, turns: p.Int("turns")}
	return g, nil
}

// Executors of two scenarios that share a Reuse trade records, but a
// Renewer renews only its own scenario's games.
func TestAReuseRenewsOnlyTheScenariosOwnGames(t *testing.T) {
	reuse := &env.Reuse{}
	a, b := renewedCounting{countingScenario()}, newOtherCounting()
	for range 3 {
		playInTurn(t, &env.LocalExecutor{Play: env.Play{Scenario: a, Params: countingParams(t, a, 10), Policy: env.SamePolicy(pick)}, Reuse: reuse}, 5)
		playInTurn(t, &env.LocalExecutor{Play: env.Play{Scenario: b, Params: countingParams(t, b, 10), Policy: env.SamePolicy(pick)}, Reuse: reuse}, 5)
	}
}

// A record goes back only to the Reuse it came from.
func TestARecordGoesBackOnlyWhereItCameFrom(t *testing.T) {
	sc := renewedCounting{countingScenario()}
	p := countingParams(t, sc, 10)
	x := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Reuse: &env.Reuse{}}
	y := &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Reuse: &env.Reuse{}}
	rec := x.Execute(context.Background(), env.Request{Seed: 1})
	y.Recycle(rec)
	assert.NotNil(t, rec.Replay, "y took a record of x's Reuse")
	x.Recycle(rec)
	assert.Nil(t, rec.Replay, "x did not take its own record back")
}

// Executors that share a Reuse may run at once: they trade engines and
// records, and each still plays what it plays alone (go test -race checks
// the sharing).
func TestAReuseIsSafeForConcurrentUse(t *testing.T) {
	sc := renewedCounting{countingScenario()}
	reuse := &env.Reuse{}
	want := playInTurn(t, &env.LocalExecutor{Play: env.Play{Scenario: sc, Params: countingParams(t, sc, 10), Policy: env.SamePolicy(pick)}}, 50)
	p := countingParams(t, sc, 10)
	got, errs := make([][]string, 4), make([]error, 4)
	var wg sync.WaitGroup
	for k := range got {
		wg.Go(func() {
			got[k], errs[k] = played(&env.LocalExecutor{Play: env.Play{Scenario: sc, Params: p, Policy: env.SamePolicy(pick)}, Reuse: reuse}, 50)
		})
	}
	wg.Wait()
	for k := range got {
		require.NoError(t, errs[k], "executor %d", k)
		assert.Equal(t, want, got[k], "executor %d", k)
	}
}
