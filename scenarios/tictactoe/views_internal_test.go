package tictactoe

import (
	"testing"

	"github.com/troupe-rl/troupe/internal/seeds"
)

// TestIncrementalBoardState plays random boards and checks that the mask
// and index the game keeps up to date equal those computed from the board,
// and that every view equals the one rendered from scratch.
func TestIncrementalBoardState(t *testing.T) {
	for ep := range 300 {
		g := &game{empty: 1<<9 - 1, views: moverViews()}
		for turn := range 9 {
			me := turn % 2
			if got, want := legals[g.empty], legalOf(&g.board); len(got) != len(want) || (len(want) > 0 && &got[0] != &want[0]) {
				t.Fatalf("episode %d turn %d: legal %v, want %v", ep, turn, got, want)
			}
			if g.pos != index(&g.board) {
				t.Fatalf("episode %d turn %d: index %d, want %d", ep, turn, g.pos, index(&g.board))
			}
			// The mover's view comes from the table, the other seat's is
			// rendered: both must be what the board shows to each.
			for _, seat := range []int{me, 1 - me} {
				if v := g.Observe(seat); v.Text != viewText(seat, &g.board, legalOf(&g.board)) {
					t.Fatalf("episode %d turn %d: seat %d's view %q", ep, turn, seat, v.Text)
				}
			}
			free := legalOf(&g.board)
			cell, _ := ParseCell(free[seeds.Intn(seeds.Mix(uint64(ep), uint64(turn)), len(free))])
			g.board[cell] = marks[me]
			g.empty &^= 1 << cell
			g.pos += (me + 1) * pow3[8-cell]
		}
	}
}

// TestLineMasks checks the masks Apply tests for a line against the board
// scan, for every set of cells.
func TestLineMasks(t *testing.T) {
	for mask := range uint16(1 << 9) {
		var b board
		for cell := range 9 {
			if mask&(1<<cell) != 0 {
				b[cell] = 'X'
			}
		}
		if lineIn(mask) != b.wins('X') {
			t.Fatalf("mask %09b: lineIn %v, board.wins %v", mask, lineIn(mask), b.wins('X'))
		}
	}
}

// TestViewTableHoldsEveryPositionInPlay checks the table against every
// board: a board with no line, an empty cell and as many X as O marks (O to
// move: one X more) is one play reaches with a move to make, and the table
// holds its mover's view; it holds nothing for every other board.
func TestViewTableHoldsEveryPositionInPlay(t *testing.T) {
	views, held := moverViews(), 0
	for pos := range len(views.spans) {
		var b board
		var count [2]int
		for cell, k := 0, pos; cell < 9; cell++ {
			if d := k / pow3[8-cell] % 3; d > 0 {
				b[cell] = marks[d-1]
				count[d-1]++
			}
		}
		mover := count[0] - count[1]
		inPlay := (mover == 0 || mover == 1) && !b.wins('X') && !b.wins('O') && b.free() > 0
		switch text := views.of(pos); {
		case inPlay && text != viewText(mover, &b, legalOf(&b)):
			t.Fatalf("position %d: the table holds %q", pos, text)
		case !inPlay && text != "":
			t.Fatalf("position %d, not in play: the table holds %q", pos, text)
		case inPlay:
			held++
		}
	}
	if held != 4520 {
		t.Fatalf("the table holds %d positions, want the 4,520 that play reaches with a move to make", held)
	}
}
