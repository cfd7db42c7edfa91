package envserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver/envclient"
)

// TestIdle: a silent HTTP session's seat falls back to the house policy
// after SessionTimeout, and an episode that waits that long for a seat
// nobody took ends aborted, end "idle". In virtual time.
func TestIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{SessionTimeout: time.Minute})
		require.NoError(t, err)
		ctx := context.Background()
		_, x, e := s.reset(ctx, &envclient.ResetRequest{Scenario: "tictactoe", Open: []string{"x"}, Policies: map[string]string{"x": "random", "o": "random"}}, false)
		require.Nil(t, e)
		_, half, e := s.reset(ctx, &envclient.ResetRequest{Scenario: "tictactoe", Seats: []string{"x"}}, false)
		require.Nil(t, e)

		time.Sleep(30 * time.Second)
		s.reap()
		assert.Nil(t, x.ep.tb.Record(), "not idle yet")
		time.Sleep(31 * time.Second)
		s.reap()

		rec := x.ep.tb.Record()
		require.NotNil(t, rec)
		assert.Equal(t, "completed", string(rec.Status))
		assert.Equal(t, "the session was idle for 1m0s", rec.Turns[0].Notes["table_fallback"])

		rec = half.ep.tb.Record()
		require.NotNil(t, rec)
		assert.Equal(t, "aborted", string(rec.Status))
		assert.Equal(t, EndIdle, rec.End)
		assert.Contains(t, rec.Err, "seats no session took: [o]")
		_, e = s.session(x.id)
		require.NotNil(t, e)
		assert.Equal(t, envclient.CodeUnknown, e.body.Code)
	})
}

// FuzzRequests: whatever a body holds, the server answers /reset and /step
// with a success or a 4xx error naming what was wrong, never a 5xx or a
// panic, and a WebSocket message likewise.
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{
		`{"scenario":"tictactoe"}`, `{"scenario":"tictactoe","seats":["x"],"open":["x"],"policies":{"o":"minimax"}}`,
		`{"scenario":"elfarol","params":{"agents":"3"},"limits":{"max_turns":2}}`, `{"join":"nope","seats":["o"]}`,
		`{"scenario":"negotiation","on_invalid":{"mode":"end","penalty":-1,"bonus":1},"pass_illegal":true}`,
		`{"session_id":"x","action":{"move":"a1"}}`, `{"type":"reset","data":{"scenario":"tictactoe"}}`, `{`, `[]`, `null`,
		`{"scenario":"bargain","allocators":["team","difference"],"reward":"shapley"}`, `{"scenario":"tictactoe","reward":"difference:c=average"}`,
		`{"scenario":"werewolf","reward":"team","allocators":["team"]}`, `{"join":"x","reward":"team"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s, err := New(Config{MaxWait: time.Millisecond})
		require.NoError(t, err)
		for _, path := range []string{envclient.PathReset, envclient.PathStep, envclient.PathSeats, envclient.PathClose} {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			if w.Code >= 500 {
				t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
			}
			if w.Code >= 400 {
				assert.Contains(t, w.Body.String(), `"message":"`)
			}
		}
		var ss *session
		if _, _, e := s.wsMessage(context.Background(), "http://127.0.0.1", []byte(body), &ss); e != nil && e.status >= 500 {
			t.Fatalf("ws %q: %v", body, e)
		}
		s.Shutdown()
	})
}

// FuzzVector feeds any body to POST /vectors and, as an actions frame, to
// a tic-tac-toe vector's step: never a server error, always a message.
func FuzzVector(f *testing.F) {
	for _, seed := range []string{
		`{"scenario":"tictactoe","num_envs":2}`, `{"scenario":"elfarol","num_envs":3,"params":{"agents":"3"},"allocators":["difference"],"reward":"difference"}`,
		`{"scenario":"blotto","num_envs":1,"open":["red-0"],"final_observations":true}`, `{"scenario":"tictactoe","num_envs":1,"view_bytes":-1}`,
		"TVA1\x02\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x04\x00\x00\x00\xff\xff\xff\xff",
		"TVA1\x02\x00\x00\x00\x02\x00\x00\x00", `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := New(Config{MaxVectorEnvs: 64})
		require.NoError(t, err)
		defer s.Shutdown()
		post := func(path, ctype string, body []byte) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			r.Header.Set("Content-Type", ctype)
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code >= 500 {
				t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
			}
			if w.Code >= 400 {
				assert.Contains(t, w.Body.String(), `"message":"`)
			}
			return w
		}
		if w := post(envclient.PathVectors, "application/json", body); w.Code == http.StatusOK {
			var a envclient.VectorAnswer
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
			post(envclient.PathVector+a.VectorID+"/reset", "application/json", nil)
			acts := make([]int32, a.NumEnvs*len(a.Agents))
			post(envclient.PathVector+a.VectorID+"/step", envclient.ContentBinary, envclient.AppendActions(nil, envclient.Actions{NumEnvs: a.NumEnvs, NumAgents: len(a.Agents), Actions: acts}))
		}
		w := post(envclient.PathVectors, "application/json", []byte(`{"scenario":"tictactoe","num_envs":2}`))
		var a envclient.VectorAnswer
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		post(envclient.PathVector+a.VectorID+"/reset", "application/json", nil)
		post(envclient.PathVector+a.VectorID+"/step", envclient.ContentBinary, body)
	})
}

// TestVectorBudget: the server bounds the elements of all its vectors'
// batches together, not only their envs, so that many vectors of long
// observations cannot hold the machine's memory; a closed vector gives
// its share back.
func TestVectorBudget(t *testing.T) {
	s, err := New(Config{})
	require.NoError(t, err)
	req := &envclient.VectorRequest{Scenario: "tictactoe", NumEnvs: 4}
	v, e := s.createVector(req)
	require.Nil(t, e)
	s.vectorBudget = 2 * v.cost
	w, e := s.createVector(req)
	require.Nil(t, e)
	_, e = s.createVector(req)
	require.NotNil(t, e, "a third vector is over the budget of two")
	assert.Equal(t, http.StatusServiceUnavailable, e.status)
	assert.Contains(t, e.body.Message, "batch elements")
	w.close(EndVectorClosed)
	_, e = s.createVector(req)
	require.Nil(t, e, "the closed vector's share is free again")
	v.close(EndVectorClosed)
}

// TestFreshSessionLeaves: a session-less step's fresh session whose first
// turn is not waited for (the request or the WebSocket ended) leaves: a
// WebSocket's session is never reaped for idleness, so it would hold its
// seat, and a MaxSessions slot, for as long as the server runs.
func TestFreshSessionLeaves(t *testing.T) {
	s, err := New(Config{Default: &envclient.ResetRequest{Scenario: "tictactoe", Open: []string{"x", "o"}, Seats: []string{"o"}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ws := range []bool{false, true} {
		_, e := s.freshSession(ctx, ws)
		require.NotNil(t, e, "o waits for x, which nobody holds")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Empty(t, s.sessions)
}

// TestDefaultedFeatures: a reset that names no scenario (OpenEnv's, of
// the server's default episode) keeps its own features, as it keeps its
// other fields.
func TestDefaultedFeatures(t *testing.T) {
	s, err := New(Config{Default: &envclient.ResetRequest{Scenario: "tictactoe"}})
	require.NoError(t, err)
	_, ss, e := s.reset(context.Background(), &envclient.ResetRequest{Features: true}, false)
	require.Nil(t, e)
	assert.True(t, ss.features, "features: true was dropped")
	s.leave(context.Background(), ss, "done")
}

// TestOpenAPIResetFields: the OpenAPI document's ResetRequest, which
// allows no other properties, has every field a reset takes, so that a
// client validating against it may send them all.
func TestOpenAPIResetFields(t *testing.T) {
	doc, err := openAPI("test")
	require.NoError(t, err)
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(doc, &d))
	props := d.Components.Schemas["ResetRequest"].Properties
	rt := reflect.TypeFor[envclient.ResetRequest]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		assert.Contains(t, props, name)
	}
}
