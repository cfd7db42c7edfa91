package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

func TestRolloutsGroupWithCallerIDs(t *testing.T) {
	s := newServer(t, server.Config{Seed: 9})
	a := post(t, s, `{"scenario":"tictactoe","n":3,"rollout_id":100,"group_index":7,"index":1000,
		"policy":"minimax","policies":{"o":"random"},"allocators":["individual"]}`)
	res := decodeResponse(t, a)
	require.Len(t, res.Rollouts, 3)

	episodeTime, ok := rollout.ParseServerTiming(a.header.Get(rollout.HeaderServerTiming))
	require.True(t, ok, "Server-Timing: %q", a.header.Get(rollout.HeaderServerTiming))
	assert.Positive(t, episodeTime)

	wantSeed := seeds.Mix(9, 1, 7) // the service seed and the group_index
	index := int64(1000)
	policySeeds := map[uint64]bool{}
	for i, r := range res.Rollouts {
		assert.Equal(t, int64(100+i), r.RolloutID)
		assert.Equal(t, int64(7), r.GroupIndex)
		assert.Equal(t, i, r.Episode)
		assert.Equal(t, wantSeed, r.Seed, "the episodes of a group share the scenario seed")
		assert.Equal(t, seeds.Mix(wantSeed, 2, uint64(r.RolloutID)), r.PolicySeed)
		policySeeds[r.PolicySeed] = true
		assert.Equal(t, protocol.StatusCompleted, r.Status)
		assert.Equal(t, env.EndTerminated, r.End)
		assert.Empty(t, r.Error)
		require.Len(t, r.AgentScores, 2)
		assert.Equal(t, []rollout.Seat{{ID: "x", Role: "x"}, {ID: "o", Role: "o"}}, r.Seats)
		assert.Equal(t, r.Turns, len(r.Samples), "every turn of tic-tac-toe is emitted")
		require.NoError(t, protocol.ValidateRollout(r.Samples))
		for _, sm := range r.Samples {
			assert.Equal(t, r.RolloutID, sm.RolloutID)
			assert.Equal(t, int64(7), sm.GroupIndex)
			assert.Equal(t, index, sm.Index, "indexes follow on across the rollouts")
			index++
			assert.Equal(t, protocol.StatusCompleted, sm.Status)
			require.NotNil(t, sm.Metadata.AgentScore)
			reward, ok := sm.Reward.Get("")
			require.True(t, ok)
			assert.Equal(t, *sm.Metadata.AgentScore, reward, "individual gives each agent its own score")
			assert.Equal(t, "individual", sm.Metadata.Allocator)
		}
	}
	assert.Len(t, policySeeds, 3, "each episode has its own policy seed")
}

func TestRolloutsAreAPureFunctionOfTheRequest(t *testing.T) {
	body := `{"scenario":"signal","n":4,"rollout_id":3,"group_index":2,"index":0,"seed":11,"policy_seed":5,
		"allocators":["team","rloo(key=role)"],"reward_format":"dict"}`
	first := post(t, newServer(t, server.Config{}), body)
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	// Another service, busy with other requests at the same time.
	s := newServer(t, server.Config{MaxConcurrentEpisodes: 2})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { post(t, s, `{"scenario":"signal","n":5}`) })
	}
	second := post(t, s, body)
	wg.Wait()
	assert.Equal(t, string(first.body), string(second.body))

	rloo, err := credit.Builtin().Parse("rloo(key=role)")
	require.NoError(t, err)
	res := decodeResponse(t, first)
	for i, r := range res.Rollouts {
		assert.Equal(t, uint64(11), r.Seed)
		assert.Equal(t, seeds.Mix(5, uint64(i)), r.PolicySeed)
		for _, sm := range r.Samples {
			require.Equal(t, protocol.RewardDict, sm.Reward.Kind)
			assert.Contains(t, sm.Reward.Dict, "team")
			assert.Contains(t, sm.Reward.Dict, rloo.Name(), "dict rewards are keyed by the allocators' names")
		}
	}
}

func TestRolloutIDsNeverCollideAcrossConcurrentRequests(t *testing.T) {
	s := newServer(t, server.Config{RolloutIDBase: 1000})
	const clients, perClient = 32, 8
	type got struct {
		rollouts []int64
		group    int64
		indexes  []int64
	}
	results := make(chan got, clients*perClient)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for k := range perClient {
				n := 1 + (c+k)%3
				res := decodeResponse(t, post(t, s, fmt.Sprintf(`{"scenario":"tictactoe","n":%d}`, n)))
				var g got
				g.group = res.Rollouts[0].GroupIndex
				for _, r := range res.Rollouts {
					g.rollouts = append(g.rollouts, r.RolloutID)
					assert.Equal(t, g.group, r.GroupIndex, "one request is one group")
					for _, sm := range r.Samples {
						g.indexes = append(g.indexes, sm.Index)
					}
				}
				results <- g
			}
		})
	}
	wg.Wait()
	close(results)

	rollouts, groups, indexes := map[int64]bool{}, map[int64]bool{}, map[int64]bool{}
	episodes := 0
	for g := range results {
		for i, id := range g.rollouts {
			assert.GreaterOrEqual(t, id, int64(1000))
			assert.Equal(t, g.rollouts[0]+int64(i), id, "a request's rollout_ids are one block")
			assert.False(t, rollouts[id], "rollout_id %d handed out twice", id)
			rollouts[id] = true
			episodes++
		}
		assert.False(t, groups[g.group], "group_index %d handed out twice", g.group)
		groups[g.group] = true
		for _, idx := range g.indexes {
			assert.False(t, indexes[idx], "index %d handed out twice", idx)
			indexes[idx] = true
		}
	}
	assert.Len(t, rollouts, episodes)
	assert.Len(t, groups, clients*perClient)
}

func TestDatasetRowPromptAndLabel(t *testing.T) {
	s := newServer(t, server.Config{})
	// The row's prompt and label fill the scenario's parameters of those
	// names; the label is every sample's label.
	res := decodeResponse(t, post(t, s, `{"scenario":"quiz","prompt":"six times seven?","label":"42","rollout_id":1}`))
	sm := res.Rollouts[0].Samples[0]
	assert.Equal(t, "Q: six times seven?", sm.Prompt.String())
	assert.Equal(t, protocol.TextLabel("42"), sm.Label)
	assert.Equal(t, 1.0, res.Rollouts[0].TeamReward, "the parrot's 42 is the label")

	// A chat prompt reaches the parameter as its JSON text.
	res = decodeResponse(t, post(t, s, `{"scenario":"quiz","prompt":[{"role":"user","content":"hi"}],"rollout_id":2}`))
	assert.Equal(t, `Q: [{"role":"user","content":"hi"}]`, res.Rollouts[0].Samples[0].Prompt.String())

	// Explicit params win over the row; the game's own label, when it
	// differs from the row's, moves to metadata.
	res = decodeResponse(t, post(t, s, `{"scenario":"quiz","params":{"label":"41"},"label":"42","rollout_id":3}`))
	sm = res.Rollouts[0].Samples[0]
	assert.Equal(t, protocol.TextLabel("42"), sm.Label)
	assert.Equal(t, "41", sm.Metadata.Extra["game_label"])
	assert.Equal(t, 0.0, res.Rollouts[0].TeamReward, "the game scored against its own label")

	// Scenarios without such parameters ignore the row's prompt.
	res = decodeResponse(t, post(t, s, `{"scenario":"tictactoe","prompt":"unused","label":"L"}`))
	for _, sm := range res.Rollouts[0].Samples {
		assert.Equal(t, protocol.TextLabel("L"), sm.Label)
	}
}

func TestRequestLimitsAndEmit(t *testing.T) {
	s := newServer(t, server.Config{})
	res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","limits":{"max_turns":3},"emit":["o"]}`))
	r := res.Rollouts[0]
	assert.Equal(t, protocol.StatusTruncated, r.Status)
	assert.Equal(t, env.EndMaxTurns, r.End)
	assert.Equal(t, 3, r.Turns)
	require.Len(t, r.Samples, 1, "only o's turn is emitted")
	assert.Equal(t, "o", r.Samples[0].Metadata.Role)

	// Zero samples are a valid answer: x's one turn, o emitted only.
	res = decodeResponse(t, post(t, s, `{"scenario":"tictactoe","limits":{"max_turns":1},"emit":["o"]}`))
	assert.Empty(t, res.Rollouts[0].Samples)
	assert.Equal(t, 1, res.Rollouts[0].Turns)
}

func TestErrorsNameTheProblem(t *testing.T) {
	s := newServer(t, server.Config{MaxEpisodesPerRequest: 8})
	for _, tc := range []struct {
		name, method, path, body, contentType string
		status                                int
		code                                  rollout.Code
		says                                  []string
	}{
		{"unknown path", "GET", "/v2/rollouts", "", "", 404, rollout.CodeNotFound, []string{"/v2/rollouts", rollout.PathRollouts}},
		{"unclean path", "POST", "/v1/../v1/rollouts", `{"scenario":"signal"}`, "", 404, rollout.CodeNotFound, []string{"/v1/../v1/rollouts"}},
		{"doubled slash", "GET", "//healthz", "", "", 404, rollout.CodeNotFound, []string{"//healthz"}},
		{"GET rollouts", "GET", rollout.PathRollouts, "", "", 405, rollout.CodeMethodNotAllowed, []string{"POST"}},
		{"POST scenarios", "POST", rollout.PathScenarios, `{}`, "", 405, rollout.CodeMethodNotAllowed, []string{"GET"}},
		{"form body", "POST", rollout.PathRollouts, `scenario=signal`, "application/x-www-form-urlencoded", 415, rollout.CodeUnsupportedMedia, []string{"application/json"}},
		{"empty body", "POST", rollout.PathRollouts, "", "", 400, rollout.CodeBadJSON, []string{"empty"}},
		{"malformed", "POST", rollout.PathRollouts, `{"scenario":signal}`, "", 400, rollout.CodeBadJSON, []string{"malformed JSON at byte"}},
		{"truncated", "POST", rollout.PathRollouts, `{"scenario":"signal"`, "", 400, rollout.CodeBadJSON, []string{"ends before"}},
		{"array", "POST", rollout.PathRollouts, `[{"scenario":"signal"}]`, "", 400, rollout.CodeBadJSON, []string{"array"}},
		{"two objects", "POST", rollout.PathRollouts, `{"scenario":"signal"} {}`, "", 400, rollout.CodeBadJSON, []string{"more than one"}},
		{"unknown field", "POST", rollout.PathRollouts, `{"scenario":"signal","episodes":3}`, "", 400, rollout.CodeUnknownField, []string{`"episodes"`, "group_index"}},
		{"unknown sampling field", "POST", rollout.PathRollouts, `{"scenario":"signal","sampling":{"temprature":0}}`, "", 400, rollout.CodeUnknownField, []string{`"temprature"`}},
		{"wrong type", "POST", rollout.PathRollouts, `{"scenario":"signal","n":"3"}`, "", 400, rollout.CodeBadRequest, []string{"field n", "string"}},
		{"no scenario", "POST", rollout.PathRollouts, `{"n":1}`, "", 400, rollout.CodeBadRequest, []string{"scenario is required", "tictactoe"}},
		{"unknown scenario", "POST", rollout.PathRollouts, `{"scenario":"chess"}`, "", 400, rollout.CodeUnknownScenario, []string{`"chess"`, "quiz, signal, tictactoe"}},
		{"unknown param", "POST", rollout.PathRollouts, `{"scenario":"signal","params":{"size":3}}`, "", 400, rollout.CodeBadParams, []string{`"size"`, "candidates"}},
		{"param out of range", "POST", rollout.PathRollouts, `{"scenario":"signal","params":{"candidates":40}}`, "", 400, rollout.CodeBadParams, []string{"candidates", "40", "[2, 16]"}},
		{"param of the wrong kind", "POST", rollout.PathRollouts, `{"scenario":"signal","params":{"candidates":2.5}}`, "", 400, rollout.CodeBadParams, []string{"candidates", "not an integer"}},
		{"param choice", "POST", rollout.PathRollouts, `{"scenario":"signal","params":{"vocab":"emoji"}}`, "", 400, rollout.CodeBadParams, []string{"vocab", "words, symbols"}},
		{"null param", "POST", rollout.PathRollouts, `{"scenario":"signal","params":{"vocab":null}}`, "", 400, rollout.CodeBadParams, []string{"params.vocab"}},
		{"n negative", "POST", rollout.PathRollouts, `{"scenario":"signal","n":-1}`, "", 400, rollout.CodeBadRequest, []string{"n = -1", "8"}},
		{"n too large", "POST", rollout.PathRollouts, `{"scenario":"signal","n":9}`, "", 400, rollout.CodeBadRequest, []string{"n = 9", "between 1 and 8"}},
		{"negative rollout_id", "POST", rollout.PathRollouts, `{"scenario":"signal","rollout_id":-2}`, "", 400, rollout.CodeBadRequest, []string{"rollout_id = -2"}},
		{"rollout_id overflow", "POST", rollout.PathRollouts, `{"scenario":"signal","n":2,"rollout_id":9223372036854775807}`, "", 400, rollout.CodeBadRequest, []string{"overflow"}},
		{"negative limit", "POST", rollout.PathRollouts, `{"scenario":"signal","limits":{"max_turns":-1}}`, "", 400, rollout.CodeBadRequest, []string{"limits.max_turns"}},
		{"negative timeout", "POST", rollout.PathRollouts, `{"scenario":"signal","limits":{"timeout_seconds":-1}}`, "", 400, rollout.CodeBadRequest, []string{"limits.timeout_seconds"}},
		{"invalid rule", "POST", rollout.PathRollouts, `{"scenario":"signal","invalid":"punish"}`, "", 400, rollout.CodeBadRequest, []string{`"punish"`, "forfeit"}},
		{"emit role", "POST", rollout.PathRollouts, `{"scenario":"signal","emit":["judge"]}`, "", 400, rollout.CodeBadRequest, []string{`"judge"`, "speaker, listener"}},
		{"reward format", "POST", rollout.PathRollouts, `{"scenario":"signal","reward_format":"list"}`, "", 400, rollout.CodeBadRequest, []string{"reward_format", "scalar or dict"}},
		{"unknown allocator", "POST", rollout.PathRollouts, `{"scenario":"signal","allocators":["fair"]}`, "", 400, rollout.CodeBadAllocator, []string{`"fair"`, "equal-split"}},
		{"allocator parameter", "POST", rollout.PathRollouts, `{"scenario":"signal","allocators":["rae:alpah=0.9"]}`, "", 400, rollout.CodeBadAllocator, []string{`"alpah"`, "alpha"}},
		{"empty allocator", "POST", rollout.PathRollouts, `{"scenario":"signal","allocators":[" "]}`, "", 400, rollout.CodeBadAllocator, []string{"empty"}},
		{"allocator twice", "POST", rollout.PathRollouts, `{"scenario":"signal","allocators":["team","team"]}`, "", 400, rollout.CodeBadAllocator, []string{"team", "twice"}},
		{"unknown policy", "POST", rollout.PathRollouts, `{"scenario":"signal","policy":"genius"}`, "", 400, rollout.CodeBadPolicy, []string{`"genius"`, "random, scripted"}},
		{"policy for an unknown role", "POST", rollout.PathRollouts, `{"scenario":"signal","policies":{"talker":"random"}}`, "", 400, rollout.CodeBadPolicy, []string{`"talker"`, "speaker, listener"}},
		{"bad prompt", "POST", rollout.PathRollouts, `{"scenario":"quiz","prompt":{"text":"hi"}}`, "", 400, rollout.CodeBadRequest, []string{"prompt must be"}},
		{"bad chat prompt", "POST", rollout.PathRollouts, `{"scenario":"quiz","prompt":[{"speaker":"user"}]}`, "", 400, rollout.CodeBadRequest, []string{"prompt must be", "speaker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var header []string
			if tc.contentType != "" {
				header = []string{"Content-Type", tc.contentType}
			}
			a := do(t, s, tc.method, tc.path, tc.body, header...)
			require.Equal(t, tc.status, a.status, "body: %s", a.body)
			e := decodeError(t, a)
			assert.Equal(t, tc.code, e.Code)
			for _, want := range tc.says {
				assert.Contains(t, e.Message, want)
			}
			if tc.status == http.StatusMethodNotAllowed {
				assert.NotEmpty(t, a.header.Get("Allow"))
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	const limit = 256
	s := newServer(t, server.Config{MaxBodyBytes: limit})
	body := func(size int) string {
		head := `{"scenario":"tictactoe"`
		return head + strings.Repeat(" ", size-len(head)-1) + "}"
	}
	a := post(t, s, body(limit))
	assert.Equal(t, http.StatusOK, a.status, "a body of exactly the limit is taken: %s", a.body)

	a = post(t, s, body(limit+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, a.status)
	e := decodeError(t, a)
	assert.Equal(t, rollout.CodeBodyTooLarge, e.Code)
	assert.Contains(t, e.Message, "256 bytes")

	// Trailing bytes past the limit are caught too, not just the object.
	a = post(t, s, `{"scenario":"tictactoe"}`+strings.Repeat(" ", limit))
	assert.Equal(t, http.StatusRequestEntityTooLarge, a.status)
}

func TestBearerToken(t *testing.T) {
	s := newServer(t, server.Config{Token: "s3cret-0123456789"})
	ok := `{"scenario":"tictactoe"}`
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong token", "Bearer s3cre", http.StatusUnauthorized},
		{"longer token", "Bearer s3cret-0123456789!", http.StatusUnauthorized},
		{"basic scheme", "Basic s3cret-0123456789", http.StatusUnauthorized},
		{"no scheme", "s3cret-0123456789", http.StatusUnauthorized},
		{"right token", "Bearer s3cret-0123456789", http.StatusOK},
		{"lower-case scheme", "bearer s3cret-0123456789", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := post(t, s, ok, "Authorization", tc.auth)
			require.Equal(t, tc.status, a.status, "body: %s", a.body)
			if tc.status == http.StatusUnauthorized {
				assert.Equal(t, rollout.CodeUnauthorized, decodeError(t, a).Code)
				assert.Contains(t, a.header.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
	// Everything but health probes needs the token.
	for _, path := range []string{rollout.PathScenarios, rollout.PathAllocators, rollout.PathMetrics} {
		assert.Equal(t, http.StatusUnauthorized, do(t, s, "GET", path, "").status, path)
		assert.Equal(t, http.StatusOK, do(t, s, "GET", path, "", "Authorization", "Bearer s3cret-0123456789").status, path)
	}
	assert.Equal(t, http.StatusOK, do(t, s, "GET", rollout.PathHealth, "").status)
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []server.Config{
		{MaxBodyBytes: -1},
		{EpisodeTimeout: -time.Second},
		{MaxConcurrentEpisodes: -3},
		{RolloutIDBase: -1},
		{Token: " padded "},
	} {
		_, err := server.New(cfg)
		require.ErrorIs(t, err, server.ErrBadConfig, "%+v", cfg)
	}
}

// TestGracefulShutdown: a request in flight when the shutdown starts is
// finished and answered; requests that arrive meanwhile are refused with
// 503; the shutdown returns once the last one is answered.
func TestGracefulShutdown(t *testing.T) {
	g := newGate()
	s := newServer(t, server.Config{Policies: factory(g)})
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, s, `{"scenario":"tictactoe","n":2}`) }()
	<-g.entered // both episodes are running
	<-g.entered

	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		return do(t, s, "GET", rollout.PathHealth, "").status == http.StatusServiceUnavailable
	}, 10*time.Second, time.Millisecond, "healthz turns 503 while draining")

	refused := post(t, s, `{"scenario":"tictactoe"}`)
	require.Equal(t, http.StatusServiceUnavailable, refused.status)
	assert.Equal(t, rollout.CodeShuttingDown, decodeError(t, refused).Code)
	assert.Equal(t, "close", refused.header.Get("Connection"))
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}

	close(g.open)
	res := decodeResponse(t, <-inflight)
	for _, r := range res.Rollouts {
		assert.Equal(t, protocol.StatusCompleted, r.Status)
		assert.NotEmpty(t, r.Samples)
	}
	require.NoError(t, <-shutdown)
	require.NoError(t, s.Shutdown(context.Background()), "a second Shutdown is a no-op")

	m := scrape(t, s)
	assert.Equal(t, 1.0, m[`troupe_http_requests_total{endpoint="rollouts",code="503"}`])
	assert.Equal(t, 1.0, m[`troupe_errors_total{code="shutting_down"}`])
	assert.GreaterOrEqual(t, m[`troupe_http_requests_total{endpoint="healthz",code="503"}`], 1.0)
	assert.Equal(t, 1.0, m[`troupe_http_requests_total{endpoint="rollouts",code="200"}`])
}

// TestShutdownTimeoutAbortsEpisodes: when the shutdown's deadline passes,
// the episodes in flight are aborted and still answered, as aborted
// rollouts naming the cause.
func TestShutdownTimeoutAbortsEpisodes(t *testing.T) {
	g := newGate()
	s := newServer(t, server.Config{Policies: factory(g), AbortGrace: time.Minute})
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, s, `{"scenario":"tictactoe","n":3}`) }()
	for range 3 {
		<-g.entered
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has already passed
	err := s.Shutdown(ctx)
	require.ErrorIs(t, err, server.ErrShutdownTimeout)

	res := decodeResponse(t, <-inflight)
	require.Len(t, res.Rollouts, 3)
	for _, r := range res.Rollouts {
		assert.Equal(t, protocol.StatusAborted, r.Status)
		assert.Equal(t, env.EndInterrupted, r.End)
		assert.Contains(t, r.Error, server.ErrShutdown.Error())
		for _, sm := range r.Samples {
			assert.Equal(t, protocol.StatusAborted, sm.Status)
		}
	}
}

// TestRequestTimeoutAnswersAbortedRollouts: a request whose episodes run
// past the service's request timeout is answered, not left hanging.
func TestRequestTimeoutAnswersAbortedRollouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		s := newServer(t, server.Config{Policies: factory(g), RequestTimeout: time.Minute})
		start := time.Now()
		res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":2}`))
		assert.Equal(t, time.Minute, time.Since(start), "answered at the deadline (virtual time)")
		for _, r := range res.Rollouts {
			assert.Equal(t, protocol.StatusAborted, r.Status)
			assert.Equal(t, env.EndInterrupted, r.End)
			assert.Contains(t, r.Error, server.ErrRequestTimeout.Error())
		}
	})
}

// TestEpisodeTimeoutTruncates: an episode past its time limit is truncated,
// and a request may ask for a shorter limit than the service's.
func TestEpisodeTimeoutTruncates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		s := newServer(t, server.Config{Policies: factory(g), EpisodeTimeout: time.Minute})
		start := time.Now()
		res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe"}`))
		assert.Equal(t, time.Minute, time.Since(start))
		assert.Equal(t, protocol.StatusTruncated, res.Rollouts[0].Status)
		assert.Equal(t, env.EndDeadline, res.Rollouts[0].End)

		start = time.Now()
		res = decodeResponse(t, post(t, s, `{"scenario":"tictactoe","limits":{"timeout_seconds":2.5}}`))
		assert.Equal(t, 2500*time.Millisecond, time.Since(start))
		assert.Equal(t, protocol.StatusTruncated, res.Rollouts[0].Status)

		start = time.Now()
		decodeResponse(t, post(t, s, `{"scenario":"tictactoe","limits":{"timeout_seconds":3600}}`))
		assert.Equal(t, time.Minute, time.Since(start), "a request cannot extend the service's limit")
	})
}

// TestEpisodeSlotsBoundConcurrency: with one slot, a second request waits
// for the first one's episode.
func TestEpisodeSlotsBoundConcurrency(t *testing.T) {
	g := newGate()
	s := newServer(t, server.Config{Policies: factory(g), MaxConcurrentEpisodes: 1})
	answers := make(chan answer, 2)
	for range 2 {
		go func() { answers <- post(t, s, `{"scenario":"tictactoe","limits":{"max_turns":1}}`) }()
	}
	<-g.entered
	select {
	case <-g.entered:
		t.Fatal("two episodes ran at once with one slot")
	default:
	}
	close(g.open)
	for range 2 {
		assert.Equal(t, http.StatusOK, (<-answers).status)
	}
}

func TestFailedEpisodeIsAnsweredAsARollout(t *testing.T) {
	// A policy error (a model server that cannot be reached) aborts the
	// episode, which is answered as an aborted rollout all the same.
	failing := factory(policyFunc(func(context.Context) error { return fmt.Errorf("model server unreachable") }))
	s := newServer(t, server.Config{Policies: failing})
	res := decodeResponse(t, post(t, s, `{"scenario":"tictactoe","n":2}`))
	for _, r := range res.Rollouts {
		assert.Equal(t, protocol.StatusAborted, r.Status)
		assert.Equal(t, env.EndPolicyError, r.End)
		assert.Contains(t, r.Error, "model server unreachable")
	}
}

func TestHealthAndListings(t *testing.T) {
	s := newServer(t, server.Config{})
	a := do(t, s, "GET", rollout.PathHealth, "")
	require.Equal(t, http.StatusOK, a.status)
	assert.JSONEq(t, `{"status":"serving"}`, string(a.body))

	var list rollout.ScenarioList
	a = do(t, s, "GET", rollout.PathScenarios, "")
	require.Equal(t, http.StatusOK, a.status)
	require.NoError(t, jsonStrict(a.body, &list))
	names := []string{}
	for _, sc := range list.Scenarios {
		names = append(names, sc.Name)
	}
	assert.Equal(t, []string{"quiz", "signal", "tictactoe"}, names)
	sig := list.Scenarios[1]
	assert.Equal(t, "async", sig.Schedule)
	assert.Equal(t, []string{"random", "scripted"}, sig.Policies)
	require.NotEmpty(t, sig.Params)
	assert.Equal(t, "candidates", sig.Params[0].Name)
	require.NotNil(t, sig.Params[0].Min)
	assert.Equal(t, 2.0, *sig.Params[0].Min)

	var allocs rollout.AllocatorList
	a = do(t, s, "GET", rollout.PathAllocators, "")
	require.NoError(t, jsonStrict(a.body, &allocs))
	found := false
	for _, al := range allocs.Allocators {
		found = found || al.Name == "team"
	}
	assert.True(t, found, "team is listed")
}

func TestServeDrainsWhenItsContextEnds(t *testing.T) {
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, server.Config{
			Addr:      "127.0.0.1:0",
			Scenarios: registry(t),
			Ready:     func(a net.Addr) { ready <- a.String() },
		})
	}()
	addr := <-ready
	resp, err := http.Post("http://"+addr+rollout.PathRollouts, "application/json", strings.NewReader(`{"scenario":"signal"}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, resp.Body.Close())

	cancel()
	require.NoError(t, <-done)
	_, err = http.Get("http://" + addr + rollout.PathHealth)
	require.Error(t, err, "the listener is closed")
}

func TestServeReportsListenErrors(t *testing.T) {
	err := server.Serve(context.Background(), server.Config{Addr: "127.0.0.1:-1"})
	require.Error(t, err)
}

func TestAllocatorTheScenarioCannotServe(t *testing.T) {
	// tic-tac-toe declares no counterfactuals; a difference reward needs
	// them. The request is refused with the allocator's reason.
	s := newServer(t, server.Config{})
	a := post(t, s, `{"scenario":"tictactoe","allocators":["difference"]}`)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	e := decodeError(t, a)
	assert.Equal(t, rollout.CodeBadAllocator, e.Code)
	assert.Contains(t, e.Message, "tictactoe")
	assert.Contains(t, e.Message, "difference")

	// Where the scenario declares them, counterfactual allocators run.
	res := decodeResponse(t, post(t, s, `{"scenario":"signal","n":2,"allocators":["coma","difference:c=average"],"reward_format":"dict"}`))
	for _, r := range res.Rollouts {
		for _, sm := range r.Samples {
			assert.Len(t, sm.Reward.Dict, 2)
		}
	}
}

func TestServeAfterShutdownRefuses(t *testing.T) {
	s := newServer(t, server.Config{})
	require.NoError(t, s.Shutdown(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.ErrorIs(t, s.Serve(context.Background(), ln), http.ErrServerClosed)
}
