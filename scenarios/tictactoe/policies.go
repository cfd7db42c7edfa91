package tictactoe

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/troupe-rl/troupe/agents"
)

// ErrUnreadable is returned by the named policies when an observation is
// not one this scenario produces (no legal cells, an opponent move on an
// empty cell, an unknown role).
var ErrUnreadable = errors.New("tictactoe: observation does not describe a board")

// readBoard rebuilds the board from what an agent observes, the way a
// player would: the occupied cells are those missing from the legal list,
// and the opponent's are those its move messages named; the rest are mine.
func readBoard(obs *agents.Observation) (b board, me byte, err error) {
	switch obs.Role {
	case RoleX:
		me = 'X'
	case RoleO:
		me = 'O'
	default:
		return b, 0, fmt.Errorf("%w: role %q", ErrUnreadable, obs.Role)
	}
	if len(obs.Legal) == 0 {
		return b, 0, fmt.Errorf("%w: no legal cells", ErrUnreadable)
	}
	opp := byte('X' + 'O' - me)
	for i := range b {
		b[i] = me
	}
	for _, name := range obs.Legal {
		i, ok := ParseCell(name)
		if !ok {
			return b, 0, fmt.Errorf("%w: legal action %q is not a cell", ErrUnreadable, name)
		}
		b[i] = 0
	}
	for _, m := range obs.Seen {
		if m.Kind != KindMove || m.From == obs.Agent {
			continue
		}
		i, ok := ParseCell(m.Payload)
		if !ok || b[i] == 0 {
			return b, 0, fmt.Errorf("%w: opponent move %q is not an occupied cell", ErrUnreadable, m.Payload)
		}
		b[i] = opp
	}
	// X moves first, so X is to move exactly when the counts are equal.
	xs, os := bytes.Count(b[:], []byte{'X'}), bytes.Count(b[:], []byte{'O'})
	if (me == 'X') != (xs == os) || xs-os < 0 || xs-os > 1 || b.wins('X') || b.wins('O') {
		return b, 0, fmt.Errorf("%w: %d X and %d O marks with %c to move", ErrUnreadable, xs, os, me)
	}
	return b, me, nil
}

// choose adapts a board-level choice to a Policy. pick returns an empty
// cell, or -1 when it has no answer for the position.
func choose(pick func(b *board, me byte) int) agents.Policy {
	return agents.PolicyFunc(func(_ context.Context, obs *agents.Observation) (agents.Action, error) {
		b, me, err := readBoard(obs)
		if err == nil {
			if i := pick(&b, me); i >= 0 && b[i] == 0 {
				return agents.Action{Text: CellName(i)}, nil
			}
			err = fmt.Errorf("%w: no move for this position", ErrUnreadable)
		}
		return agents.Action{}, fmt.Errorf("agent %q turn %d: %w", obs.Agent, obs.Turn, err)
	})
}

// Minimax returns the perfect player. It solves the whole game once, when
// it is made (5,478 reachable positions, well under a millisecond), and then
// only looks moves up, so it is cheap per turn and safe for concurrent use.
// Among equally valued moves it prefers the quickest win (or the slowest
// loss), then the first cell in a1..c3 order.
func Minimax() agents.Policy {
	s := newSolver()
	return choose(func(b *board, _ byte) int { return s.best(b) })
}

// solver memoises negamax over positions, indexed in base 3 (0 empty, 1 X,
// 2 O). Once built it is read-only.
type solver struct {
	solved [19683]bool
	move   [19683]int8
	value  [19683]int8
}

func newSolver() *solver {
	s := &solver{}
	var b board
	s.solve(&b, 'X')
	return s
}

func index(b *board) int {
	k := 0
	for _, c := range b {
		k *= 3
		switch c {
		case 'X':
			k++
		case 'O':
			k += 2
		}
	}
	return k
}

// solve returns the value of b for me, to move: 1 + the empty cells left
// after a win (quicker wins are worth more), 0 for a draw, negative for a
// loss. b must have an empty cell and no line.
func (s *solver) solve(b *board, me byte) int8 {
	k := index(b)
	if s.solved[k] {
		return s.value[k]
	}
	opp := byte('X' + 'O' - me)
	best, move := int8(-100), int8(-1)
	for i := range b {
		if b[i] != 0 {
			continue
		}
		b[i] = me
		var v int8
		switch left := int8(b.free()); {
		case b.wins(me):
			v = 1 + left
		case left == 0:
			v = 0
		default:
			v = -s.solve(b, opp)
		}
		b[i] = 0
		if v > best {
			best, move = v, int8(i)
		}
	}
	s.solved[k], s.move[k], s.value[k] = true, move, best
	return best
}

// best returns the solved move for b, or -1 for a position no legal game
// reaches (readBoard's checks make that impossible for real observations).
func (s *solver) best(b *board) int {
	if k := index(b); s.solved[k] {
		return int(s.move[k])
	}
	return -1
}

// CenterFirst returns the classic heuristic player: win now if possible,
// otherwise block the opponent's win, otherwise take the centre, then the
// first free corner, then the first free side.
func CenterFirst() agents.Policy {
	return choose(func(b *board, me byte) int {
		opp := byte('X' + 'O' - me)
		for _, mark := range []byte{me, opp} {
			if i := completing(b, mark); i >= 0 {
				return i
			}
		}
		for _, i := range []int{4, 0, 2, 6, 8, 1, 3, 5, 7} {
			if b[i] == 0 {
				return i
			}
		}
		return -1 // unreachable: readBoard saw an empty cell
	})
}

// completing returns the first empty cell that gives mark a line, or -1.
func completing(b *board, mark byte) int {
	for i := range b {
		if b[i] != 0 {
			continue
		}
		b[i] = mark
		won := b.wins(mark)
		b[i] = 0
		if won {
			return i
		}
	}
	return -1
}
