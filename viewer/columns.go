package viewer

import (
	"math"
	"slices"
)

// The index keeps its episodes column by column, each column in the
// fewest bytes that hold its values: a million El Farol episodes cost
// about 20 bytes each (docs/viewer.md), where a struct per episode with
// its strings, slices and maps cost 400.

// ints is a column of integers. A row is kept as its difference from a
// prediction (base, plus the row's number when slope is 1), zigzag
// encoded, in width bytes: the width of the widest difference, so that a
// column of ids counting up costs nothing and one of small counts a byte a
// row. Arithmetic wraps, so every int64 comes back exactly.
type ints struct {
	slope int64 // 0, or 1 for a column that counts up with the row
	base  int64 // the first row's value
	n     int
	width uint8 // bytes per row: 0 (every row is predicted), 1, 2, 4 or 8
	w1    []uint8
	w2    []uint16
	w4    []uint32
	w8    []uint64
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// widthOf is the bytes that hold d.
func widthOf(d uint64) uint8 {
	switch {
	case d == 0:
		return 0
	case d <= math.MaxUint8:
		return 1
	case d <= math.MaxUint16:
		return 2
	case d <= math.MaxUint32:
		return 4
	}
	return 8
}

func (c *ints) add(v int64) {
	if c.n == 0 {
		c.base = v
	}
	d := zigzag(v - c.base - c.slope*int64(c.n))
	if w := widthOf(d); w > c.width {
		c.widen(w)
	}
	switch c.width {
	case 1:
		c.w1 = append(c.w1, uint8(d))
	case 2:
		c.w2 = append(c.w2, uint16(d))
	case 4:
		c.w4 = append(c.w4, uint32(d))
	case 8:
		c.w8 = append(c.w8, d)
	}
	c.n++
}

// diff returns row k's difference from its prediction, encoded.
func (c *ints) diff(k int) uint64 {
	switch c.width {
	case 1:
		return uint64(c.w1[k])
	case 2:
		return uint64(c.w2[k])
	case 4:
		return uint64(c.w4[k])
	case 8:
		return c.w8[k]
	}
	return 0
}

func (c *ints) get(k int) int64 {
	return c.base + c.slope*int64(k) + unzigzag(c.diff(k))
}

// widen rewrites the rows in w bytes each.
func (c *ints) widen(w uint8) {
	room := c.n + c.n/4 + 16
	old := *c
	// The narrower rows are copied: let them go.
	c.w1, c.w2, c.w4 = nil, nil, nil
	switch w {
	case 1:
		c.w1 = widened[uint8](&old, room)
	case 2:
		c.w2 = widened[uint16](&old, room)
	case 4:
		c.w4 = widened[uint32](&old, room)
	case 8:
		c.w8 = widened[uint64](&old, room)
	}
	c.width = w
}

// widened is c's rows in a T each, with room for more.
func widened[T uint8 | uint16 | uint32 | uint64](c *ints, room int) []T {
	s := make([]T, c.n, room)
	for k := range s {
		s[k] = T(c.diff(k))
	}
	return s
}

// seal gives back the room kept for rows to come.
func (c *ints) seal() {
	c.w1, c.w2, c.w4, c.w8 = fit(c.w1), fit(c.w2), fit(c.w4), fit(c.w8)
}

// bytes is what the column's rows cost.
func (c *ints) bytes() int {
	return cap(c.w1) + 2*cap(c.w2) + 4*cap(c.w4) + 8*cap(c.w8)
}

// fit returns s in an array of its length: append leaves a quarter more.
func fit[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// floats is a column of numbers. While it takes at most maxColTable
// distinct values (the outcomes of a discrete game: El Farol's million team
// rewards are a few hundred numbers), a row is the position of its value
// in table, one or two bytes; past that, every row is kept whole. Values
// are kept by their bits: NaN, -0 and the rest come back as they went in.
type floats struct {
	codes ints
	table []float64
	pos   map[uint64]uint32 // value bits → position in table, while adding
	raw   []float64         // every row, once the column has too many values
	whole bool
}

// maxColTable bounds a float column's table: two bytes a row.
const maxColTable = 1 << 16

func (c *floats) add(v float64) {
	if c.whole {
		c.raw = append(c.raw, v)
		return
	}
	bits := math.Float64bits(v)
	p, ok := c.pos[bits]
	if !ok {
		if len(c.table) == maxColTable {
			raw := make([]float64, c.codes.n, c.codes.n+c.codes.n/4+16)
			for k := range raw {
				raw[k] = c.get(k)
			}
			*c = floats{raw: append(raw, v), whole: true}
			return
		}
		if c.pos == nil {
			c.pos = map[uint64]uint32{}
		}
		p = uint32(len(c.table))
		c.pos[bits] = p
		c.table = append(c.table, v)
	}
	c.codes.add(int64(p))
}

func (c *floats) get(k int) float64 {
	if c.whole {
		return c.raw[k]
	}
	return c.table[c.codes.get(k)]
}

func (c *floats) len() int {
	if c.whole {
		return len(c.raw)
	}
	return c.codes.n
}

// seal drops what only adding needs.
func (c *floats) seal() {
	c.pos = nil
	c.codes.seal()
	c.raw = fit(c.raw)
	c.table = fit(c.table)
}

func (c *floats) bytes() int {
	return c.codes.bytes() + 8*cap(c.table) + 8*cap(c.raw)
}

// spanBlock is how many rows of spans share one start kept whole.
const spanBlock = 64

// spans are where rows are in a file, as a start and a length each (bytes,
// or lines): a row starts where the one before ends, plus a gap that is
// nearly always 0 (a blank or bad line between them), so a start is kept
// whole only every spanBlock rows and found from the lengths between.
type spans struct {
	starts []int64
	sizes  ints
	gaps   ints // start minus the previous row's end; 0 at a block's first row
	end    int64
}

func (s *spans) add(start, size int64) {
	if s.sizes.n%spanBlock == 0 {
		s.starts = append(s.starts, start)
		s.gaps.add(0)
	} else {
		s.gaps.add(start - s.end)
	}
	s.sizes.add(size)
	s.end = start + size
}

// at returns row k's start and length.
func (s *spans) at(k int) (start, size int64) {
	b := k - k%spanBlock
	start = s.starts[k/spanBlock]
	for j := b; j < k; j++ {
		start += s.sizes.get(j) + s.gaps.get(j+1)
	}
	return start, s.sizes.get(k)
}

func (s *spans) seal() {
	s.starts = fit(s.starts)
	s.sizes.seal()
	s.gaps.seal()
}

func (s *spans) bytes() int { return 8*cap(s.starts) + s.sizes.bytes() + s.gaps.bytes() }
