package viewer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/troupe-rl/troupe/internal/httpedge"
)

// DefaultAddr is where Serve listens by default: this machine only, on a
// free port.
const DefaultAddr = "127.0.0.1:0"

// ErrExposed is returned by Serve for an address other machines can reach
// without a token.
var ErrExposed = httpedge.ErrExposed

// ServeConfig is how Serve listens.
type ServeConfig struct {
	Addr  string // host:port; DefaultAddr when empty
	Token string // required of every request when set; required beyond loopback
	// Ready, when set, is called with the viewer's URL (the token in it)
	// once it listens.
	Ready func(url string)
}

// Serve serves the viewer until ctx is done, then shuts down.
func Serve(ctx context.Context, v *Viewer, cfg ServeConfig) error {
	addr := cfg.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	// The viewer is never served open: its token is its only lock.
	if _, err := httpedge.CheckAccess(addr, cfg.Token, false, ""); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := httpedge.Server(v.Handler(cfg.Token, httpedge.Loopback(addr)), 0, 0)
	if cfg.Ready != nil {
		u := url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/"}
		if cfg.Token != "" {
			u.RawQuery = url.Values{"token": {cfg.Token}}.Encode()
		}
		cfg.Ready(u.String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
