package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/tools/llama/llamatest"
)

// testPool is the llm policies of a command whose --llm-* flags are cfg
// and whose --llm-endpoint values are endpoints, closed when t ends.
func testPool(t *testing.T, cfg llm.Config, endpoints ...string) *llmPool {
	t.Helper()
	eps, err := parseEndpoints(cfg, endpoints, noEnv, true)
	require.NoError(t, err)
	pool := newLLMPool(eps, cfg.Seed)
	t.Cleanup(pool.close)
	require.NoError(t, pool.check())
	return pool
}

// wireCall is one request a recordingProxy forwarded.
type wireCall struct {
	Path   string
	Header http.Header
	Body   map[string]any // nil when the body is not a JSON object
}

// recordingProxy is a reverse proxy on 127.0.0.1 in front of a server,
// which records every request as it reached the wire.
type recordingProxy struct {
	URL   string // the proxy's root URL
	mu    sync.Mutex
	calls []wireCall
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := &recordingProxy{}
	fwd := httputil.NewSingleHostReverseProxy(u)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var obj map[string]any
		_ = json.Unmarshal(body, &obj)
		rp.mu.Lock()
		rp.calls = append(rp.calls, wireCall{Path: r.URL.Path, Header: r.Header.Clone(), Body: obj})
		rp.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	rp.URL = hs.URL
	return rp
}

// chats are the chat completion requests the proxy saw.
func (rp *recordingProxy) chats() []wireCall {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	var out []wireCall
	for _, c := range rp.calls {
		// llama.cpp's /completion: an agent that remembers continues its
		// conversation from token ids (policies/llm's token-in path).
		if strings.HasSuffix(c.Path, "/chat/completions") || strings.HasSuffix(c.Path, "/completion") {
			out = append(out, c)
		}
	}
	return out
}

// all are every request the proxy saw.
func (rp *recordingProxy) all() []wireCall {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Clone(rp.calls)
}

func TestParseRoleLLM(t *testing.T) {
	r, err := parseRoleLLM(`x=endpoint=big,model=lora-x,temperature=0.7,top_k=5,stop=a,b,stop=c,stop_token_ids=7,extra.chat_template_kwargs={"a":1,"b":2},frozen`)
	require.NoError(t, err)
	assert.Equal(t, "x", r.role)
	assert.True(t, r.frozen)
	assert.JSONEq(t, `{"endpoint":"big","model":"lora-x","temperature":0.7,"top_k":5,"stop":["a,b","c"],"stop_token_ids":[7],"extra":{"chat_template_kwargs":{"a":1,"b":2}}}`,
		string(r.settings.encode()), "a piece without a key continues the value before it")

	for v, want := range map[string]string{
		"x":                             "want ROLE=key=value",
		"x=":                            "role x: no settings",
		"x=temprature=1":                `role x: unknown key "temprature"`,
		"x=temperature=hot":             `temperature "hot": want a number`,
		"x=temperature=1,temperature=2": "temperature given twice",
		"x=frozen=maybe":                `frozen "maybe"`,
		"x=extra.k=nope":                `extra.k: "nope" is not JSON`,
		"x=stop_token_ids=eos":          `stop_token_ids "eos"`,
		"x=top_k=1.5":                   "top_k",
	} {
		_, err := parseRoleLLM(v)
		assert.ErrorContains(t, err, want, v)
	}
}

func TestParseEndpoints(t *testing.T) {
	base := llm.DefaultConfig()
	base.APIKey = "default-secret"
	env := func(k string) (string, bool) {
		if k == "BIG_KEY" {
			return "big-secret", true
		}
		return "", false
	}
	eps, err := parseEndpoints(base, []string{"local", "big=http://10.0.0.2:8000/v1,kind=sglang,api_key_env=BIG_KEY,max_in_flight=8", "small=http://10.0.0.3:8080/v1,kind=llamacpp,tokenize=false"}, env, true)
	require.NoError(t, err)
	cfg, err := eps.config("big")
	require.NoError(t, err)
	assert.Equal(t, "http://10.0.0.2:8000/v1", cfg.BaseURL)
	assert.Equal(t, llm.KindSGLang, cfg.Kind)
	assert.Equal(t, "big-secret", cfg.APIKey)
	assert.Equal(t, 8, cfg.MaxInFlight)
	assert.Equal(t, "big", cfg.Endpoint)
	cfg, err = eps.config("small")
	require.NoError(t, err)
	assert.Empty(t, cfg.APIKey, "a named endpoint never gets the default endpoint's key")
	assert.False(t, cfg.Tokenize)
	cfg, err = eps.config("local")
	require.NoError(t, err)
	assert.Equal(t, base, cfg, "a bare name is the default endpoint")
	_, err = eps.config("nope")
	assert.ErrorContains(t, err, `endpoint "nope" is not defined here`)

	for v, want := range map[string]string{
		"-x=http://h/v1":                "an endpoint name is",
		"a=":                            "no URL",
		"a=http://h/v1,kind=tgi":        `kind "tgi"`,
		"a=http://h/v1,api_key_env=NO":  "api_key_env: $NO is not set",
		"a=http://h/v1,colour=red":      `unknown key "colour"`,
		"a=ftp://h/v1":                  "the scheme must be http or https",
		"a=http://h/v1,max_in_flight=x": `max_in_flight "x"`,
	} {
		_, err := parseEndpoints(base, []string{v}, env, true)
		assert.ErrorContains(t, err, want, v)
	}
	_, err = parseEndpoints(base, []string{"a=http://h/v1", "a=http://g/v1"}, env, true)
	assert.ErrorContains(t, err, "endpoint a is defined twice")
}

// printSpec is the canonical spec troupe run prints for args.
func printSpec(t *testing.T, lookup func(string) (string, bool), args ...string) (*runspec.Spec, result) {
	t.Helper()
	r := invokeWithEnv(t, lookup, append([]string{"run", "--print-spec"}, args...)...)
	if r.code != ExitOK {
		return nil, r
	}
	spec, err := runspec.DecodeBytes([]byte(r.stdout))
	require.NoError(t, err, r.stdout)
	return spec, r
}

// TestRoleLLMSpec: a role's endpoint, model and sampling are its policy's
// settings in the run spec, over the --llm-* flags; the spec's hash changes
// with any of them; frozen roles leave emit; addresses and keys stay out.
func TestRoleLLMSpec(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "O_KEY" || k == "TROUPE_LLM_API_KEY" {
			return "sk-very-secret", true
		}
		return "", false
	}
	base := []string{"tictactoe", "-n", "2", "--llm-model", "base-model", "--llm-temperature", "0.5",
		"--llm-endpoint", "osrv=http://127.0.0.1:9/v1,kind=sglang,api_key_env=O_KEY"}
	spec, r := printSpec(t, env, append(base, "--role-llm", "x=model=lora-x,top_k=5", "--role-llm", "o=endpoint=osrv,temperature=0.9,frozen")...)
	require.NotNil(t, spec, r.stderr)
	assert.JSONEq(t, `{"model":"lora-x","temperature":0.5,"top_k":5}`, string(spec.Policies["x"].Settings))
	// The endpoint's kind is recorded, and sglang's default, token-in.
	assert.JSONEq(t, `{"endpoint":"osrv","model":"base-model","temperature":0.9,"kind":"sglang","token_in":true}`, string(spec.Policies["o"].Settings))
	assert.Equal(t, "llm", spec.Policies["x"].Name)
	assert.Equal(t, []string{"x"}, spec.Emit, "a frozen role's turns become no samples")
	assert.NotContains(t, r.stdout, "sk-very-secret")
	assert.NotContains(t, r.stdout, "127.0.0.1:9", "the spec names endpoints, not addresses")

	hashes := map[string]string{spec.Hash(): "first"}
	for _, variant := range [][]string{
		{"--role-llm", "x=model=lora-x,top_k=6", "--role-llm", "o=endpoint=osrv,temperature=0.9,frozen"},
		{"--role-llm", "x=model=lora-y,top_k=5", "--role-llm", "o=endpoint=osrv,temperature=0.9,frozen"},
		{"--role-llm", "x=model=lora-x,top_k=5", "--role-llm", "o=endpoint=osrv,temperature=0.8,frozen"},
		{"--role-llm", "x=model=lora-x,top_k=5", "--role-llm", "o=temperature=0.9,frozen"},
		{"--role-llm", "x=model=lora-x,top_k=5", "--role-llm", "o=endpoint=osrv,temperature=0.9"},
	} {
		s, r := printSpec(t, env, append(base, variant...)...)
		require.NotNil(t, s, r.stderr)
		h := s.Hash()
		require.NotContains(t, hashes, h, "%v has the hash of %s", variant, hashes[h])
		hashes[h] = strings.Join(variant, " ")
	}

	// Frozen alone freezes whatever the role plays.
	s, r := printSpec(t, noEnv, "tictactoe", "--policy", "o=random", "--role-llm", "o=frozen", "--role-llm", "x=model=m")
	require.NotNil(t, s, r.stderr)
	assert.Equal(t, "random", s.Policies["o"].Name)
	assert.Equal(t, "llm", s.Policies["x"].Name)
	assert.Equal(t, []string{"x"}, s.Emit)

	// Without --role-llm the spec is what it always was: every llm role has
	// the flags' settings.
	s, r = printSpec(t, env, "tictactoe", "--policy", "llm", "--llm-model", "m")
	require.NotNil(t, s, r.stderr)
	assert.JSONEq(t, `{"model":"m","temperature":1}`, string(s.Policies["o"].Settings))
	assert.Equal(t, s.Policies["x"], s.Policies["o"])
}

// TestRoleLLMRefused: bad per-role settings are refused before anything
// runs, naming the role and the field.
func TestRoleLLMRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--role-llm", "w=model=m"}, []string{`scenario tictactoe has no role "w"`}},
		{[]string{"--role-llm", "x=endpoint=gone"}, []string{"role x", `endpoint "gone" is not defined`}},
		{[]string{"--role-llm", "x=stop_token_ids=2", "--llm-kind", "llamacpp"}, []string{"role x", "stop_token_ids: kind llamacpp"}},
		{[]string{"--llm-endpoint", "oa=http://127.0.0.1:9/v1,kind=openai", "--role-llm", "o=endpoint=oa,top_k=4"}, []string{"role o", "top_k: kind openai has no top_k"}},
		{[]string{"--role-llm", "x=temperature=3"}, []string{"role x", "temperature 3"}},
		{[]string{"--role-llm", "x=model=m", "--policy", "x=random"}, []string{"--role-llm x", `plays policy "random"`}},
		{[]string{"--role-llm", "x=frozen", "--role-llm", "o=frozen"}, []string{"every role is frozen"}},
		{[]string{"--role-llm", "x=model=m,frozen", "--role-llm", "o=frozen"}, []string{"every role is frozen"}},
		{[]string{"--role-llm", "x=frozen", "--emit", "x"}, []string{"role x is frozen, and emitted too"}},
		{[]string{"--role-llm", "x=model=a", "--role-llm", "x=model=b"}, []string{"role x was given settings already"}},
	} {
		r := invokeWithEnv(t, noEnv, append([]string{"run", "tictactoe", "-n", "1", "-o", filepath.Join(t.TempDir(), "o.jsonl")}, c.args...)...)
		assert.Equal(t, ExitUsage, r.code, "%v: %s", c.args, r.stderr)
		for _, w := range c.want {
			assert.Contains(t, r.stderr, w, c.args)
		}
	}
}

// TestRoleLLMOnTwoServers plays two roles with their own endpoints, models
// and sampling on two in-process servers, each behind a recording proxy:
// each role's requests reach its own server only, with its own fields and
// a routing key per agent, and its samples name the model and endpoint.
func TestRoleLLMOnTwoServers(t *testing.T) {
	a := newRecordingProxy(t, strings.TrimSuffix(llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM}).URL(), "/v1"))
	b := newRecordingProxy(t, strings.TrimSuffix(llmtest.Start(t, llmtest.Options{Kind: llmtest.SGLang}).URL(), "/v1"))
	dir := t.TempDir()
	out, eps := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "episodes.jsonl")
	env := func(k string) (string, bool) {
		if k == "B_KEY" {
			return "sk-b-secret", true
		}
		return "", false
	}
	r := invokeWithEnv(t, env, "run", "tictactoe", "-n", "3", "-c", "2", "--llm-base-url", a.URL+"/v1", "--llm-kind", "vllm",
		"--llm-endpoint", "bsrv="+b.URL+"/v1,kind=sglang,api_key_env=B_KEY,token_in=false",
		"--role-llm", "x=model=model-x,temperature=0.25,top_k=7",
		"--role-llm", "o=endpoint=bsrv,model=model-o,temperature=0.75,top_p=0.5,max_tokens=33",
		"-o", out, "--episodes-out", eps)
	require.Equal(t, ExitOK, r.code, r.stderr)
	checkTwoServers(t, a, b, readRollouts(t, readFile(t, out)), 3, map[string]float64{"temperature": 0.25, "top_k": 7}, map[string]float64{"temperature": 0.75, "top_p": 0.5, "max_tokens": 33})
	for _, c := range b.all() {
		assert.Equal(t, "Bearer sk-b-secret", c.Header.Get("Authorization"), "the named endpoint gets its key")
	}
	for _, c := range a.all() {
		assert.Empty(t, c.Header.Get("Authorization"), "and the other server never sees it")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Len(t, files, 3, "samples, records and the progress file: %v", files)
	for _, f := range files {
		assert.NotContains(t, string(readFile(t, f)), "sk-b-secret", "no key in %s", f)
	}
	assert.NotContains(t, r.stderr, "sk-b-secret")
}

// checkTwoServers checks the wire and the samples of a run whose role x
// played model-x on a and role o model-o on b (endpoint bsrv).
func checkTwoServers(t *testing.T, a, b *recordingProxy, rollouts [][]protocol.Sample, episodes int, xFields, oFields map[string]float64) {
	t.Helper()
	require.Len(t, rollouts, episodes)
	for _, side := range []struct {
		p      *recordingProxy
		model  string
		fields map[string]float64
	}{{a, "model-x", xFields}, {b, "model-o", oFields}} {
		chats := side.p.chats()
		require.NotEmpty(t, chats)
		keys := map[string]int{}
		for _, c := range chats {
			tokenIn := strings.HasSuffix(c.Path, "/completion")
			if !tokenIn { // a /completion body names no model: the server's own plays it
				assert.Equal(t, side.model, c.Body["model"], "a role's requests reach its own server only")
			}
			for k, v := range side.fields {
				if k == "max_tokens" && tokenIn {
					k = "n_predict"
				}
				assert.Equal(t, v, c.Body[k], "%s of %s (%s)", k, side.model, c.Path)
			}
			keys[c.Header.Get(llm.DefaultRoutingHeader)]++
		}
		for _, c := range side.p.all() {
			key := c.Header.Get(llm.DefaultRoutingHeader)
			assert.Regexp(t, `^[0-9a-f]{16}$`, key, "every request of %s carries its agent's routing key (%s)", side.model, c.Path)
		}
		// One agent of the role per episode: one key per episode, on every
		// one of its turns.
		assert.Len(t, keys, episodes, "routing keys of %s: %v", side.model, keys)
		t.Logf("%s: %d requests (%d chat), %d routing keys %v", side.model, len(side.p.all()), len(chats), len(keys), keys)
	}
	for _, ro := range rollouts {
		require.NoError(t, protocol.ValidateRollout(ro))
		for _, s := range ro {
			assert.Contains(t, []protocol.Status{protocol.StatusCompleted, protocol.StatusTruncated}, s.Status, s.Metadata.Error)
			switch s.Metadata.Role {
			case "x":
				assert.Equal(t, "model-x", s.Metadata.Extra["llm_model"])
				assert.NotContains(t, s.Metadata.Extra, "llm_endpoint", "the default endpoint is not named")
			case "o":
				assert.Equal(t, "model-o", s.Metadata.Extra["llm_model"])
				assert.Equal(t, "bsrv", s.Metadata.Extra["llm_endpoint"])
			}
		}
	}
}

// TestRoleLLMOnTwoRealLlamaServers is TestRoleLLMOnTwoServers against two
// real llama-server processes, the tiny model served under two aliases,
// each behind a recording proxy; then the same run with o frozen: its
// turns are played and recorded in the episode records, no sample of it is
// written, and x's samples, credit included, are the same bytes. It skips
// when the server is not built, unless TROUPE_REQUIRE_LLAMA=1.
func TestRoleLLMOnTwoRealLlamaServers(t *testing.T) {
	la := llamatest.New(t, llamatest.Options{Slots: 2})
	lb := llamatest.New(t, llamatest.Options{Slots: 2, Args: []string{"-a", "tiny-o"}})
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	resp, err := http.Get(lb.URL + "/v1/models")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&models))
	resp.Body.Close()
	require.NotEmpty(t, models.Data)
	require.Equal(t, "tiny-o", models.Data[0].ID, "the second server serves the model under its own alias")

	a, b := newRecordingProxy(t, la.URL), newRecordingProxy(t, lb.URL)
	run := func(frozen string) ([][]protocol.Sample, []byte) {
		dir := t.TempDir()
		out, eps := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "episodes.jsonl")
		r := invokeWithEnv(t, noEnv, "run", "tictactoe", "-n", "1",
			"--llm-base-url", a.URL+"/v1", "--llm-kind", "llamacpp", "--llm-timeout", "60s", "--on-invalid", "forfeit",
			"--llm-endpoint", "bsrv="+b.URL+"/v1,kind=llamacpp",
			"--role-llm", "x=model="+llamatest.ModelAlias+",temperature=0,top_k=5,max_tokens=24",
			"--role-llm", "o=endpoint=bsrv,model=tiny-o,temperature=0.8,top_p=0.9,max_tokens=24,repetition_penalty=1.1"+frozen,
			"-o", out, "--episodes-out", eps)
		require.Equal(t, ExitOK, r.code, r.stderr)
		return readRollouts(t, readFile(t, out)), readFile(t, eps)
	}
	rollouts, _ := run("")
	checkTwoServers(t, renamed(a, "model-x", llamatest.ModelAlias), renamed(b, "model-o", "tiny-o"), relabelled(rollouts),
		1, map[string]float64{"temperature": 0, "top_k": 5, "max_tokens": 24},
		map[string]float64{"temperature": 0.8, "top_p": 0.9, "max_tokens": 24, "repeat_penalty": 1.1})
	tokens := 0
	for _, ro := range rollouts {
		for _, s := range ro {
			if !s.Metadata.TextOnly {
				tokens++
			}
		}
	}
	assert.Positive(t, tokens, "the servers' token ids are kept")

	before := len(b.chats())
	frozenRollouts, records := run(",frozen")
	assert.Greater(t, len(b.chats()), before, "a frozen role is played")
	checkFrozen(t, frozenRollouts, records)
}

// checkFrozen checks a run whose role o was frozen: no sample of o, and
// o's turns in the episode records, not emitted.
func checkFrozen(t *testing.T, rollouts [][]protocol.Sample, records []byte) {
	t.Helper()
	for _, ro := range rollouts {
		require.NoError(t, protocol.ValidateRollout(ro))
		for _, s := range ro {
			require.Equal(t, "x", s.Metadata.Role, "a frozen role's turns become no samples")
		}
	}
	oTurns := 0
	for line := range bytes.Lines(records) {
		var rec struct {
			Seats []struct {
				Role string `json:"role"`
			} `json:"seats"`
			Turns []struct {
				Seat int  `json:"seat"`
				Emit bool `json:"emit"`
			} `json:"turns"`
		}
		require.NoError(t, json.Unmarshal(line, &rec))
		for _, tn := range rec.Turns {
			if rec.Seats[tn.Seat].Role == "o" {
				oTurns++
				assert.False(t, tn.Emit)
			}
		}
	}
	assert.Positive(t, oTurns, "the episode records hold the frozen role's turns")
}

// TestFrozenRoleKeepsTheOthersBytes: freezing a role changes nothing of
// the other roles' samples but their running index: the same tokens,
// rewards under every allocator, metadata.
func TestFrozenRoleKeepsTheOthersBytes(t *testing.T) {
	srv := llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM})
	run := func(frozen string) ([][]protocol.Sample, []byte) {
		dir := t.TempDir()
		out, eps := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "episodes.jsonl")
		r := invokeWithEnv(t, noEnv, "run", "tictactoe", "-n", "6", "-g", "3", "-c", "3", "-a", "team,equal-split,rloo(key=role)", "--reward-format", "dict",
			"--llm-base-url", srv.URL(), "--role-llm", "x=model=mx", "--role-llm", "o=model=mo,temperature=0.5"+frozen, "-o", out, "--episodes-out", eps)
		require.Equal(t, ExitOK, r.code, r.stderr)
		return readRollouts(t, readFile(t, out)), readFile(t, eps)
	}
	all, _ := run("")
	frozen, records := run(",frozen")
	checkFrozen(t, frozen, records)
	var xs, xsFrozen []protocol.Sample
	for _, ro := range all {
		for _, s := range ro {
			if s.Metadata.Role == "x" {
				xs = append(xs, s)
			}
		}
	}
	for _, ro := range frozen {
		xsFrozen = append(xsFrozen, ro...)
	}
	require.Len(t, xsFrozen, len(xs))
	for i := range xs {
		xs[i].Index, xsFrozen[i].Index = 0, 0 // the running count of samples written
		assert.Equal(t, xs[i], xsFrozen[i], "x's sample %d", i)
	}
}

// renamed is p with the model name want expected as name: the real servers
// answer to their aliases.
func renamed(p *recordingProxy, _, alias string) *recordingProxy {
	out := &recordingProxy{URL: p.URL}
	for _, c := range p.all() {
		if c.Body != nil && c.Body["model"] == alias {
			c.Body = maps.Clone(c.Body)
			c.Body["model"] = map[string]string{llamatest.ModelAlias: "model-x", "tiny-o": "model-o"}[alias]
		}
		out.calls = append(out.calls, c)
	}
	return out
}

// relabelled is rollouts with the real aliases as checkTwoServers' names.
func relabelled(rollouts [][]protocol.Sample) [][]protocol.Sample {
	out := make([][]protocol.Sample, len(rollouts))
	for i, ro := range rollouts {
		for _, s := range ro {
			s.Metadata.Extra = maps.Clone(s.Metadata.Extra)
			switch s.Metadata.Extra["llm_model"] {
			case llamatest.ModelAlias:
				s.Metadata.Extra["llm_model"] = "model-x"
			case "tiny-o":
				s.Metadata.Extra["llm_model"] = "model-o"
			}
			out[i] = append(out[i], s)
		}
	}
	return out
}

// TestServeRoleSettings: a rollout request gives its roles their own
// endpoint, model and sampling, and freezes some; bad role settings are
// refused naming the role and the field.
func TestServeRoleSettings(t *testing.T) {
	a := newRecordingProxy(t, strings.TrimSuffix(llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM}).URL(), "/v1"))
	b := newRecordingProxy(t, strings.TrimSuffix(llmtest.Start(t, llmtest.Options{Kind: llmtest.VLLM}).URL(), "/v1"))
	cfg := llm.DefaultConfig()
	cfg.BaseURL = a.URL + "/v1"
	c := serveLLM(t, cfg, "bsrv="+b.URL+"/v1,kind=vllm")
	temp := 0.25
	res, err := c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", N: 2, Policy: "llm",
		Sampling: &protocol.Sampling{Temperature: &temp, TopK: ptr(7)},
		Roles: map[string]rollout.RoleSettings{
			"x": {Model: "model-x"},
			"o": {Endpoint: "bsrv", Model: "model-o", Sampling: &protocol.Sampling{Temperature: ptr(0.75), TopP: ptr(0.5), MaxTokens: ptr(33)}},
		}})
	require.NoError(t, err)
	var rollouts [][]protocol.Sample
	for _, ro := range res.Rollouts {
		rollouts = append(rollouts, ro.Samples)
	}
	checkTwoServers(t, a, b, rollouts, 2, map[string]float64{"temperature": 0.25, "top_k": 7},
		map[string]float64{"temperature": 0.75, "top_p": 0.5, "max_tokens": 33, "top_k": 7})

	res, err = c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policy: "llm",
		Roles: map[string]rollout.RoleSettings{"o": {Endpoint: "bsrv", Frozen: true}}})
	require.NoError(t, err)
	require.Len(t, res.Rollouts, 1)
	require.NotEmpty(t, res.Rollouts[0].Samples)
	for _, s := range res.Rollouts[0].Samples {
		assert.Equal(t, "x", s.Metadata.Role, "a frozen role returns no samples")
	}

	for _, bad := range []struct {
		roles map[string]rollout.RoleSettings
		emit  []string
		want  string
	}{
		{map[string]rollout.RoleSettings{"w": {Model: "m"}}, nil, `scenario tictactoe has no role "w"`},
		{map[string]rollout.RoleSettings{"o": {Endpoint: "gone"}}, nil, `roles.o.endpoint: endpoint "gone" is not defined`},
		{map[string]rollout.RoleSettings{"o": {Frozen: true}}, []string{"o"}, "role o is frozen, and emitted too"},
		{map[string]rollout.RoleSettings{"o": {Frozen: true}, "x": {Frozen: true}}, nil, "every role is frozen"},
		{map[string]rollout.RoleSettings{"o": {Sampling: &protocol.Sampling{Temperature: ptr(9.0)}}}, nil, "temperature 9"},
	} {
		_, err := c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policy: "llm", Roles: bad.roles, Emit: bad.emit})
		assert.ErrorContains(t, err, bad.want)
	}
	_, err = c.Rollouts(t.Context(), &rollout.Request{Scenario: "tictactoe", Policies: map[string]string{"x": "llm"},
		Roles: map[string]rollout.RoleSettings{"o": {Model: "m"}}})
	assert.ErrorContains(t, err, "roles.o: role o plays")
}

// FuzzParseRoleLLM: any --role-llm value is read or refused, never a
// panic, and the settings read survive the run spec's round trip.
func FuzzParseRoleLLM(f *testing.F) {
	for _, s := range []string{`x=endpoint=big,model=m,temperature=0.7,stop=a,b,extra.k={"a":1,"b":2},frozen`, "x=", "=", "x=top_k=-1,stop_token_ids=2,stop_token_ids=3", "x=frozen=false,model=a=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, err := parseRoleLLM(v)
		if err != nil {
			return
		}
		raw := r.settings.encode()
		back, err := decodeLLMSettings(raw)
		require.NoError(t, err, "%s", raw)
		assert.Equal(t, string(raw), string(back.encode()))
	})
}

// FuzzParseEndpoints: any --llm-endpoint value is read or refused, never
// a panic; one read has a name and a valid configuration.
func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"a=http://h:1/v1,kind=sglang,tokenize=false,max_in_flight=3", "a", "a=", "a=http://h/v1,api_key_env=K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		eps, err := parseEndpoints(llm.DefaultConfig(), []string{v}, func(string) (string, bool) { return "k", true }, true)
		if err != nil {
			return
		}
		for name, cfg := range eps.named {
			assert.Equal(t, name, cfg.Endpoint)
			assert.NoError(t, cfg.Validate())
		}
	})
}
