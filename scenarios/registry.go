// Package scenarios holds troupe's built-in scenarios and the registry that
// names them. Each scenario lives in its own subpackage and uses only the
// public API of env and agents, as a user's scenario would.
package scenarios

import (
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// Builtin returns a new registry of the built-in scenarios. Each call builds
// fresh scenario values, so registries never share state.
func Builtin() *env.Registry {
	r, err := env.NewRegistry(
		elfarol.New(),
	)
	if err != nil {
		// The built-in definitions are fixed at compile time; the tests
		// check them, so this cannot happen in a released binary.
		panic(err)
	}
	return r
}
