package league_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/league"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// A checkpoint served by a real llama.cpp server (the tiny random-weight
// model of tools/llama, named as a server of LoRA adapters would name
// one) plays a league match against random: its answers are the
// server's own, and the match is rated. One match: on two busy cores the
// tiny model samples a few tokens a second. It skips when the server is
// not built, unless TROUPE_REQUIRE_LLAMA=1 (as in CI).
func TestLLMPlayersAgainstRealLlamaServer(t *testing.T) {
	srv := llamatest.New(t, llamatest.Options{})
	temp := 0.0
	player := func(name string) league.Player {
		return league.Player{Name: name, Policy: league.LLMPlayer(league.LLMSettings{BaseURL: srv.URL + "/v1", Kind: "llamacpp",
			Model: name, Sampling: protocol.Sampling{Temperature: &temp, MaxTokens: ptr(24)}, Timeout: "60s"})}
	}
	l := newLeague(t, t.TempDir(), league.Config{Seed: 4}, player("ckpt-a"), scripted("random"))
	defer l.Close()
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 1, Focal: "ckpt-a"}))
	for _, r := range l.Results() {
		assert.Equal(t, protocol.StatusCompleted, r.Status, "match %d", r.Match)
	}
	games := 0
	for _, r := range l.Ratings() {
		games += r.Record.Games
	}
	assert.Equal(t, 2, games, "one rated two-player match")
	assert.NotEqual(t, "ckpt-a", l.Results()[0].Roles[map[string]string{"x": "o", "o": "x"}[l.Results()[0].FocalRole]])
}
