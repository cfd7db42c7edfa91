package credit_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// The coincidences the allocators' documentation states hold on El Farol
// (one role, one turn per patron, the team reward): bit for bit where the
// same operations are done, to rounding where they are rescaled. And the
// ones it does not state do not hold there.
func TestAllocatorsCoincideWhereTheirDocsSay(t *testing.T) {
	const patrons, g = 6, 4
	group := make([]*trajectories.Episode, g)
	for e := range group {
		group[e] = playBar(t, patrons, 3, 2, uint64(40+e)).ep
		group[e].GroupIndex = 0
	}
	values := func(spec string) [][]float64 {
		a, err := credit.Builtin().Parse(spec)
		require.NoError(t, err, spec)
		got, err := allocate(a, group...)
		require.NoError(t, err, spec)
		return got
	}
	magrpo, magrpoStd := values("magrpo"), values("magrpo:std=true")
	assert.Equal(t, magrpoStd, values("at-grpo"), "at-grpo = magrpo:std=true")
	assert.Equal(t, magrpoStd, values("grpo:key=scenario+group+agent"), "grpo keyed by agent = magrpo:std=true")
	assert.Equal(t, magrpo, values("dr-grpo:key=scenario+group+agent"), "dr-grpo keyed by agent = magrpo")
	// The default key pools the N·G patrons, each with its episode's G:
	// the same mean, summed in another order.
	drgrpo, rloo := values("dr-grpo"), values("rloo")
	for e := range rloo {
		for s := range rloo[e] {
			assert.InDelta(t, magrpo[e][s], drgrpo[e][s], 1e-12, "dr-grpo = magrpo")
			assert.InDelta(t, magrpo[e][s]*g/(g-1), rloo[e][s], 1e-12, "rloo = magrpo × G/(G−1)")
		}
	}
	// grpo's default key pools the N·G patrons: its std divides by N·G−1
	// where magrpo:std=true's divides by G−1.
	grpo := values("grpo")
	ratio := math.Sqrt(float64(patrons*g-1) / float64(patrons*(g-1)))
	for e := range grpo {
		for s := range grpo[e] {
			assert.InDelta(t, magrpoStd[e][s]*ratio, grpo[e][s], 1e-5)
		}
	}
	assert.NotEqual(t, magrpoStd, grpo)
}
