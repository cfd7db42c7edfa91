package verifiers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/rollout"
)

// runPlan is a run request as the rollout request that plays it, and what
// its traces need to know of it.
type runPlan struct {
	scenario   string
	request    *rollout.Request
	roles      map[string]rollout.RoleSettings
	llm        map[string]bool // roles that play the request's model
	frozen     map[string]bool
	allocators []string
}

// plan turns a run request into the rollout request of its one episode:
// the task's fields, the request's sampling for every role, and the
// request's model and endpoint for each role that plays "llm" (a role's
// own settings in task.roles win over them).
func (s *Server) plan(req *RunRequest) (*runPlan, error) {
	task, err := DecodeTask(req.TaskData)
	if err != nil {
		return nil, err
	}
	sampling, err := SamplingOf(req.Sampling)
	if err != nil {
		return nil, err
	}
	sc, err := s.cfg.Scenarios.Lookup(task.Scenario)
	if err != nil {
		return nil, fmt.Errorf("%w: task_data.scenario: %w", ErrBadRequest, err)
	}
	info := sc.Info()
	known := map[string]bool{}
	for _, r := range info.Roles {
		known[r.Name] = true
	}
	for role := range task.Roles {
		if !known[role] {
			return nil, fmt.Errorf("%w: task_data.roles: scenario %s has no role %q (its roles: %s)", ErrBadRequest, task.Scenario, role, roleNames(info.Roles))
		}
	}
	// The endpoint matters only to the roles that play the model; a task
	// of scripted policies plays whatever the client's base_url.
	endpoint, endpointErr := "", error(nil)
	if s.cfg.Endpoint != nil {
		endpoint, endpointErr = s.cfg.Endpoint(req.Client.BaseURL)
	}
	policy := task.Policy
	if policy == "" {
		policy = LLMPolicy
	}
	p := &runPlan{scenario: task.Scenario, roles: map[string]rollout.RoleSettings{}, llm: map[string]bool{}, frozen: map[string]bool{},
		allocators: task.Allocators}
	for _, r := range info.Roles {
		rs := task.Roles[r.Name]
		pol := policy
		if named, ok := task.Policies[r.Name]; ok {
			pol = named
		}
		if pol == LLMPolicy {
			p.llm[r.Name] = true
			if rs.Model == "" {
				rs.Model = req.Model
			}
			if rs.Endpoint == "" {
				if endpointErr != nil {
					return nil, fmt.Errorf("%w: client.base_url (role %s plays the model): %w", ErrBadRequest, r.Name, endpointErr)
				}
				rs.Endpoint = endpoint
			}
		}
		if rs.Frozen {
			p.frozen[r.Name] = true
		}
		if rs != (rollout.RoleSettings{}) {
			p.roles[r.Name] = rs
		}
	}
	if len(p.allocators) == 0 {
		p.allocators = []string{"team"}
	}
	p.request = &rollout.Request{
		Scenario: task.Scenario, Params: task.Params, Seed: task.Seed, PolicySeed: task.PolicySeed, N: 1,
		Policy: policy, Policies: task.Policies, Roles: p.roles, Sampling: sampling,
		Allocators: p.allocators, RewardFormat: "dict", Limits: task.Limits, Invalid: task.Invalid, Prompt: task.Prompt,
	}
	return p, nil
}

func roleNames(roles []*agents.Role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

// handle posts req to h in process and decodes its answer: a rollout
// service's error body becomes its *rollout.Error.
func handle(ctx context.Context, h http.Handler, token string, req *rollout.Request) (*rollout.Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("rollout request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, rollout.PathRollouts, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	w := &handlerWriter{header: http.Header{}}
	h.ServeHTTP(w, hr)
	if w.status != http.StatusOK {
		var eb rollout.ErrorBody
		if json.Unmarshal(w.body.Bytes(), &eb) == nil && eb.Error != nil {
			eb.Error.Status = w.status
			return nil, eb.Error
		}
		return nil, fmt.Errorf("rollout service: status %d: %s", w.status, strings.TrimSpace(w.body.String()))
	}
	var res rollout.Response
	if err := json.Unmarshal(w.body.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("rollout service answer: %w", err)
	}
	return &res, nil
}

// discardLog is the logger zmq4 writes its own lines to: the server logs
// what matters through Config.Logger.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
