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
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/internal/httpedge"
	"github.com/troupe-rl/troupe/internal/seeds"
	"github.com/troupe-rl/troupe/league"
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
	match *league.ServedMatch
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
	bp := s.getBuf()
	defer s.putBuf(bp)
	a, e := s.rollouts(ctx, p, count, bp)
	if e != nil {
		return 0, e
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(rollout.HeaderServerTiming, rollout.FormatServerTiming(a.inside))
	seq := a.tx.commit()
	if seq > 0 {
		h.Set(rollout.HeaderAllocationSeq, formatSeq(seq))
	}
	if _, err := w.Write(a.body); err != nil && seq > 0 {
		// The allocators' update stands (see beginAllocation): say so once.
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
	case httpedge.BodyTimedOut(err):
		return &rollout.Error{Status: http.StatusRequestTimeout, Code: rollout.CodeBadRequest,
			Message: fmt.Sprintf("the request body did not arrive within %s", s.cfg.ReadTimeout)}
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
	if e := checkLLMFields(req); e != nil {
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
	frozen := slices.ContainsFunc(slices.Collect(maps.Values(req.Roles)), func(r rollout.RoleSettings) bool { return r.Frozen })
	// A merged answer's samples are the agents', not their turns: no turn
	// cap stands for the samples limit (checkSamples counts the merged
	// samples).
	// Neither does a tree-sampled one: K candidates per turn, and the
	// play-outs that score them, are not turns of the main line.
	p.capTurns = len(req.Emit) == 0 && !frozen && p.limits.MaxTurns == 0 && !req.MergeTurns && req.Tree == nil
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
//   - merge_turns: the request's (the merged layout); merge_reward the
//     request's, else mean (trajectories.DefaultMergeReward).
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
		settings, err := s.cfg.PolicySettings(pol.Name, role, req)
		if err != nil {
			return nil, badRequest(rollout.CodeBadPolicy, "policy %q of role %s: %v", pol.Name, role, err)
		}
		pol.Settings = settings
		policies[role] = pol
	}
	for _, role := range slices.Sorted(maps.Keys(req.Roles)) {
		rs := req.Roles[role]
		if info.Role(role) == nil {
			return nil, badRequest(rollout.CodeBadPolicy, "roles: scenario %s has no role %q (its roles: %s)", info.Name, role, info.RoleNames())
		}
		if rs.Endpoint == "" && rs.Model == "" && rs.Sampling == nil && rs.MaxContext == 0 {
			continue // frozen only, or nothing: any policy
		}
		if pol := policies[role]; s.cfg.PolicySettings == nil || pol.Name == "" || slices.Contains(info.PolicyNames(), pol.Name) {
			return nil, badRequest(rollout.CodeBadPolicy, "roles.%s: role %s plays %s, which takes no endpoint, model, sampling or max_context (name one of the service's policies for it, such as llm)",
				role, role, cmp.Or(pol.Name, "the scenario's default policy"))
		}
	}
	emit, e := unfrozen(req, info)
	if e != nil {
		return nil, e
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
		Emit:         emit,
		Limits:       runspec.LimitsOf(limits, p.timeout),
		OnInvalid:    runspec.InvalidOf(invalid),
		Allocators:   req.Allocators,
		RewardFormat: req.RewardFormat,
		Episodes:     p.n,
		GroupSize:    p.n,
		Seed:         s.cfg.Seed,
		MergeTurns:   req.MergeTurns,
	}
	if req.MergeTurns {
		spec.MergeReward = cmp.Or(req.MergeReward, string(trajectories.DefaultMergeReward))
	}
	if t := req.Tree; t != nil {
		spec.Tree = &runspec.Tree{K: t.K, Alpha: 1, Joint: t.Joint, Roles: t.Roles}
		if t.Alpha != nil {
			spec.Tree.Alpha = *t.Alpha
		}
	}
	return spec, nil
}

// checkLLMFields refuses a merge_reward that is none of sum, mean and
// last, or given without merge_turns, and a negative max_context, naming
// the field.
func checkLLMFields(req *rollout.Request) *rollout.Error {
	if req.MergeReward != "" {
		if _, err := trajectories.ParseMergeReward(req.MergeReward); err != nil {
			return badRequest(rollout.CodeBadRequest, "merge_reward = %q: want mean, sum or last", req.MergeReward)
		}
		if !req.MergeTurns {
			return badRequest(rollout.CodeBadRequest, "merge_reward = %q without merge_turns: only merged samples have a merged reward", req.MergeReward)
		}
	}
	if req.MaxContext < 0 {
		return badRequest(rollout.CodeBadRequest, "max_context = %d: want 0 (the service's) or a budget in tokens", req.MaxContext)
	}
	for _, role := range slices.Sorted(maps.Keys(req.Roles)) {
		if m := req.Roles[role].MaxContext; m < 0 {
			return badRequest(rollout.CodeBadRequest, "roles.%s.max_context = %d: want 0 (the request's) or a budget in tokens", role, m)
		}
	}
	return nil
}

// unfrozen is the request's emitted roles (none: all) less its frozen
// ones (Roles[role].Frozen; runspec.Unfrozen).
func unfrozen(req *rollout.Request, info *env.Info) ([]string, *rollout.Error) {
	var frozen []string
	for _, r := range info.Roles {
		if req.Roles[r.Name].Frozen {
			frozen = append(frozen, r.Name)
		}
	}
	emit, err := runspec.Unfrozen(info, req.Emit, frozen)
	if err != nil {
		return nil, badRequest(rollout.CodeBadRequest, "roles, emit: %v", err)
	}
	return emit, nil
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
