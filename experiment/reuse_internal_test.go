package experiment

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A cell of a point finds the Reuse an earlier cell of that point gave
// back, cells playing at once have their own, and once the point's last
// cell is done nothing of the point is kept: its engines and records
// would otherwise stay until the run's end, every point's at once.
func TestAPointsReuseGoesAfterItsLastCell(t *testing.T) {
	var p plan
	p.countCells([]*cellPlan{{point: 0}, {point: 0}, {point: 0}, {point: 1}})
	a, b := p.takeReuse(0), p.takeReuse(0)
	assert.NotSame(t, a, b, "two cells playing at once")
	p.giveReuse(0, a)
	assert.Same(t, a, p.takeReuse(0), "the next cell of the point")
	p.giveReuse(0, a)
	p.giveReuse(0, b)
	assert.Empty(t, p.reuse[0], "the point's cells are all done")
	_, kept := p.reuse[0]
	assert.False(t, kept)
	c := p.takeReuse(1)
	p.giveReuse(1, c)
	assert.Empty(t, p.reuse)
}
