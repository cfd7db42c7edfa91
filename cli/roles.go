package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/policies/llm"
)

// An LLM endpoint is a server the "llm" policy plays on. The --llm-* flags
// (or TROUPE_LLM_* variables) are the default endpoint; --llm-endpoint
// names others:
//
//	--llm-endpoint NAME=URL[,kind=K][,api_key_env=VAR][,tokenize=BOOL][,max_in_flight=N]
//
// defines the endpoint NAME, whose settings not given are the default
// endpoint's, except its key: a named endpoint sends the key in $VAR of its
// api_key_env, or none, never the default endpoint's. A bare
// --llm-endpoint NAME names the default endpoint (a distributed run's
// workers know it by that name). A role plays on an endpoint by naming it
// in its settings (--role-llm ROLE=endpoint=NAME,...); the run spec
// records the name, never the address or the key, as it never records the
// default endpoint's.

// endpointName is what an endpoint may be called.
var endpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// llmEndpoints are the LLM endpoints of a command: the default and the
// named ones.
type llmEndpoints struct {
	base    llm.Config            // the default endpoint: the --llm-* flags
	aliases []string              // names of the default endpoint (bare --llm-endpoint NAME)
	named   map[string]llm.Config // the endpoints NAME=URL,...
	lookup  func(string) (string, bool)
}

// parseEndpoints reads --llm-endpoint values over the default endpoint
// base. Every error names the value and the bad field. Unless
// tokenInGiven (--llm-token-in or TROUPE_LLM_TOKEN_IN was given: base's
// TokenIn is it), every endpoint that does not say token_in= generates
// token in, token out as its kind does by default (llm.DefaultTokenIn):
// sglang's do.
func parseEndpoints(base llm.Config, values []string, lookup func(string) (string, bool), tokenInGiven bool) (*llmEndpoints, error) {
	if !tokenInGiven {
		base.TokenIn = llm.DefaultTokenIn(base.Kind)
	}
	e := &llmEndpoints{base: base, named: map[string]llm.Config{}, lookup: lookup}
	for _, v := range values {
		name, def, isDef := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		if !endpointName.MatchString(name) {
			return nil, usagef("--llm-endpoint %q: an endpoint name is 1 to 64 letters, digits and . _ -, starting with a letter or digit", v)
		}
		if slices.Contains(e.aliases, name) || e.named[name].BaseURL != "" {
			return nil, usagef("--llm-endpoint %q: endpoint %s is defined twice", v, name)
		}
		if !isDef {
			e.aliases = append(e.aliases, name)
			continue
		}
		cfg, err := parseEndpoint(base, name, def, lookup, tokenInGiven)
		if err != nil {
			return nil, usagef("--llm-endpoint %q: %w", v, err)
		}
		e.named[name] = cfg
	}
	return e, nil
}

// parseEndpoint reads an endpoint's definition, URL[,key=value...].
func parseEndpoint(base llm.Config, name, def string, lookup func(string) (string, bool), tokenInGiven bool) (llm.Config, error) {
	cfg := base
	tokenInSet := tokenInGiven
	cfg.Endpoint, cfg.APIKey = name, ""
	parts := strings.Split(def, ",")
	cfg.BaseURL = strings.TrimSpace(parts[0])
	if cfg.BaseURL == "" {
		return cfg, errors.New("no URL: want NAME=URL[,kind=K,...]")
	}
	for _, part := range parts[1:] {
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return cfg, fmt.Errorf("%q: want key=value (keys: kind, api_key_env, tokenize, token_in, max_in_flight)", part)
		}
		var err error
		switch k {
		case "kind":
			cfg.Kind = llm.Kind(strings.ToLower(v))
		case "api_key_env":
			key, set := lookup(v)
			if v == "" || !set {
				return cfg, fmt.Errorf("api_key_env: $%s is not set", v)
			}
			cfg.APIKey = key
		case "tokenize":
			cfg.Tokenize, err = strconv.ParseBool(v)
		case "token_in":
			cfg.TokenIn, err = strconv.ParseBool(v)
			tokenInSet = true
		case "max_in_flight":
			cfg.MaxInFlight, err = strconv.Atoi(v)
		default:
			return cfg, fmt.Errorf("unknown key %q (keys: kind, api_key_env, tokenize, token_in, max_in_flight)", k)
		}
		if err != nil {
			return cfg, fmt.Errorf("%s %q: %w", k, v, err)
		}
	}
	if !tokenInSet {
		cfg.TokenIn = llm.DefaultTokenIn(cfg.Kind)
	}
	return cfg, cfg.Validate()
}

// defaultEndpointName is the first name the --llm-endpoint values give the
// default endpoint (a bare NAME), or "".
func defaultEndpointName(values []string) string {
	for _, v := range values {
		if !strings.Contains(v, "=") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// config is the configuration of the endpoint called name: the default
// one for "" or one of its aliases.
func (e *llmEndpoints) config(name string) (llm.Config, error) {
	if name == "" || slices.Contains(e.aliases, name) {
		return e.base, nil
	}
	if cfg, ok := e.named[name]; ok {
		return cfg, nil
	}
	return llm.Config{}, fmt.Errorf("endpoint %q is not defined here (define it with --llm-endpoint %s=URL; defined: %s)", name, name, e.describe())
}

// describe lists the endpoints' names, the default first.
func (e *llmEndpoints) describe() string {
	names := append([]string{"the default (--llm-base-url)"}, e.aliases...)
	return strings.Join(append(names, slices.Sorted(maps.Keys(e.named))...), ", ")
}

// llmPool makes the "llm" policies of a command: one client per endpoint,
// made on first use and shared by every policy on it (and so its bound on
// requests in flight), and a policy per role settings. It is safe for
// concurrent use.
type llmPool struct {
	endpoints *llmEndpoints
	seed      uint64 // roots the clients' retry jitter

	mu      sync.Mutex
	clients map[string]*llm.Client
}

func newLLMPool(e *llmEndpoints, seed uint64) *llmPool {
	return &llmPool{endpoints: e, seed: seed, clients: map[string]*llm.Client{}}
}

// client is the client of the endpoint name.
func (p *llmPool) client(name string) (*llm.Client, error) {
	cfg, err := p.endpoints.config(name)
	if err != nil {
		return nil, err
	}
	key := cfg.Endpoint // aliases share the default's client
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[key]; ok {
		return c, nil
	}
	cfg.Seed = p.seed
	c, err := llm.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	p.clients[key] = c
	return c, nil
}

// policy makes the llm policy of req: on the endpoint its settings name,
// with their model and sampling over the endpoint's flags, fitted to the
// scenario. Its errors name the role and the bad field.
func (p *llmPool) policy(req env.PolicyRequest) (agents.Policy, error) {
	st, err := decodeLLMSettings(req.Settings)
	if err != nil {
		return nil, fmt.Errorf("role %s: %w", req.Role, err)
	}
	client, err := p.client(st.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("role %s: %w", req.Role, err)
	}
	cfg := client.Config()
	// No settings at all (a policy a reset names, troupe env-serve's) is
	// the command's flags throughout; settings a spec writer made record
	// the endpoint they were made for, and their policy settings apply.
	if len(req.Settings) > 0 {
		if err := st.checkEndpoint(&cfg); err != nil {
			return nil, fmt.Errorf("role %s: endpoint %s: %w", req.Role, cmp.Or(st.Endpoint, "(the default)"), err)
		}
		st.applyTo(&cfg)
	}
	pol, err := llm.NewPolicy(client, cfg, llm.ForScenario(req.Scenario, req.Params)...)
	if err != nil {
		return nil, fmt.Errorf("role %s: %w", req.Role, err)
	}
	return pol, nil
}

// check makes every endpoint's client now, so that a bad definition is
// refused before anything runs.
func (p *llmPool) check() error {
	if _, err := p.client(""); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(p.endpoints.named)) {
		if _, err := p.client(name); err != nil {
			return fmt.Errorf("endpoint %s: %w", name, err)
		}
	}
	return nil
}

// close closes the clients; a nil pool has none.
func (p *llmPool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		c.Close()
	}
	clear(p.clients)
}

// roleLLM is one --role-llm value: a role's LLM settings, over the
// default endpoint's flags, and whether the role is frozen.
type roleLLM struct {
	role     string
	settings llmSettings // only what the value gives
	frozen   bool
}

// roleLLMKeys are the keys of a --role-llm value besides the sampling
// fields' JSON names: the endpoint, model, the policy settings of
// llmShape (a role's own context budget, memory, format, re-asks) and
// frozen.
var roleLLMKeys = []string{"endpoint", "model", "max_context", "no_memory", "format", "invalid_retries", "feedback", "frozen"}

// samplingKeys are protocol.Sampling's JSON names, the --role-llm keys
// of the sampling settings; extra.KEY sets an extra body field.
var samplingKeys = []string{"temperature", "top_p", "top_k", "max_tokens", "stop", "stop_token_ids", "sampling_seed",
	"skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens", "repetition_penalty", "min_tokens"}

// parseRoleLLM reads a --role-llm value, ROLE=key=value,...: the keys
// are endpoint, model, max_context, no_memory, format, invalid_retries,
// feedback, frozen (alone, or frozen=BOOL), the sampling
// fields by their JSON names (stop and stop_token_ids repeatable), and
// extra.KEY=JSON. A value is JSON when it reads as JSON, else a string;
// a piece with no key of these continues the value before it, so that
// stop strings and JSON values may hold commas.
func parseRoleLLM(v string) (roleLLM, error) {
	role, rest, ok := strings.Cut(v, "=")
	r := roleLLM{role: strings.TrimSpace(role)}
	if !ok || r.role == "" {
		return r, usagef("--role-llm %q: want ROLE=key=value,... (keys: %s, extra.KEY)", v, strings.Join(append(slices.Clone(roleLLMKeys), samplingKeys...), ", "))
	}
	bad := func(format string, args ...any) error {
		return usagef("--role-llm %q: role %s: %s", v, r.role, fmt.Sprintf(format, args...))
	}
	var pairs [][2]string
	for part := range strings.SplitSeq(rest, ",") {
		k, val, _ := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if isRoleLLMKey(k) || len(pairs) == 0 {
			pairs = append(pairs, [2]string{k, val})
			continue
		}
		pairs[len(pairs)-1][1] += "," + part
	}
	obj := map[string]json.RawMessage{}
	extra := map[string]json.RawMessage{}
	var stop []string
	var stopIDs []int
	for _, kv := range pairs {
		k, val := kv[0], strings.TrimSpace(kv[1])
		switch {
		case k == "" && val == "" && len(pairs) == 1:
			return r, bad("no settings")
		case k == "frozen":
			r.frozen = true
			if val != "" {
				b, err := strconv.ParseBool(val)
				if err != nil {
					return r, bad("frozen %q: want frozen, frozen=true or frozen=false", val)
				}
				r.frozen = b
			}
		case !isRoleLLMKey(k):
			return r, bad("unknown key %q (keys: %s, extra.KEY)", k, strings.Join(append(slices.Clone(roleLLMKeys), samplingKeys...), ", "))
		case strings.HasPrefix(k, "extra."):
			if !json.Valid([]byte(val)) {
				return r, bad("%s: %q is not JSON (quote strings: %s=\"text\")", k, val, k)
			}
			extra[strings.TrimPrefix(k, "extra.")] = json.RawMessage(val)
		case k == "stop":
			stop = append(stop, val)
		case k == "stop_token_ids":
			id, err := strconv.Atoi(val)
			if err != nil {
				return r, bad("stop_token_ids %q: want a token id (repeat the key for more)", val)
			}
			stopIDs = append(stopIDs, id)
		case k == "endpoint" || k == "model" || k == "format":
			obj[k], _ = json.Marshal(val)
		default:
			if _, dup := obj[k]; dup {
				return r, bad("%s given twice", k)
			}
			if !json.Valid([]byte(val)) {
				return r, bad("%s %q: want a number or true/false", k, val)
			}
			obj[k] = json.RawMessage(val)
		}
	}
	if stop != nil {
		obj["stop"], _ = json.Marshal(stop)
	}
	if stopIDs != nil {
		obj["stop_token_ids"], _ = json.Marshal(stopIDs)
	}
	if len(extra) > 0 {
		obj["extra"], _ = json.Marshal(extra)
	}
	raw, _ := json.Marshal(obj)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r.settings); err != nil {
		return r, bad("%v", err)
	}
	return r, nil
}

func isRoleLLMKey(k string) bool {
	return slices.Contains(roleLLMKeys, k) || slices.Contains(samplingKeys, k) || (strings.HasPrefix(k, "extra.") && len(k) > len("extra."))
}
