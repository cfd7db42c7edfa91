// Package httpedge holds what troupe's HTTP services share at their edge:
// the bearer-token check, the JSON content-type check, and the check of
// a path ServeMux would redirect (Canonical, Routed). The rollout service
// (rollout/server) and the environment server (envserver) use them;
// the viewer uses Routed.
package httpedge

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"mime"
	"net"
	"net/http"
	"path"
	"strings"
)

// Token is a service's bearer token, kept hashed. The zero Token (NewToken
// of "") lets every request through.
type Token struct {
	set  bool
	hash [sha256.Size]byte
}

// NewToken returns the token s; "" is no token.
func NewToken(s string) Token {
	if s == "" {
		return Token{}
	}
	return Token{set: true, hash: sha256.Sum256([]byte(s))}
}

// Authorized checks r's "Authorization: Bearer TOKEN" header. Both sides
// are hashed first, so the comparison takes the same time whatever the
// lengths.
func (t Token) Authorized(r *http.Request) bool {
	if !t.set {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], t.hash[:]) == 1
}

// CheckJSON accepts a request with a JSON media type, or none; its error
// says what to send.
func CheckJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return fmt.Errorf("Content-Type %q: send application/json", ct)
}

// Canonical reports whether p, a request's URL.Path, is one that
// http.ServeMux routes as it is: rooted, with no "." or ".." element and
// no doubled slash (a trailing slash is allowed). ServeMux answers any
// other path with a redirect to its cleaned form; troupe's servers answer
// it 404 in their own shape instead, as they did before they routed with
// ServeMux, rather than send a client (a POST included) elsewhere.
func Canonical(p string) bool {
	c := path.Clean(p)
	return strings.HasPrefix(p, "/") && (c == p || (c != "/" && c+"/" == p))
}

// Routed returns mux as a handler that answers a path that is not
// Canonical with notFound, where ServeMux would redirect it: no endpoint
// has such a name, and a ".." must lead nowhere.
func Routed(mux *http.ServeMux, notFound http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Canonical(r.URL.Path) {
			notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ListenAndServe listens on addr (TCP) and hands the listener to serve, a
// service's Serve; what names the service in the listener's error.
func ListenAndServe(ctx context.Context, addr, what string, serve func(context.Context, net.Listener) error) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return serve(ctx, ln)
}
