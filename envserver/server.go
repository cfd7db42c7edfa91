// Package envserver is troupe's environment server: outside learners and
// agents play troupe scenarios over HTTP or a WebSocket, in OpenEnv's
// conventions (package envserver/envclient documents the protocol), one seat or
// many per session, the seats no session holds played by troupe policies.
//
// Each episode is a shared episode (play/table) made from a run spec's
// fields, seeded as a one-episode `troupe run` of the same spec would be.
// When it ends, its record goes through the output stage every run has
// (trajectories.Output: the allocators' credit, counterfactual re-simulation
// included, samples, sinks) by way of play.Run, so the server writes the same
// record and samples as `troupe run` given the same seeds and moves.
//
// Bounds, as troupe serve's: loopback by default, an optional bearer token
// (every path but /health), a body limit, a cap on live sessions and
// episodes, and an idle timeout after which a session's seats fall back (to
// the house policy, or forfeit) and an episode left waiting for seats
// nobody took ends aborted. Shutdown ends the episodes in play aborted
// ("interrupted") and writes them.
package envserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/trajectories"
	"github.com/troupe-rl/troupe/trajectories/credit"
)

// Defaults of Config's zero fields.
const (
	DefaultAddr           = "127.0.0.1:8378"
	DefaultMaxSessions    = 1024
	DefaultMaxEpisodes    = 1024
	DefaultSessionTimeout = 5 * time.Minute
	DefaultMaxWait        = 30 * time.Second
	DefaultRetain         = 10 * time.Minute
	DefaultMaxRetained    = 4096
	DefaultMaxBodyBytes   = 1 << 20
	DefaultReadTimeout    = 30 * time.Second
	// DefaultMaxSeats bounds the seats of one episode (or of one env of
	// a vector). 10,000 seats keep a reset's answer to a few megabytes
	// (every seat's id, role and observation), a step that names every
	// seat's move (some 20 bytes each) well inside DefaultMaxBodyBytes,
	// and their reset and step to a fraction of a CPU-second: a server's
	// cost per episode stays what its operator sized it for.
	DefaultMaxSeats = 10_000
)

// EndIdle is the end of an episode the server stopped because nobody
// moved for SessionTimeout while it waited for seats no session took.
const EndIdle = "idle"

// ErrBadConfig is wrapped by the errors of a Config the server cannot run.
var ErrBadConfig = errors.New("bad environment server configuration")

// Config configures a Server. The zero value serves the built-in scenarios
// and allocators on DefaultAddr.
type Config struct {
	// Addr is the TCP address Serve listens on (loopback by default).
	Addr string
	// Token, when set, is the bearer token every request but GET /health
	// (and the WebSocket upgrade: "Authorization: Bearer TOKEN") carries;
	// httpedge.MinTokenBytes long at least. An Addr beyond loopback needs
	// one, unless InsecureOpen.
	Token string
	// InsecureOpen serves an Addr beyond loopback without a token, to
	// anyone who can reach it (Serve logs a warning). New refuses it with
	// a HarnessModel: harness seats' chat calls go to the model server,
	// which an open server would lend to anyone.
	InsecureOpen bool
	// BodyTimeout bounds the reading of a request's body, from its
	// handler's start (default httpedge.DefaultBodyTimeout): a client
	// that is slower is answered 408 and its connection closed.
	BodyTimeout time.Duration
	Scenarios   *env.Registry    // default scenarios.Builtin()
	Allocators  *credit.Registry // default credit.Builtin()
	// Policies makes the house policies the scenarios do not own (an
	// LLM), as runspec.Resolvers.Policies; nil: the scenarios' own and
	// "random".
	Policies env.PolicyMaker
	// HarnessModel is the model server the seats an outside harness plays
	// (ResetRequest.Harness) forward their chat calls to, by the seat's
	// role; nil: resets naming harness seats are refused. The server
	// does not close the clients.
	HarnessModel func(role string) (*llm.Client, error)
	// HarnessLLM, when set, is the model and sampling that role's harness
	// seats ask HarnessModel's client for (seats.Options.LLM): each role
	// of outside agents its own model on a shared server. nil, or nil for
	// a role: the client's own.
	HarnessLLM func(role string) *llm.Config
	// HarnessSeat configures the harness seats; an ActTimeout of 0 is
	// SessionTimeout: a harness that makes no move that long gives its
	// seat up to the episode's fallback.
	HarnessSeat seats.Options
	// Seed roots the run seeds of episodes whose reset brings none: the
	// n-th such episode plays run seed seeds.Mix(Seed, n).
	Seed uint64
	// RolloutIDBase is the rollout_id (and group_index) of the first
	// episode whose reset brings no rollout_id; the next get the next.
	RolloutIDBase int64
	// Sink receives every finished episode, credited and projected into
	// samples by its spec's allocators (a JSONL sample writer, an episode
	// writer, a Tee of both); nil: none (the records stay readable at
	// /record for Retain). It is called one episode at a time.
	Sink trajectories.Sink

	MaxSessions int // live sessions at once
	MaxEpisodes int // live episodes at once
	// MaxSeats bounds the seats of one episode, or of each env of a
	// vector (default DefaultMaxSeats): a reset (or /seats, or /vectors)
	// whose parameters make more is refused, 400 too_large, naming the
	// count and the limit, before its seats are built when the scenario
	// counts them (env.SeatCounter).
	MaxSeats int
	// MaxVectorEnvs bounds the envs of all vector environments together
	// (default DefaultMaxVectorEnvs).
	MaxVectorEnvs int
	// SessionTimeout is how long a session may stay silent (over HTTP;
	// a WebSocket session lasts as long as its connection) before its
	// seats fall back, and how long an episode may wait for seats no
	// session took before it ends aborted (end EndIdle).
	SessionTimeout time.Duration
	// MaxWait bounds how long one reset or step waits for the session's
	// turn; an answer with no pending seat and done false says "not yet":
	// step again with no move to wait on.
	MaxWait time.Duration
	// Retain is how long a finished episode stays readable (/state,
	// /record) after its end; MaxRetained how many finished episodes are
	// kept so at most (the oldest go first).
	Retain       time.Duration
	MaxRetained  int
	MaxBodyBytes int64

	Logger *slog.Logger
	// Ready, when set, is called with the listener's address once Serve
	// listens.
	Ready func(net.Addr)

	// Default is the reset of a request that names neither a scenario
	// nor an episode to join (OpenEnv's reset() sends none): its fields
	// fill those the request leaves zero. nil: such resets are refused.
	// New refuses a Default without a scenario, or one that joins or
	// brings a seed, episode_id or rollout_id.
	Default *envclient.ResetRequest
}

func (c Config) withDefaults() (Config, error) {
	for name, v := range map[string]int64{"MaxSessions": int64(c.MaxSessions), "MaxEpisodes": int64(c.MaxEpisodes), "MaxSeats": int64(c.MaxSeats), "MaxVectorEnvs": int64(c.MaxVectorEnvs),
		"SessionTimeout": int64(c.SessionTimeout), "MaxWait": int64(c.MaxWait), "Retain": int64(c.Retain), "MaxRetained": int64(c.MaxRetained), "MaxBodyBytes": c.MaxBodyBytes, "BodyTimeout": int64(c.BodyTimeout)} {
		if v < 0 {
			return c, fmt.Errorf("%w: %s is negative (%d)", ErrBadConfig, name, v)
		}
	}
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	if c.Scenarios == nil {
		c.Scenarios = scenarios.Builtin()
	}
	if c.Allocators == nil {
		c.Allocators = credit.Builtin()
	}
	c.BodyTimeout = cmp.Or(c.BodyTimeout, httpedge.DefaultBodyTimeout)
	c.MaxSessions = cmp.Or(c.MaxSessions, DefaultMaxSessions)
	c.MaxEpisodes = cmp.Or(c.MaxEpisodes, DefaultMaxEpisodes)
	c.MaxSeats = cmp.Or(c.MaxSeats, DefaultMaxSeats)
	c.MaxVectorEnvs = cmp.Or(c.MaxVectorEnvs, DefaultMaxVectorEnvs)
	c.MaxRetained = cmp.Or(c.MaxRetained, DefaultMaxRetained)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.Retain = cmp.Or(c.Retain, DefaultRetain)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.HarnessSeat.ActTimeout = cmp.Or(c.HarnessSeat.ActTimeout, c.SessionTimeout)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c, nil
}

// Server is the environment server: an http.Handler. It is safe for
// concurrent use.
type Server struct {
	cfg      Config
	token    httpedge.Token
	exposed  string // CheckAccess's warning: served open beyond loopback
	metadata []byte
	mux      http.Handler // routes (httpedge.Routed)

	mu       sync.Mutex
	episodes map[string]*episodeEntry
	sessions map[string]*session
	live     int // episodes not over
	draining bool
	seeded   uint64          // episodes seeded by the server
	rollouts int64           // rollout ids handed out
	ended    []*episodeEntry // finished episodes still kept, oldest first
	reaped   time.Time       // when reap last ran
	// vectors are the vector environments, by id; vectorEnvs counts
	// their envs, vectorElements their batches' elements (vectorCost),
	// which vectorBudget bounds.
	vectors        map[string]*vectorEnv
	vectorEnvs     int
	vectorElements uint64
	vectorBudget   uint64

	writeMu sync.Mutex // one episode written at a time
	samples atomic.Int64

	openapi []byte       // GET /openapi.json
	mcpHTTP http.Handler // MCP's streamable HTTP transport at /mcp
	oe      openenvState // OpenEnv's session-less calls and MCP sessions
}

// episodeEntry is one episode of the server.
type episodeEntry struct {
	id      string
	tb      *table.Table
	res     *runspec.Resolved
	actions [][]string // by seat: its role's action set, nil when none
	check   func(obs *agents.Observation, text string) error
	// reward is the index in res.Allocators of the allocator whose
	// credit is the seats' reward; -1: their scores.
	reward int
	// learners are the seats sessions may play (not the house's from the
	// start): their counterfactuals replay them (learnerReplay).
	learners []int

	// guarded by Server.mu
	last     time.Time  // the last move or call that touched it
	ended    time.Time  // when it was seen over
	sessions int        // live sessions
	members  []*session // every session that joined it

	// harness are the seats outside harnesses play, by agent id; their
	// handlers serve under PathEpisodes until the episode is forgotten.
	harness  map[string]*harnessSeat
	written  sync.Once
	wrote    atomic.Bool // written's function returned: credit and writeErr are set
	writeErr error
	// credit is the episode's credit seat by seat, set by write (under
	// written: read once settle returned).
	credit *credit.Seats
}

// harnessSeat is a seat an outside harness plays, and its endpoints.
type harnessSeat struct {
	seat    *seats.Seat
	handler http.Handler
}

// session is one session: its seats at its episode's table.
type session struct {
	id string
	ep *episodeEntry
	s  *table.Session
	ws bool // a WebSocket's: it lasts as long as its connection
	// features: its answers carry its seats' features (and the state,
	// when it holds every seat).
	features bool
	last     time.Time // guarded by Server.mu
}

// New returns a server of cfg.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	exposed, err := httpedge.CheckAccess(cfg.Addr, cfg.Token, cfg.InsecureOpen, "--insecure-open")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if exposed != "" && cfg.HarnessModel != nil {
		return nil, fmt.Errorf("%w: --addr %s without a token would forward anyone's chat calls to the model server (--llm-base-url): give the server a token (--token-file or $TROUPE_TOKEN)", ErrBadConfig, cfg.Addr)
	}
	s := &Server{cfg: cfg, exposed: exposed, token: httpedge.NewToken(cfg.Token), episodes: map[string]*episodeEntry{}, sessions: map[string]*session{}, vectors: map[string]*vectorEnv{}, vectorBudget: maxServerVectorElements}
	if err := s.checkDefault(); err != nil {
		return nil, err
	}
	if s.metadata, err = json.Marshal(metadataOf(cfg.Scenarios)); err != nil {
		return nil, err
	}
	if s.openapi, err = openAPI(runspec.TroupeVersion); err != nil {
		return nil, err
	}
	s.mcpHTTP = s.newMCPHandler()
	s.rollouts = cfg.RolloutIDBase
	s.mux = httpedge.Routed(s.routes(), s.notFound)
	return s, nil
}

// apiError is an error answer: its HTTP status and its body.
type apiError struct {
	status int
	body   envclient.Error
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status, envclient.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// tableError maps a table's error to its answer.
func tableError(err error) *apiError {
	switch {
	case errors.Is(err, table.ErrIllegal):
		return errorf(http.StatusUnprocessableEntity, envclient.CodeIllegal, "%v", err)
	case errors.Is(err, table.ErrNotPending):
		return errorf(http.StatusConflict, envclient.CodeNotYourTurn, "%v", err)
	case errors.Is(err, table.ErrEpisodeOver):
		return errorf(http.StatusConflict, envclient.CodeEpisodeOver, "%v", err)
	case errors.Is(err, table.ErrNotYours):
		return errorf(http.StatusForbidden, envclient.CodeNotYours, "%v", err)
	case errors.Is(err, table.ErrTaken):
		return errorf(http.StatusConflict, envclient.CodeTaken, "%v", err)
	case errors.Is(err, table.ErrNoSeat), errors.Is(err, table.ErrBadConfig):
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%v", err)
	case errors.Is(err, table.ErrLeft):
		return errorf(http.StatusNotFound, envclient.CodeUnknown, "%v", err)
	}
	return errorf(http.StatusInternalServerError, envclient.CodeInternal, "%v", err)
}

// newID is a random id: session ids are what a session's calls carry, so
// they must not be guessed.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// reset starts a session: a new episode, or a seat at one (Join). A new
// episode's harness seats are seated first; when they leave the session
// no seat, the answer is the episode and no session.
func (s *Server) reset(ctx context.Context, req *envclient.ResetRequest, ws bool) (*episodeEntry, *session, *apiError) {
	s.reapSoon()
	req = s.defaulted(req)
	var ep *episodeEntry
	if req.Join != "" {
		if e := joinOnly(req); e != nil {
			return nil, nil, e
		}
		s.mu.Lock()
		ep = s.episodes[req.Join]
		s.mu.Unlock()
		if ep == nil {
			return nil, nil, errorf(http.StatusNotFound, envclient.CodeUnknown, "join: no episode %q", req.Join)
		}
	}
	var seats []int
	if req.Join == "" {
		if len(req.Harness) > 0 && s.cfg.HarnessModel == nil {
			return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "harness: this server has no model server for harness seats (troupe env-serve --llm-base-url URL)")
		}
		var e *apiError
		if ep, seats, e = s.create(ctx, req); e != nil {
			return nil, nil, e
		}
		if len(req.Harness) > 0 && len(seats) == 0 {
			// Every seat left is the harnesses' or the house's: the
			// creator follows the episode by its id.
			s.started(ep)
			return ep, nil, nil
		}
	} else {
		var e *apiError
		if seats, e = seatsOf(ep.tb, req.Seats, "seats"); e != nil {
			return nil, nil, e
		}
	}
	if _, ok := ep.res.Scenario.(env.Features); req.Features && !ok {
		s.dropIfUnjoined(ep)
		return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "features: scenario %s declares no numeric observation (env.Features): its observations are its views", ep.res.Info.Name)
	}
	s.mu.Lock()
	if len(s.sessions) >= s.cfg.MaxSessions {
		s.mu.Unlock()
		s.dropIfUnjoined(ep)
		return nil, nil, errorf(http.StatusServiceUnavailable, envclient.CodeTooMany, "the server holds %d sessions, its limit", s.cfg.MaxSessions)
	}
	s.mu.Unlock()
	ts, err := ep.tb.Join(seats...)
	if err != nil {
		s.dropIfUnjoined(ep)
		return nil, nil, tableError(err)
	}
	ss := &session{id: newID("s-"), ep: ep, s: ts, ws: ws, features: req.Features}
	s.mu.Lock()
	now := time.Now()
	ss.last, ep.last = now, now
	ep.sessions++
	ep.members = append(ep.members, ss)
	s.sessions[ss.id] = ss
	s.mu.Unlock()
	if len(req.Harness) > 0 {
		s.started(ep)
	}
	return ep, ss, nil
}

// seatHarness seats outside harnesses at the new episode ep's seats
// named, and returns the seats its creator's session takes: those given
// (which must not be the harnesses'), or when none are, every open seat
// but the harnesses'. Nothing is seated when a name is wrong.
func (s *Server) seatHarness(ctx context.Context, ep *episodeEntry, names []string, mine []int) ([]int, *apiError) {
	hs, e := seatsOf(ep.tb, names, "harness")
	if e != nil {
		return nil, e
	}
	open := ep.tb.Open() // in seat order
	n := len(ep.tb.Seats())
	// Marks, not scans: a reset may name each of thousands of seats.
	harness, given := marks(n, hs[:0:0]), marks(n, mine)
	for _, i := range hs {
		agent := ep.tb.Seats()[i].ID
		_, isOpen := slices.BinarySearch(open, i)
		switch {
		case harness[i]:
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "harness: seat %s is named twice", agent)
		case given[i]:
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "harness: seat %s is in seats too: a seat is played by the session or by a harness, not both", agent)
		case !isOpen:
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "harness: seat %s is played by the house (open names the seats sessions and harnesses may take)", agent)
		}
		harness[i] = true
	}
	if len(mine) == 0 {
		for _, i := range open {
			if !harness[i] {
				mine = append(mine, i)
			}
		}
	}
	// The seats' watchers live as long as the server, not the request:
	// they end when the episode does (started) or is dropped.
	wctx := context.WithoutCancel(ctx)
	ep.harness = make(map[string]*harnessSeat, len(hs))
	for _, i := range hs {
		role := ep.tb.Seats()[i].Role
		client, err := s.cfg.HarnessModel(role)
		if err != nil {
			s.closeHarness(ep)
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "harness: the model server of role %s: %v", role, err)
		}
		opts := s.cfg.HarnessSeat
		if s.cfg.HarnessLLM != nil {
			opts.LLM = s.cfg.HarnessLLM(role)
		}
		st, err := seats.New(wctx, ep.tb, i, client, opts)
		if err != nil {
			s.closeHarness(ep)
			return nil, tableError(err)
		}
		ep.harness[st.ID()] = &harnessSeat{seat: st, handler: st.Handler()}
	}
	return mine, nil
}

// started watches an episode with harness seats: nobody may step it once
// its sessions are gone, so its end is written when it comes, and its
// seats' watchers stop.
func (s *Server) started(ep *episodeEntry) {
	s.mu.Lock()
	if ep.last.IsZero() {
		ep.last = time.Now()
	}
	s.mu.Unlock()
	go func() {
		<-ep.tb.Done()
		s.settle(ep)
		s.closeHarness(ep)
	}()
}

// closeHarness stops the watchers of ep's harness seats.
func (s *Server) closeHarness(ep *episodeEntry) {
	for _, h := range ep.harness {
		h.seat.Close()
	}
}

// joinOnly refuses the episode's fields in a reset that joins one.
func joinOnly(req *envclient.ResetRequest) *apiError {
	if req.Scenario != "" || req.Params != nil || req.Policies != nil || req.Open != nil || req.Fallback != "" || req.Seed != nil ||
		req.Limits != nil || req.OnInvalid != nil || req.Emit != nil || req.Allocators != nil || req.RewardFormat != "" ||
		req.Reward != "" || req.RolloutID != nil || req.EpisodeID != "" || req.PassIllegal {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "join: a reset that joins an episode names only join and seats: the episode's creator set the rest")
	}
	if req.Harness != nil {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "join: harness seats are named by the reset that creates the episode")
	}
	return nil
}

// seatsOf reads agent ids (or seat numbers) into seat indexes.
func seatsOf(tb *table.Table, names []string, field string) ([]int, *apiError) {
	var out []int
	for _, n := range names {
		i, err := tb.SeatOf(n)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%s: %v", field, err)
		}
		out = append(out, i)
	}
	return out, nil
}

// dropIfUnjoined forgets an episode its creator's reset failed to join
// (a bad seats field): nobody else knows its id yet.
func (s *Server) dropIfUnjoined(ep *episodeEntry) {
	s.mu.Lock()
	drop := ep.sessions == 0 && s.episodes[ep.id] == ep && ep.ended.IsZero() && ep.last.IsZero()
	if drop {
		delete(s.episodes, ep.id)
		s.live--
	}
	s.mu.Unlock()
	if drop {
		s.closeHarness(ep)
	}
}

// create makes the episode a reset describes, its harness seats seated,
// and returns the seats its creator's session takes.
func (s *Server) create(ctx context.Context, req *envclient.ResetRequest) (*episodeEntry, []int, *apiError) {
	if req.Scenario == "" {
		return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "scenario: name one (%v), or join an episode (troupe env-serve --scenario NAME makes a default)", s.cfg.Scenarios.Names())
	}
	fb, err := table.ParseFallback(req.Fallback)
	if err != nil {
		return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "fallback: %v", err)
	}
	s.mu.Lock()
	switch {
	case s.draining:
		s.mu.Unlock()
		return nil, nil, errorf(http.StatusServiceUnavailable, envclient.CodeDraining, "the server is shutting down")
	case s.live >= s.cfg.MaxEpisodes:
		s.mu.Unlock()
		return nil, nil, errorf(http.StatusServiceUnavailable, envclient.CodeTooMany, "the server plays %d episodes, its limit", s.cfg.MaxEpisodes)
	case req.EpisodeID != "" && s.episodes[req.EpisodeID] != nil:
		s.mu.Unlock()
		return nil, nil, errorf(http.StatusConflict, envclient.CodeBadRequest, "episode_id %q is in use", req.EpisodeID)
	}
	var seed uint64
	if req.Seed != nil {
		seed = *req.Seed
	} else {
		seed = seeds.Mix(s.cfg.Seed, s.seeded)
		s.seeded++
	}
	var rid int64
	if req.RolloutID != nil {
		rid = *req.RolloutID
	} else {
		rid = s.rollouts
		s.rollouts++
	}
	s.mu.Unlock()

	spec := specOf(req.Scenario, req.Params, req.Policies, req.Limits, req.OnInvalid, req.Emit, req.Allocators, req.RewardFormat)
	res, reward, setup, e := s.resolveAt(spec, seed, rid, req.Reward)
	if e != nil {
		return nil, nil, e
	}
	open := []int{}
	if len(req.Open) == 0 {
		open = nil // every seat
	}
	tb, err := table.New(ctx, table.Config{Setup: setup, Open: open, OpenAgents: req.Open, Fallback: fb, PassIllegal: req.PassIllegal})
	if err != nil {
		return nil, nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%v", err)
	}
	if e := s.checkSeats(res.Info.Name, len(tb.Seats())); e != nil {
		// A scenario that does not count its seats ahead (SeatCounter)
		// is held to the limit once they are built.
		tb.Stop(protocol.StatusAborted, env.EndInterrupted, errors.New("refused: over the server's seat limit"))
		return nil, nil, e
	}
	ep := &episodeEntry{id: req.EpisodeID, tb: tb, res: res, reward: reward}
	house := marks(len(tb.Seats()), tb.House())
	for i := range tb.Seats() {
		if !house[i] {
			ep.learners = append(ep.learners, i)
		}
	}
	if ep.id == "" {
		ep.id = newID("e-")
	}
	if sa, ok := res.Scenario.(env.StructuredActions); ok {
		ep.check = sa.CheckAnswer
	}
	if as, ok := res.Scenario.(env.ActionSets); ok {
		sets := map[string][]string{}
		for _, seat := range tb.Seats() {
			set, ok := sets[seat.Role]
			if !ok {
				set = as.ActionSet(res.Config.Params, seat.Role)
				sets[seat.Role] = set
			}
			ep.actions = append(ep.actions, set)
		}
	}
	mine, e := seatsOf(tb, req.Seats, "seats")
	if e != nil {
		return nil, nil, e
	}
	if len(req.Harness) > 0 {
		// Seated before the episode is known: its harness map is
		// read, never written, once it is.
		if mine, e = s.seatHarness(ctx, ep, req.Harness, mine); e != nil {
			return nil, nil, e
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.episodes[ep.id] != nil {
		s.closeHarness(ep)
		return nil, nil, errorf(http.StatusConflict, envclient.CodeBadRequest, "episode_id %q is in use", ep.id)
	}
	s.episodes[ep.id] = ep
	s.live++
	return ep, mine, nil
}

// specOf is the one-episode run spec of an episode's fields (a reset's,
// a vector's), without its seed and ids (resolve sets them).
func specOf(scenario string, params, policies map[string]string, limits *envclient.Limits, invalid *envclient.Invalid, emit, allocators []string, format string) runspec.Spec {
	spec := runspec.Spec{Scenario: scenario, Params: params, Emit: emit, Allocators: allocators,
		RewardFormat: format, Episodes: 1, GroupSize: 1}
	if len(policies) > 0 {
		spec.Policies = make(map[string]runspec.Policy, len(policies))
		for role, name := range policies {
			spec.Policies[role] = runspec.Policy{Name: name}
		}
	}
	if l := limits; l != nil {
		spec.Limits = runspec.Limits{MaxSteps: l.MaxSteps, MaxTurns: l.MaxTurns, MaxMessages: l.MaxMessages}
	}
	if v := invalid; v != nil {
		spec.OnInvalid = runspec.Invalid{Mode: v.Mode, Penalty: v.Penalty, Bonus: v.Bonus}
	}
	return spec
}

// resolveAt resolves spec as the one-episode run of run seed seed whose
// episode has rollout id (and group index) rid, its allocators gaining
// reward as resolve says, and returns reward's index (resolve's) and the
// episode's setup: what `troupe run --seed` of the spec would play.
func (s *Server) resolveAt(spec runspec.Spec, seed uint64, rid int64, reward string) (*runspec.Resolved, int, env.Setup, *apiError) {
	spec.Seed, spec.RolloutIDBase, spec.GroupIndexBase = seed, rid, rid
	res, k, e := s.resolve(spec, reward)
	if e != nil {
		return nil, 0, env.Setup{}, e
	}
	r := res.Config.Request(0)
	setup := env.Setup{Play: res.Config.Play, Seed: r.Seed, PolicySeed: r.PolicySeed, Index: r.Index, RolloutID: r.RolloutID, GroupIndex: r.GroupIndex}
	// The server plays without a clock: its timeouts are its own.
	setup.Timeout = 0
	return res, k, setup, nil
}

// resolve resolves spec, whose allocators gain reward (an allocator's
// spec) when none of them has its name, and returns the index of reward's
// allocator among them (-1 when reward is "": the scores).
func (s *Server) resolve(spec runspec.Spec, reward string) (*runspec.Resolved, int, *apiError) {
	rs := runspec.Resolvers{Scenarios: s.cfg.Scenarios, Allocators: s.cfg.Allocators, Policies: s.cfg.Policies}
	res, err := spec.Resolve(rs)
	if err != nil {
		return nil, 0, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "%v", err)
	}
	if sc, ok := res.Scenario.(env.SeatCounter); ok {
		if e := s.checkSeats(res.Info.Name, sc.SeatCount(res.Config.Params)); e != nil {
			return nil, 0, e
		}
	}
	if reward == "" {
		return res, -1, nil
	}
	cf := res.Info.Counterfactual
	a, err := s.cfg.Allocators.ParseDefaultingSim(reward, cf != nil && cf.Resimulate)
	if err != nil {
		return nil, 0, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "reward: %q: %v", reward, err)
	}
	for k, b := range res.Allocators {
		if b.Name() == a.Name() {
			return res, k, nil
		}
	}
	// Resolved again with it, so that the run spec's checks (a
	// counterfactual allocator needs the scenario's consent) see it.
	spec.Allocators = append(slices.Clone(res.Spec.Allocators), reward)
	if res, err = spec.Resolve(rs); err != nil {
		return nil, 0, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "reward: %v", err)
	}
	return res, len(res.Allocators) - 1, nil
}

// checkSeats refuses an episode of n seats when n is over MaxSeats.
func (s *Server) checkSeats(scenario string, n int) *apiError {
	if n <= s.cfg.MaxSeats {
		return nil
	}
	return errorf(http.StatusBadRequest, envclient.CodeTooLarge, "params: an episode of %s with these parameters has %d seats, over this server's limit of %d (troupe env-serve --max-seats)", scenario, n, s.cfg.MaxSeats)
}

// step gives a session's moves and waits for its next turn.
func (s *Server) step(ctx context.Context, ss *session, a *envclient.Action) (envclient.Result, *apiError) {
	s.touch(ss)
	defer s.settle(ss.ep)
	moves, e := s.movesOf(ss, a)
	if e != nil {
		return envclient.Result{}, e
	}
	// Every move is checked before any is given: a refused one changes
	// nothing.
	for _, m := range moves {
		if err := ss.s.Check(m.seat, m.action); err != nil {
			return envclient.Result{}, tableError(err)
		}
	}
	for _, m := range moves {
		if err := ss.s.Act(ctx, m.seat, m.action); err != nil {
			return envclient.Result{}, tableError(err)
		}
	}
	return s.await(ctx, ss)
}

type move struct {
	seat   int
	action agents.Action
}

// movesOf reads a step's action: one move, several, or none (wait).
func (s *Server) movesOf(ss *session, a *envclient.Action) ([]move, *apiError) {
	tb := ss.ep.tb
	if e := checkGeneration(a); e != nil {
		return nil, e
	}
	switch {
	case a.Move != nil && a.Moves != nil:
		return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action: give move (one seat's) or moves (by agent), not both")
	case a.Moves != nil:
		if a.Seat != "" {
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action: seat goes with move; moves names its agents")
		}
		out := make([]move, 0, len(a.Moves))
		for agent, text := range a.Moves {
			i, err := tb.SeatOf(agent)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action.moves: %v", err)
			}
			out = append(out, move{i, agents.Action{Text: text}})
		}
		slices.SortFunc(out, func(x, y move) int { return x.seat - y.seat })
		return out, nil
	case a.Move != nil:
		if a.Seat != "" {
			i, err := tb.SeatOf(a.Seat)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action.seat: %v", err)
			}
			return []move{{i, moveAction(a)}}, nil
		}
		pend := ss.s.Pending()
		switch len(pend) {
		case 1:
			return []move{{pend[0].Seat, moveAction(a)}}, nil
		case 0:
			if tb.Record() != nil {
				return nil, tableError(table.ErrEpisodeOver)
			}
			return nil, errorf(http.StatusConflict, envclient.CodeNotYourTurn, "none of the session's seats acts now (the episode waits for %v): step with no move to wait", names(tb, tb.Waiting()))
		}
		return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action: %d of the session's seats act now (%v): name the seat, or give moves", len(pend), agentsOf(pend))
	case a.Seat != "":
		return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action: seat %q without a move", a.Seat)
	}
	return nil, nil
}

func agentsOf(obs []env.PendingSeat) []string {
	out := make([]string, len(obs))
	for k, o := range obs {
		out[k] = o.Agent
	}
	return out
}

func names(tb *table.Table, seats []int) []string {
	all := tb.Seats()
	out := make([]string, len(seats))
	for k, i := range seats {
		out[k] = all[i].ID
	}
	return out
}

// await waits, up to MaxWait, for one of the session's seats to act, or
// the end, and answers what the session sees then.
func (s *Server) await(ctx context.Context, ss *session) (envclient.Result, *apiError) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	obs, err := ss.s.Observe(wctx)
	switch {
	case err == nil:
	case errors.Is(err, table.ErrLeft):
		return envclient.Result{}, tableError(err)
	case ctx.Err() != nil:
		return envclient.Result{}, errorf(http.StatusServiceUnavailable, envclient.CodeInternal, "the request ended: %v", context.Cause(ctx))
	default: // MaxWait: not yet
	}
	s.settle(ss.ep)
	s.touch(ss)
	return s.result(ss, obs), nil
}

// touch marks the session and its episode alive now.
func (s *Server) touch(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ss.last, ss.ep.last = now, now
}

// settle writes the episode once it is over (whichever call sees it first).
func (s *Server) settle(ep *episodeEntry) {
	rec := ep.tb.Record()
	if rec == nil {
		return
	}
	ep.written.Do(func() {
		s.mu.Lock()
		ep.ended = time.Now()
		s.live--
		s.ended = append(s.ended, ep)
		if len(s.ended) > s.cfg.MaxRetained {
			old := s.ended[0]
			s.ended = s.ended[1:]
			if s.episodes[old.id] == old {
				delete(s.episodes, old.id)
			}
		}
		// A session ends with its episode: its id no longer counts
		// against MaxSessions (the episode's id reads its state).
		for _, ss := range ep.members {
			if s.sessions[ss.id] == ss {
				delete(s.sessions, ss.id)
				ep.sessions--
			}
		}
		s.mu.Unlock()
		ep.writeErr = s.write(ep.res, rec, ep.replayOf(rec), func(rec *episode.Record, c *trajectories.Credit) error {
			var err error
			ep.credit, err = credit.SeatsOf(rec, c)
			return err
		})
		ep.wrote.Store(true)
		if ep.writeErr != nil {
			s.cfg.Logger.Error("environment server: an episode could not be written", "episode", ep.id, "error", ep.writeErr)
		}
	})
}

// write hands the record to the output stage of its spec: play.Run, with an
// executor that returns it, into trajectories.Output over the server's
// sink, its samples numbered from the server's counter; its credit
// replays counterfactuals with replay (replayOf's), and observe, when not
// nil, sees the credit the allocators gave it (Output.ObserveCredit).
func (s *Server) write(res *runspec.Resolved, rec *episode.Record, replay episode.Replayer, observe func(*episode.Record, *trajectories.Credit) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	out := res.Output(s.cfg.Sink)
	out.Reserve = func(n int) int64 { return s.samples.Add(int64(n)) - int64(n) }
	out.ObserveCredit = observe
	if replay != rec.Replay {
		cp := *rec
		cp.Replay = replay
		rec = &cp
	}
	cfg := res.Config
	cfg.Executor = env.ExecutorFunc(func(context.Context, env.Request) *episode.Record { return rec })
	_, err := play.Run(context.Background(), cfg, out)
	return err
}

// result is what the session sees: its pending seats (obs), the episode's
// state and, once it is over, the scores.
func (s *Server) result(ss *session, obs []env.PendingSeat) envclient.Result {
	ep := ss.ep
	o := s.observation(ep, ss)
	if o.Done {
		s.creditOf(ep, &o)
	}
	o.Pending = make([]envclient.SeatObservation, len(obs))
	for k := range obs {
		o.Pending[k] = ep.seatObservation(obs[k].Seat, &obs[k].Observation)
	}
	if ss.features {
		if e := ep.features(&o, ss); e != nil {
			o.Error = e.body.Message
		}
	}
	res := envclient.Result{Observation: o, Done: o.Done}
	r := 0.0
	if o.Done {
		for _, i := range ss.s.Seats() {
			agent := ep.tb.Seats()[i].ID
			if c, ok := o.Credit[agent]; ok {
				r += c.Reward
			} else if ep.reward < 0 {
				r += o.Scores[agent]
			}
		}
	}
	res.Reward = &r
	return res
}

// observation is the episode as the session sees it, without its pending
// seats.
func (s *Server) observation(ep *episodeEntry, ss *session) envclient.Observation {
	tb := ep.tb
	o := envclient.Observation{EpisodeID: ep.id, Step: tb.Time(), Waiting: names(tb, tb.Waiting()), Pending: []envclient.SeatObservation{}}
	if ss != nil {
		o.SessionID = ss.id
	}
	if rec := tb.Record(); rec != nil {
		o.Done, o.Status, o.End, o.Error = true, string(rec.Status), rec.End, rec.Err
		o.Step = rec.Steps
		if rec.Status == protocol.StatusCompleted || rec.Status == protocol.StatusTruncated {
			team := rec.Score.Team
			o.Team = &team
			o.Scores = make(map[string]float64, len(rec.Seats))
			for i, seat := range rec.Seats {
				v, ok := rec.AgentScore(i)
				if !ok {
					v = rec.SeatReward(i) // its team's: G, or its side's
				}
				o.Scores[seat.ID] = v
			}
			if rec.Teams != nil {
				o.Sides = make(map[string]float64, len(rec.Teams))
				for t, name := range rec.Teams {
					o.Sides[name] = rec.Score.Of(t)
				}
			}
		}
	}
	return o
}

// features sets o's features of ss's seats and, when ss holds every
// seat, the global state.
func (ep *episodeEntry) features(o *envclient.Observation, ss *session) *apiError {
	fs, ok := ep.res.Scenario.(env.Features)
	if !ok {
		return nil // refused at the reset
	}
	params, tb := ep.res.Config.Params, ep.tb
	mine := ss.s.Seats()
	o.Features = make(map[string][]float32, len(mine))
	for _, i := range mine {
		seat := tb.Seats()[i]
		v := make([]float32, fs.ObservationSpace(params, seat.Role).Size())
		if err := tb.Features(i, v); err != nil {
			return errorf(http.StatusInternalServerError, envclient.CodeInternal, "%v", err)
		}
		o.Features[seat.ID] = v
	}
	if len(mine) == len(tb.Seats()) {
		o.State = make([]float32, fs.StateSpace(params).Size())
		if err := tb.State(o.State); err != nil {
			return errorf(http.StatusInternalServerError, envclient.CodeInternal, "%v", err)
		}
	}
	return nil
}

// creditOf sets o's credit, once the episode over is written (settle).
func (s *Server) creditOf(ep *episodeEntry, o *envclient.Observation) {
	if ep.reward >= 0 {
		o.RewardAllocator = ep.res.Allocators[ep.reward].Name()
	}
	if !ep.wrote.Load() {
		return
	}
	c := ep.credit
	if c == nil {
		o.CreditError = "the episode's credit was not computed"
		if ep.writeErr != nil {
			o.CreditError = ep.writeErr.Error()
		}
		return
	}
	o.Credit = make(map[string]envclient.SeatCredit, len(c.Seats))
	for i := range c.Seats {
		sc := &c.Seats[i]
		w := envclient.SeatCredit{Side: sc.SideName, SideReward: sc.Reward, Credit: map[string]float64{}, Turns: map[string][]float64{}, Steps: sc.Steps}
		if w.Steps == nil {
			w.Steps = []int{}
		}
		if sc.HasScore {
			v := sc.Score
			w.Score = &v
		}
		for a, name := range c.Allocators {
			w.Turns[name] = sc.Turns[a]
			if sc.End != nil {
				w.Credit[name] = sc.End[a]
			}
		}
		switch {
		case !c.Scored:
			// No outcome: nothing to reward (the allocators' 0).
		case ep.reward < 0:
			w.Reward = sc.ScoreOr()
		default:
			w.Reward = w.Credit[c.Allocators[ep.reward]]
		}
		o.Credit[sc.Agent] = w
	}
}

// seats describes the episode's seats as ss sees them; base is the
// server's URL as the request reached it (the harness seats' URLs start
// with it).
func (ep *episodeEntry) seats(ss *session, base string) []envclient.Seat {
	var mine []int
	if ss != nil {
		mine = ss.s.Seats()
	}
	n := len(ep.tb.Seats())
	isMine, house := marks(n, mine), marks(n, ep.tb.House())
	out := make([]envclient.Seat, n)
	for i, seat := range ep.tb.Seats() {
		out[i] = envclient.Seat{Agent: seat.ID, Role: seat.Role, Mine: isMine[i], House: house[i]}
		if ep.actions != nil {
			out[i].Actions = ep.actions[i]
		}
		if _, ok := ep.harness[seat.ID]; ok {
			p := base + harnessPath(ep.id, seat.ID)
			out[i].Harness = &envclient.HarnessURLs{OpenAIBaseURL: p + "/v1", MCPURL: p + "/mcp", ToolsURL: p + "/tools"}
		}
	}
	return out
}

// marks returns n flags, those of the seats in set true: a membership
// test in constant time where slices.Contains made describing n seats
// cost n².
func marks(n int, set []int) []bool {
	m := make([]bool, n)
	for _, i := range set {
		m[i] = true
	}
	return m
}

// harnessPath is where a harness seat's endpoints are served.
func harnessPath(episode, agent string) string {
	return envclient.PathEpisodes + url.PathEscape(episode) + "/seats/" + url.PathEscape(agent)
}

// seatObservation is o, seat i's, on the wire, with the choices of its action set
// the rules allow.
func (ep *episodeEntry) seatObservation(i int, o *agents.Observation) envclient.SeatObservation {
	so := envclient.SeatObservation{Agent: o.Agent, Role: o.Role, State: string(o.State), Turn: o.Turn, Step: o.Step,
		View: o.View, Legal: o.Legal, Inbox: o.Inbox, Seed: o.Seed}
	if so.Inbox == nil {
		so.Inbox = []protocol.Message{}
	}
	if ep.actions == nil || ep.actions[i] == nil {
		return so
	}
	switch {
	case o.Legal != nil:
		so.Choices = o.Legal
	case ep.check != nil:
		so.Choices = []string{}
		for _, a := range ep.actions[i] {
			if ep.check(o, a) == nil {
				so.Choices = append(so.Choices, a)
			}
		}
	default:
		so.Choices = ep.actions[i]
	}
	return so
}

// state is GET /state's answer.
func (s *Server) state(ep *episodeEntry, ss *session, base string) envclient.State {
	o := s.observation(ep, ss)
	o.Seats = ep.seats(ss, base)
	setup := ep.tb.Setup()
	return envclient.State{EpisodeID: ep.id, StepCount: o.Step, Scenario: ep.res.Info.Name, Params: setup.Params.Map(),
		Seats: o.Seats, Waiting: o.Waiting, Done: o.Done, Status: o.Status, End: o.End}
}

// leave ends a session: its seats fall back.
func (s *Server) leave(ctx context.Context, ss *session, why string) {
	s.mu.Lock()
	if s.sessions[ss.id] != ss {
		s.mu.Unlock()
		return
	}
	delete(s.sessions, ss.id)
	ss.ep.sessions--
	ss.ep.last = time.Now()
	s.mu.Unlock()
	ss.s.Leave(ctx, why)
	s.settle(ss.ep)
}

// reapSoon reaps when it has not for a quarter of SessionTimeout: resets
// call it, so that a server without Serve's janitor (a handler mounted
// elsewhere) reaps too, without a scan of every episode per reset.
func (s *Server) reapSoon() {
	s.mu.Lock()
	due := time.Since(s.reaped) > s.cfg.SessionTimeout/4
	s.mu.Unlock()
	if due {
		s.reap()
	}
}

// reap ends what has been idle too long and forgets episodes over for
// longer than Retain. Serve's janitor calls it, and resets (reapSoon).
func (s *Server) reap() {
	now := time.Now()
	s.mu.Lock()
	s.reaped = now
	var idle []*session
	for _, ss := range s.sessions {
		if !ss.ws && now.Sub(ss.last) > s.cfg.SessionTimeout {
			idle = append(idle, ss)
		}
	}
	// Finished episodes end in order: the expired ones are a prefix.
	n := 0
	for n < len(s.ended) && now.Sub(s.ended[n].ended) > s.cfg.Retain {
		if old := s.ended[n]; s.episodes[old.id] == old {
			delete(s.episodes, old.id)
		}
		n++
	}
	s.ended = s.ended[n:]
	var stale []*episodeEntry
	for _, ep := range s.episodes {
		if ep.ended.IsZero() && now.Sub(ep.last) > s.cfg.SessionTimeout {
			stale = append(stale, ep)
		}
	}
	var idleVectors []*vectorEnv
	for _, v := range s.vectors {
		if now.Sub(v.last) > s.cfg.SessionTimeout {
			idleVectors = append(idleVectors, v)
		}
	}
	s.mu.Unlock()
	for _, v := range idleVectors {
		v.close(EndVectorClosed)
	}
	for _, ss := range idle {
		s.leave(context.Background(), ss, fmt.Sprintf("the session was idle for %v", s.cfg.SessionTimeout))
	}
	for _, ep := range stale {
		if ep.tb.Record() == nil && len(ep.tb.Open()) > 0 {
			ep.tb.Stop(protocol.StatusAborted, EndIdle, fmt.Errorf("nobody moved for %v; the episode waited for seats no session took: %v", s.cfg.SessionTimeout, names(ep.tb, ep.tb.Open())))
		}
		s.settle(ep)
	}
}

// session looks a session up.
func (s *Server) session(id string) (*session, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		if id == "" {
			return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "session_id: missing (a reset answers one)")
		}
		return nil, errorf(http.StatusNotFound, envclient.CodeUnknown, "no session %q (it closed, went idle for %v, or never was)", id, s.cfg.SessionTimeout)
	}
	return ss, nil
}

// episode looks an episode up.
func (s *Server) episode(id string) (*episodeEntry, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.episodes[id]
	if ep == nil {
		return nil, errorf(http.StatusNotFound, envclient.CodeUnknown, "no episode %q (over for longer than %v, or never was)", id, s.cfg.Retain)
	}
	return ep, nil
}

// Shutdown stops taking new episodes, ends every episode in play aborted
// (end "interrupted") and writes them. It may be called more than once.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.draining = true
	eps := make([]*episodeEntry, 0, len(s.episodes))
	for _, ep := range s.episodes {
		eps = append(eps, ep)
	}
	vectors := make([]*vectorEnv, 0, len(s.vectors))
	for _, v := range s.vectors {
		vectors = append(vectors, v)
	}
	s.mu.Unlock()
	slices.SortFunc(vectors, func(a, b *vectorEnv) int { return cmp.Compare(a.id, b.id) })
	for _, v := range vectors {
		v.close(EndVectorClosed)
	}
	slices.SortFunc(eps, func(a, b *episodeEntry) int { return cmp.Compare(a.tb.Setup().RolloutID, b.tb.Setup().RolloutID) })
	for _, ep := range eps {
		ep.tb.Stop(protocol.StatusAborted, env.EndInterrupted, errors.New("the environment server shut down"))
		s.settle(ep)
	}
}
