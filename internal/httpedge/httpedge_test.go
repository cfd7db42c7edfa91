package httpedge_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/httpedge/edgetest"
)

func TestToken(t *testing.T) {
	req := func(auth string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return httpedge.NewToken("sesame").Authorized(r)
	}
	assert.True(t, req("Bearer sesame"))
	assert.True(t, req("bearer  sesame "))
	assert.False(t, req("Bearer sesam"))
	assert.False(t, req("Basic sesame"))
	assert.False(t, req("sesame"))
	assert.False(t, req(""))
	assert.True(t, httpedge.NewToken("").Authorized(httptest.NewRequest("GET", "/", nil)), "no token: open")
}

func TestCheckJSON(t *testing.T) {
	for ct, ok := range map[string]bool{"": true, "application/json": true, "application/json; charset=utf-8": true,
		"application/merge-patch+json": true, "text/plain": false, "application/x-www-form-urlencoded": false, ";;": false} {
		r := httptest.NewRequest("POST", "/", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		err := httpedge.CheckJSON(r)
		assert.Equal(t, ok, err == nil, "%q: %v", ct, err)
	}
}

func TestCanonical(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/v1/rollouts": true, "/episodes/e/seats/a/": true, "/run-0/ep-1.html": true,
		"": false, "//": false, "//v1/rollouts": false, "/a//b": false, "/a/./b": false, "/a/../b": false,
		"/../go.mod": false, "/run-0/../../etc/passwd": false, "/a/.": false, "relative": false,
	} {
		if got := httpedge.Canonical(p); got != want {
			t.Errorf("Canonical(%q) = %v, want %v", p, got, want)
		}
	}
}

// A client that announces a body and sends one byte of it (slowloris) is
// answered 408 by a handler that reads the body, and its connection is
// closed, once the body deadline passes; a handler that reads a whole
// body may then wait past the deadline without its request's context
// being cancelled.
func TestBodyDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	waited := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			if httpedge.BodyTimedOut(err) {
				w.Header().Set("Connection", "close")
				http.Error(w, "too slow", http.StatusRequestTimeout)
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(2 * deadline):
			waited <- nil
		case <-r.Context().Done():
			waited <- r.Context().Err()
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := httpedge.Server(h, time.Second, deadline)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	answer := edgetest.SlowBody(t, ln.Addr().String(), "/")
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 408 "), "%q", answer)

	// A body sent whole: the handler waits past the deadline, its
	// context alive.
	resp, err := http.Post("http://"+ln.Addr().String(), "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.NoError(t, <-waited, "the request's context outlives the body deadline")
}

// A token shorter than MinTokenBytes is refused; an address beyond
// loopback needs a token, or open, which gives a warning.
func TestCheckAccess(t *testing.T) {
	long := strings.Repeat("k", httpedge.MinTokenBytes)
	for _, c := range []struct {
		addr, token string
		open        bool
		err         error
		warns       bool
	}{
		{"127.0.0.1:8378", "", false, nil, false},
		{"localhost:8378", "", false, nil, false},
		{"[::1]:8378", "", false, nil, false},
		{"127.0.0.1:8378", "k", false, httpedge.ErrShortToken, false},
		{"127.0.0.1:8378", long[1:], false, httpedge.ErrShortToken, false},
		{"0.0.0.0:8378", "k", true, httpedge.ErrShortToken, false},
		{"0.0.0.0:8378", "", false, httpedge.ErrExposed, false},
		{":8378", "", false, httpedge.ErrExposed, false},
		{"example.org:8378", "", false, httpedge.ErrExposed, false},
		{"0.0.0.0:8378", long, false, nil, false},
		{"0.0.0.0:8378", "", true, nil, true},
	} {
		warning, err := httpedge.CheckAccess(c.addr, c.token, c.open, "--insecure-open")
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, "%+v", c)
		} else {
			assert.NoError(t, err, "%+v", c)
		}
		assert.Equal(t, c.warns, warning != "", "%+v: %q", c, warning)
	}
	_, err := httpedge.CheckAccess("0.0.0.0:1", "", false, "--insecure-open")
	assert.ErrorContains(t, err, "--insecure-open", "the error names the way out")
}
