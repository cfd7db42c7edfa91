package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// A tree-sampled request (AT-GRPO through the service, as slime reaches
// troupe): every turn of the main line is K samples that share their
// prompt, exactly one of them chosen, each with reward α·team + local,
// numbered contiguously; the same request answers the same bytes.
func TestTreeThroughServe(t *testing.T) {
	s := newServer(t, server.Config{})
	body := `{"scenario":"tictactoe","n":2,"policy":"random","tree":{"k":3,"alpha":0.5},"allocators":["at-grpo"],"rollout_id":7,"group_index":2,"index":40}`
	a := post(t, s, body)
	res := decodeResponse(t, a)
	require.Len(t, res.Rollouts, 2)
	index := int64(40)
	for _, r := range res.Rollouts {
		require.Equal(t, protocol.StatusCompleted, r.Status, r.Error)
		require.Len(t, r.Samples, 3*r.Turns, "K samples per turn of the main line")
		for k := 0; k < len(r.Samples); k += 3 {
			group := r.Samples[k : k+3]
			chosen := 0
			for c, sm := range group {
				assert.Equal(t, index, sm.Index)
				index++
				md := sm.Metadata
				assert.Equal(t, group[0].Prompt, sm.Prompt, "the candidates of a turn share its history")
				assert.Equal(t, group[0].Metadata.Turn, md.Turn)
				assert.EqualValues(t, c, md.Extra["tree_candidate"])
				team, local := md.Extra["tree_team"].(float64), md.Extra["tree_local"].(float64)
				assert.Equal(t, 0.5*team+local, md.Extra["tree_reward"])
				if md.Extra["tree_chosen"] == true {
					chosen++
				}
			}
			assert.Equal(t, 1, chosen, "rollout %d turn %d", r.RolloutID, group[0].Metadata.Turn)
		}
	}
	assert.Equal(t, string(a.body), string(post(t, s, body).body), "a request's answer is deterministic")
}

// Tree sampling's samples limit is K per turn, known before playing; the
// service refuses what it cannot play as asked, naming the field, and
// answers alike whether it plays the episodes or hands them to workers.
func TestTreeRequestsChecked(t *testing.T) {
	// A crowd of 3 plays 3 turns: 2 episodes are 6 samples, 12 with 2
	// candidates per turn, refused before anything is played.
	c, count := crowdServer(t, server.Config{MaxSamplesPerAnswer: 10})
	require.Equal(t, http.StatusOK, post(t, c, `{"scenario":"crowd","n":2,"params":{"agents":3}}`).status)
	played := count.n.Load()
	e := decodeError(t, post(t, c, `{"scenario":"crowd","n":2,"params":{"agents":3},"tree":{"k":2}}`))
	assert.Equal(t, rollout.CodeTooManySamples, e.Code, e.Message)
	assert.Contains(t, e.Message, "12 samples")
	assert.Equal(t, played, count.n.Load(), "nothing was played")
	// Without a bound known before playing, the samples are counted once
	// the episodes are played, candidates included.
	e = decodeError(t, post(t, c, `{"scenario":"tictactoe","n":2,"tree":{"k":3}}`))
	assert.Equal(t, rollout.CodeTooManySamples, e.Code, e.Message)

	s := newServer(t, server.Config{})
	for body, want := range map[string]string{
		`{"scenario":"tictactoe","tree":{"k":1}}`:                     "tree.k",
		`{"scenario":"tictactoe","tree":{"k":2,"roles":["z"]}}`:       "tree.roles[0]",
		`{"scenario":"tictactoe","tree":{"k":2},"merge_turns":true}`:  "merge_turns",
		`{"scenario":"tictactoe","tree":{"k":2,"alpha":"x"}}`:         "alpha",
		`{"scenario":"tictactoe","tree":{"k":2,"candidates":3}}`:      "candidates",
		`{"scenario":"tictactoe","tree":{"k":2,"roles":["x"]},"n":0}`: "",
		`{"scenario":"tictactoe","tree":{"k":2},"emit":["o"],"n":1}`:  "",
	} {
		t.Run(body, func(t *testing.T) {
			a := post(t, s, body)
			if want == "" {
				assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
				return
			}
			require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
			assert.Contains(t, string(a.body), want)
		})
	}

	// A service that hands its episodes to workers answers as it would
	// itself: the candidates travel in the records.
	body := `{"scenario":"tictactoe","policy":"random","n":2,"tree":{"k":2},"allocators":["at-grpo"],"rollout_id":3,"group_index":1,"index":0}`
	local := post(t, newServer(t, server.Config{}), body)
	require.Equal(t, http.StatusOK, local.status, "%s", local.body)
	assert.Equal(t, string(local.body), string(post(t, newServer(t, server.Config{Remote: &elsewhere{}}), body).body))
}
