// Package httpedge holds what troupe's HTTP services share at their edge:
// the http.Server and its limits (Server: header and body deadlines,
// header size), who may reach a server (CheckAccess: a token of
// MinTokenBytes, needed beyond loopback), the bearer-token check, the
// JSON content-type check, and the check of a path ServeMux would
// redirect (Canonical, Routed). The rollout service (rollout/server), the
// environment server (envserver) and the viewer use them.
package httpedge

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"time"
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

// The limits every troupe HTTP server's edge keeps (Server).
const (
	// DefaultReadHeaderTimeout bounds the reading of a request's header.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds the reading of a request's body, from
	// the handler's start: a client that announces a body and sends it
	// a byte at a time is cut off then.
	DefaultBodyTimeout = 30 * time.Second
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes = 64 << 10
	// MinTokenBytes is the shortest bearer token a server takes: 16
	// bytes, 128 bits when they are random bytes. A hex token must be
	// twice as long for as many bits: `openssl rand -hex 16` writes 32
	// characters, 128 bits.
	MinTokenBytes = 16
)

// Server returns the http.Server that serves h at troupe's edge: headers
// within readHeader (DefaultReadHeaderTimeout when 0) and of at most
// MaxHeaderBytes, each request's body within body of its handler's start
// (BodyDeadline; DefaultBodyTimeout when 0). It sets no ReadTimeout: that
// deadline stays on the connection while a handler runs, and its expiry
// cancels the request's context, which a handler that waits (a long-poll
// step, a rollout of minutes) must not see.
func Server(h http.Handler, readHeader, body time.Duration) *http.Server {
	return &http.Server{
		Handler:           BodyDeadline(h, cmp.Or(body, DefaultBodyTimeout)),
		ReadHeaderTimeout: cmp.Or(readHeader, DefaultReadHeaderTimeout),
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// BodyDeadline returns h with a deadline on each request's body: a read of
// the body past d from the handler's start fails with an error that
// BodyTimedOut reports, and the connection is closed (a body not read by
// then is not waited for either: the server's reading of what the handler
// left fails at the same deadline). Once the body is read whole the
// connection has no read deadline again, so a handler may wait as long as
// it likes after reading it. A request without a body (GET) has none.
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody is a request body under BodyDeadline's deadline, which it
// lifts at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		// The server now watches the connection for the client going
		// away; under the deadline that watch would cancel the
		// request's context when it passed.
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// BodyTimedOut reports whether err, a request body's read error, is
// BodyDeadline's deadline passing.
func BodyTimedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// Errors of CheckAccess.
var (
	// ErrExposed: an address beyond loopback without a token, and not
	// declared open.
	ErrExposed = errors.New("an address beyond loopback needs a token")
	// ErrShortToken: a token shorter than MinTokenBytes.
	ErrShortToken = errors.New("the token is too short")
)

// CheckAccess checks who can reach a server that listens on addr with
// token: a token must have MinTokenBytes at least, and an address other
// machines can reach (any but a loopback address or "localhost": 0.0.0.0,
// a host name, an empty host) needs one, unless open says the server is
// meant to be open to its network, in which case warning says so, to be
// printed. flag names the option that sets open, for the error ("": the
// server has none).
func CheckAccess(addr, token string, open bool, flag string) (warning string, err error) {
	if token != "" && len(token) < MinTokenBytes {
		return "", fmt.Errorf("%w: %d bytes, fewer than %d (128 bits: openssl rand -hex 16)", ErrShortToken, len(token), MinTokenBytes)
	}
	if token != "" || Loopback(addr) {
		return "", nil
	}
	switch {
	case !open && flag == "":
		return "", fmt.Errorf("--addr %s: %w (--token-file or $TROUPE_TOKEN)", addr, ErrExposed)
	case !open:
		return "", fmt.Errorf("--addr %s: %w (--token-file or $TROUPE_TOKEN), or %s to serve anyone who can reach it", addr, ErrExposed, flag)
	}
	return fmt.Sprintf("--addr %s without a token (%s): anyone who can reach this address may use the server", addr, flag), nil
}

// Loopback reports whether addr, host:port or a host, names this machine
// only: a loopback IP address or "localhost".
func Loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		h = addr
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
