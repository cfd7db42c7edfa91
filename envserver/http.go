package envserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// routes is the server's ServeMux: "METHOD PATH" patterns for the
// endpoints, the harness seats' subtree, and, so that every refusal is a
// JSON error body rather than ServeMux's plain-text one, a method-less
// pattern per path (405 with Allow) and "/" (404). A GET pattern also
// serves HEAD.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, e := range []struct {
		method, path string
		handle       func(w http.ResponseWriter, r *http.Request) *apiError
	}{
		{http.MethodGet, envclient.PathHealth, s.handleHealth},
		{http.MethodGet, envclient.PathMetadata, s.static(s.metadata)},
		{http.MethodGet, envclient.PathSchema, s.static(schemas)},
		{http.MethodGet, envclient.PathOpenAPI, s.static(s.openapi)},
		{http.MethodPost, envclient.PathReset, s.handleReset},
		{http.MethodPost, envclient.PathStep, s.handleStep},
		{http.MethodGet, envclient.PathState, s.handleState},
		{http.MethodPost, envclient.PathClose, s.handleClose},
		{http.MethodGet, envclient.PathRecord, s.handleRecord},
		{http.MethodGet, envclient.PathWS, s.handleWS},
		{http.MethodPost, envclient.PathSeats, s.handleSeats},
		{http.MethodPost, envclient.PathVectors, s.handleVector},
		{http.MethodPost, envclient.PathVector + "{vector}/reset", s.handleVectorReset},
		{http.MethodPost, envclient.PathVector + "{vector}/step", s.handleVectorStep},
		{http.MethodPost, envclient.PathVector + "{vector}/close", s.handleVectorClose},
	} {
		// Health probes carry no token: orchestrators poll them.
		open := e.path == envclient.PathHealth
		mux.HandleFunc(e.method+" "+e.path, func(w http.ResponseWriter, r *http.Request) {
			if !open && !s.token.Authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="troupe"`)
				s.fail(w, errorf(http.StatusUnauthorized, envclient.CodeUnauthorized, "missing or wrong bearer token (send Authorization: Bearer TOKEN)"))
				return
			}
			if e := e.handle(w, r); e != nil {
				s.fail(w, e)
			}
		})
		mux.HandleFunc(e.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", e.method)
			s.fail(w, errorf(http.StatusMethodNotAllowed, envclient.CodeMethod, "%s takes %s, not %s", r.URL.Path, e.method, r.Method))
		})
	}
	// /mcp takes every method: MCP's streamable HTTP transport has GET
	// and DELETE too (handleMCP).
	mux.HandleFunc(envclient.PathMCP, func(w http.ResponseWriter, r *http.Request) {
		if !s.token.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="troupe"`)
			s.fail(w, errorf(http.StatusUnauthorized, envclient.CodeUnauthorized, "missing or wrong bearer token (send Authorization: Bearer TOKEN)"))
			return
		}
		if e := s.handleMCP(w, r); e != nil {
			s.fail(w, e)
		}
	})
	// A harness seat's own handler routes by method and answers in the
	// OpenAI and MCP shapes; what is under PathEpisodes but not a seat's
	// answers in the server's.
	// The seat's root without its slash is the seat's too (its handler
	// answers "/" 404), not ServeMux's redirect.
	mux.HandleFunc(envclient.PathEpisodes+"{episode}/seats/{agent}/{rest...}", s.handleHarness)
	mux.HandleFunc(envclient.PathEpisodes+"{episode}/seats/{agent}", s.handleHarness)
	mux.HandleFunc(envclient.PathEpisodes, func(w http.ResponseWriter, r *http.Request) {
		if !s.authorizedHarness(w, r) {
			return
		}
		s.fail(w, errorf(http.StatusNotFound, envclient.CodeUnknown, "no endpoint %s (a harness seat's are under /episodes/{episode}/seats/{agent}/: v1/chat/completions, v1/responses, v1/models, mcp, tools)", r.URL.Path))
	})
	mux.HandleFunc("/", s.notFound)
	return mux
}

// ServeHTTP implements http.Handler. A path ServeMux would redirect to
// its clean form (httpedge.Canonical) is answered 404 here.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// notFound answers a path that is no endpoint.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, errorf(http.StatusNotFound, envclient.CodeUnknown, "no endpoint %s (GET /health, /metadata, /schema, /openapi.json, /state, /record, /ws; POST /reset, /step, /close, /seats, /mcp, /vectors, /vector/{id}/reset, /vector/{id}/step, /vector/{id}/close; a harness seat's under /episodes/{episode}/seats/{agent}/)", r.URL.Path))
}

// fail answers e as {"error": {...}}.
func (s *Server) fail(w http.ResponseWriter, e *apiError) {
	body, _ := json.Marshal(envclient.ErrorBody{Error: &e.body}) // strings only: always encodes
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(body, '\n'))
	if e.status >= http.StatusInternalServerError {
		s.cfg.Logger.Warn("environment server error", "code", e.body.Code, "message", e.body.Message)
	}
}

// reply answers v as JSON.
func reply(w http.ResponseWriter, v any) *apiError {
	body, err := json.Marshal(v)
	if err != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "encoding the answer: %v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
	return nil
}

func (s *Server) static(body []byte) func(http.ResponseWriter, *http.Request) *apiError {
	return func(w http.ResponseWriter, _ *http.Request) *apiError {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return nil
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) *apiError {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"draining"}` + "\n"))
		return nil
	}
	return reply(w, envclient.Health{Status: "healthy"})
}

// decode reads r's JSON body into v, strictly: unknown fields, trailing
// data and bodies over the limit are refused, naming what was wrong.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	if err := httpedge.CheckJSON(r); err != nil {
		return errorf(http.StatusUnsupportedMediaType, envclient.CodeMedia, "%v", err)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errorf(http.StatusRequestEntityTooLarge, envclient.CodeTooLarge, "the body is over %d bytes", s.cfg.MaxBodyBytes)
		}
		if httpedge.BodyTimedOut(err) {
			w.Header().Set("Connection", "close")
			return errorf(http.StatusRequestTimeout, envclient.CodeBadRequest, "the body did not arrive within %s (troupe env-serve --body-timeout)", s.cfg.BodyTimeout)
		}
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "reading the body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	return decodeJSON(body, v)
}

// decodeJSON reads one JSON object into v, strictly.
func decodeJSON(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "malformed JSON: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "malformed JSON: data after the object")
	}
	return nil
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.ResetRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	ep, ss, e := s.reset(r.Context(), &req, false)
	if e != nil {
		return e
	}
	if ss == nil {
		return reply(w, s.unheld(ep, baseURL(r)))
	}
	s.setLatest(ss)
	res, e := s.first(r.Context(), ss)
	if e != nil {
		return e
	}
	res.Reward, res.Observation.Seats = nil, ss.ep.seats(ss, baseURL(r))
	return reply(w, res)
}

func (s *Server) handleStep(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.StepRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	ss, e := s.stepSession(r.Context(), req.SessionID)
	if e != nil {
		return e
	}
	res, e := s.step(r.Context(), ss, &req.Action)
	if e != nil {
		return e
	}
	return reply(w, res)
}

// target is the session, or else the episode, a GET names.
func (s *Server) target(r *http.Request) (*episodeEntry, *session, *apiError) {
	q := r.URL.Query()
	if id := q.Get("session_id"); id != "" {
		ss, e := s.session(id)
		if e != nil {
			return nil, nil, e
		}
		return ss.ep, ss, nil
	}
	if id := q.Get("episode_id"); id != "" {
		ep, e := s.episode(id)
		return ep, nil, e
	}
	// OpenEnv's GET /state names nothing: the latest HTTP reset's.
	if ss, _ := s.latestSession(); ss != nil {
		return ss.ep, ss, nil
	}
	return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "name the session (?session_id=) or the episode (?episode_id=): no HTTP reset made one yet")
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) *apiError {
	ep, ss, e := s.target(r)
	if e != nil {
		return e
	}
	return reply(w, s.state(ep, ss, baseURL(r)))
}

func (s *Server) handleClose(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.SessionRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	if req.SessionID == "" {
		if latest, _ := s.latestSession(); latest != nil {
			req.SessionID = latest.id
		}
	}
	ss, e := s.session(req.SessionID)
	if e != nil {
		return e
	}
	s.leave(r.Context(), ss, "the session closed")
	return reply(w, s.state(ss.ep, nil, baseURL(r)))
}

// first is a reset's answer: the session's first turn, waited for, or
// with harness seats at the episode, what the session sees now (the
// harnesses learn their URLs from the answer, so it cannot wait for
// their moves).
func (s *Server) first(ctx context.Context, ss *session) (envclient.Result, *apiError) {
	if ss.ep.harness == nil {
		return s.await(ctx, ss)
	}
	return s.result(ss, ss.s.Pending()), nil
}

// unheld is the answer of a reset whose episode's seats are all the
// harnesses' or the house's: the episode, and no session.
func (s *Server) unheld(ep *episodeEntry, base string) envclient.Result {
	o := s.observation(ep, nil)
	o.Seats = ep.seats(nil, base)
	return envclient.Result{Observation: o, Done: o.Done}
}

// baseURL is the server's URL as r reached it.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// authorizedHarness checks the bearer token of a request under
// PathEpisodes; when it is missing or wrong it answers 401 and reports
// false.
func (s *Server) authorizedHarness(w http.ResponseWriter, r *http.Request) bool {
	if s.token.Authorized(r) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="troupe"`)
	s.fail(w, errorf(http.StatusUnauthorized, envclient.CodeUnauthorized, "missing or wrong bearer token (send Authorization: Bearer TOKEN; an OpenAI SDK sends its API key so)"))
	return false
}

// handleHarness serves a harness seat's endpoints, under
// /episodes/{episode}/seats/{agent}/, behind the server's bearer token.
// The seat's handler answers in the OpenAI and MCP shapes; what does not
// reach it (an unknown episode or seat, no token) answers in the server's.
func (s *Server) handleHarness(w http.ResponseWriter, r *http.Request) {
	if !s.authorizedHarness(w, r) {
		return
	}
	epID, agent := r.PathValue("episode"), r.PathValue("agent")
	ep, e := s.episode(epID)
	if e != nil {
		s.fail(w, e)
		return
	}
	h := ep.harness[agent]
	if h == nil {
		s.fail(w, errorf(http.StatusNotFound, envclient.CodeUnknown, "episode %s has no harness seat %q", epID, agent))
		return
	}
	s.mu.Lock()
	if ep.ended.IsZero() {
		ep.last = time.Now()
	}
	s.mu.Unlock()
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = "/"+r.PathValue("rest"), ""
	h.handler.ServeHTTP(w, r2)
}

// handleSeats answers the seats of a scenario under parameters, with
// their action sets: those of an episode started (and dropped) here, never
// played nor written.
func (s *Server) handleSeats(w http.ResponseWriter, r *http.Request) *apiError {
	var req envclient.SeatsRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	if req.Scenario == "" {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "scenario: name one (%v)", s.cfg.Scenarios.Names())
	}
	sc, err := s.cfg.Scenarios.Lookup(req.Scenario)
	if err != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "scenario: %v", err)
	}
	params, err := sc.Info().ParseParams(req.Params)
	if err != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "params: %v", err)
	}
	if c, ok := sc.(env.SeatCounter); ok {
		if e := s.checkSeats(sc.Info().Name, c.SeatCount(params)); e != nil {
			return e
		}
	}
	ep, err := env.NewEpisode(env.Setup{Play: env.Play{Scenario: sc, Params: params}})
	if err != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%v", err)
	}
	if e := s.checkSeats(sc.Info().Name, len(ep.Seats())); e != nil {
		return e
	}
	if rec := ep.Record(); rec != nil && len(rec.Seats) == 0 {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "the scenario seated nobody: %s", rec.Err)
	}
	as, _ := sc.(env.ActionSets)
	fs, _ := sc.(env.Features)
	out := envclient.SeatsAnswer{Scenario: sc.Info().Name, Params: params.Map()}
	for _, seat := range ep.Seats() {
		d := envclient.Seat{Agent: seat.ID, Role: seat.Role}
		if as != nil {
			d.Actions = as.ActionSet(params, seat.Role)
		}
		if fs != nil {
			d.Observation = spaceOf(fs.ObservationSpace(params, seat.Role))
		}
		out.Seats = append(out.Seats, d)
	}
	if fs != nil {
		out.State = spaceOf(fs.StateSpace(params))
	}
	return reply(w, out)
}

// handleRecord answers the episode's record, as an episode file holds it
// (troupe.episode/v2), once it is over.
func (s *Server) handleRecord(w http.ResponseWriter, r *http.Request) *apiError {
	ep, _, e := s.target(r)
	if e != nil {
		return e
	}
	rec := ep.tb.Record()
	if rec == nil {
		return errorf(http.StatusConflict, envclient.CodeBadRequest, "episode %s is not over", ep.id)
	}
	body, err := trajectories.AppendEpisodeJSON(nil, rec, nil)
	if err != nil {
		return errorf(http.StatusInternalServerError, envclient.CodeInternal, "encoding the record: %v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	return nil
}

// handleWS serves one WebSocket session, OpenEnv's: reset, step, state and
// close messages, each answered in turn. The connection is the session:
// when it closes, the session leaves (its seats fall back).
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) *apiError {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept answered the handshake's error itself
	}
	c.SetReadLimit(s.cfg.MaxBodyBytes)
	ctx := r.Context()
	var ss *session
	defer func() {
		if ss != nil {
			s.leave(context.WithoutCancel(ctx), ss, "its WebSocket closed")
		}
	}()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return nil
		}
		typ, v, e := s.wsMessage(ctx, baseURL(r), data, &ss)
		if typ == "close" {
			_ = c.Close(websocket.StatusNormalClosure, "")
			return nil
		}
		out := envclient.WSMessage{Type: typ}
		if e != nil {
			out.Type = "error"
			v = e.body
		}
		if out.Data, err = json.Marshal(v); err != nil {
			out.Type, out.Data = "error", []byte(`{"code":"internal","message":"the answer could not be encoded"}`)
		}
		msg, _ := json.Marshal(out)
		wctx, cancel := context.WithTimeout(ctx, DefaultReadTimeout)
		err = c.Write(wctx, websocket.MessageText, msg)
		cancel()
		if err != nil {
			return nil
		}
	}
}

// wsMessage answers one WebSocket message: its answer's type and data.
func (s *Server) wsMessage(ctx context.Context, base string, data []byte, ss **session) (string, any, *apiError) {
	var m envclient.WSMessage
	if e := decodeJSON(data, &m); e != nil {
		return "", nil, e
	}
	if len(m.Data) == 0 || string(m.Data) == "null" {
		m.Data = []byte("{}")
	}
	switch m.Type {
	case "reset":
		var req envclient.ResetRequest
		if e := decodeJSON(m.Data, &req); e != nil {
			return "", nil, e
		}
		if *ss != nil {
			// A reset starts another episode: OpenEnv's meaning.
			s.leave(ctx, *ss, "its WebSocket session reset")
			*ss = nil
		}
		ep, n, e := s.reset(ctx, &req, true)
		if e != nil {
			return "", nil, e
		}
		if n == nil {
			return "observation", s.unheld(ep, base), nil
		}
		*ss = n
		res, e := s.first(ctx, n)
		res.Reward, res.Observation.Seats = nil, n.ep.seats(n, base)
		return "observation", res, e
	case "step":
		if v, ok, e := s.toolStep(ctx, wsBinding{ss}, m.Data); ok {
			// OpenEnv's MCP actions (MCPToolClient): a tool's call.
			return "observation", v, e
		}
		if *ss == nil && s.cfg.Default != nil {
			// As a session-less HTTP step: the default episode's.
			n, e := s.freshSession(ctx, true)
			if e != nil {
				return "", nil, e
			}
			*ss = n
		}
		if *ss == nil {
			return "", nil, errorf(http.StatusConflict, envclient.CodeBadRequest, "step before reset (or start the server with a default episode: troupe env-serve --scenario NAME)")
		}
		var a envclient.Action
		if e := decodeJSON(m.Data, &a); e != nil {
			return "", nil, e
		}
		res, e := s.step(ctx, *ss, &a)
		return "observation", res, e
	case "state":
		if *ss == nil {
			return "", nil, errorf(http.StatusConflict, envclient.CodeBadRequest, "state before reset")
		}
		s.touch(*ss)
		return "state", s.state((*ss).ep, *ss, base), nil
	case "close":
		return "close", nil, nil
	case "mcp":
		// OpenEnv's MCP over the WebSocket: a JSON-RPC request in, its
		// response out; the tools act for the connection's session.
		return "mcp", s.rpc(ctx, wsBinding{ss}, m.Data), nil
	}
	return "", nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "unknown message type %q (reset, step, state, mcp, close)", m.Type)
}

// Serve answers on ln until ctx ends, then shuts down (Shutdown) and
// closes the connections. A janitor reaps idle sessions meanwhile.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := httpedge.Server(s, 0, s.cfg.BodyTimeout)
	hs.BaseContext = func(net.Listener) context.Context { return ctx }
	if s.exposed != "" {
		s.cfg.Logger.Warn("troupe: warning: " + s.exposed)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if s.cfg.Ready != nil {
		s.cfg.Ready(ln.Addr())
	}
	tick := time.NewTicker(max(s.cfg.SessionTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			s.Shutdown()
			return fmt.Errorf("environment server: %w", err)
		case <-tick.C:
			s.reap()
		case <-ctx.Done():
			s.Shutdown()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				_ = hs.Close()
			}
			<-errc
			return nil
		}
	}
}

// Serve listens on cfg.Addr and serves until ctx ends.
func Serve(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return httpedge.ListenAndServe(ctx, s.cfg.Addr, "environment server", s.Serve)
}

// metadata is GET /metadata's answer: OpenEnv's EnvironmentMetadata
// (name, description, version) with the scenarios served.
type metadata struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Version     string             `json:"version"`
	Scenarios   []scenarioMetadata `json:"scenarios"`
}

type scenarioMetadata struct {
	Name          string   `json:"name"`
	Summary       string   `json:"summary"`
	Schedule      string   `json:"schedule"`
	Roles         []string `json:"roles"`
	Params        []string `json:"params"`
	Policies      []string `json:"policies"`
	DefaultPolicy string   `json:"default_policy"`
	ActionSets    bool     `json:"action_sets"`
	Features      bool     `json:"features"`
}

func metadataOf(reg *env.Registry) metadata {
	m := metadata{Name: "troupe", Version: runspec.TroupeVersion,
		Description: "troupe scenarios as multi-agent environments: a session holds one seat or every seat; troupe policies play the rest (troupe scenarios NAME describes one)"}
	for _, name := range reg.Names() {
		sc, err := reg.Lookup(name)
		if err != nil {
			continue
		}
		in := sc.Info()
		d := scenarioMetadata{Name: in.Name, Summary: in.Summary, Schedule: in.Schedule.String(), Policies: in.PolicyNames(), DefaultPolicy: in.DefaultPolicyName()}
		for _, r := range in.Roles {
			d.Roles = append(d.Roles, r.Name)
		}
		for _, p := range in.Params {
			d.Params = append(d.Params, p.Name)
		}
		_, d.ActionSets = sc.(env.ActionSets)
		_, d.Features = sc.(env.Features)
		m.Scenarios = append(m.Scenarios, d)
	}
	return m
}

// schemas is GET /schema's answer: the JSON schemas of an action, an
// observation and a state, as OpenEnv's SchemaResponse holds them.
var schemas = []byte(`{"action":{"type":"object","additionalProperties":false,"properties":{` +
	`"seat":{"type":"string","description":"which of the session's seats moves (when several act now)"},` +
	`"move":{"type":"string","description":"the move: one of the seat's legal actions, or an answer in the scenario's grammar"},` +
	`"moves":{"type":"object","additionalProperties":{"type":"string"},"description":"moves by agent id: a simultaneous step"},` +
	`"generation":{"type":"object","additionalProperties":false,"description":"with move: the learner's token ids, kept in the turn's sample",` +
	`"required":["prompt_ids","completion_ids"],"properties":{"prompt_ids":{"type":"array","items":{"type":"integer"}},"completion_ids":{"type":"array","items":{"type":"integer"}},` +
	`"logprobs":{"type":"array","items":{"type":"number"}},"prompt":{"type":"string"},"completion":{"type":"string"}}}}},` +
	`"observation":{"type":"object","properties":{"episode_id":{"type":"string"},"session_id":{"type":"string"},"step":{"type":"integer"},` +
	`"seats":{"type":"array","items":{"type":"object","properties":{"agent":{"type":"string"},"role":{"type":"string"},"mine":{"type":"boolean"},"house":{"type":"boolean"},"actions":{"type":["array","null"],"items":{"type":"string"}}}}},` +
	`"pending":{"type":"array","items":{"type":"object","properties":{"agent":{"type":"string"},"role":{"type":"string"},"state":{"type":"string"},` +
	`"turn":{"type":"integer"},"step":{"type":"integer"},"view":{"type":"string"},"legal":{"type":["array","null"],"items":{"type":"string"}},` +
	`"choices":{"type":["array","null"],"items":{"type":"string"}},"inbox":{"type":"array","items":{"type":"object"}},"seed":{"type":"integer"}}}},` +
	`"waiting":{"type":"array","items":{"type":"string"}},"done":{"type":"boolean"},"status":{"type":"string"},"end":{"type":"string"},` +
	`"error":{"type":"string"},"scores":{"type":"object","additionalProperties":{"type":"number"}},"team":{"type":"number"}}},` +
	`"state":{"type":"object","properties":{"episode_id":{"type":"string"},"step_count":{"type":"integer"},"scenario":{"type":"string"},` +
	`"params":{"type":"object"},"seats":{"type":"array"},"waiting":{"type":"array"},"done":{"type":"boolean"},"status":{"type":"string"},"end":{"type":"string"}}}}` + "\n")
