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

// Two checkpoints served by a real llama.cpp server (the tiny random-
// weight model of tools/llama, under two model names, as a server of LoRA
// adapters would name them) play in a league against random: their
// answers are the server's own, and the matches are rated. It skips when
// the server is not built, unless TROUPE_REQUIRE_LLAMA=1 (as in CI).
func TestLLMPlayersAgainstRealLlamaServer(t *testing.T) {
	srv := llamatest.New(t, llamatest.Options{})
	temp := 0.0
	player := func(name string) league.Player {
		return league.Player{Name: name, Policy: league.LLMPlayer(league.LLMSettings{BaseURL: srv.URL + "/v1", Kind: "llamacpp",
			Model: name, Temperature: &temp, MaxTokens: 24, Timeout: "60s"})}
	}
	l := newLeague(t, t.TempDir(), league.Config{Seed: 4}, player("ckpt-a"), player("ckpt-b"), scripted("random"))
	defer l.Close()
	require.NoError(t, l.Play(context.Background(), league.PlayOptions{N: 2, Concurrency: 2}))
	for _, r := range l.Results() {
		assert.Equal(t, protocol.StatusCompleted, r.Status, "match %d", r.Match)
	}
	games := 0
	for _, r := range l.Ratings() {
		games += r.Record.Games
	}
	assert.Equal(t, 4, games, "two rated two-player matches")
}
