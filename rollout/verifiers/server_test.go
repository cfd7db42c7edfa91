package verifiers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/troupe-rl/troupe/internal/pyenv"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/verifiers"
	"github.com/troupe-rl/troupe/scenarios"
)

// fakeRoller answers every request with one canned tictactoe episode and
// keeps the requests it was sent.
type fakeRoller struct {
	mu   sync.Mutex
	reqs []*rollout.Request
	// block, when set, makes a request wait for its context's end.
	block    bool
	canceled chan error
}

func (f *fakeRoller) Rollouts(ctx context.Context, req *rollout.Request) (*rollout.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		f.canceled <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	return &rollout.Response{Rollouts: []rollout.Rollout{cannedRollout()}}, nil
}

func sample(turn int, tokens []int, rl int, reward float64) protocol.Sample {
	mask := make([]int, rl)
	lp := make([]float64, rl)
	for i := range mask {
		mask[i], lp[i] = 1, -0.5*float64(i+1)
	}
	return protocol.Sample{RolloutID: 9, Tokens: tokens, ResponseLength: rl, LossMask: mask, RolloutLogProbs: lp,
		Response: fmt.Sprintf("move %d", turn), Prompt: protocol.Prompt{Text: fmt.Sprintf("board %d", turn)},
		Reward: protocol.DictReward(map[string]float64{"team": reward, "individual": 2 * reward}),
		Status: protocol.StatusCompleted,
		Metadata: protocol.Metadata{Scenario: "tictactoe", Agent: "x", Role: "x", Turn: turn, Allocator: "team individual",
			Extra: map[string]any{"llm_model": "policy-7"}}}
}

// cannedRollout: x plays three turns, the second extending the first's
// tokens (memory), the third a fresh prompt; o is frozen (no samples).
func cannedRollout() rollout.Rollout {
	return rollout.Rollout{RolloutID: 9, Seed: 5, PolicySeed: 6, Status: protocol.StatusCompleted, End: "terminal",
		TeamReward: 1, AgentScores: []float64{1, -1},
		Seats: []rollout.Seat{{ID: "x", Role: "x"}, {ID: "o", Role: "o"}}, Turns: 5,
		Samples: []protocol.Sample{
			sample(0, []int{1, 2, 3, 10, 11}, 2, 1),
			sample(1, []int{1, 2, 3, 10, 11, 4, 5, 12}, 1, 1),
			sample(2, []int{7, 8, 13, 14}, 2, 1),
		}}
}

func startServer(t *testing.T, cfg verifiers.Config) string {
	t.Helper()
	cfg.Addr = "tcp://127.0.0.1:0"
	if cfg.Scenarios == nil {
		cfg.Scenarios = scenarios.Builtin()
	}
	ready := make(chan string, 1)
	cfg.Ready = func(addr string) { ready <- addr }
	s, err := verifiers.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop")
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return ""
}

// dealer is a Go DEALER client for the tests that send what verifiers'
// client never would.
func dealer(t *testing.T, addr string) zmq4.Socket {
	t.Helper()
	d := zmq4.NewDealer(t.Context(), zmq4.WithTimeout(10*time.Second))
	require.NoError(t, d.Dial(addr))
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func ask(t *testing.T, d zmq4.Socket, frames ...[]byte) map[string]any {
	t.Helper()
	require.NoError(t, d.Send(zmq4.NewMsgFrom(frames...)))
	for {
		m, err := d.Recv()
		require.NoError(t, err)
		require.Len(t, m.Frames, 3)
		if string(m.Frames[1]) == "delta" {
			continue
		}
		assert.Equal(t, "reply", string(m.Frames[1]))
		var out map[string]any
		require.NoError(t, msgpack.Unmarshal(m.Frames[2], &out))
		return out
	}
}

func pack(t *testing.T, v any) []byte {
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestBadFramesAreAnsweredNotFatal(t *testing.T) {
	addr := startServer(t, verifiers.Config{Rollouts: &fakeRoller{}})
	d := dealer(t, addr)

	r := ask(t, d, []byte("1"), []byte("health"), pack(t, map[string]any{}))
	assert.Equal(t, true, r["success"])

	r = ask(t, d, []byte("2"), []byte("dance"), pack(t, map[string]any{}))
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], `unknown method "dance"`)

	r = ask(t, d, []byte("3"), []byte("run"))
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], "expected 3 frames")

	r = ask(t, d, []byte("4"), []byte("run"), []byte{0xc1, 0xff})
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], "run: not a msgpack map")

	r = ask(t, d, []byte("5"), []byte("run"), pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe", "sed": 3}, "model": "m"}))
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], `unknown field "sed"`)

	r = ask(t, d, []byte("6"), []byte("run"), pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe", "roles": map[string]any{"z": map[string]any{}}}, "model": "m"}))
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], `no role "z" (its roles: x, o)`)

	r = ask(t, d, []byte("7"), []byte("cancel"), pack(t, map[string]any{"request_id": "nothing"}))
	assert.Equal(t, true, r["success"])
	assert.Equal(t, false, r["cancelled"])

	r = ask(t, d, []byte("8"), []byte("health"), pack(t, nil))
	assert.Equal(t, true, r["success"], "the server still serves")
}

func TestCancelAbortsTheRun(t *testing.T) {
	f := &fakeRoller{block: true, canceled: make(chan error, 1)}
	addr := startServer(t, verifiers.Config{Rollouts: f})
	d := dealer(t, addr)
	run := pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe"}, "model": "m",
		"client": map[string]any{"base_url": "http://x"}, "sampling": map[string]any{}})
	require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte("run-1"), []byte("run"), run)))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte("c-1"), []byte("cancel"), pack(t, map[string]any{"request_id": "run-1"}))))
	got := map[string]map[string]any{}
	for len(got) < 2 {
		m, err := d.Recv()
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, msgpack.Unmarshal(m.Frames[2], &out))
		got[string(m.Frames[0])] = out
	}
	assert.Equal(t, true, got["c-1"]["cancelled"])
	assert.Equal(t, false, got["run-1"]["success"])
	assert.Contains(t, got["run-1"]["error"], "Cancelled: rollout aborted")
	select {
	case cause := <-f.canceled:
		assert.ErrorContains(t, cause, "cancelled by the client")
	case <-time.After(5 * time.Second):
		t.Fatal("the episode's context was not cancelled")
	}
}

// runClient runs verifiers' own EnvClient (testdata/verifiers_client.py)
// with spec and returns what it wrote.
func runClient(t *testing.T, spec map[string]any) map[string]any {
	return pyenv.RunJSON(t, pyenv.E2E, filepath.Join("testdata", "verifiers_client.py"), spec, 3*time.Minute)
}

// TestVerifiersClientReadsTheEpisode: verifiers' own client assembles
// and types the episode, and its branches are troupe's samples' ids.
func TestVerifiersClientReadsTheEpisode(t *testing.T) {
	f := &fakeRoller{}
	addr := startServer(t, verifiers.Config{Rollouts: f, Endpoint: func(u string) (string, error) {
		if u != "http://127.0.0.1:9/v1" {
			return "", fmt.Errorf("not served")
		}
		return "gpu0", nil
	}})
	out := runClient(t, map[string]any{
		"address": addr, "base_url": "http://127.0.0.1:9/v1", "model": "policy-7",
		"sampling": map[string]any{"temperature": 0.5, "max_tokens": 32, "min_p": 0.1},
		"runs": []any{map[string]any{"scenario": "tictactoe", "seed": 5, "policy_seed": 6, "allocators": []string{"team", "individual"},
			"roles": map[string]any{"o": map[string]any{"frozen": true}}, "name": "row 1"}},
	})
	assert.Equal(t, true, out["health"])
	assert.Equal(t, true, out["health_after"])
	runs := out["runs"].([]any)
	require.Len(t, runs, 1)
	ep := runs[0].(map[string]any)
	require.NotContains(t, ep, "error")
	assert.Equal(t, "troupe-tictactoe-seed5-rollout9", ep["id"])
	assert.Equal(t, true, ep["ok"])
	assert.Equal(t, "troupe/tictactoe", ep["env"])
	assert.Equal(t, "row 1", ep["task"].(map[string]any)["name"], "the task row comes back as sent")

	traces := ep["traces"].([]any)
	require.Len(t, traces, 2, "one trace per seat")
	x, o := traces[0].(map[string]any), traces[1].(map[string]any)
	assert.Equal(t, "x", x["agent"])
	assert.Equal(t, true, x["trainable"])
	assert.Equal(t, "policy-7", x["model"])
	assert.Equal(t, 1.0, x["reward"], "the first allocator's credit, weight 1")
	assert.Equal(t, map[string]any{"team": []any{1.0, 1.0}, "individual": []any{2.0, 0.0}}, x["rewards"])
	assert.Equal(t, 3.0, x["num_turns"])
	assert.Equal(t, "troupe-tictactoe-seed5-rollout9", x["info"].(map[string]any)["troupe"].(map[string]any)["episode"], "the episode stamp")
	branches := x["branches"].([]any)
	require.Len(t, branches, 2, "memory continues a branch; a fresh prompt starts one")
	want := cannedRollout().Samples
	for i, s := range []protocol.Sample{want[1], want[2]} {
		b := branches[i].(map[string]any)
		assert.Equal(t, toAny(s.Tokens), b["token_ids"], "branch %d is the sample's ids", i)
	}
	b0 := branches[0].(map[string]any)
	assert.Equal(t, []any{false, false, false, true, true, false, false, true}, b0["sampled_mask"])
	assert.Equal(t, []any{0.0, 0.0, 0.0, -0.5, -1.0, 0.0, 0.0, -0.5}, b0["logprobs"])

	assert.Equal(t, "o", o["agent"])
	assert.Equal(t, false, o["trainable"], "a frozen role never trains")
	assert.Empty(t, o["rewards"])

	require.Len(t, f.reqs, 1)
	req := f.reqs[0]
	assert.Equal(t, "llm", req.Policy)
	assert.Equal(t, 1, req.N)
	assert.Equal(t, uint64(5), *req.Seed)
	assert.Equal(t, rollout.RoleSettings{Endpoint: "gpu0", Model: "policy-7"}, req.Roles["x"])
	assert.Equal(t, rollout.RoleSettings{Endpoint: "gpu0", Model: "policy-7", Frozen: true}, req.Roles["o"])
	assert.Equal(t, 0.5, *req.Sampling.Temperature)
	assert.Equal(t, 32, *req.Sampling.MaxTokens)
	assert.JSONEq(t, "0.1", string(req.Sampling.Extra["min_p"]))
	assert.Equal(t, "dict", req.RewardFormat)
}

func TestVerifiersClientNamesBadRequests(t *testing.T) {
	addr := startServer(t, verifiers.Config{Rollouts: &fakeRoller{}, Endpoint: func(u string) (string, error) {
		return "", fmt.Errorf("%q is not served", u)
	}})
	out := runClient(t, map[string]any{
		"address": addr, "base_url": "http://elsewhere/v1", "model": "m",
		"runs": []any{map[string]any{"scenario": "tictactoe"}, map[string]any{"scenario": "tictacto"}},
	})
	runs := out["runs"].([]any)
	assert.Contains(t, runs[0].(map[string]any)["error"], `client.base_url (role x plays the model): "http://elsewhere/v1" is not served`)
	assert.Contains(t, runs[1].(map[string]any)["error"], `did you mean "tictactoe"`)
	assert.Equal(t, true, out["health_after"])
}

func TestVerifiersClientCancels(t *testing.T) {
	f := &fakeRoller{block: true, canceled: make(chan error, 1)}
	addr := startServer(t, verifiers.Config{Rollouts: f})
	out := runClient(t, map[string]any{
		"address": addr, "base_url": "http://x/v1", "model": "m", "cancel_after": 0.5,
		"runs": []any{map[string]any{"scenario": "tictactoe"}},
	})
	assert.Equal(t, true, out["cancelled"])
	select {
	case cause := <-f.canceled:
		assert.ErrorContains(t, cause, "cancelled by the client", "verifiers' client sent cancel and the episode stopped")
	case <-time.After(10 * time.Second):
		t.Fatal("the episode was not cancelled")
	}
}

func toAny(ids []int) []any {
	out := make([]any, len(ids))
	for i, v := range ids {
		out[i] = float64(v)
	}
	return out
}

// TestConcurrentRunsAnswerTheirOwnIDs: runs in flight at once each get
// their own traces and reply, under their own request ids.
func TestConcurrentRunsAnswerTheirOwnIDs(t *testing.T) {
	addr := startServer(t, verifiers.Config{Rollouts: &fakeRoller{}})
	d := dealer(t, addr)
	const n = 16
	for i := range n {
		run := pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe", "seed": i}, "model": "m",
			"client": map[string]any{"base_url": "http://x"}, "sampling": map[string]any{"temperature": 1}})
		require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte(fmt.Sprint("r", i)), []byte("run"), run)))
	}
	deltas, replies := map[string]int{}, map[string]bool{}
	for len(replies) < n {
		m, err := d.Recv()
		require.NoError(t, err)
		id := string(m.Frames[0])
		var out map[string]any
		require.NoError(t, msgpack.Unmarshal(m.Frames[2], &out))
		if string(m.Frames[1]) == "delta" {
			assert.False(t, replies[id], "a delta after its run's reply")
			deltas[id]++
			continue
		}
		assert.Equal(t, true, out["success"], "%v", out["error"])
		assert.Len(t, out["traces"], 2)
		replies[id] = true
	}
	for i := range n {
		assert.Equal(t, 2, deltas[fmt.Sprint("r", i)], "one delta per trace")
	}
}

// TestDrain: once Serve's context ends, new runs are refused, health is
// answered, and a run still in flight at ShutdownTimeout is aborted and
// answered before Serve returns.
func TestDrain(t *testing.T) {
	f := &fakeRoller{block: true, canceled: make(chan error, 1)}
	ready := make(chan string, 1)
	s, err := verifiers.New(verifiers.Config{Addr: "tcp://127.0.0.1:0", Rollouts: f, Scenarios: scenarios.Builtin(),
		ShutdownTimeout: 300 * time.Millisecond, Ready: func(a string) { ready <- a }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	d := dealer(t, <-ready)
	run := pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe"}, "model": "m"})
	require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte("early"), []byte("run"), run)))
	time.Sleep(100 * time.Millisecond)
	cancel()
	time.Sleep(50 * time.Millisecond)
	r := ask(t, d, []byte("late"), []byte("run"), run)
	assert.Contains(t, r["error"], "the server is shutting down")
	r = ask(t, d, []byte("h"), []byte("health"), pack(t, map[string]any{}))
	assert.Equal(t, true, r["success"])
	m, err := d.Recv()
	require.NoError(t, err)
	assert.Equal(t, "early", string(m.Frames[0]))
	var out map[string]any
	require.NoError(t, msgpack.Unmarshal(m.Frames[2], &out))
	assert.Contains(t, out["error"], "Cancelled: rollout aborted (the server shut down before the run finished)")
	assert.ErrorIs(t, <-f.canceled, verifiers.ErrShutdown)
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

// TestMaxRuns: a run over MaxRuns is answered at once, success false,
// while the runs in flight go on; health is still answered, and a slot
// freed (a cancel) takes a run again.
func TestMaxRuns(t *testing.T) {
	f := &fakeRoller{block: true, canceled: make(chan error, 3)}
	addr := startServer(t, verifiers.Config{Rollouts: f, MaxRuns: 2, ShutdownTimeout: 100 * time.Millisecond})
	d := dealer(t, addr)
	run := pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe"}, "model": "m"})
	for _, id := range []string{"a", "b"} {
		require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte(id), []byte("run"), run)))
	}
	r := ask(t, d, []byte("c"), []byte("run"), run)
	assert.Equal(t, false, r["success"])
	assert.Contains(t, r["error"], "the server has 2 runs in flight, its limit")
	r = ask(t, d, []byte("h"), []byte("health"), pack(t, map[string]any{}))
	assert.Equal(t, true, r["success"])
	r = ask(t, d, []byte("x"), []byte("cancel"), pack(t, map[string]any{"request_id": "a"}))
	assert.Equal(t, true, r["cancelled"])
	m, err := d.Recv() // a's answer
	require.NoError(t, err)
	assert.Equal(t, "a", string(m.Frames[0]))
	// a's slot is freed just after its answer: try until a run is taken
	// (a cancel sent after it finds it), each refusal answered before.
	for k := 0; ; k++ {
		require.Less(t, k, 100, "no run was taken once a finished")
		run1, cancel1 := fmt.Sprint("d", k), fmt.Sprint("x", k)
		require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte(run1), []byte("run"), run)))
		require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte(cancel1), []byte("cancel"), pack(t, map[string]any{"request_id": run1}))))
		var cancelled bool
		for {
			m, err := d.Recv()
			require.NoError(t, err)
			var out map[string]any
			require.NoError(t, msgpack.Unmarshal(m.Frames[2], &out))
			if string(m.Frames[0]) == cancel1 {
				cancelled = out["cancelled"] == true
				break
			}
		}
		if cancelled {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestVerifiersClientNamesFullServer: verifiers' own client raises the
// answer to a run over MaxRuns.
func TestVerifiersClientNamesFullServer(t *testing.T) {
	f := &fakeRoller{block: true, canceled: make(chan error, 1)}
	addr := startServer(t, verifiers.Config{Rollouts: f, MaxRuns: 1, ShutdownTimeout: 100 * time.Millisecond})
	d := dealer(t, addr)
	run := pack(t, map[string]any{"task_data": map[string]any{"scenario": "tictactoe"}, "model": "m"})
	require.NoError(t, d.Send(zmq4.NewMsgFrom([]byte("hold"), []byte("run"), run)))
	r := ask(t, d, []byte("h"), []byte("health"), pack(t, map[string]any{})) // the run is registered
	require.Equal(t, true, r["success"])
	out := runClient(t, map[string]any{
		"address": addr, "base_url": "http://x/v1", "model": "m",
		"runs": []any{map[string]any{"scenario": "tictactoe"}},
	})
	runs := out["runs"].([]any)
	assert.Contains(t, runs[0].(map[string]any)["error"], "the server has 1 runs in flight, its limit")
}
