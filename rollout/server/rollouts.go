package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/trajectories"
)

// plan is a validated rollout request: its run spec, resolved by the one
// resolver (package runspec), and what the answer needs besides.
type plan struct {
	req *rollout.Request
	// run is the request's run spec resolved; place puts it at the ids
	// and seeds the request plays.
	run *runspec.Resolved
	// allocators are run's, each stateful one replaced by the service's
	// single instance of its spec (shared).
	allocators []trajectories.Allocator
	shared     []*shared      // the stateful allocators among allocators
	label      protocol.Label // the request's label, if any
	n          int
	// limits are the request's own limits, before the turn cap, and
	// timeout its episodes' wall-time limit (the service's, or the
	// request's when shorter).
	limits  env.Limits
	timeout time.Duration
	// capTurns is set when every role is emitted and the request sets no
	// turn limit: each episode then gets MaxTurns = MaxSamplesPerAnswer
	// (in the run spec's limits), and one that reaches it has more
	// samples than an answer may hold.
	capTurns bool
	// match is the request's league match (Config.League), until the
	// league is told how it went.
	match *Match
}

// handleRollouts answers POST /v1/rollouts.
func (s *Server) handleRollouts(w http.ResponseWriter, r *http.Request) (int, *rollout.Error) {
	if !s.begin() {
		// Read the body (within its limit) before answering, so that the
		// connection closes cleanly after the answer instead of being
		// reset with unread data in it.
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		w.Header().Set("Connection", "close")
		return 0, &rollout.Error{Status: http.StatusServiceUnavailable, Code: rollout.CodeShuttingDown,
			Message: "the service is shutting down and takes no new rollouts"}
	}
	defer s.end()
	start := time.Now()
	if e := checkContentType(r); e != nil {
		return 0, e
	}
	req, e := s.decode(w, r)
	if e != nil {
		return 0, e
	}
	p, e := s.plan(req)
	if e != nil {
		return 0, e
	}
	if e := s.place(p); e != nil {
		s.voidMatch(p)
		return 0, e
	}
	// The spec is echoed at debug level only: its canonical form and hash
	// cost more allocations than the rest of a small request.
	if s.cfg.Logger.Enabled(r.Context(), slog.LevelDebug) {
		s.cfg.Logger.Debug("rollout request", "spec_hash", p.run.Hash(), "spec", string(p.run.Spec.Canonical()))
	}

	ctx, cancel := s.requestContext(r.Context())
	defer cancel()
	ctx, count := s.countTurns(ctx, p)
	defer count.cancel(nil)
	setups := s.setups(p, count)
	eps, inside := s.play(ctx, p, setups)
	count.stop()
	s.leaguePlayed(p, eps)
	if e := s.checkSamples(p, eps, count); e != nil {
		return 0, e
	}

	alloc, err := s.allocate(ctx, p, eps)
	if err != nil {
		if ctx.Err() != nil {
			return 0, &rollout.Error{Status: http.StatusServiceUnavailable, Code: rollout.CodeInternal,
				Message: fmt.Sprintf("reward allocation was interrupted: %v", context.Cause(ctx))}
		}
		return 0, &rollout.Error{Status: http.StatusBadRequest, Code: rollout.CodeBadAllocator,
			Message: fmt.Sprintf("scenario %s: %v", p.run.Info.Name, err)}
	}
	s.finish(p, eps)

	bp := s.getBuf()
	defer s.putBuf(bp)
	var ok bool
	if *bp, ok = appendResponse((*bp)[:0], eps, s.cfg.MaxAnswerBytes); !ok {
		alloc.rollback()
		return 0, &rollout.Error{Status: http.StatusUnprocessableEntity, Code: rollout.CodeAnswerTooLarge,
			Message: fmt.Sprintf("the answer is larger than the service's limit of %d bytes (troupe serve --max-answer-bytes; MaxAnswerBytes): ask for fewer episodes (n = %d) or fewer samples (emit, limits.max_turns)", s.cfg.MaxAnswerBytes, p.n)}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(rollout.HeaderServerTiming, rollout.FormatServerTiming(inside))
	seq := alloc.commit()
	if seq > 0 {
		h.Set(rollout.HeaderAllocationSeq, formatSeq(seq))
	}
	if _, err := w.Write(*bp); err != nil && seq > 0 {
		// The allocators' update stands (see allocate): say so once.
		s.cfg.Logger.Info("rollout answer not delivered after its allocation was committed", "allocation_seq", seq, "error", err)
	}
	s.metrics.requestDuration.observe(time.Since(start))
	return http.StatusOK, nil
}

// requestContext is the context of one request's episodes: cancelled when
// the client goes away, when RequestTimeout passes, or when a shutdown
// gives up waiting. Each cause is recorded in the aborted episodes' error.
func (s *Server) requestContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(s.base, func() { cancel(context.Cause(s.base)) })
	tctx, tcancel := context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, ErrRequestTimeout)
	return tctx, func() {
		tcancel()
		stop()
		cancel(nil)
	}
}

// decode reads one JSON rollout request from the body, within the size
// limit, refusing unknown keys and trailing data.
func (s *Server) decode(w http.ResponseWriter, r *http.Request) (*rollout.Request, *rollout.Error) {
	// The body is read whole (it is bounded) so that a syntax error can
	// be placed in the field that holds it.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return nil, s.decodeError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req rollout.Request
	if err := dec.Decode(&req); err != nil {
		return nil, s.placeError(body, s.decodeError(err), err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err == nil:
		return nil, badJSON("the body holds more than one JSON value: send one rollout request object")
	default:
		return nil, s.decodeError(err)
	}
	return &req, nil
}

// placeError prefixes a syntax error's message with the top-level field
// whose value holds it ("field label: malformed JSON at byte 12: ...").
func (s *Server) placeError(body []byte, e *rollout.Error, err error) *rollout.Error {
	var syntaxErr *json.SyntaxError
	if !errors.As(err, &syntaxErr) {
		return e
	}
	if field := fieldAt(body, syntaxErr.Offset); field != "" {
		e.Message = "field " + field + ": " + e.Message
	}
	return e
}

// fieldAt returns the top-level key of the JSON object in body whose value
// the byte offset falls in, or "" when there is none.
func fieldAt(body []byte, offset int64) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, key, expectKey := 0, "", false
	for {
		tok, err := dec.Token()
		if err != nil || dec.InputOffset() >= offset {
			if depth >= 1 && !(depth == 1 && expectKey) {
				return key
			}
			return ""
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				depth++
				if depth == 1 {
					expectKey = t == '{'
				}
			case '}', ']':
				depth--
				if depth == 1 {
					expectKey = true
				}
			}
		case string:
			if depth == 1 && expectKey {
				key, expectKey = t, false
				continue
			}
		}
		if depth == 1 && !expectKey {
			if _, isDelim := tok.(json.Delim); !isDelim {
				expectKey = true // a scalar value ended the field
			}
		}
	}
}

func badJSON(format string, args ...any) *rollout.Error {
	return &rollout.Error{Status: http.StatusBadRequest, Code: rollout.CodeBadJSON, Message: fmt.Sprintf(format, args...)}
}

func badRequest(code rollout.Code, format string, args ...any) *rollout.Error {
	return &rollout.Error{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

// requestKeys lists the JSON keys of a rollout request, for error messages.
var requestKeys = func() string {
	t := reflect.TypeFor[rollout.Request]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return strings.Join(keys, ", ")
}()

func (s *Server) decodeError(err error) *rollout.Error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return &rollout.Error{Status: http.StatusRequestEntityTooLarge, Code: rollout.CodeBodyTooLarge,
			Message: fmt.Sprintf("the request body is larger than the service's limit of %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return badJSON("the body is empty: send a JSON rollout request object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badJSON("the JSON body ends before the object is complete")
	case errors.As(err, &syntaxErr):
		return badJSON("malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badJSON("the body is a JSON %s: send a rollout request object", typeErr.Value)
		}
		return badRequest(rollout.CodeBadRequest, "field %s: got a JSON %s, want %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.Is(err, rollout.ErrBadParamValue):
		return badRequest(rollout.CodeBadParams, "%v", err)
	case errors.Is(err, rollout.ErrBadPrompt):
		return badRequest(rollout.CodeBadRequest, "%v", err)
	}
	// encoding/json has no typed error for unknown keys; its message is
	// `json: unknown field "name"`.
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return badRequest(rollout.CodeUnknownField, "unknown field %s (a rollout request takes %s; see package rollout for sampling and limits)", field, requestKeys)
	}
	return badJSON("the body is not a rollout request: %v", err)
}

// plan checks a request against the scenario and the service's limits
// and resolves its run spec (specOf) with the one resolver. Every error
// names the field and what is allowed. A request that passes every check
// gets (and so creates) the service's instances of its stateful
// allocators; it takes no ids yet (place does).
func (s *Server) plan(req *rollout.Request) (p *plan, e *rollout.Error) {
	if strings.TrimSpace(req.Scenario) == "" {
		return nil, badRequest(rollout.CodeBadRequest, "scenario is required (known: %s)", strings.Join(s.cfg.Scenarios.Names(), ", "))
	}
	sc, err := s.cfg.Scenarios.Lookup(req.Scenario)
	if err != nil {
		return nil, badRequest(rollout.CodeUnknownScenario, "%v", err)
	}
	info := sc.Info()
	p = &plan{req: req, n: max(req.N, 1)}
	if req.N < 0 || req.N > s.cfg.MaxEpisodesPerRequest {
		return nil, badRequest(rollout.CodeBadRequest, "n = %d: must be between 1 and %d (0 means 1)", req.N, s.cfg.MaxEpisodesPerRequest)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"rollout_id", req.RolloutID}, {"group_index", req.GroupIndex}, {"index", req.Index}} {
		if f.v != nil && *f.v < 0 {
			return nil, badRequest(rollout.CodeBadRequest, "%s = %d: must not be negative", f.name, *f.v)
		}
	}
	if req.RolloutID != nil && *req.RolloutID > math.MaxInt64-int64(p.n-1) {
		return nil, badRequest(rollout.CodeBadRequest, "rollout_id = %d: the %d episodes' ids would overflow", *req.RolloutID, p.n)
	}
	if p.label, err = protocol.RawLabel(req.Label); err != nil {
		return nil, badRequest(rollout.CodeBadRequest, "label: %v", err)
	}
	if e := s.planLimits(p); e != nil {
		return nil, e
	}
	if !slices.Contains([]string{"", "pass", "forfeit", "spiral"}, req.Invalid) {
		return nil, badRequest(rollout.CodeBadRequest, "invalid = %q: want pass, forfeit or spiral", req.Invalid)
	}
	for _, spec := range req.Allocators {
		if hasStateParam(spec) {
			return nil, badRequest(rollout.CodeBadAllocator, "allocator %q: a request may not name a state file (state=): the service keeps one instance of each stateful allocator and its state (troupe serve --allocator-state DIR)", spec)
		}
	}
	p.capTurns = len(req.Emit) == 0 && p.limits.MaxTurns == 0
	if s.cfg.League != nil {
		if e := s.leagueMatch(req, info, p); e != nil {
			return nil, e
		}
		matched := p // a refusal returns a nil plan
		defer func() {
			if e != nil {
				s.voidMatch(matched)
			}
		}()
		p.capTurns = false // the learner's turns only, unless emit says otherwise
	}

	spec, e := s.specOf(req, info, p)
	if e != nil {
		return nil, e
	}
	if p.match != nil {
		leagueSpec(spec, p)
	}
	p.run, err = spec.Resolve(runspec.Resolvers{Scenarios: s.cfg.Scenarios, Allocators: s.cfg.Allocators, Policies: s.makePolicy})
	if err != nil {
		return nil, specError(err)
	}
	// The service's flag, not the policies', decides (Resolvers.Parallel).
	p.run.Config.ParallelPolicies = s.cfg.ParallelPolicies
	if e := s.planSamples(p); e != nil {
		return nil, e
	}
	// Only a request that passed every other check gets (and so creates)
	// the service's instances of its stateful allocators.
	p.allocators = slices.Clone(p.run.Allocators)
	for i, a := range p.allocators {
		a, sh, err := s.stateful.share(a)
		if err != nil {
			return nil, badRequest(rollout.CodeBadAllocator, "allocators[%d] %q: %v", i, p.run.Spec.Allocators[i], err)
		}
		if sh != nil {
			p.shared = append(p.shared, sh)
		}
		p.allocators[i] = a
	}
	return p, nil
}

// specOf is the request's run spec: the request's fields merged over the
// service's own defaults and flags, here and nowhere else.
//
//   - scenario, params: the request's; the dataset row's prompt and label
//     fill the scenario's parameters of those names unless params sets
//     them (a label as its text).
//   - policies: policies[role], else policy, for every role; settings from
//     Config.PolicySettings for the policies the scenario does not own
//     (an LLM's model and sampling over the --llm-* defaults). Roles
//     named by neither are left to the resolver: the scenario's default
//     policy, else random.
//   - emit, allocators (default team), reward_format: the request's.
//   - limits: the request's; the timeout is the service's episode timeout
//     unless the request asks for less; with every role emitted and no
//     turn limit, max_turns is the samples limit (capTurns).
//   - on_invalid: pass, forfeit or spiral.
//   - episodes and group_size: n (a request is one group).
//   - seed: the service seed. The ids (rollout_id_base, group_index_base)
//     and seeds (the request's seed and policy_seed, else the service's
//     derivations) are placed by place, once the request passed every
//     check: until then they are the request's or 0.
func (s *Server) specOf(req *rollout.Request, info *env.Info, p *plan) (*runspec.Spec, *rollout.Error) {
	params := maps.Clone(map[string]string(req.Params))
	if params == nil {
		params = map[string]string{}
	}
	if _, set := params["prompt"]; !set && req.Prompt != nil && declares(info, "prompt") {
		params["prompt"] = req.Prompt.ParamText()
	}
	if text, ok := p.label.Text(); ok && declares(info, "label") {
		if _, set := params["label"]; !set {
			params["label"] = text
		}
	}
	policies := map[string]runspec.Policy{}
	name := func(role string) string {
		if n, ok := req.Policies[role]; ok {
			return strings.TrimSpace(n)
		}
		return strings.TrimSpace(req.Policy)
	}
	for role := range req.Policies {
		policies[role] = runspec.Policy{Name: name(role)} // unknown roles are the resolver's to refuse
	}
	for _, r := range info.Roles {
		if n := name(r.Name); n != "" {
			policies[r.Name] = runspec.Policy{Name: n}
		}
	}
	for _, role := range slices.Sorted(maps.Keys(policies)) {
		pol := policies[role]
		if s.cfg.PolicySettings == nil || pol.Name == "" || slices.Contains(info.PolicyNames(), pol.Name) {
			continue
		}
		settings, err := s.cfg.PolicySettings(pol.Name, req)
		if err != nil {
			return nil, badRequest(rollout.CodeBadPolicy, "policy %q of role %s: %v", pol.Name, role, err)
		}
		pol.Settings = settings
		policies[role] = pol
	}
	limits := p.limits
	if p.capTurns {
		limits.MaxTurns = s.cfg.MaxSamplesPerAnswer
	}
	invalid := env.InvalidRule{}
	switch req.Invalid {
	case "forfeit":
		invalid = env.Forfeit
	case "spiral":
		invalid = env.SpiralPenalty
	}
	spec := &runspec.Spec{
		Scenario:     info.Name,
		Params:       params,
		Policies:     policies,
		Emit:         req.Emit,
		Limits:       runspec.LimitsOf(limits, p.timeout),
		OnInvalid:    runspec.InvalidOf(invalid),
		Allocators:   req.Allocators,
		RewardFormat: req.RewardFormat,
		Episodes:     p.n,
		GroupSize:    p.n,
		Seed:         s.cfg.Seed,
	}
	return spec, nil
}

// place puts the request's run at its ids and seeds: the request's
// rollout_id (else a block of n ids reserved atomically, so concurrent
// requests never share one), its group_index (else a fresh one), its
// seed (else seeds.Mix(Seed, 1, group_index)) and policy_seed (else each
// episode's derives from the scenario seed and its rollout_id:
// runspec.Seeds). Called once the request passed every check, so that a
// refused request takes no ids.
func (s *Server) place(p *plan) *rollout.Error {
	req, n := p.req, p.n
	var rid int64
	if req.RolloutID != nil {
		rid = *req.RolloutID
	} else {
		rid = s.nextRollout.Add(int64(n)) - int64(n)
	}
	var group int64
	if req.GroupIndex != nil {
		group = *req.GroupIndex
	} else {
		group = s.nextGroup.Add(1) - 1
	}
	sd := &runspec.Seeds{Scenario: seeds.Mix(s.cfg.Seed, 1, uint64(group)), Policy: req.PolicySeed}
	if req.Seed != nil {
		sd.Scenario = *req.Seed
	}
	run, err := p.run.At(rid, group, sd)
	if err != nil {
		return specError(err)
	}
	p.run = run
	return nil
}

// makePolicy is the service's runspec.Resolvers.Policies: the League's
// policies, then Config.Policies.
func (s *Server) makePolicy(req env.PolicyRequest) (agents.Policy, error) {
	if s.cfg.League != nil {
		pol, err := s.cfg.League.MakePolicy(req)
		if !errors.Is(err, env.ErrUnknownPolicy) {
			return pol, err
		}
	}
	if s.cfg.Policies == nil {
		return nil, env.ErrUnknownPolicy
	}
	return s.cfg.Policies(req)
}

// specFields are the request's names of the run spec's fields, where they
// differ, for the resolver's errors.
var specFields = map[string]string{
	"on_invalid": "invalid", "rollout_id_base": "rollout_id", "group_index_base": "group_index",
	"seeds": "seed", "episodes": "n", "group_size": "n",
}

// specError answers a resolver's error: its field decides the code, and
// the message names the field as the request does.
func specError(err error) *rollout.Error {
	fe, ok := errors.AsType[*runspec.FieldError](err)
	if !ok {
		return &rollout.Error{Status: http.StatusInternalServerError, Code: rollout.CodeInternal, Message: err.Error()}
	}
	top, _, _ := strings.Cut(fe.Field, ".")
	top, _, _ = strings.Cut(top, "[")
	field := fe.Field
	if name, ok := specFields[top]; ok {
		field = name + strings.TrimPrefix(fe.Field, top)
	}
	switch top {
	case "scenario":
		return badRequest(rollout.CodeUnknownScenario, "%v", fe.Err)
	case "params":
		return badRequest(rollout.CodeBadParams, "%v", fe.Err)
	case "policies":
		if field != top {
			return badRequest(rollout.CodeBadPolicy, "%s: %v", field, fe.Err)
		}
		return badRequest(rollout.CodeBadPolicy, "%v", fe.Err)
	case "allocators":
		return badRequest(rollout.CodeBadAllocator, "%s: %v", field, fe.Err)
	}
	return badRequest(rollout.CodeBadRequest, "%s: %v", field, fe.Err)
}

func (s *Server) planLimits(p *plan) *rollout.Error {
	p.timeout = s.cfg.EpisodeTimeout
	l := p.req.Limits
	if l == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_steps", l.MaxSteps}, {"max_turns", l.MaxTurns}, {"max_messages", l.MaxMessages}} {
		if f.v < 0 {
			return badRequest(rollout.CodeBadRequest, "limits.%s = %d: must not be negative (0: no limit)", f.name, f.v)
		}
	}
	if l.TimeoutSeconds < 0 {
		return badRequest(rollout.CodeBadRequest, "limits.timeout_seconds = %g: must not be negative (0: the service's %v)", l.TimeoutSeconds, s.cfg.EpisodeTimeout)
	}
	p.limits.MaxSteps, p.limits.MaxTurns, p.limits.MaxMessages = l.MaxSteps, l.MaxTurns, l.MaxMessages
	if l.TimeoutSeconds > 0 && l.TimeoutSeconds < s.cfg.EpisodeTimeout.Seconds() {
		// At least 1ns: a zero Timeout would mean no limit at all.
		p.timeout = max(time.Duration(l.TimeoutSeconds*float64(time.Second)), 1)
	}
	return nil
}

func declares(info *env.Info, param string) bool {
	return slices.ContainsFunc(info.Params, func(p env.ParamSpec) bool { return p.Name == param })
}

// setups are the request's episodes as the engine plays them: the run's
// requests (their seeds and ids) with its configuration, the policies
// counted by the turn counter.
func (s *Server) setups(p *plan, count *turnCounter) []env.Setup {
	cfg := &p.run.Config
	policy := count.wrap(cfg.Policy, cfg.Emit)
	reqs := p.run.Requests()
	out := make([]env.Setup, len(reqs))
	for i, r := range reqs {
		out[i] = env.Setup{
			Play:       env.Play{Scenario: cfg.Scenario, Params: cfg.Params, Policy: policy, Limits: cfg.Limits, Invalid: cfg.Invalid, Emit: cfg.Emit, ParallelPolicies: cfg.ParallelPolicies},
			Seed:       r.Seed,
			PolicySeed: r.PolicySeed,
			Index:      r.Index,
			RolloutID:  r.RolloutID,
			GroupIndex: r.GroupIndex,
			Engines:    &s.engines,
		}
	}
	return out
}

// play runs the episodes, each in an episode slot, concurrently when there
// are several. It returns them in order with the time spent inside them:
// from the first episode's start to the last one's end, so that waiting
// for a slot counts as the service's overhead, not as episode time.
func (s *Server) play(ctx context.Context, p *plan, setups []env.Setup) ([]*trajectories.Episode, time.Duration) {
	eps := make([]*trajectories.Episode, len(setups))
	starts := make([]time.Time, len(setups))
	ends := make([]time.Time, len(setups))
	run := func(i int) {
		// An episode that cannot get a slot before the request's context
		// ends is still run: it ends aborted at once, with its seats and
		// error, so the caller gets a rollout for it all the same.
		if s.acquire(ctx) {
			defer s.release()
		}
		s.metrics.inflightEpisodes.Add(1)
		defer s.metrics.inflightEpisodes.Add(-1)
		eng := s.engines.Get()
		defer s.engines.Put(eng)
		starts[i] = time.Now()
		eps[i] = trajectories.NewEpisode(eng.Run(ctx, setups[i]))
		ends[i] = time.Now()
		ep := eps[i]
		s.metrics.episode(p.run.Info.Name, ep.Status, len(ep.Samples), len(ep.Turns), ends[i].Sub(starts[i]))
	}
	if s.cfg.Remote != nil {
		return s.playRemote(ctx, p, setups)
	}
	if len(setups) == 1 {
		run(0)
	} else {
		var wg sync.WaitGroup
		for i := range setups {
			wg.Go(func() { run(i) })
		}
		wg.Wait()
	}
	first, last := starts[0], ends[0]
	for i := range setups {
		if starts[i].Before(first) {
			first = starts[i]
		}
		if ends[i].After(last) {
			last = ends[i]
		}
	}
	return eps, last.Sub(first)
}

func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) release() { <-s.slots }

// finish stamps the request's label and the sample indexes (the caller's
// base, or a block reserved atomically), and marks the samples of aborted
// and failed episodes remove_sample unless the request keeps them.
func (s *Server) finish(p *plan, eps []*trajectories.Episode) {
	total := 0
	for _, ep := range eps {
		total += len(ep.Samples)
	}
	var index int64
	if p.req.Index != nil {
		index = *p.req.Index
	} else {
		index = s.nextIndex.Add(int64(total)) - int64(total)
	}
	for _, ep := range eps {
		remove := !p.req.KeepFailed && (ep.Status == protocol.StatusAborted || ep.Status == protocol.StatusFailed)
		for k := range ep.Samples {
			sm := &ep.Samples[k]
			sm.Index = index
			index++
			if remove {
				sm.RemoveSample = true
			}
			if want, ok := p.label.Text(); ok {
				// The game's label is usually the request's, read as a
				// parameter: it moves aside only when it says otherwise.
				if game, ok := sm.Label.Text(); ok && game != want {
					// A copy: a sample's Extra may be its turn's Notes.
					extra := maps.Clone(sm.Metadata.Extra)
					if extra == nil {
						extra = map[string]any{}
					}
					extra["game_label"] = game
					sm.Metadata.Extra = extra
				}
				sm.Label = p.label
			}
		}
	}
}

func (s *Server) getBuf() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

// putBuf keeps buffers up to 1 MiB: a rare huge answer should not pin its
// memory for the life of the service.
func (s *Server) putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 {
		s.bufs.Put(b)
	}
}

// appendResponse encodes the answer by hand: the samples with
// protocol.Sample.AppendJSON (the slime encoding, fixed key order, no
// reflection), the rollout envelopes in rollout.Rollout's key order. It
// stops and reports false as soon as the answer grows past maxBytes, so
// that a too large answer costs at most maxBytes and one sample.
func appendResponse(b []byte, eps []*trajectories.Episode, maxBytes int64) ([]byte, bool) {
	start := len(b)
	b = append(b, `{"rollouts":[`...)
	for i, ep := range eps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"rollout_id":`...)
		b = strconv.AppendInt(b, ep.RolloutID, 10)
		b = append(b, `,"group_index":`...)
		b = strconv.AppendInt(b, ep.GroupIndex, 10)
		b = append(b, `,"episode":`...)
		b = strconv.AppendInt(b, ep.Index, 10)
		b = append(b, `,"seed":`...)
		b = strconv.AppendUint(b, ep.Seed, 10)
		b = append(b, `,"policy_seed":`...)
		b = strconv.AppendUint(b, ep.PolicySeed, 10)
		b = append(b, `,"status":`...)
		b = protocol.AppendString(b, string(ep.Status))
		b = append(b, `,"end":`...)
		b = protocol.AppendString(b, ep.End)
		b = append(b, `,"error":`...)
		b = protocol.AppendString(b, ep.Err)
		b = append(b, `,"team_reward":`...)
		b = protocol.AppendFloat(b, ep.Score.Team)
		b = append(b, `,"agent_scores":`...)
		if ep.Score.Agents == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for k, v := range ep.Score.Agents {
				if k > 0 {
					b = append(b, ',')
				}
				b = protocol.AppendFloat(b, v)
			}
			b = append(b, ']')
		}
		b = append(b, `,"seats":[`...)
		for k, seat := range ep.Seats {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = protocol.AppendString(b, seat.ID)
			b = append(b, `,"role":`...)
			b = protocol.AppendString(b, seat.Role)
			b = append(b, '}')
		}
		b = append(b, `],"steps":`...)
		b = strconv.AppendInt(b, int64(ep.Steps), 10)
		b = append(b, `,"turns":`...)
		b = strconv.AppendInt(b, int64(len(ep.Turns)), 10)
		b = append(b, `,"samples":[`...)
		for k := range ep.Samples {
			if k > 0 {
				b = append(b, ',')
			}
			b = ep.Samples[k].AppendJSON(b)
			if int64(len(b)-start) > maxBytes {
				return b, false
			}
		}
		b = append(b, "]}"...)
	}
	b = append(b, "]}\n"...)
	return b, int64(len(b)-start) <= maxBytes
}

// playRemote hands the request's episodes to Config.Remote. The episodes
// come back without a Replayer (it cannot travel); each gets the one a
// local episode would have, for counterfactual allocators.
func (s *Server) playRemote(ctx context.Context, p *plan, setups []env.Setup) ([]*trajectories.Episode, time.Duration) {
	n := int64(len(setups))
	s.metrics.inflightEpisodes.Add(n)
	defer s.metrics.inflightEpisodes.Add(-n)
	start := time.Now()
	eps := s.cfg.Remote.Play(ctx, RemoteRequest{Run: p.run, Requests: p.run.Requests()})
	inside := time.Since(start)
	for i, ep := range eps {
		if ep.Replay == nil && len(ep.Seats) > 0 {
			ep.Replay = env.NewReplayer(setups[i], ep.Seats, ep.Turns)
		}
		s.metrics.episode(p.run.Info.Name, ep.Status, len(ep.Samples), len(ep.Turns), inside)
	}
	return eps, inside
}
