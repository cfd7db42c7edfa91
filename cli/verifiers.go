package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/rollout/verifiers"
)

// serveRollouts runs the rollout service of cfg until ctx ends and, with
// a verifiers address, verifiers' env-server protocol beside it
// (rollout/verifiers): its runs are played by the same service in
// process, so they share its episode slots, LLM endpoints and stateful
// allocators. Both drain on ctx's end; the first error is returned.
func (a *App) serveRollouts(ctx context.Context, cfg server.Config, vaddr string, eps *llmEndpoints) error {
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	if vaddr == "" {
		return httpedge.ListenAndServe(ctx, cfg.Addr, "rollout service", s.Serve)
	}
	vs, err := verifiers.New(verifiers.Config{
		Addr: vaddr, Rollouts: verifiers.HandlerRoller(s, cfg.Token), Scenarios: cfg.Scenarios, Endpoint: eps.endpointOf,
		Logger: cfg.Logger, ShutdownTimeout: cfg.ShutdownTimeout,
		// A run waits for one of the service's episode slots holding its
		// request: twice the slots lets a batch wait while one plays.
		MaxRuns: 2 * cmp.Or(cfg.MaxConcurrentEpisodes, server.DefaultMaxConcurrentEpisodes),
		Ready: func(addr string) {
			fmt.Fprintf(a.Stderr, "troupe: serving verifiers' env-server protocol on %s\n", addr)
		},
	})
	if err != nil {
		return fmt.Errorf("--verifiers-addr: %w", err)
	}
	if !loopbackZMQ(vaddr) {
		fmt.Fprintf(a.Stderr, "troupe: warning: --verifiers-addr %s is not a loopback address, and verifiers' protocol has no authentication: bind it to a private network only\n", vaddr)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var verr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if verr = vs.Serve(ctx); verr != nil {
			cancel() // the HTTP service stops with it
		}
	}()
	herr := httpedge.ListenAndServe(ctx, cfg.Addr, "rollout service", s.Serve)
	cancel()
	wg.Wait()
	return errors.Join(herr, verr)
}

// loopbackZMQ reports whether a ZMQ endpoint binds a loopback address.
func loopbackZMQ(addr string) bool {
	hostport, ok := strings.CutPrefix(addr, "tcp://")
	if !ok {
		return false
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return false
	}
	return httpedge.Loopback(hostport)
}

// endpointOf names the endpoint whose base URL a verifiers request's
// client base_url is: the default (--llm-base-url, "") or one of
// --llm-endpoint's. The service calls only the endpoints it was started
// with, with their keys; any other URL is refused, listing them.
func (e *llmEndpoints) endpointOf(baseURL string) (string, error) {
	want := normalURL(baseURL)
	if want == normalURL(e.base.BaseURL) {
		return "", nil
	}
	var served []string
	for _, name := range slices.Sorted(maps.Keys(e.named)) {
		if normalURL(e.named[name].BaseURL) == want {
			return name, nil
		}
		served = append(served, e.named[name].BaseURL)
	}
	return "", fmt.Errorf("%q is not an endpoint this service calls (it calls %s; start troupe serve with --llm-base-url or --llm-endpoint NAME=URL for it)",
		baseURL, strings.Join(append([]string{e.base.BaseURL}, served...), ", "))
}

// normalURL is a base URL compared without a trailing slash and with its
// scheme and host in lower case.
func normalURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return strings.TrimRight(s, "/")
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	return u.String()
}
