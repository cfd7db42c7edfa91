package verifiers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
)

// The methods of the protocol (verifiers/v1/serve/types.py: the request
// classes' `method`), sent as the frame between the request id and the
// payload.
const (
	MethodHealth = "health"
	MethodRun    = "run"
	MethodCancel = "cancel"
)

// The kinds of the frames the server sends back, in the place of the
// method: a run's traces stream as "delta" frames before its "reply".
const (
	kindReply = "reply"
	kindDelta = "delta"
)

// ErrBadRequest is wrapped by every refusal of a request's payload; its
// text names the field that was wrong.
var ErrBadRequest = errors.New("bad verifiers request")

// RunRequest is verifiers' RunRequest as its client sends it
// (verifiers/v1/serve/types.py; model_dump(mode="json"), packed with
// msgpack): the task, the endpoint its model calls go to, the model and
// the sampling settings.
type RunRequest struct {
	// TaskData is the taskset row: for troupe, a Task (DecodeTask).
	TaskData map[string]any `msgpack:"task_data"`
	Client   ClientConfig   `msgpack:"client"`
	Model    string         `msgpack:"model"`
	// Sampling is verifiers' SamplingConfig: temperature, top_p,
	// max_tokens and reasoning_effort typed, provider keys passed through
	// (SamplingOf).
	Sampling map[string]any `msgpack:"sampling"`
}

// ClientConfig is what troupe reads of verifiers' ClientConfig (an eval or
// train client): the endpoint's base URL. Its API key stays in the
// client's environment (api_key_var names a variable there): the server
// calls the endpoint with the key its operator configured for it.
type ClientConfig struct {
	Type    string `msgpack:"type"`
	BaseURL string `msgpack:"base_url"`
}

// cancelRequest is verifiers' CancelRequest: the wire request id of the
// run to abort.
type cancelRequest struct {
	RequestID string `msgpack:"request_id"`
}

// DecodeRun decodes a run payload. It never panics: a payload that is not
// a msgpack map of the request's fields, or whose fields have the wrong
// types, is an error wrapping ErrBadRequest that names what was wrong.
func DecodeRun(payload []byte) (*RunRequest, error) {
	var req RunRequest
	if err := decodeStrict(payload, &req); err != nil {
		return nil, fmt.Errorf("%w: run: %w", ErrBadRequest, err)
	}
	if req.TaskData == nil {
		return nil, fmt.Errorf("%w: run: task_data is missing (a map naming at least the scenario)", ErrBadRequest)
	}
	if req.Model == "" {
		return nil, fmt.Errorf("%w: run: model is empty", ErrBadRequest)
	}
	return &req, nil
}

// decodeStrict decodes one msgpack value into v and refuses trailing
// bytes, so that a frame holding two values is not half read.
func decodeStrict(payload []byte, v any) error {
	if err := checkMsgpack(payload); err != nil {
		return fmt.Errorf("not a msgpack map of the request's fields: %w", err)
	}
	r := bytes.NewReader(payload)
	dec := msgpack.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a msgpack map of the request's fields: %w", err)
	}
	if r.Len() > 0 {
		return fmt.Errorf("%d bytes after the payload's msgpack value", r.Len())
	}
	return nil
}

// decodeCancel decodes a cancel payload.
func decodeCancel(payload []byte) (string, error) {
	var c cancelRequest
	if err := decodeStrict(payload, &c); err != nil {
		return "", fmt.Errorf("%w: cancel: %w", ErrBadRequest, err)
	}
	if c.RequestID == "" {
		return "", fmt.Errorf("%w: cancel: request_id is empty", ErrBadRequest)
	}
	return c.RequestID, nil
}

// Task is the task_data of a run request for troupe: which episode to
// play and how, the fields of a rollout request (rollout.Request) that a
// single episode has. A verifiers taskset for troupe is a TaskData
// subclass with these fields; each row is one episode.
//
// The fields of verifiers' own TaskData (idx, id, name, description,
// system_prompt, image, workdir, agent_user, skills, network_allow,
// network_block, artifacts, artifact_max_bytes, timeout, resources) are
// accepted and ignored, since every dumped row carries them; prompt is
// the rollout request's prompt (a scenario's "prompt" parameter). Any
// other key is refused, naming it.
type Task struct {
	Scenario   string         `json:"scenario"`
	Params     rollout.Params `json:"params,omitempty"`
	Seed       *uint64        `json:"seed,omitempty"`
	PolicySeed *uint64        `json:"policy_seed,omitempty"`
	// Policy names every role's policy, Policies a role's; a role named
	// by neither plays "llm", the model of the request.
	Policy   string            `json:"policy,omitempty"`
	Policies map[string]string `json:"policies,omitempty"`
	// Roles are the roles' own settings: endpoint (one of the server's
	// --llm-endpoint names), model and sampling over the request's, and
	// frozen (played, never trained: their traces are untrainable).
	Roles      map[string]rollout.RoleSettings `json:"roles,omitempty"`
	Allocators []string                        `json:"allocators,omitempty"`
	Limits     *rollout.Limits                 `json:"limits,omitempty"`
	Invalid    string                          `json:"invalid,omitempty"`
	Prompt     *rollout.Prompt                 `json:"prompt,omitempty"`
}

// baseTaskKeys are the fields of verifiers' TaskData that a dumped row
// carries and troupe does not read.
var baseTaskKeys = []string{"idx", "id", "name", "description", "system_prompt", "image", "workdir", "agent_user",
	"skills", "network_allow", "network_block", "artifacts", "artifact_max_bytes", "timeout", "resources"}

// DecodeTask reads a run request's task_data as a Task.
func DecodeTask(data map[string]any) (*Task, error) {
	own := make(map[string]any, len(data))
	for k, v := range data {
		if slices.Contains(baseTaskKeys, k) {
			continue
		}
		if k == "prompt" && v == nil {
			continue
		}
		own[k] = v
	}
	b, err := json.Marshal(jsonable(own))
	if err != nil {
		return nil, fmt.Errorf("%w: task_data: %w", ErrBadRequest, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t Task
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: task_data: %w (a troupe task has scenario, params, seed, policy_seed, policy, policies, roles, allocators, limits, invalid, prompt)", ErrBadRequest, err)
	}
	if t.Scenario == "" {
		return nil, fmt.Errorf("%w: task_data.scenario is missing: name the troupe scenario to play (troupe list)", ErrBadRequest)
	}
	return &t, nil
}

// jsonable turns a decoded msgpack value into one encoding/json encodes
// as the same JSON: maps with non-string keys get their keys' text, and
// byte strings become text.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case []byte:
		return string(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil // refused by the field it lands in, never by encoding/json's panic-free error
		}
		return x
	case float32:
		return jsonable(float64(x))
	}
	return v
}

// SamplingOf is verifiers' SamplingConfig as troupe's sampling: the typed
// keys (temperature, top_p, max_tokens, and max_completion_tokens for it),
// and troupe's own (top_k, stop, stop_token_ids, seed as sampling_seed,
// repetition_penalty, min_tokens, skip_special_tokens, ...). Any other
// key a provider takes (min_p, chat_template_kwargs, reasoning_effort)
// passes through to the model server's body. Null values are unset.
func SamplingOf(raw map[string]any) (*protocol.Sampling, error) {
	s := map[string]any{}
	extra := map[string]any{}
	for k, v := range raw {
		if v == nil {
			continue
		}
		switch k {
		case "max_completion_tokens":
			if _, ok := raw["max_tokens"]; !ok || raw["max_tokens"] == nil {
				s["max_tokens"] = v
			}
		case "seed":
			s["sampling_seed"] = v
		case "temperature", "top_p", "top_k", "max_tokens", "stop", "stop_token_ids", "sampling_seed",
			"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens", "repetition_penalty", "min_tokens":
			s[k] = v
		case "extra_body":
			continue // verifiers' client flattens it before sending
		default:
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		s["extra"] = extra
	}
	b, err := json.Marshal(jsonable(s))
	if err != nil {
		return nil, fmt.Errorf("%w: sampling: %w", ErrBadRequest, err)
	}
	var out protocol.Sampling
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: sampling: %w", ErrBadRequest, err)
	}
	return &out, nil
}

// message is one frame triple the server sends after the peer's identity.
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true) // the same answer is the same bytes
	if err := enc.Encode(v); err != nil {
		// Every value encoded here is built of maps, slices, strings,
		// numbers and booleans, which always encode.
		panic(fmt.Sprintf("verifiers: encoding an answer: %v", err))
	}
	return buf.Bytes()
}

// baseResponse is verifiers' BaseResponse, and HealthResponse.
type baseResponse struct {
	Success bool    `msgpack:"success"`
	Error   *string `msgpack:"error"`
}

func failure(format string, args ...any) baseResponse {
	e := fmt.Sprintf(format, args...)
	return baseResponse{Error: &e}
}

// cancelResponse is verifiers' CancelResponse.
type cancelResponse struct {
	Success   bool    `msgpack:"success"`
	Error     *string `msgpack:"error"`
	Cancelled bool    `msgpack:"cancelled"`
}

// runResponse is verifiers' RunResponse: the episode without its traces
// (head), and each trace's id and size, which the client checks its
// assembly of the deltas against.
type runResponse struct {
	Success bool           `msgpack:"success"`
	Error   *string        `msgpack:"error"`
	Head    map[string]any `msgpack:"head"`
	Traces  []traceSummary `msgpack:"traces"`
}

type traceSummary struct {
	ID    string `msgpack:"id"`
	Nodes int    `msgpack:"nodes"`
	Calls int    `msgpack:"calls"`
}
