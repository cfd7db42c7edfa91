package envserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/runspec"
)

// What OpenEnv's clients and tools expect of a server, beyond the routes
// themselves: an OpenAPI document (openenv validate reads the API's
// version and its paths from it), a reset with no arguments (the
// server's default episode, Config.Default), and HTTP calls that carry no
// session id (OpenEnv's HTTP requests never do).

// OpenAPIVersion is the version GET /openapi.json declares (info.version):
// the OpenEnv HTTP API profile the server implements, "openenv-http/1.x"
// to openenv validate. troupe's own version is info.x-troupe-version.
const OpenAPIVersion = "1.0.0"

// openenvState is what the server keeps for OpenEnv's session-less HTTP
// calls and its MCP sessions.
type openenvState struct {
	mu sync.Mutex
	// latest is the session of the latest HTTP reset: the one a call that
	// names no session means. nil before the first.
	latest *session
	// mcp are the sessions OpenEnv's MCP method openenv/session/create
	// made, and those of MCP clients (streamable HTTP), by id.
	mcp map[string]*mcpHolder
}

// checkDefault refuses a default reset the server could not play: it must
// name a scenario and create (not join) an episode; its scenario, params,
// policies, allocators and reward are resolved as a reset's would be.
func (s *Server) checkDefault() error {
	d := s.cfg.Default
	if d == nil {
		return nil
	}
	switch {
	case d.Scenario == "":
		return fmt.Errorf("%w: the default episode: name a scenario (%v)", ErrBadConfig, s.cfg.Scenarios.Names())
	case d.Join != "" || d.EpisodeID != "" || d.Seed != nil || d.RolloutID != nil:
		return fmt.Errorf("%w: the default episode: join, episode_id, seed and rollout_id are each reset's own, not a default's", ErrBadConfig)
	}
	spec := runspec.Spec{Scenario: d.Scenario, Params: d.Params, Emit: d.Emit, Allocators: d.Allocators, RewardFormat: d.RewardFormat, Episodes: 1, GroupSize: 1}
	if len(d.Policies) > 0 {
		spec.Policies = make(map[string]runspec.Policy, len(d.Policies))
		for role, name := range d.Policies {
			spec.Policies[role] = runspec.Policy{Name: name}
		}
	}
	if l := d.Limits; l != nil {
		spec.Limits = runspec.Limits{MaxSteps: l.MaxSteps, MaxTurns: l.MaxTurns, MaxMessages: l.MaxMessages}
	}
	if v := d.OnInvalid; v != nil {
		spec.OnInvalid = runspec.Invalid{Mode: v.Mode, Penalty: v.Penalty, Bonus: v.Bonus}
	}
	if _, _, e := s.resolve(spec, d.Reward); e != nil {
		return fmt.Errorf("%w: the default episode (Config.Default; troupe env-serve --scenario, --param, --policy): %s", ErrBadConfig, e.body.Message)
	}
	return nil
}

// defaulted is req with Config.Default's fields where req leaves them
// zero, when req names neither a scenario nor an episode to join:
// OpenEnv's reset() sends nothing, or only a seed and an episode_id.
func (s *Server) defaulted(req *envclient.ResetRequest) *envclient.ResetRequest {
	d := s.cfg.Default
	if d == nil || req.Scenario != "" || req.Join != "" {
		return req
	}
	out := *d
	// A reset's own fields: never the default's.
	out.Seed, out.EpisodeID, out.RolloutID = req.Seed, req.EpisodeID, req.RolloutID
	or := func(dst *[]string, v []string) {
		if v != nil {
			*dst = v
		}
	}
	if req.Params != nil {
		out.Params = req.Params
	}
	if req.Policies != nil {
		out.Policies = req.Policies
	}
	or(&out.Open, req.Open)
	or(&out.Seats, req.Seats)
	or(&out.Harness, req.Harness)
	or(&out.Emit, req.Emit)
	or(&out.Allocators, req.Allocators)
	if req.Fallback != "" {
		out.Fallback = req.Fallback
	}
	if req.RewardFormat != "" {
		out.RewardFormat = req.RewardFormat
	}
	if req.Reward != "" {
		out.Reward = req.Reward
	}
	if req.Limits != nil {
		out.Limits = req.Limits
	}
	if req.OnInvalid != nil {
		out.OnInvalid = req.OnInvalid
	}
	out.PassIllegal = out.PassIllegal || req.PassIllegal
	out.Features = out.Features || req.Features
	return &out
}

// setLatest makes ss the session that HTTP calls naming none mean.
func (s *Server) setLatest(ss *session) {
	s.oe.mu.Lock()
	s.oe.latest = ss
	s.oe.mu.Unlock()
}

// latestSession is the session of the latest HTTP reset, nil when none;
// live reports whether it is still in play (not closed, reaped or over).
func (s *Server) latestSession() (ss *session, live bool) {
	s.oe.mu.Lock()
	ss = s.oe.latest
	s.oe.mu.Unlock()
	if ss == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ss, s.sessions[ss.id] == ss
}

// stepSession is the session a step means: the one it names; or, when it
// names none, as OpenEnv's session-less HTTP step, the session of the
// latest HTTP reset while that is in play, else a new one of the default
// reset (OpenEnv's server steps a fresh environment), its first turn
// waited for so that the step's move finds it.
func (s *Server) stepSession(ctx context.Context, id string) (*session, *apiError) {
	if id != "" {
		return s.session(id)
	}
	if ss, live := s.latestSession(); live {
		return ss, nil
	}
	ss, e := s.freshSession(ctx, false)
	if e == nil {
		s.setLatest(ss)
	}
	return ss, e
}

// freshSession starts a session of the default reset, as a reset with no
// body would, and waits for its first turn.
func (s *Server) freshSession(ctx context.Context, ws bool) (*session, *apiError) {
	if s.cfg.Default == nil {
		return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest,
			"session_id: missing, and no episode is in play to step: reset first, or start the server with a default episode (troupe env-serve --scenario NAME)")
	}
	_, ss, e := s.reset(ctx, &envclient.ResetRequest{}, ws)
	if e != nil {
		return nil, e
	}
	if ss == nil {
		return nil, errorf(http.StatusBadRequest, envclient.CodeBadRequest, "the default episode leaves no seat to a session (its seats are all the house's or harnesses')")
	}
	if _, e := s.first(ctx, ss); e != nil {
		// Nobody holds it: a WebSocket's would never be reaped.
		s.leave(context.WithoutCancel(ctx), ss, "its first turn was not waited for")
		return nil, e
	}
	return ss, nil
}

// openAPI is GET /openapi.json's answer: an OpenAPI 3.1 document of the
// server's routes, its schemas those of GET /schema.
func openAPI(version string) ([]byte, error) {
	var sch map[string]json.RawMessage
	if err := json.Unmarshal(schemas, &sch); err != nil {
		return nil, err
	}
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	body := func(name string) map[string]any {
		return map[string]any{"required": false, "content": map[string]any{"application/json": map[string]any{"schema": ref(name)}}}
	}
	ok := func(desc, name string) map[string]any {
		r := map[string]any{"description": desc}
		if name != "" {
			r["content"] = map[string]any{"application/json": map[string]any{"schema": ref(name)}}
		}
		return map[string]any{"200": r, "default": map[string]any{"description": "an error: {\"error\": {\"code\", \"message\"}}",
			"content": map[string]any{"application/json": map[string]any{"schema": ref("ErrorBody")}}}}
	}
	op := func(tag, summary string, extra map[string]any) map[string]any {
		o := map[string]any{"tags": []string{tag}, "summary": summary}
		for k, v := range extra {
			o[k] = v
		}
		return o
	}
	query := func(names ...string) []any {
		var out []any
		for _, n := range names {
			out = append(out, map[string]any{"name": n, "in": "query", "required": false, "schema": map[string]any{"type": "string"}})
		}
		return out
	}
	paths := map[string]any{
		envclient.PathHealth:   map[string]any{"get": op("Health", "Health check", map[string]any{"responses": ok("healthy", "Health")})},
		envclient.PathMetadata: map[string]any{"get": op("Environment Info", "The environment's name, description, version and scenarios", map[string]any{"responses": ok("metadata", "")})},
		envclient.PathSchema:   map[string]any{"get": op("Schema", "JSON schemas of an action, an observation and a state", map[string]any{"responses": ok("schemas", "")})},
		envclient.PathOpenAPI:  map[string]any{"get": op("Schema", "This document", map[string]any{"responses": ok("OpenAPI 3.1", "")})},
		envclient.PathReset: map[string]any{"post": op("Environment Control", "Start a session: a new episode (the server's default when the body names no scenario), or a seat at one (join)",
			map[string]any{"requestBody": body("ResetRequest"), "responses": ok("the session's first observation", "Result")})},
		envclient.PathStep: map[string]any{"post": op("Environment Control", "Give the session's move and wait for its next turn; without session_id, the latest HTTP reset's session (or a new episode of the default)",
			map[string]any{"requestBody": body("StepRequest"), "responses": ok("what the session sees next", "Result")})},
		envclient.PathState: map[string]any{"get": op("State Management", "The episode's state: of the session or episode named, else of the latest HTTP reset's session",
			map[string]any{"parameters": query("session_id", "episode_id"), "responses": ok("state", "State")})},
		envclient.PathClose: map[string]any{"post": op("Environment Control", "End a session: its seats fall back",
			map[string]any{"requestBody": body("SessionRequest"), "responses": ok("the episode's state", "State")})},
		envclient.PathRecord: map[string]any{"get": op("State Management", "A finished episode's record (troupe.episode/v2)",
			map[string]any{"parameters": query("session_id", "episode_id"), "responses": ok("the record", "")})},
		envclient.PathSeats: map[string]any{"post": op("Environment Info", "The seats of a scenario under parameters, and their action sets",
			map[string]any{"requestBody": body("SeatsRequest"), "responses": ok("seats", "")})},
		envclient.PathWS: map[string]any{"get": op("Environment Control", "A WebSocket session (OpenEnv's): reset, step, state, mcp and close messages",
			map[string]any{"responses": map[string]any{"101": map[string]any{"description": "switching protocols"}}})},
		envclient.PathMCP: map[string]any{
			"post": op("MCP", "MCP over JSON-RPC: OpenEnv's (tools/list, tools/call, openenv/session/create and close), or MCP's streamable HTTP transport (Accept: application/json, text/event-stream)",
				map[string]any{"responses": map[string]any{"200": map[string]any{"description": "a JSON-RPC 2.0 response"}}}),
			"get":    op("MCP", "MCP's streamable HTTP transport: the server's stream", map[string]any{"responses": map[string]any{"200": map[string]any{"description": "text/event-stream"}}}),
			"delete": op("MCP", "MCP's streamable HTTP transport: end the MCP session", map[string]any{"responses": map[string]any{"200": map[string]any{"description": "ended"}}}),
		},
	}
	str := map[string]any{"type": "string"}
	strs := map[string]any{"type": "array", "items": str}
	strMap := map[string]any{"type": "object", "additionalProperties": str}
	components := map[string]any{
		"Action":      sch["action"],
		"Observation": sch["observation"],
		"State":       sch["state"],
		"Result": map[string]any{"type": "object", "required": []string{"observation", "done"}, "properties": map[string]any{
			"observation": ref("Observation"), "reward": map[string]any{"type": []string{"number", "null"}}, "done": map[string]any{"type": "boolean"}}},
		"ResetRequest": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"seed": map[string]any{"type": "integer", "minimum": 0}, "episode_id": str, "join": str, "scenario": str, "params": strMap, "policies": strMap,
			"open": strs, "fallback": map[string]any{"enum": []string{"", "policy", "forfeit"}}, "pass_illegal": map[string]any{"type": "boolean"},
			"limits": map[string]any{"type": "object"}, "on_invalid": map[string]any{"type": "object"}, "emit": strs, "allocators": strs,
			"reward_format": str, "reward": str, "rollout_id": map[string]any{"type": "integer"}, "seats": strs, "harness": strs,
			"features": map[string]any{"type": "boolean"}}},
		"StepRequest": map[string]any{"type": "object", "required": []string{"action"}, "additionalProperties": false, "properties": map[string]any{
			"session_id": str, "action": ref("Action"), "timeout_s": map[string]any{"type": "number"}, "request_id": str}},
		"SessionRequest": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{"session_id": str}},
		"SeatsRequest":   map[string]any{"type": "object", "required": []string{"scenario"}, "properties": map[string]any{"scenario": str, "params": strMap}},
		"Health":         map[string]any{"type": "object", "properties": map[string]any{"status": str}},
		"ErrorBody": map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{"type": "object",
			"properties": map[string]any{"code": str, "message": str}}}},
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "troupe environment server", "version": OpenAPIVersion, "x-troupe-version": version,
			"description": "troupe scenarios as multi-agent environments in OpenEnv's HTTP, WebSocket and MCP conventions (docs/openenv.md)"},
		"paths":      paths,
		"components": map[string]any{"schemas": components},
	}
	b, err := json.Marshal(doc)
	return append(b, '\n'), err
}

// checkGeneration refuses a step's generation that cannot become a
// sample's tokens, naming what is wrong.
func checkGeneration(a *envclient.Action) *apiError {
	g := a.Generation
	if g == nil {
		return nil
	}
	bad := func(format string, args ...any) *apiError {
		return errorf(http.StatusBadRequest, envclient.CodeBadRequest, "action.generation: "+format, args...)
	}
	switch {
	case a.Move == nil:
		return bad("goes with move (one seat's move), not moves")
	case len(g.PromptIDs) == 0:
		return bad("prompt_ids: empty (the prompt's token ids)")
	case len(g.CompletionIDs) == 0:
		return bad("completion_ids: empty (the move's sampled token ids)")
	case g.LogProbs != nil && len(g.LogProbs) != len(g.CompletionIDs):
		return bad("logprobs: %d of them for %d completion ids (one each)", len(g.LogProbs), len(g.CompletionIDs))
	}
	for _, ids := range [][]int{g.PromptIDs, g.CompletionIDs} {
		for _, id := range ids {
			if id < 0 {
				return bad("token id %d is negative", id)
			}
		}
	}
	return nil
}

// moveAction is a step's one move, with the learner's generation.
func moveAction(a *envclient.Action) agents.Action {
	act := agents.Action{Text: *a.Move}
	if g := a.Generation; g != nil {
		gen := &agents.Generation{Completion: g.Completion, Tokens: &agents.Tokens{
			Prompt: slices.Clone(g.PromptIDs), Response: slices.Clone(g.CompletionIDs), LogProbs: slices.Clone(g.LogProbs)}}
		if g.Completion == *a.Move {
			gen.Completion = ""
		}
		if g.Prompt != "" {
			p := protocol.TextPrompt(g.Prompt)
			gen.Prompt = &p
		}
		act.Generation = gen
	}
	return act
}
