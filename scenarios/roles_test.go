package scenarios_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents/agentstest"
	"github.com/troupe-rl/troupe/scenarios"
)

// TestBuiltinRolesAgreeWithLooplab drives every role of every built-in
// scenario through every state and event, under synthetic callbacks on
// every key looplab knows (passing, each failing in turn, short forms,
// random mixes), in troupe's compiled machine and in a looplab *fsm.FSM
// built from the same declaration: same final state, same error class,
// same callback trace (agentstest.Verify).
func TestBuiltinRolesAgreeWithLooplab(t *testing.T) {
	reg := scenarios.Builtin()
	roles := 0
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		require.NoError(t, err)
		for _, r := range sc.Info().Roles {
			t.Run(name+"/"+r.Name, func(t *testing.T) {
				agentstest.Check(t, r)
				assert.NotEmpty(t, r.Acting, "built-in roles say in which states their agents act")
			})
			roles++
		}
	}
	assert.GreaterOrEqual(t, roles, 10)
}
