package trajectories_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/trajectories"
)

// treeEpisode is cornerEpisode tree-sampled: its emitted turns 0, 2 and 3
// have two candidates each (turn 5 none), with every corner of a
// candidate (odd strings, generations, non-finite numbers, notes JSON
// cannot hold).
func treeEpisode() *episode.Record {
	rec, _ := cornerEpisode()
	odd := rec.Label
	prompt := protocol.Prompt{Text: odd}
	rec.Tree = &episode.Tree{K: 2, Alpha: 0.5, Joint: true, Roles: []string{"r", odd}}
	rec.Candidates = []episode.Candidate{
		{Turn: 0, Index: 0, Seed: 1, Action: "a", Chosen: true, Team: 1, Local: 2, Reward: 2.5},
		{Turn: 0, Index: 1, Seed: 2, Action: odd, Invalid: odd, Notes: map[string]any{"nan": math.NaN(), "s": odd}, Team: math.Inf(1), Local: math.NaN(), Reward: math.Inf(-1)},
		{Turn: 2, Index: 0, Seed: math.MaxUint64, Action: "x", Generation: &agents.Generation{Completion: odd, Prompt: &prompt}, Team: -1},
		{Turn: 2, Index: 1, Action: "", Generation: rec.Turns[2].Generation, Chosen: true, Notes: map[string]any{}},
		{Turn: 3, Index: 0, Generation: &agents.Generation{Tokens: &agents.Tokens{Prompt: []int{1, 2}, Response: []int{3}, LogProbs: []float64{math.NaN()}}}, Chosen: true},
		{Turn: 3, Index: 1, Generation: &agents.Generation{Tokens: &agents.Tokens{Prompt: []int{1, 2}, Response: []int{4}}}, Reward: 1e-300},
	}
	return rec
}

// A tree-sampled record writes its tree and candidates as encoding/json
// writes the form, reads back to the same line, and counts and projects
// one sample per candidate of an emitted turn.
func TestTreeEpisodeRoundTrip(t *testing.T) {
	rec := treeEpisode()
	for _, credit := range []*trajectories.Credit{nil, {Allocators: []string{"team"}, Values: [][]float64{{1, 2, 3, 4, 5, 6, 7}}}} {
		got, err := trajectories.AppendEpisodeJSON(nil, rec, credit)
		require.NoError(t, err)
		want, err := trajectories.AppendEpisodeJSONReflect(nil, rec, credit)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		// Decoded, invalid UTF-8 is U+FFFD: the line read back writes
		// itself again byte for byte.
		back, c, err := trajectories.DecodeEpisode(bytes.TrimSpace(got))
		require.NoError(t, err)
		once, err := trajectories.AppendEpisodeJSON(nil, back, c)
		require.NoError(t, err)
		back, c, err = trajectories.DecodeEpisode(bytes.TrimSpace(once))
		require.NoError(t, err)
		twice, err := trajectories.AppendEpisodeJSON(nil, back, c)
		require.NoError(t, err)
		assert.Equal(t, string(once), string(twice))
		assert.Len(t, back.Candidates, 6)
	}
	// Emitted turns 0, 2, 3 and 5: turns 0, 2 and 3 are two samples each.
	assert.Equal(t, 7, rec.Emitted())
	assert.Equal(t, []episode.SampleRef{{Turn: 0, Candidate: 0}, {Turn: 0, Candidate: 1}, {Turn: 2, Candidate: 2}, {Turn: 2, Candidate: 3}, {Turn: 3, Candidate: 4}, {Turn: 3, Candidate: 5}, {Turn: 5, Candidate: -1}}, rec.SampleRefs(nil))
	samples := trajectories.Samples(rec)
	require.Len(t, samples, 7)
	assert.Equal(t, "x", samples[2].Metadata.Action, "the candidate's move; its completion is the response")
	assert.Equal(t, rec.Label, samples[2].Prompt.Text, "the candidate's own chat")
	assert.Equal(t, 0, samples[2].Metadata.Extra["tree_candidate"])
	assert.Equal(t, true, samples[3].Metadata.Extra["tree_chosen"])
	assert.Equal(t, []int{1, 2, 4}, samples[5].Tokens)
	assert.NotContains(t, samples[6].Metadata.Extra, "tree_candidate", "turn 5 was not sampled")
}

// A line whose tree does not hold together is refused, naming why.
func TestTreeEpisodeDecodeErrors(t *testing.T) {
	head := `{"format":"troupe.episode/v2","status":"completed","seats":[{"id":"a","role":"r"}],"turns":[{"seat":0,"emit":true}],"score":{"team":0,"agents":null},"credit":null`
	for tail, want := range map[string]string{
		`,"candidates":[{"turn":0}]}`:                                                                                                                "without a tree",
		`,"tree":{"k":1,"alpha":1,"joint":false,"roles":null}}`:                                                                                      "tree of 1 candidates",
		`,"tree":{"k":2,"alpha":1,"joint":false,"roles":null},"candidates":[{"turn":1}]}`:                                                            "names turn 1 of 1",
		`,"tree":{"k":2,"alpha":1,"joint":false,"roles":null},"candidates":[{"turn":0,"index":2}]}`:                                                  "index 2 of 2",
		`,"tree":{"k":2,"alpha":1,"joint":false,"roles":null},"candidates":[{"turn":0,"index":1},{"turn":0,"index":0}]}`:                             "out of order",
		`,"tree":{"k":2,"alpha":1,"joint":false,"roles":null},"candidates":[{"turn":0,"index":0},{"turn":0,"index":1}]}`:                             "0 chosen candidates",
		`,"tree":{"k":2,"alpha":1,"joint":false,"roles":null},"candidates":[{"turn":0,"index":0,"chosen":true},{"turn":0,"index":1,"chosen":true}]}`: "2 chosen candidates",
	} {
		_, _, err := trajectories.DecodeEpisode([]byte(head + tail))
		require.ErrorIs(t, err, trajectories.ErrEpisodeLine, tail)
		assert.ErrorContains(t, err, want, tail)
	}
}
