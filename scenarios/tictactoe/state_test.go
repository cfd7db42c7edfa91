package tictactoe_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// TestStatesReplayTheRecord: env.States replays a recorded game from its
// own moves and draws the board after the start and every step; an
// illegal move is named.
func TestStatesReplayTheRecord(t *testing.T) {
	ep := play(t, nil, 0, agents.Replay("a1", "b1", "c1"), agents.Replay("a2", "b2"), env.Limits{})
	states, err := env.States(context.Background(), tictactoe.New(), &ep.Record)
	require.NoError(t, err)
	want := []string{
		"   a b c\n1  . . .\n2  . . .\n3  . . .\nx (X) to move\n",
		"   a b c\n1  X . .\n2  . . .\n3  . . .\no (O) to move\n",
		"   a b c\n1  X . .\n2  O . .\n3  . . .\nx (X) to move\n",
		"   a b c\n1  X X .\n2  O . .\n3  . . .\no (O) to move\n",
		"   a b c\n1  X X .\n2  O O .\n3  . . .\nx (X) to move\n",
		"   a b c\n1  X X X\n2  O O .\n3  . . .\nx (X) wins\n",
	}
	require.Len(t, states, len(want))
	for k, s := range states {
		assert.Equal(t, k, s.Step)
		assert.Equal(t, want[k], s.State, "after step %d", k)
	}

	ep = play(t, nil, 0, agents.Replay("a1", "a1"), agents.Replay("a1"), env.Limits{})
	states, err = env.States(context.Background(), tictactoe.New(), &ep.Record)
	require.NoError(t, err)
	assert.Contains(t, states[len(states)-1].State, "o (O) moved illegally")

	// A record whose moves this game does not end the same way: said so.
	rec := ep.Record
	rec.Steps++
	_, err = env.States(context.Background(), tictactoe.New(), &rec)
	assert.ErrorContains(t, err, "the replay played 2 steps, the record 3")
}
