package httpedge_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/troupe-rl/troupe/internal/httpedge"
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
