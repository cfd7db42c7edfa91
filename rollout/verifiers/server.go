// Package verifiers serves troupe's scenarios over verifiers' env-server
// protocol (verifiers v1, PyPI verifiers 0.4: verifiers/v1/serve), so that
// verifiers' own EnvClient, and prime-rl's orchestrator through it, runs
// troupe episodes as multi-agent verifiers episodes.
//
// The wire: a ZMQ ROUTER socket (the client's is a DEALER) carrying
// msgpack frames [request_id, method, payload]; the methods are health,
// run and cancel. A run's payload carries task_data (the taskset row: for
// troupe a Task naming the scenario, its params and seed), the client
// config of the endpoint the model is served at, the model and the
// sampling settings. The answer streams the episode's traces as "delta"
// frames (each opens one trace and fills it whole) and ends with a
// "reply" frame holding the episode's head and each trace's id and size,
// as verifiers' EpisodeAssembly checks. Every reply is a verifiers
// response: success, or success false with an error that names what was
// wrong; a malformed frame never ends the server.
//
// One run is one troupe episode, played by the rollout service (package
// rollout/server, through Config.Rollouts): the roles that play "llm" (all
// of them, unless the task names other policies) call the request's model
// at the request's endpoint with its sampling, a role's own settings in
// task_data.roles laid over them. The episode is a flat list of traces,
// one per seat, each stamped with the episode (its id, in the trace's
// info.troupe.episode, and the head's id), carrying the server's token ids
// and log-probs, and the credit of the task's allocators as its rewards.
// Frozen roles, and roles played by a policy that is not the model's, are
// traces with trainable false, which verifiers' trainer never turns into
// samples.
//
// A cancel aborts the run it names: its episode is stopped at once and the
// run is answered success false, "Cancelled: rollout aborted", as
// verifiers' own server answers it.
package verifiers

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
)

// DefaultAddr is verifiers' default env-server address.
const DefaultAddr = "tcp://127.0.0.1:5000"

// DefaultMaxPayloadBytes bounds a request's payload: a run request is a
// taskset row and a few settings, far below it.
const DefaultMaxPayloadBytes = 4 << 20

// DefaultMaxRuns is Config.MaxRuns' default: twice the rollout service's
// default episode slots (rollout/server.DefaultMaxConcurrentEpisodes),
// so that a full batch plays while the next one waits.
const DefaultMaxRuns = 2048

// LLMPolicy is the policy name of the roles that call the request's model.
const LLMPolicy = "llm"

// Roller plays rollout requests: the rollout service, in process
// (HandlerRoller) or over HTTP (rollout/client, through RollerFunc).
type Roller interface {
	Rollouts(ctx context.Context, req *rollout.Request) (*rollout.Response, error)
}

// RollerFunc is a function as a Roller.
type RollerFunc func(ctx context.Context, req *rollout.Request) (*rollout.Response, error)

// Rollouts implements Roller.
func (f RollerFunc) Rollouts(ctx context.Context, req *rollout.Request) (*rollout.Response, error) {
	return f(ctx, req)
}

// Config configures a Server.
type Config struct {
	// Addr is the ZMQ endpoint to bind, "tcp://HOST:PORT"; port 0 picks
	// one (Ready reports it). Default DefaultAddr.
	Addr string
	// Rollouts plays each run's episode. Required.
	Rollouts Roller
	// Scenarios tells each scenario's roles, so that every role playing
	// "llm" gets the request's model and endpoint. Required.
	Scenarios *env.Registry
	// Endpoint names the service's LLM endpoint (troupe serve
	// --llm-endpoint NAME=URL; "" the default one) that a request's
	// client base_url is. A base_url the service does not serve is refused
	// (the error should list the ones it does): the server calls only
	// endpoints its operator configured, with their keys. nil: every
	// request plays on the default endpoint, whatever its base_url.
	Endpoint func(baseURL string) (string, error)
	// MaxPayloadBytes bounds a request's payload; default
	// DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxRuns bounds the runs in flight (playing, or waiting for one of
	// the rollout service's episode slots, each holding its decoded
	// request): a run over it is answered at once, success false, an
	// error saying so, which verifiers' client raises. Default
	// DefaultMaxRuns; troupe serve sets twice --max-episodes.
	MaxRuns int
	// ShutdownTimeout is how long the runs in flight may finish once
	// Serve's context ends; default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger // default: discard
	// Ready, when set, is called with the address bound once the server
	// takes requests.
	Ready func(addr string)
}

// ErrBadConfig is wrapped by New's errors.
var ErrBadConfig = errors.New("bad verifiers server configuration")

// Server answers verifiers' env-server protocol. Serve runs it, once.
type Server struct {
	cfg Config

	sendMu sync.Mutex // one frame sequence at a time on the socket
	sock   zmq4.Socket

	mu       sync.Mutex
	running  map[string]context.CancelCauseFunc // in-flight runs by wire request id
	draining bool                               // set once Serve's context ended: runs are refused
	wg       sync.WaitGroup                     // the runs in flight; Add only while not draining, under mu
}

// checkAddr accepts a ZMQ endpoint verifiers' client can dial:
// tcp://HOST:PORT or ipc://PATH.
func checkAddr(addr string) error {
	if rest, ok := strings.CutPrefix(addr, "tcp://"); ok {
		if _, port, err := net.SplitHostPort(rest); err != nil || port == "" {
			return fmt.Errorf("address %q: want tcp://HOST:PORT (port 0 picks one)", addr)
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(addr, "ipc://"); ok && rest != "" {
		return nil
	}
	return fmt.Errorf("address %q: want tcp://HOST:PORT or ipc://PATH", addr)
}

// errCancelled is the cause of a run aborted by a cancel request.
var errCancelled = errors.New("cancelled by the client")

// ErrShutdown is the cause of the runs aborted when the drain's
// ShutdownTimeout passed; their answers name it.
var ErrShutdown = errors.New("the server shut down before the run finished")

// DefaultShutdownTimeout is how long Serve lets runs in flight finish once
// its context ends.
const DefaultShutdownTimeout = time.Minute

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Rollouts == nil {
		return nil, fmt.Errorf("%w: Rollouts is nil", ErrBadConfig)
	}
	if cfg.Scenarios == nil {
		return nil, fmt.Errorf("%w: Scenarios is nil", ErrBadConfig)
	}
	if cfg.ShutdownTimeout < 0 {
		return nil, fmt.Errorf("%w: ShutdownTimeout is negative (%v)", ErrBadConfig, cfg.ShutdownTimeout)
	}
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	if cfg.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("%w: MaxPayloadBytes is negative (%d)", ErrBadConfig, cfg.MaxPayloadBytes)
	}
	if cfg.MaxRuns < 0 {
		return nil, fmt.Errorf("%w: MaxRuns is negative (%d)", ErrBadConfig, cfg.MaxRuns)
	}
	cfg.MaxRuns = cmp.Or(cfg.MaxRuns, DefaultMaxRuns)
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	if err := checkAddr(cfg.Addr); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	cfg.MaxPayloadBytes = cmp.Or(cfg.MaxPayloadBytes, DefaultMaxPayloadBytes)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Server{cfg: cfg, running: map[string]context.CancelCauseFunc{}}, nil
}

// Serve binds the socket and answers requests until ctx ends. Then it
// drains: new runs are refused ("the server is shutting down"), health
// and cancel still answered, and the runs in flight have
// ShutdownTimeout to finish; those still running then are aborted and
// answered, and the socket is closed.
func (s *Server) Serve(ctx context.Context) error {
	// The socket and the runs outlive ctx by the drain.
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	sock := zmq4.NewRouter(base, zmq4.WithLogger(discardLog()))
	if err := sock.Listen(s.cfg.Addr); err != nil {
		return fmt.Errorf("verifiers server: %w", err)
	}
	s.sock = sock
	addr := s.cfg.Addr
	if a, ok := sock.Addr().(*net.TCPAddr); ok && a != nil {
		addr = "tcp://" + a.String()
	}
	s.cfg.Logger.Info("troupe verifiers env server listening", "addr", addr)
	if s.cfg.Ready != nil {
		s.cfg.Ready(addr)
	}
	msgs := make(chan zmq4.Msg)
	go func() {
		defer close(msgs)
		for {
			m, err := sock.Recv()
			if err != nil {
				if base.Err() != nil {
					return
				}
				s.cfg.Logger.Warn("verifiers env server: receive failed", "error", err)
				continue
			}
			select {
			case msgs <- m:
			case <-base.Done():
				return
			}
		}
	}()
	var drained chan struct{} // closed once no run is left, after ctx ends
	var deadline <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-done:
			done = nil
			s.mu.Lock()
			s.draining = true
			s.mu.Unlock()
			s.cfg.Logger.Info("troupe verifiers env server draining", "cause", context.Cause(ctx), "timeout", s.cfg.ShutdownTimeout)
			drained = make(chan struct{})
			go func() { s.wg.Wait(); close(drained) }()
			t := time.NewTimer(s.cfg.ShutdownTimeout)
			defer t.Stop()
			deadline = t.C
		case <-deadline:
			deadline = nil
			s.abortAll(ErrShutdown)
		case <-drained:
			stop()
			return sock.Close()
		case m, ok := <-msgs:
			if !ok {
				return sock.Close()
			}
			s.dispatch(base, m.Frames)
		}
	}
}

// dispatch answers one message: [identity, request_id, method, payload].
func (s *Server) dispatch(ctx context.Context, frames [][]byte) {
	if len(frames) != 4 {
		// Without the request id there is no one to answer; with it, the
		// client learns what it sent wrong.
		s.cfg.Logger.Warn("verifiers env server: dropping a malformed message", "frames", len(frames)-1)
		if len(frames) >= 2 {
			s.reply(frames[0], frames[1], failure("expected 3 frames [request_id, method, payload], got %d: is the client speaking verifiers' env-serve protocol?", len(frames)-1))
		}
		return
	}
	id, rid, method, payload := frames[0], frames[1], string(frames[2]), frames[3]
	if len(payload) > s.cfg.MaxPayloadBytes {
		s.reply(id, rid, failure("the %q payload is %d bytes, over the server's limit of %d", method, len(payload), s.cfg.MaxPayloadBytes))
		return
	}
	switch method {
	case MethodHealth:
		s.reply(id, rid, baseResponse{Success: true})
	case MethodCancel:
		target, err := decodeCancel(payload)
		if err != nil {
			s.reply(id, rid, failure("%v", err))
			return
		}
		s.mu.Lock()
		cancel, found := s.running[target]
		s.mu.Unlock()
		if found {
			cancel(errCancelled)
		}
		s.reply(id, rid, cancelResponse{Success: true, Cancelled: found})
	case MethodRun:
		req, err := DecodeRun(payload)
		if err != nil {
			s.reply(id, rid, failure("%v", err))
			return
		}
		// Registered here, before the run's goroutine starts: a cancel
		// that follows the run on the same connection finds it.
		rctx, cancel := context.WithCancelCause(ctx)
		key := string(rid)
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			cancel(nil)
			s.reply(id, rid, failure("the server is shutting down: send the run to another env server"))
			return
		}
		if len(s.running) >= s.cfg.MaxRuns {
			n := len(s.running)
			s.mu.Unlock()
			cancel(nil)
			s.reply(id, rid, failure("the server has %d runs in flight, its limit (MaxRuns; troupe serve: twice --max-episodes): retry once some finish, or send fewer at once", n))
			return
		}
		if _, dup := s.running[key]; dup {
			s.mu.Unlock()
			cancel(nil)
			s.reply(id, rid, failure("request id %q is already running", key))
			return
		}
		s.running[key] = cancel
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.running, key)
				s.mu.Unlock()
				cancel(nil)
			}()
			s.run(rctx, id, rid, req)
		}()
	default:
		s.reply(id, rid, failure("unknown method %q (there are health, run and cancel)", method))
	}
}

// abortAll cancels every run in flight.
func (s *Server) abortAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.running {
		cancel(cause)
	}
}

// run plays one run request and answers it: its traces as deltas, then
// the reply.
func (s *Server) run(ctx context.Context, id, rid []byte, req *RunRequest) {
	plan, err := s.plan(req)
	if err != nil {
		s.reply(id, rid, failure("%v", err))
		return
	}
	res, err := s.cfg.Rollouts.Rollouts(ctx, plan.request)
	if ctx.Err() != nil {
		// verifiers' own server answers an aborted run so.
		s.reply(id, rid, failure("Cancelled: rollout aborted (%v)", context.Cause(ctx)))
		return
	}
	if err != nil {
		s.reply(id, rid, failure("%v", err))
		return
	}
	if len(res.Rollouts) != 1 {
		s.reply(id, rid, failure("the rollout service answered %d episodes for one", len(res.Rollouts)))
		return
	}
	head, traces, sums := episodeOf(&res.Rollouts[0], req, plan)
	for _, d := range traces {
		if err := s.send(id, rid, kindDelta, encode(d)); err != nil {
			s.cfg.Logger.Warn("verifiers env server: sending a trace failed", "error", err)
			return
		}
	}
	s.reply(id, rid, runResponse{Success: true, Head: head, Traces: sums})
}

// reply sends a run's, health's or cancel's answer.
func (s *Server) reply(id, rid []byte, v any) {
	if err := s.send(id, rid, kindReply, encode(v)); err != nil {
		s.cfg.Logger.Warn("verifiers env server: sending a reply failed", "error", err)
	}
}

func (s *Server) send(id, rid []byte, kind string, data []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.sock.Send(zmq4.NewMsgFrom(id, rid, []byte(kind), data))
}

// HandlerRoller is the rollout service h (a rollout/server.Server) played
// in process: each request is handled as a POST /v1/rollouts on the
// caller's context, without a network hop, and its answer decoded. token
// is the service's bearer token (rollout/server.Config.Token), sent with
// each request; "" sends none.
func HandlerRoller(h http.Handler, token string) Roller {
	return RollerFunc(func(ctx context.Context, req *rollout.Request) (*rollout.Response, error) {
		return handle(ctx, h, token, req)
	})
}

// handlerWriter is the in-process http.ResponseWriter of HandlerRoller.
type handlerWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *handlerWriter) Header() http.Header { return w.header }
func (w *handlerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *handlerWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
