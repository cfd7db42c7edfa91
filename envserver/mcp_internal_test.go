package envserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver/envclient"
)

// FuzzMCP feeds any body to /mcp as OpenEnv's clients post it, and as a
// WebSocket's mcp message and step: /mcp always answers 200 with a
// JSON-RPC 2.0 response, and nothing answers a server error.
func FuzzMCP(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"act","arguments":{"move":"b2"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"new_episode","arguments":{"scenario":"elfarol","params":{"agents":"2"}}}}`,
		`{"jsonrpc":"2.0","method":"openenv/session/create"}`, `{"jsonrpc":"2.0","method":"openenv/session/close","params":{"session_id":"m-1"}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"observe","session_id":"nope"}}`, `{"jsonrpc":"1.0"}`, `[]`, `null`, `{`,
		`{"type":"call_tool","tool_name":"scenarios"}`, `{"type":"list_tools"}`, `{"type":"call_tool"}`, `{"type":3}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s, err := New(Config{MaxWait: time.Millisecond, Default: &envclient.ResetRequest{Scenario: "tictactoe", Open: []string{"x"}}})
		require.NoError(t, err)
		defer s.Shutdown()
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, envclient.PathMCP, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("/mcp %q: %d %s", body, w.Code, w.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out["jsonrpc"] != "2.0" {
			t.Fatalf("/mcp %q: not JSON-RPC 2.0: %s", body, w.Body)
		}
		var ss *session
		ctx := context.Background()
		for _, typ := range []string{"mcp", "step"} {
			msg, _ := json.Marshal(map[string]any{"type": typ, "data": json.RawMessage(body)})
			if !json.Valid([]byte(body)) {
				msg = []byte(`{"type":"` + typ + `","data":` + body + `}`)
			}
			if _, _, e := s.wsMessage(ctx, "http://127.0.0.1", msg, &ss); e != nil && e.status >= 500 {
				t.Fatalf("ws %s %q: %v", typ, body, e)
			}
		}
	})
}

// TestMCPBodyErrors: /mcp answers a body over MaxBodyBytes 413 and one
// that cannot be read (the client went away mid-body) 400, as every other
// route does, not 413 for both.
func TestMCPBodyErrors(t *testing.T) {
	s, err := New(Config{MaxBodyBytes: 64})
	require.NoError(t, err)
	for _, tc := range []struct {
		body io.Reader
		want int
	}{
		{strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","pad":"` + strings.Repeat("x", 64) + `"}`), http.StatusRequestEntityTooLarge},
		{io.MultiReader(strings.NewReader(`{"jsonrpc":`), iotest.ErrReader(io.ErrUnexpectedEOF)), http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, envclient.PathMCP, tc.body))
		require.Equal(t, tc.want, w.Code, w.Body.String())
	}
}
