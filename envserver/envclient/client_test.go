package envclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver/envclient"
)

// TestErrors: an error answer becomes an *APIError wrapping ErrServer,
// with the server's code, or the body's text when it is not the server's
// JSON (a proxy's page).
func TestErrors(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case envclient.PathReset:
			assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":{"code":"illegal_action","message":"no"}}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream down\n"))
		}
	}))
	defer hs.Close()
	c := envclient.New(hs.URL+"/", "tok", nil)
	_, _, err := c.Reset(t.Context(), envclient.ResetRequest{Scenario: "tictactoe"})
	require.ErrorIs(t, err, envclient.ErrServer)
	var ae *envclient.APIError
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, envclient.CodeIllegal, ae.Code())
	assert.Equal(t, http.StatusUnprocessableEntity, ae.Status)

	_, err = c.Health(t.Context())
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, http.StatusBadGateway, ae.Status)
	assert.Equal(t, "upstream down", ae.Body.Message)
}
