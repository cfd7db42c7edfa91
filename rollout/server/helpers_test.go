package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/looplab/fsm"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
	"github.com/troupe-rl/troupe/scenarios/signal"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
)

// quiz is a one-turn scenario that takes a dataset row: the solver sees
// the prompt and answers; it scores 1 when the answer is the label. Its
// game reports the label as its ground truth.
func quiz() env.Scenario {
	solver := &agents.Role{
		Name:     "solver",
		Doc:      "answers the question",
		Initial:  "asking",
		Events:   fsm.Events{agents.Edge("asking", "answer", "done")},
		Terminal: []agents.State{"done"},
	}
	info := &env.Info{
		Name:     "quiz",
		Summary:  "one question, one answer",
		Schedule: env.Sequential,
		Roles:    []*agents.Role{solver},
		Params: []env.ParamSpec{
			env.String("prompt", "", "the question"),
			env.String("label", "", "the expected answer"),
		},
		Policies: map[string]env.PolicyMaker{
			"parrot": func(env.PolicyRequest) (agents.Policy, error) {
				return agents.Scripted(func(*agents.Observation) string { return "42" }), nil
			},
		},
		DefaultPolicy: "parrot",
	}
	return env.Define(info, func(p env.Params, _ uint64) (env.Game, error) {
		return &quizGame{prompt: p.String("prompt"), label: p.String("label")}, nil
	})
}

type quizGame struct {
	prompt, label, answer string
}

func (g *quizGame) Seats() []env.Seat     { return []env.Seat{{ID: "solver", Role: "solver"}} }
func (g *quizGame) Start(*env.Step) error { return nil }
func (g *quizGame) Next(*env.Step) []int  { return []int{0} }
func (g *quizGame) Observe(int) env.View  { return env.View{Text: "Q: " + g.prompt} }
func (g *quizGame) Label() string         { return g.label }
func (g *quizGame) Apply(s *env.Step, moves []env.Move) error {
	g.answer = moves[0].Action.Text
	if err := s.Fire(0, "answer"); err != nil {
		return err
	}
	s.End()
	return nil
}

func (g *quizGame) Score() env.Score {
	if g.answer == g.label {
		return env.Score{Team: 1}
	}
	return env.Score{Team: 0}
}

// registry holds the scenarios the tests play.
func registry(t testing.TB) *env.Registry {
	t.Helper()
	r, err := env.NewRegistry(tictactoe.New(), signal.New(), quiz())
	require.NoError(t, err)
	return r
}

// newServer returns a Server over the test registry with cfg's other
// settings.
func newServer(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.Scenarios == nil {
		cfg.Scenarios = registry(t)
	}
	s, err := server.New(cfg)
	require.NoError(t, err)
	return s
}

// answer is a recorded HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request straight to the handler.
func do(t testing.TB, h http.Handler, method, path, body string, header ...string) answer {
	t.Helper()
	req := httptest.NewRequestWithContext(context.Background(), method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func post(t testing.TB, h http.Handler, body string, header ...string) answer {
	t.Helper()
	return do(t, h, http.MethodPost, rollout.PathRollouts, body, header...)
}

// decodeResponse decodes a 200 rollout answer strictly: a key the
// rollout.Response types do not have is an error.
func decodeResponse(t testing.TB, a answer) *rollout.Response {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, "body: %s", a.body)
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	var r rollout.Response
	require.NoError(t, dec.Decode(&r))
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "one JSON value only")
	return &r
}

// decodeError decodes an error answer.
func decodeError(t testing.TB, a answer) *rollout.Error {
	t.Helper()
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	var body rollout.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "body: %s", a.body)
	require.NotNil(t, body.Error)
	return body.Error
}

// gate is a policy that blocks every turn until it is opened, or until
// the episode's context ends (then it returns the context's error, as a
// policy waiting on a model server would). entered receives one value per
// turn that starts waiting.
type gate struct {
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 1024), open: make(chan struct{})}
}

func (g *gate) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return agents.Action{Text: obs.Legal[0]}, nil
	case <-ctx.Done():
		return agents.Action{}, context.Cause(ctx)
	}
}

// factory plays p in every seat of every request, whatever the policy
// names.
func factory(p agents.Policy) env.PolicyMaker {
	return func(env.PolicyRequest) (agents.Policy, error) { return p, nil }
}

// policyFunc is a policy that fails with fail's error, or plays the first
// legal action when fail returns nil.
type policyFunc func(ctx context.Context) error

func (f policyFunc) Act(ctx context.Context, obs *agents.Observation) (agents.Action, error) {
	if err := f(ctx); err != nil {
		return agents.Action{}, err
	}
	return agents.Action{Text: obs.Legal[0]}, nil
}

// jsonStrict decodes b into v, refusing unknown keys.
func jsonStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
