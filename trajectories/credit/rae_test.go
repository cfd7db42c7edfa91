package credit_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

func TestRAEUsesTheBaselineBeforeItsUpdate(t *testing.T) {
	rae, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, Base: credit.SourceAuto})
	require.NoError(t, err)
	assert.True(t, rae.Sequential())

	// Two roles; role a has two seats with individual scores, b one.
	g1 := agentEpisode(0, []float64{2, 4, 10}, seats("a", "a", "b"), []int{1, 1, 2})
	got, err := allocate(rae, g1)
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 4, 10, 10}, got[0], "first baselines are 0")
	b, n, ok := rae.Baseline("test", "a")
	require.True(t, ok)
	assert.Equal(t, 1.5, b, "b ← 0.5·0 + 0.5·mean(2, 4)")
	assert.Equal(t, int64(1), n)

	// A group of two episodes: the second sees the first's update.
	g2 := []*trajectories.Episode{
		agentEpisode(0, []float64{5, 1}, seats("a", "b"), []int{1, 1}),
		agentEpisode(0, []float64{7, 3}, seats("a", "b"), []int{1, 1}),
	}
	got, err = allocate(rae, g2...)
	require.NoError(t, err)
	// a: 5 - 1.5, then b = 3.25 and 7 - 3.25. b: 1 - 5, then b = 3 and 3 - 3.
	assert.Equal(t, [][]float64{{3.5, -4}, {3.75, 0}}, got)
	b, n, _ = rae.Baseline("test", "b")
	assert.Equal(t, 3.0, b)
	assert.Equal(t, int64(3), n)
}

func TestRAEBaseTeamAndUnfinishedEpisodes(t *testing.T) {
	rae, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, Base: credit.SourceTeam})
	require.NoError(t, err)
	aborted := agentEpisode(100, nil, seats("a"), []int{1})
	aborted.Status = protocol.StatusAborted
	got, err := allocate(rae, aborted, agentEpisode(4, []float64{1}, seats("a"), []int{1}))
	require.NoError(t, err)
	assert.Equal(t, [][]float64{{0}, {4}}, got, "the aborted episode gets 0 and no update; base team ignores scores")
	b, n, _ := rae.Baseline("test", "a")
	assert.Equal(t, 2.0, b)
	assert.Equal(t, int64(1), n)

	ind, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, Base: credit.SourceIndividual})
	require.NoError(t, err)
	_, err = allocate(ind, agentEpisode(4, []float64{1}, seats("a"), []int{1}), agentEpisode(4, nil, seats("a"), []int{1}))
	require.ErrorIs(t, err, credit.ErrNoAgentScores)
	_, _, ok := ind.Baseline("test", "a")
	assert.False(t, ok, "a failed allocation leaves the baselines alone")
}

func TestRAEStateSurvivesSaveAndReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "baselines.json")
	cfg := credit.RAEConfig{Alpha: 0.9, Base: credit.SourceAuto, StatePath: path}
	groups := func() [][]*trajectories.Episode {
		var out [][]*trajectories.Episode
		for k := range 4 {
			x := float64(k)
			out = append(out, []*trajectories.Episode{
				agentEpisode(0, []float64{x, 2 * x, -x}, seats("a", "a", "b"), []int{1, 1, 1}),
				agentEpisode(0, []float64{x + 0.5, 1}, seats("a", "c"), []int{1, 1}),
			})
		}
		return out
	}

	// One RAE sees all four groups.
	whole, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.9, Base: credit.SourceAuto})
	require.NoError(t, err)
	var want [][][]float64
	for _, g := range groups() {
		got, err := allocate(whole, g...)
		require.NoError(t, err)
		want = append(want, got)
	}

	// The same groups split over two runs, with the state saved between.
	first, err := credit.NewRAE(cfg)
	require.NoError(t, err)
	gs := groups()
	for k := range 2 {
		got, err := allocate(first, gs[k]...)
		require.NoError(t, err)
		assert.Equal(t, want[k], got)
	}
	require.NoError(t, first.Close())
	second, err := credit.NewRAE(cfg)
	require.NoError(t, err)
	for _, role := range []string{"a", "b", "c"} {
		b1, n1, ok1 := first.Baseline("test", role)
		b2, n2, ok2 := second.Baseline("test", role)
		assert.True(t, ok1 && ok2, role)
		assert.Equal(t, b1, b2, "baselines are saved exactly (role %s)", role)
		assert.Equal(t, n1, n2)
	}
	for k := 2; k < 4; k++ {
		got, err := allocate(second, gs[k]...)
		require.NoError(t, err)
		assert.Equal(t, want[k], got, "group %d after the reload", k)
	}
	require.NoError(t, second.Close())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"version": 1`)
	assert.Contains(t, string(data), `"role": "b"`)
}

func TestRAEStateFileErrors(t *testing.T) {
	dir := t.TempDir()
	fresh, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, StatePath: filepath.Join(dir, "missing.json")})
	require.NoError(t, err, "a missing state file means fresh baselines")
	_, _, ok := fresh.Baseline("test", "a")
	assert.False(t, ok)

	for name, content := range map[string]string{
		"garbage":   "{",
		"version":   `{"version": 2, "baselines": []}`,
		"unknown":   `{"version": 1, "baselines": [], "extra": 1}`,
		"duplicate": `{"version": 1, "baselines": [{"scenario": "s", "role": "r", "baseline": 1, "updates": 1}, {"scenario": "s", "role": "r", "baseline": 2, "updates": 1}]}`,
		"no role":   `{"version": 1, "baselines": [{"scenario": "s", "baseline": 1, "updates": 1}]}`,
		"negative":  `{"version": 1, "baselines": [{"scenario": "s", "role": "r", "baseline": 1, "updates": -1}]}`,
	} {
		path := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		_, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, StatePath: path})
		require.ErrorIs(t, err, credit.ErrBadState, name)
		assert.Contains(t, err.Error(), path, "the error names the file")
	}

	_, err = credit.NewRAE(credit.RAEConfig{Alpha: 1})
	require.ErrorIs(t, err, credit.ErrBadAllocatorParam)

	r, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5})
	require.NoError(t, err)
	require.NoError(t, r.Close(), "without a state file Close does nothing")
	require.Error(t, r.Save(filepath.Join(dir, "no", "such", "dir.json")))
}

func TestRAEUnmarshalStateReplacesTheBaselines(t *testing.T) {
	rae, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, Base: credit.SourceAuto})
	require.NoError(t, err)
	_, err = allocate(rae, agentEpisode(0, []float64{2, 4}, seats("a", "b"), []int{1, 1}))
	require.NoError(t, err)
	saved, err := rae.MarshalState()
	require.NoError(t, err)

	// Another RAE takes the state whole and goes on from it.
	other, err := credit.NewRAE(credit.RAEConfig{Alpha: 0.5, Base: credit.SourceAuto})
	require.NoError(t, err)
	_, err = allocate(other, agentEpisode(0, []float64{9}, seats("c"), []int{1}))
	require.NoError(t, err)
	require.NoError(t, other.UnmarshalState(saved))
	_, _, ok := other.Baseline("test", "c")
	assert.False(t, ok, "the state is replaced, not merged")
	got, err := allocate(other, agentEpisode(0, []float64{2, 4}, seats("a", "b"), []int{1, 1}))
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 2}, got[0], "R - b with the loaded baselines 1 and 2")
	again, err := other.MarshalState()
	require.NoError(t, err)
	assert.NotEqual(t, saved, again)

	// A bad state leaves the baselines as they were.
	for _, bad := range []string{`{`, `{"version":2,"baselines":[]}`, `{"version":1,"baselines":[{"scenario":"s","role":"r","updates":-1}]}`,
		`{"version":1,"baselines":[]} {}`, `{"version":1,"baselines":[],"extra":1}`} {
		err := other.UnmarshalState([]byte(bad))
		require.ErrorIs(t, err, credit.ErrBadState, bad)
		now, err := other.MarshalState()
		require.NoError(t, err)
		assert.Equal(t, again, now, bad)
	}
}
