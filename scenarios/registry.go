// Package scenarios holds troupe's built-in scenarios and the registry that
// names them. Each scenario lives in its own subpackage and uses only the
// public API of env and agents, as a user's scenario would.
package scenarios

import (
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/bargain"
	"github.com/troupe-rl/troupe/scenarios/blotto"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/debate"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
	"github.com/troupe-rl/troupe/scenarios/negotiation"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/scenarios/werewolf"
)

// Builtin returns a new registry of the built-in scenarios (List). Each
// call builds fresh scenario values, so registries never share state.
func Builtin() *env.Registry {
	r, err := env.NewRegistry(List()...)
	if err != nil {
		// The built-in definitions are fixed at compile time; the tests
		// check them, so this cannot happen in a released binary.
		panic(err)
	}
	return r
}

// List returns new values of the built-in scenarios, in name order:
// bargain (two teams bargain over a pie, general-sum), blotto (Colonel
// Blotto by teams, zero-sum), committee (informed and uninformed advisers: null players), debate (a
// solver and a critic on a verifiable puzzle), elfarol (the El Farol bar,
// for credit assignment), negotiation (Deal or No Deal), signal (a Lewis
// signalling game), tictactoe (zero-sum self-play) and werewolf (hidden
// roles, two teams). A program that adds
// scenarios of its own registers them beside these:
// env.NewRegistry(append(scenarios.List(), mine)...).
func List() []env.Scenario {
	return []env.Scenario{
		bargain.New(),
		blotto.New(),
		committee.New(),
		debate.New(),
		elfarol.New(),
		negotiation.New(),
		signal.New(),
		tictactoe.New(),
		werewolf.New(),
	}
}
