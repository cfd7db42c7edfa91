// Package server is troupe's HTTP rollout service: slime (or any caller)
// posts a rollout request, the service plays the episodes and answers with
// their samples, grouped per rollout. The wire contract is package rollout;
// `troupe serve` runs Serve.
//
// Safe defaults: it binds 127.0.0.1, checks an optional bearer token in
// constant time, limits request bodies, applies read, write and idle
// timeouts, bounds each episode and each request in time, and bounds the
// episodes played at once, and bounds each answer in samples and bytes
// (422 past either, never a truncated answer). Serve drains on
// cancellation (SIGTERM in the CLI): new rollout requests are answered
// 503, kept-alive connections included, the ones in flight finish, and
// when the shutdown timeout passes their episodes are aborted and answered
// as aborted rollouts rather than dropped.
//
// Each rollout request becomes a run spec (package runspec: the request's
// fields over the service's defaults, merged in one place, specOf),
// resolved by the one resolver that troupe run, NATS workers and
// experiments use; its episodes are played from the resolved values by
// play.Run, the one play loop (here or, with Config.Remote, by troupe
// workers), and its answer is written by trajectories.Output, which
// allocates the credit and numbers the samples as for any run.
//
// Stateful allocators (RAE) exist once per allocator spec for the life of the
// Server, shared by all requests, updated by one request at a time (see
// package rollout for the order and rollout.HeaderAllocationSeq), and kept across
// restarts in Config.AllocatorStateDir.
package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/promtext"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Defaults of Config's zero fields.
const (
	DefaultAddr                  = "127.0.0.1:8377"
	DefaultMaxBodyBytes          = 1 << 20
	DefaultMaxEpisodesPerRequest = 256
	DefaultMaxConcurrentEpisodes = 1024
	DefaultEpisodeTimeout        = 10 * time.Minute
	DefaultRequestTimeout        = 15 * time.Minute
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultReadTimeout           = 30 * time.Second
	DefaultIdleTimeout           = 2 * time.Minute
	DefaultShutdownTimeout       = time.Minute
	// DefaultMaxSamplesPerAnswer bounds the samples of one answer. A slime
	// rollout group is n_samples_per_prompt episodes of a few seats and
	// turns (hundreds of samples); 65,536 leaves two orders of magnitude
	// above that, while a scripted sample of about 600 bytes keeps such an
	// answer near 40 MiB, under DefaultMaxAnswerBytes.
	DefaultMaxSamplesPerAnswer = 65536
	// DefaultMaxAnswerBytes bounds the encoded answer. 64 MiB holds about
	// two million LLM tokens with their log-probs and loss mask (some 30
	// bytes a token), far above a rollout group of long multi-turn
	// samples, and keeps what one request can pin in the service's memory
	// (the answer buffer) to a size a host of many concurrent requests can
	// afford.
	DefaultMaxAnswerBytes = 64 << 20
	// DefaultAbortGrace is how long Shutdown waits, once it has aborted the
	// episodes in flight, for their requests to be answered before it
	// closes the connections.
	DefaultAbortGrace = 10 * time.Second
)

// Config configures a Server. The zero value serves the built-in scenarios,
// allocators and scripted policies on DefaultAddr with the defaults above.
type Config struct {
	// Addr is the TCP address Serve listens on; "127.0.0.1:0" picks a port
	// (Ready reports it). An address beyond loopback needs a Token, or
	// InsecureOpen.
	Addr string
	// Token, when set, is the bearer token every request but GET /healthz
	// must carry ("Authorization: Bearer TOKEN"), httpedge.MinTokenBytes
	// long at least. It is compared in constant time.
	Token string
	// InsecureOpen serves an Addr beyond loopback without a token, to
	// anyone who can reach it; Serve logs a warning.
	InsecureOpen bool

	Scenarios  *env.Registry    // default scenarios.Builtin()
	Allocators *credit.Registry // default credit.Builtin()
	// Policies makes the policies the scenarios do not own (an LLM) for
	// the roles of each request's run spec: it is the service's
	// runspec.Resolvers.Policies, asked after the League's. For a name it
	// does not know it returns env.ErrUnknownPolicy, which the scenario's
	// own policies and "random" then resolve (roles a request names no
	// policy for play the scenario's default, else random: the resolver's
	// rule). It is called once per role and request; the policy it
	// returns serves every episode of the request, concurrently. Its other
	// errors are answered as 400 bad_policy with their text, so they
	// should name the bad field and what is allowed. nil: the scenarios'
	// own policies and "random" only. PolicySettings gives them their
	// settings in each request's run spec; nil: none.
	Policies       env.PolicyMaker
	PolicySettings PolicySettings
	// Calls counts the model calls of the policies Policies makes, for
	// GET /metrics: Policies' closure holds the same counter and hands it
	// to its policies. nil: New makes one, which nothing reports to.
	Calls *CallCounter

	// Seed is the service seed: a request without a seed plays the scenario
	// seed seeds.Mix(Seed, 1, group_index). It is the Seed of every
	// request's run spec (an LLM client's retry jitter derives from it).
	Seed uint64
	// RolloutIDBase is the first rollout_id the service hands out to
	// requests that bring none.
	RolloutIDBase int64

	MaxBodyBytes          int64 // request body limit; larger is 413
	MaxEpisodesPerRequest int   // the largest n a request may ask for
	// MaxSamplesPerAnswer bounds the samples of one answer, all episodes
	// together; a request over it is answered 422 too_many_samples: before
	// any episode is played when the scenario tells how many turns its
	// episodes take (MinTurnser), else as soon as an episode passes it
	// (the episode is stopped there, so its memory stays bounded).
	MaxSamplesPerAnswer int
	// MaxAnswerBytes bounds the encoded answer; encoding stops once past
	// it and the request is answered 422 answer_too_large, never with a
	// truncated body.
	MaxAnswerBytes int64
	// AllocatorStateDir, when set, is the directory where the service
	// keeps the state of its stateful allocators (RAE's baselines), one
	// file per allocator spec: loaded by New, saved after every request
	// that changed it and at shutdown. Without it the state lives as long
	// as the service.
	AllocatorStateDir string
	// MaxConcurrentEpisodes bounds the episodes played at once over all
	// requests; the others wait for a slot (their wait counts against the
	// request timeout).
	MaxConcurrentEpisodes int
	// EpisodeTimeout bounds one episode's wall time: an episode that runs
	// past it ends truncated (end "deadline"). A request may ask for less.
	EpisodeTimeout time.Duration
	// RequestTimeout bounds a rollout request from the start of its
	// episodes to its answer: episodes still running then are aborted and
	// answered as aborted rollouts, so no request hangs.
	RequestTimeout time.Duration

	// The http.Server's timeouts. ReadTimeout bounds the reading of a
	// request's body from its handler's start (httpedge.BodyDeadline),
	// after ReadHeaderTimeout's header: a slower body is answered 408.
	// WriteTimeout defaults to RequestTimeout plus a minute, so the
	// service always answers before the connection is cut.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration

	// ShutdownTimeout is how long Serve lets requests in flight finish
	// after its context is cancelled, before it aborts their episodes.
	ShutdownTimeout time.Duration
	// AbortGrace is how long Shutdown waits for aborted requests to be
	// answered before it closes their connections.
	AbortGrace time.Duration

	// ParallelPolicies asks the policies of an episode's simultaneous
	// actors at once (LLM policies); their answers are applied in seat
	// order all the same.
	ParallelPolicies bool
	// League, when set, plays every request as a match of a self-play
	// league (troupe serve --league): the request's policy in the
	// learner's role, the league's players in the others (see Matcher).
	League Matcher
	// Remote, when set, plays the episodes elsewhere (troupe workers on
	// NATS JetStream) instead of in this process.
	Remote Remote
	// ExtraMetrics, when set, appends more metrics, in the Prometheus
	// text format, to every /metrics answer (a Remote's queue depth and
	// workers, say).
	ExtraMetrics func(ctx context.Context, w io.Writer)

	// Logger receives the service's log lines; default: discard.
	Logger *slog.Logger
	// Ready, when set, is called by Serve with the address it listens on,
	// once it accepts connections.
	Ready func(addr net.Addr)
}

// ErrBadConfig is wrapped by New's errors.
var ErrBadConfig = errors.New("bad rollout service configuration")

// Causes of the cancellation of episodes, recorded in aborted episodes'
// error text.
var (
	ErrRequestTimeout = errors.New("the rollout request ran past the service's request timeout")
	ErrShutdown       = errors.New("the service shut down before the episode finished")
)

// ErrShutdownTimeout is returned by Shutdown when requests were still in
// flight at its deadline: their episodes were aborted and answered.
var ErrShutdownTimeout = errors.New("requests were still in flight when the shutdown timeout passed")

func (c Config) withDefaults() (Config, error) {
	for _, d := range []struct {
		name string
		v    int64
	}{
		{"MaxBodyBytes", c.MaxBodyBytes}, {"MaxEpisodesPerRequest", int64(c.MaxEpisodesPerRequest)},
		{"MaxConcurrentEpisodes", int64(c.MaxConcurrentEpisodes)}, {"EpisodeTimeout", int64(c.EpisodeTimeout)},
		{"RequestTimeout", int64(c.RequestTimeout)}, {"ReadHeaderTimeout", int64(c.ReadHeaderTimeout)},
		{"ReadTimeout", int64(c.ReadTimeout)}, {"WriteTimeout", int64(c.WriteTimeout)},
		{"IdleTimeout", int64(c.IdleTimeout)}, {"ShutdownTimeout", int64(c.ShutdownTimeout)},
		{"AbortGrace", int64(c.AbortGrace)}, {"RolloutIDBase", c.RolloutIDBase},
		{"MaxSamplesPerAnswer", int64(c.MaxSamplesPerAnswer)}, {"MaxAnswerBytes", c.MaxAnswerBytes},
	} {
		if d.v < 0 {
			return c, fmt.Errorf("%w: %s is negative (%d)", ErrBadConfig, d.name, d.v)
		}
	}
	if c.Token != strings.TrimSpace(c.Token) {
		return c, fmt.Errorf("%w: the token has leading or trailing spaces", ErrBadConfig)
	}
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	if _, err := httpedge.CheckAccess(c.Addr, c.Token, c.InsecureOpen, "--insecure-open"); err != nil {
		return c, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if c.Scenarios == nil {
		c.Scenarios = scenarios.Builtin()
	}
	if c.Allocators == nil {
		c.Allocators = credit.Builtin()
	}
	if c.Calls == nil {
		c.Calls = &CallCounter{}
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxEpisodesPerRequest = cmp.Or(c.MaxEpisodesPerRequest, DefaultMaxEpisodesPerRequest)
	c.MaxConcurrentEpisodes = cmp.Or(c.MaxConcurrentEpisodes, DefaultMaxConcurrentEpisodes)
	c.MaxSamplesPerAnswer = cmp.Or(c.MaxSamplesPerAnswer, DefaultMaxSamplesPerAnswer)
	c.MaxAnswerBytes = cmp.Or(c.MaxAnswerBytes, DefaultMaxAnswerBytes)
	c.EpisodeTimeout = cmp.Or(c.EpisodeTimeout, DefaultEpisodeTimeout)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, c.RequestTimeout+time.Minute)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.AbortGrace = cmp.Or(c.AbortGrace, DefaultAbortGrace)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c, nil
}

// Server is the rollout service. It is an http.Handler; Serve runs it on a
// listener. It is safe for concurrent use.
type Server struct {
	cfg     Config
	metrics *metrics
	// reuse is the engines and records of the requests' local executors,
	// and replays the engines of the replays of remote episodes.
	reuse   env.Reuse
	replays env.EnginePool
	slots   chan struct{} // episode slots: MaxConcurrentEpisodes

	nextRollout atomic.Int64
	nextGroup   atomic.Int64
	nextIndex   atomic.Int64

	// base is cancelled when a shutdown gives up waiting: every request's
	// episodes then end aborted.
	base       context.Context
	cancelBase context.CancelCauseFunc

	token     httpedge.Token
	mux       http.Handler // routes (httpedge.Routed)
	scenarios []byte       // the encoded GET /v1/scenarios answer
	allocs    []byte       // the encoded GET /v1/allocators answer
	bufs      sync.Pool
	stateful  *allocators // the stateful allocators

	mu       sync.Mutex
	draining bool
	inflight int           // rollout requests being answered
	idle     chan struct{} // closed when draining and inflight reaches 0
	http     *http.Server  // set by Serve
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		metrics: newMetrics(cfg.Scenarios.Names(), cfg.Calls),
		slots:   make(chan struct{}, cfg.MaxConcurrentEpisodes),
		idle:    make(chan struct{}),
		token:   httpedge.NewToken(cfg.Token),
	}
	s.nextRollout.Store(cfg.RolloutIDBase)
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	if s.scenarios, err = json.Marshal(describeScenarios(cfg.Scenarios)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if s.allocs, err = json.Marshal(describeAllocators(cfg.Allocators)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if s.stateful, err = loadAllocatorStates(cfg.AllocatorStateDir, cfg.Allocators); err != nil {
		return nil, err
	}
	s.mux = httpedge.Routed(s.routes(), s.notFound)
	return s, nil
}

// routes is the service's ServeMux: "METHOD PATH" patterns for the
// endpoints, and, so that every refusal is a JSON error body rather than
// ServeMux's plain-text one, a method-less pattern per path (405 with
// Allow) and "/" (404). A GET pattern also serves HEAD.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, e := range []struct {
		endpoint, method, path string
		handle                 handler
	}{
		{"rollouts", http.MethodPost, rollout.PathRollouts, s.handleRollouts},
		{"scenarios", http.MethodGet, rollout.PathScenarios, s.static(s.scenarios)},
		{"allocators", http.MethodGet, rollout.PathAllocators, s.static(s.allocs)},
		{"healthz", http.MethodGet, rollout.PathHealth, s.handleHealth},
		{"metrics", http.MethodGet, rollout.PathMetrics, s.handleMetrics},
	} {
		mux.HandleFunc(e.method+" "+e.path, func(w http.ResponseWriter, r *http.Request) {
			s.serveEndpoint(w, r, e.endpoint, e.handle)
		})
		mux.HandleFunc(e.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", e.method)
			s.fail(w, e.endpoint, &rollout.Error{Status: http.StatusMethodNotAllowed, Code: rollout.CodeMethodNotAllowed,
				Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, e.method, r.Method)})
		})
	}
	mux.HandleFunc("/", s.notFound)
	return mux
}

// ServeHTTP implements http.Handler. A path ServeMux would redirect to
// its clean form (httpedge.Canonical) is answered 404 here.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// notFound answers a path that is no endpoint.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, "other", &rollout.Error{Status: http.StatusNotFound, Code: rollout.CodeNotFound,
		Message: fmt.Sprintf("no endpoint %s (there are POST %s, GET %s, GET %s, GET %s, GET %s)", r.URL.Path,
			rollout.PathRollouts, rollout.PathScenarios, rollout.PathAllocators, rollout.PathHealth, rollout.PathMetrics)})
}

// serveEndpoint checks the token and answers r with handle; endpoint
// names it in the metrics.
func (s *Server) serveEndpoint(w http.ResponseWriter, r *http.Request, endpoint string, handle handler) {
	// Health probes carry no token: load balancers and orchestrators poll
	// them, and they reveal nothing but "serving" or "draining".
	if endpoint != "healthz" && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="troupe"`)
		s.fail(w, endpoint, &rollout.Error{Status: http.StatusUnauthorized, Code: rollout.CodeUnauthorized,
			Message: "missing or wrong bearer token (send Authorization: Bearer TOKEN)"})
		return
	}
	if s.isDraining() {
		// Move callers off their kept-alive connections: each answer
		// during a drain is the connection's last.
		w.Header().Set("Connection", "close")
	}
	status, e := handle(w, r)
	if e != nil {
		s.fail(w, endpoint, e)
		return
	}
	s.metrics.request(endpoint, status, "")
}

// handler answers one endpoint: it writes a successful answer and returns
// its status, or returns the error for ServeHTTP to answer.
type handler func(http.ResponseWriter, *http.Request) (int, *rollout.Error)

// authorized checks the bearer token (httpedge.Token).
func (s *Server) authorized(r *http.Request) bool { return s.token.Authorized(r) }

// fail answers e as a JSON error body.
func (s *Server) fail(w http.ResponseWriter, endpoint string, e *rollout.Error) {
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	body, err := json.Marshal(rollout.ErrorBody{Error: e})
	if err != nil {
		body = []byte(`{"error":{"code":"internal","message":"the error could not be encoded"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
	s.metrics.request(endpoint, e.Status, e.Code)
	switch {
	case e.Code == rollout.CodeShuttingDown:
		// Expected while draining, and as many as callers send: one info
		// line per refused request, not an error.
		s.cfg.Logger.Info("rollout request refused: the service is draining", "endpoint", endpoint, "code", e.Code)
	case e.Status >= http.StatusInternalServerError:
		s.cfg.Logger.Error("rollout service error", "endpoint", endpoint, "code", e.Code, "message", e.Message)
	}
}

func (s *Server) static(body []byte) handler {
	return func(w http.ResponseWriter, _ *http.Request) (int, *rollout.Error) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return http.StatusOK, nil
	}
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) (int, *rollout.Error) {
	draining := s.isDraining()
	h := rollout.Health{Status: rollout.HealthServing}
	status := http.StatusOK
	if draining {
		h.Status, status = rollout.HealthDraining, http.StatusServiceUnavailable
	}
	body, _ := json.Marshal(h) // a struct of one string always encodes
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status, nil
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) (int, *rollout.Error) {
	var b bytes.Buffer
	s.metrics.write(&b)
	if s.cfg.ExtraMetrics != nil {
		s.cfg.ExtraMetrics(r.Context(), &b)
	}
	w.Header().Set("Content-Type", promtext.ContentType)
	_, _ = w.Write(b.Bytes())
	return http.StatusOK, nil
}

// begin registers a rollout request; it reports false when the service is
// draining. end unregisters it.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight++
	s.metrics.inflightRequests.Add(1)
	return true
}

func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	s.metrics.inflightRequests.Add(-1)
	if s.draining && s.inflight == 0 {
		close(s.idle)
	}
}

// Shutdown stops the service taking work and waits for the rollout
// requests in flight to be answered. From its first instant, new rollout
// requests get 503 shutting_down (a full answer with "Connection: close",
// also on kept-alive connections, logged at info level once per request)
// and GET /healthz says draining. Once no rollout request is left, the
// states of the stateful allocators are saved. When ctx
// ends first, Shutdown aborts the episodes in flight (they are answered as
// aborted rollouts), waits up to AbortGrace for those answers, and returns
// an error wrapping ErrShutdownTimeout. If Serve is running, Shutdown also
// closes its listener and connections, and Serve returns. Shutdown may be
// called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if s.inflight == 0 {
			close(s.idle)
		}
	}
	idle, hs := s.idle, s.http
	s.mu.Unlock()

	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		s.cancelBase(ErrShutdown)
		t := time.NewTimer(s.cfg.AbortGrace)
		select {
		case <-idle:
			t.Stop()
		case <-t.C:
		}
		err = fmt.Errorf("%w: %w", ErrShutdownTimeout, context.Cause(ctx))
	}
	// Every request answered so far saved its allocator states; this
	// catches the ones whose save failed.
	if e := s.saveStates(); e != nil {
		s.cfg.Logger.Error("allocator states could not be saved at shutdown", "error", e)
		err = errors.Join(err, fmt.Errorf("rollout service: saving allocator states: %w", e))
	}
	if hs != nil {
		// No rollout request is left; what remains are health probes and
		// idle keep-alive connections, which close at once. A request that
		// outlived AbortGrace (a policy deaf to cancellation) loses its
		// connection.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if e := hs.Shutdown(closeCtx); e != nil {
			_ = hs.Close()
		}
	}
	return err
}

// Serve answers requests on ln until ctx is cancelled (the CLI cancels it
// on SIGTERM or SIGINT), then shuts down: it stops taking work, lets the
// requests in flight finish for up to ShutdownTimeout, aborts what is left,
// and returns. It returns nil after a clean drain, an error wrapping
// ErrShutdownTimeout when episodes had to be aborted, or the listener's
// error. A Server serves one listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := httpedge.Server(s, s.cfg.ReadHeaderTimeout, s.cfg.ReadTimeout)
	hs.WriteTimeout, hs.IdleTimeout = s.cfg.WriteTimeout, s.cfg.IdleTimeout
	hs.ErrorLog = slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
	if warning, _ := httpedge.CheckAccess(s.cfg.Addr, s.cfg.Token, s.cfg.InsecureOpen, "--insecure-open"); warning != "" {
		s.cfg.Logger.Warn("troupe: warning: " + warning)
	}
	s.mu.Lock()
	switch {
	case s.http != nil:
		s.mu.Unlock()
		return fmt.Errorf("%w: the server is already serving", ErrBadConfig)
	case s.draining:
		s.mu.Unlock()
		return fmt.Errorf("rollout service: %w", http.ErrServerClosed)
	}
	s.http = hs
	s.mu.Unlock()

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if s.cfg.Ready != nil {
		s.cfg.Ready(ln.Addr())
	}
	s.cfg.Logger.Info("troupe rollout service listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("rollout service: %w", err)
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("troupe rollout service draining", "cause", context.Cause(ctx), "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("rollout service: %w", e)
	}
	return err
}

// Serve listens on cfg.Addr and serves the rollout service until ctx is
// cancelled; see (*Server).Serve. It is what `troupe serve` runs.
func Serve(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return httpedge.ListenAndServe(ctx, s.cfg.Addr, "rollout service", s.Serve)
}

// checkContentType accepts a JSON media type or none (httpedge.CheckJSON).
func checkContentType(r *http.Request) *rollout.Error {
	if err := httpedge.CheckJSON(r); err != nil {
		return &rollout.Error{Status: http.StatusUnsupportedMediaType, Code: rollout.CodeUnsupportedMedia, Message: err.Error()}
	}
	return nil
}

// Remote plays requests' episodes somewhere other than this process
// (troupe workers on NATS JetStream): for each request it makes an
// executor, which the request's run (play.Run) plays its episodes with.
type Remote interface {
	// Start readies one request's episodes and returns their executor:
	// Execute is called once for each of r.Requests, all at once, and must
	// honour ctx and record failures in the records, as an env.Executor
	// does; Close is called once they are all back. An error of Start is
	// every episode's: they are answered aborted (end policy_error), with
	// its text.
	Start(ctx context.Context, r RemoteRequest) (RemoteExecutor, error)
}

// RemoteExecutor is a Remote's executor of one request's episodes.
type RemoteExecutor interface {
	env.Executor
	Close() error
}

// RemoteRequest is one rollout request's episodes, as a Remote needs them:
// the request's resolved run spec, which workers elsewhere build the same
// policies from (natsrun.SpecOf), and its episode requests
// (Run.Requests()), whose seeds and ids the service chose.
type RemoteRequest struct {
	Run      *runspec.Resolved
	Requests []env.Request
}
