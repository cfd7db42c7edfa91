package envserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories"
)

// lockedBuffer is a sink's file: the test reads it while no episode is
// being written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start serves an environment server on a loopback test listener; its
// episodes file (records and credit) is returned.
func start(t *testing.T, cfg envserver.Config) (*envclient.Client, *httptest.Server, *lockedBuffer, *envserver.Server) {
	t.Helper()
	eps := &lockedBuffer{}
	if cfg.Sink == nil {
		cfg.Sink = trajectories.NewEpisodeWriter(eps)
	}
	s, err := envserver.New(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return envclient.New(hs.URL, cfg.Token, hs.Client()), hs, eps, s
}

// engineLine is the episode line `troupe run` writes for the one-episode
// spec with the given seats replaying moves: the determinism yardstick.
func engineLine(t *testing.T, spec runspec.Spec, moves map[string][]string) string {
	t.Helper()
	spec.Episodes = 1
	res, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	require.NoError(t, err)
	house := res.Config.Policy
	res.Config.Policy = func(s env.Seat) agents.Policy {
		if m, ok := moves[s.ID]; ok {
			return agents.Replay(m...)
		}
		return house(s)
	}
	var b bytes.Buffer
	_, err = play.Run(t.Context(), res.Config, res.Output(trajectories.NewEpisodeWriter(&b)))
	require.NoError(t, err)
	return b.String()
}

// playFirst plays a session to the end, always the first choice (or legal
// action) of each pending seat, and returns its moves by agent.
func playFirst(ctx context.Context, s *envclient.Session, res envclient.Result) (map[string][]string, envclient.Result, error) {
	moves := map[string][]string{}
	for !res.Done {
		var err error
		switch len(res.Observation.Pending) {
		case 0:
			res, err = s.Wait(ctx)
		default:
			all := map[string]string{}
			for _, p := range res.Observation.Pending {
				c := p.Choices
				if c == nil {
					c = p.Legal
				}
				m := c[int(p.Seed%uint64(len(c)))]
				all[p.Agent] = m
				moves[p.Agent] = append(moves[p.Agent], m)
			}
			res, err = s.StepAll(ctx, all)
		}
		if err != nil {
			return moves, res, err
		}
	}
	return moves, res, nil
}

// TestSeatsShareAnEpisode: two sessions, one per seat, over HTTP, on
// their own goroutines, play tic-tac-toe; the record equals `troupe run`'s
// with the same moves replayed, byte for byte.
func TestSeatsShareAnEpisode(t *testing.T) {
	c, _, eps, _ := start(t, envserver.Config{})
	ctx := t.Context()
	seed := uint64(9)
	x, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Seed: &seed, Seats: []string{"x"}, EpisodeID: "game-1"})
	require.NoError(t, err)
	assert.Equal(t, "game-1", x.EpisodeID)
	require.Len(t, res.Observation.Pending, 1)
	assert.Nil(t, res.Reward)
	assert.Equal(t, []string{"a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3"}, res.Observation.Seats[0].Actions)
	assert.True(t, res.Observation.Seats[0].Mine)

	var wg sync.WaitGroup
	var oMoves map[string][]string
	wg.Go(func() {
		o, res, err := c.Reset(ctx, envclient.ResetRequest{Join: "game-1", Seats: []string{"o"}})
		if !assert.NoError(t, err) {
			return
		}
		oMoves, res, err = playFirst(ctx, o, res)
		assert.NoError(t, err)
		assert.True(t, res.Done)
	})
	xMoves, res, err := playFirst(ctx, x, res)
	require.NoError(t, err)
	wg.Wait()
	assert.Equal(t, "completed", res.Observation.Status)
	require.NotNil(t, res.Reward)
	assert.Equal(t, res.Observation.Scores["x"], *res.Reward)

	xMoves["o"] = oMoves["o"]
	want := engineLine(t, runspec.Spec{Scenario: "tictactoe", Seed: seed}, xMoves)
	assert.Equal(t, want, eps.String())
	rec, err := c.Record(ctx, "game-1")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(want, strings.TrimSpace(string(rec))[:200]))
}

// TestControllerWithHouse: one session controls o of each episode, the
// house plays x with minimax; negotiation and El Farol with a controller of
// every seat.
func TestController(t *testing.T) {
	c, _, eps, _ := start(t, envserver.Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		spec runspec.Spec
		req  envclient.ResetRequest
	}{
		{runspec.Spec{Scenario: "tictactoe", Seed: 3, Policies: map[string]runspec.Policy{"x": {Name: "minimax"}}, RolloutIDBase: 7, GroupIndexBase: 7},
			envclient.ResetRequest{Scenario: "tictactoe", Open: []string{"o"}, Policies: map[string]string{"x": "minimax"}}},
		{runspec.Spec{Scenario: "negotiation", Seed: 3, Allocators: []string{"team", "individual"}, RewardFormat: "dict", RolloutIDBase: 7, GroupIndexBase: 7},
			envclient.ResetRequest{Scenario: "negotiation", Allocators: []string{"team", "individual"}, RewardFormat: "dict"}},
		{runspec.Spec{Scenario: "elfarol", Seed: 3, Params: map[string]string{"agents": "5", "nights": "3"}, Allocators: []string{"shapley"}, RolloutIDBase: 7, GroupIndexBase: 7},
			envclient.ResetRequest{Scenario: "elfarol", Params: map[string]string{"agents": "5", "nights": "3"}, Allocators: []string{"shapley"}}},
	} {
		t.Run(tc.spec.Scenario, func(t *testing.T) {
			before := len(eps.String())
			seed, rid := uint64(3), int64(7)
			tc.req.Seed, tc.req.RolloutID = &seed, &rid
			s, res, err := c.Reset(ctx, tc.req)
			require.NoError(t, err)
			moves, res, err := playFirst(ctx, s, res)
			require.NoError(t, err)
			assert.Contains(t, []string{"completed", "truncated"}, res.Observation.Status)
			assert.Equal(t, engineLine(t, tc.spec, moves), eps.String()[before:])
		})
	}
}

// TestBadInput: malformed requests, moves out of turn, illegal moves,
// unknown sessions, each answered with its code and a message that says
// what was wrong; nothing changes.
func TestBadInput(t *testing.T) {
	c, hs, _, _ := start(t, envserver.Config{Token: "sesame-0123456789abcdef", MaxWait: 50 * time.Millisecond})
	ctx := t.Context()
	post := func(path, body string, auth bool) (int, envclient.Error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+path, strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer sesame-0123456789abcdef")
		}
		resp, err := hs.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var eb envclient.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
		if eb.Error == nil {
			return resp.StatusCode, envclient.Error{}
		}
		return resp.StatusCode, *eb.Error
	}
	code, e := post("/reset", `{"scenario":"tictactoe"}`, false)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, e = post("/reset", `{"scenario":`, true)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, e.Message, "malformed JSON")
	code, e = post("/reset", `{"scenario":"tictactoe","colour":"red"}`, true)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, e.Message, `unknown field "colour"`)
	code, e = post("/reset", `{"scenario":"chess"}`, true)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, e.Message, "chess")
	code, e = post("/reset", `{"scenario":"tictactoe","params":{"illegal":"maybe"}}`, true)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, e.Message, "illegal")
	code, e = post("/reset", `{"scenario":"tictactoe","seats":["z"]}`, true)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, e.Message, `"z"`)
	code, e = post("/step", `{"session_id":"s-nope","action":{"move":"a1"}}`, true)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, envclient.CodeUnknown, e.Code)
	// A path ServeMux would redirect to its clean form is no endpoint,
	// answered in the server's shape, not a redirect a POST would follow.
	code, e = post("/health/../reset", `{"scenario":"tictactoe"}`, true)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, e.Message, "no endpoint /health/../reset")

	x, _, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Seats: []string{"x"}, EpisodeID: "g"})
	require.NoError(t, err)
	o, res, err := c.Reset(ctx, envclient.ResetRequest{Join: "g", Seats: []string{"o"}})
	require.NoError(t, err)
	assert.Empty(t, res.Observation.Pending, "the step's wait ends with x to move")
	_, _, err = c.Reset(ctx, envclient.ResetRequest{Join: "g", Seats: []string{"o"}})
	assertCode(t, err, envclient.CodeTaken)
	_, _, err = c.Reset(ctx, envclient.ResetRequest{Join: "g", Scenario: "tictactoe"})
	assertCode(t, err, envclient.CodeBadRequest)

	_, err = o.Step(ctx, "", "a1")
	assertCode(t, err, envclient.CodeNotYourTurn)
	_, err = o.Step(ctx, "x", "a1")
	assertCode(t, err, envclient.CodeNotYours)
	_, err = x.Step(ctx, "", "d4")
	assertCode(t, err, envclient.CodeIllegal)
	assert.Contains(t, err.Error(), `"d4" is not one of agent x's legal actions`)
	st, err := x.State(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, st.Waiting, "refused moves changed nothing")
	assert.Equal(t, 1, st.StepCount)
}

func assertCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae *envclient.APIError
	if assert.True(t, errors.As(err, &ae), "%v", err) {
		assert.Equal(t, code, ae.Code(), ae.Error())
	}
}

// TestVanish: a session that leaves mid-episode (its WebSocket drops, or
// it closes) hands its seat to the fallback, and the record says so.
func TestVanish(t *testing.T) {
	c, hs, _, _ := start(t, envserver.Config{})
	ctx := t.Context()

	// Over a WebSocket: x moves once, then the connection drops; the
	// house's policy (random) plays x's turns on, noted in the record.
	ws, _, err := websocket.Dial(ctx, strings.Replace(hs.URL, "http", "ws", 1)+"/ws", nil)
	require.NoError(t, err)
	send := func(typ, data string) envclient.WSMessage {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"type":"`+typ+`","data":`+data+`}`)))
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var m envclient.WSMessage
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	m := send("reset", `{"scenario":"tictactoe","episode_id":"w","open":["x"],"policies":{"x":"random","o":"random"}}`)
	require.Equal(t, "observation", m.Type, string(m.Data))
	m = send("step", `{"move":"z9"}`)
	require.Equal(t, "error", m.Type)
	assert.Contains(t, string(m.Data), `"code":"illegal_action"`)
	m = send("step", `{"move":"b2"}`)
	require.Equal(t, "observation", m.Type, string(m.Data))
	m = send("state", `{}`)
	require.Equal(t, "state", m.Type)
	assert.Contains(t, string(m.Data), `"step_count":3`)
	require.NoError(t, ws.CloseNow())
	rec := waitRecord(t, c, "w")
	assert.Contains(t, rec, `"table_fallback":"its WebSocket closed"`)
	assert.Contains(t, rec, `"status":"completed"`)

	// Over HTTP, forfeit: the episode ends aborted, naming the seat.
	s, _, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", EpisodeID: "f", Open: []string{"o"}, Fallback: "forfeit"})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	rec = waitRecord(t, c, "f")
	assert.Contains(t, rec, `"status":"aborted"`)
	assert.Contains(t, rec, `"end":"forfeit"`)
	assert.Contains(t, rec, `seat 1 (o) forfeited: the session closed`)
	_, err = s.Wait(ctx)
	assertCode(t, err, envclient.CodeUnknown)
}

// waitRecord polls the record of an episode until it is over: the session
// that left ends it on the server's side.
func waitRecord(t *testing.T, c *envclient.Client, id string) string {
	t.Helper()
	for {
		rec, err := c.Record(t.Context(), id)
		if err == nil {
			return string(rec)
		}
		var ae *envclient.APIError
		require.True(t, errors.As(err, &ae) && ae.Status == http.StatusConflict, "%v", err)
		runtime.Gosched()
	}
}

// TestRetained: the server keeps the last MaxRetained finished episodes
// readable, and forgets older ones.
func TestRetained(t *testing.T) {
	c, _, _, _ := start(t, envserver.Config{MaxRetained: 2})
	ctx := t.Context()
	for _, id := range []string{"r1", "r2", "r3"} {
		s, res, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", EpisodeID: id})
		require.NoError(t, err)
		_, _, err = playFirst(ctx, s, res)
		require.NoError(t, err)
	}
	_, err := c.Record(ctx, "r1")
	assertCode(t, err, envclient.CodeUnknown)
	for _, id := range []string{"r2", "r3"} {
		_, err := c.Record(ctx, id)
		require.NoError(t, err)
	}
}

// TestShutdown: shutting down ends the episodes in play aborted,
// "interrupted", and writes them; new episodes are refused.
func TestShutdown(t *testing.T) {
	c, _, eps, s := start(t, envserver.Config{MaxWait: time.Millisecond})
	ctx := t.Context()
	_, _, err := c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe", Seats: []string{"x"}, EpisodeID: "cut"})
	require.NoError(t, err)
	s.Shutdown()
	assert.Contains(t, eps.String(), `"status":"aborted"`)
	assert.Contains(t, eps.String(), `"end":"interrupted"`)
	_, _, err = c.Reset(ctx, envclient.ResetRequest{Scenario: "tictactoe"})
	assertCode(t, err, envclient.CodeDraining)
	h, err := c.Health(ctx)
	var ae *envclient.APIError
	require.True(t, errors.As(err, &ae), "%v %v", h, err)
	assert.Equal(t, http.StatusServiceUnavailable, ae.Status)
}
