package experiment

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/learn"
	"github.com/troupe-rl/troupe/scenarios/committee"
	"github.com/troupe-rl/troupe/scenarios/elfarol"
)

// TestEncodeCellIsEncodingJSONs: a cell file holds the bytes json.Marshal
// writes, for cells with every optional part (episode metrics, credit,
// diagnostics, lock-in, an unknown optimum), and its spans point at the
// team and reward values.
func TestEncodeCellIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	spec := func(s string) []learn.Spec {
		l, err := learn.Parse(s)
		require.NoError(t, err)
		return []learn.Spec{l}
	}
	grids := []Config{
		{
			Scenario: elfarol.New(), Params: map[string]string{"nights": "3", "capacity": "2", "agents": "7"},
			Allocators: []string{"team", "difference"}, Learners: spec("egreedy:alpha=0.2"), Seeds: 2, Seed: 3, Episodes: 30,
			Diagnose: Diagnose{Episodes: 2},
		},
		{
			Scenario: committee.New(), Params: map[string]string{"informed": "1", "options": "3", "uninformed": "2"},
			Allocators: []string{"team", "shapley"}, Learners: spec("reinforce"), Learn: []string{committee.RoleAdviser},
			Policies: map[string]string{committee.RoleDecider: "scripted"}, Seeds: 2, Seed: 1, Episodes: 20,
			Limits: env.Limits{MaxSteps: 50}, Optimum: func(env.Params) (float64, error) { return 3, nil },
		},
	}
	for _, cfg := range grids {
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		for _, cell := range res.Cells {
			want, err := json.Marshal(cell)
			require.NoError(t, err)
			got, err := encodeCell(cell)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got.data))
			for e := range cell.Team {
				for which, v := range []float64{cell.Team[e], cell.Reward[e]} {
					text, err := appendJSONFloat(nil, v)
					require.NoError(t, err)
					assert.Equal(t, string(text), string(got.data[got.spans[4*e+2*which]:got.spans[4*e+2*which+1]]))
					assert.Equal(t, strconv.FormatFloat(v, 'g', -1, 64), string(got.number(nil, e, which, v)))
				}
			}
		}
	}
	_, err := encodeCell(&Cell{Team: []float64{1, math.NaN()}})
	assert.ErrorContains(t, err, "unsupported value: NaN")
}

func TestNumbersAreWrittenAsTheStandardLibraryWritesThem(t *testing.T) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -3, 0.5, 1e-4, 9.99e-5, 1e-6, 9e-7, 1e-7, 1.5e-9, 999999, 1e6, -1e6, 123456789, 1e15, 1e15 + 1, 1e20, 1e21, 1e22,
		2.5e21, 5e-324, math.MaxFloat64, -math.MaxFloat64, 0.1 + 0.2, 13.2452, 1 / 3.0} {
		check(t, v)
	}
}

func FuzzNumbersAreWrittenAsTheStandardLibraryWritesThem(f *testing.F) {
	for _, v := range []float64{0, 1, -3.5, 1e-7, 1e21, 123456, 0.1} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) { check(t, math.Float64frombits(bits)) })
}

// check compares appendJSONFloat with encoding/json and appendFtoa with
// strconv, and sameText with what they write.
func check(t *testing.T, v float64) {
	t.Helper()
	got, err := appendJSONFloat(nil, v)
	want, werr := json.Marshal(v)
	if werr != nil {
		require.Error(t, err, "%v", v)
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "%v (%x)", v, math.Float64bits(v))
	g := strconv.FormatFloat(v, 'g', -1, 64)
	require.Equal(t, g, string(appendFtoa(nil, v)), "%v", v)
	if sameText(v) {
		require.Equal(t, g, string(got), "%v", v)
	}
}
