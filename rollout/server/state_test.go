package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// raeModel is RAE computed by hand, independently of package credit: a
// baseline per (scenario, role), starting at 0; each finished episode's
// seats get R - b with b taken before the episode's update, then
// b ← α b + (1-α) mean of the role's R.
type raeModel struct {
	alpha float64
	b     map[string]float64 // scenario/role
	n     map[string]int64
}

func newRAEModel() *raeModel {
	return &raeModel{alpha: 0.95, b: map[string]float64{}, n: map[string]int64{}}
}

// check applies one answer to the model and asserts that every sample's
// reward (the scalar, or the "rae" entry of a dict) is the model's.
func (m *raeModel) check(t *testing.T, res *rollout.Response, key string) {
	t.Helper()
	for _, r := range res.Rollouts {
		if r.Status != protocol.StatusCompleted && r.Status != protocol.StatusTruncated {
			continue
		}
		require.Len(t, r.AgentScores, len(r.Seats), "tic-tac-toe scores each agent")
		seat := map[string]int{}
		for i, s := range r.Seats {
			seat[s.ID] = i
		}
		require.NotEmpty(t, r.Samples)
		for _, sm := range r.Samples {
			i := seat[sm.Metadata.Agent]
			k := sm.Metadata.Scenario + "/" + r.Seats[i].Role
			got, ok := sm.Reward.Get(key)
			require.True(t, ok)
			assert.InDelta(t, r.AgentScores[i]-m.b[k], got, 1e-12, "rollout %d agent %s turn %d", r.RolloutID, sm.Metadata.Agent, sm.Metadata.Turn)
		}
		sum, cnt := map[string]float64{}, map[string]float64{}
		var order []string
		for i, s := range r.Seats {
			k := s.Role
			if _, seen := cnt[k]; !seen {
				order = append(order, k)
			}
			sum[k] += r.AgentScores[i]
			cnt[k]++
		}
		for _, role := range order {
			k := "tictactoe/" + role
			m.b[k] = m.alpha*m.b[k] + (1-m.alpha)*(sum[role]/cnt[role])
			m.n[k]++
		}
	}
}

// stateFile reads the one allocator state file of dir.
func stateFile(t *testing.T, dir string) (string, map[string]any) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "allocator-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one file per allocator spec")
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var f struct {
		Version   int    `json:"version"`
		Allocator string `json:"allocator"`
		State     struct {
			Version   int `json:"version"`
			Baselines []struct {
				Scenario string  `json:"scenario"`
				Role     string  `json:"role"`
				Baseline float64 `json:"baseline"`
				Updates  int64   `json:"updates"`
			} `json:"baselines"`
		} `json:"state"`
	}
	require.NoError(t, jsonStrict(data, &f))
	assert.Equal(t, 1, f.Version)
	out := map[string]any{}
	for _, b := range f.State.Baselines {
		out[b.Scenario+"/"+b.Role] = b.Baseline
		out[b.Scenario+"/"+b.Role+"#"] = b.Updates
	}
	return f.Allocator, out
}

func assertStateIs(t *testing.T, dir string, m *raeModel) {
	t.Helper()
	name, st := stateFile(t, dir)
	assert.Equal(t, "rae", name)
	for k, b := range m.b {
		assert.InDelta(t, b, st[k], 1e-12, k)
		assert.Equal(t, m.n[k], st[k+"#"], k)
	}
}

func TestRAEStatePersistsAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created by the service
	m := newRAEModel()
	batch := func(s *server.Server, first int, specs ...string) {
		for i, spec := range specs {
			body := fmt.Sprintf(`{"scenario":"tictactoe","n":3,"seed":%d,"policy":"random","allocators":[%q]}`, first+i, spec)
			a := post(t, s, body)
			res := decodeResponse(t, a)
			m.check(t, res, "")
			assert.Equal(t, strconv.Itoa(i+1), a.header.Get(rollout.HeaderAllocationSeq), "the service's allocation order")
			assertStateIs(t, dir, m) // saved after every request
		}
	}

	s := newServer(t, server.Config{AllocatorStateDir: dir})
	batch(s, 1, "rae", "rae", "rae:alpha=0.95") // one spec, however spelt
	require.NoError(t, s.Shutdown(context.Background()))
	nonzero := false
	for _, b := range m.b {
		nonzero = nonzero || b != 0
	}
	require.True(t, nonzero, "the first batch moved the baselines, so the second batch tells")

	// A new service on the same directory starts from the baselines the
	// first one left.
	s = newServer(t, server.Config{AllocatorStateDir: dir})
	batch(s, 10, "rae", "rae(alpha=0.95;base=auto)", "rae")
	require.NoError(t, s.Shutdown(context.Background()))
	assertStateIs(t, dir, m)

	// Another spec is another allocator, with a file of its own; team keeps
	// no state and gets none.
	s = newServer(t, server.Config{AllocatorStateDir: dir})
	decodeResponse(t, post(t, s, `{"scenario":"tictactoe","allocators":["rae:alpha=0.5","team"]}`))
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Len(t, files, 2, "%v", files)
}

func TestRAEStateWithoutDirLivesAsLongAsTheService(t *testing.T) {
	s := newServer(t, server.Config{})
	m := newRAEModel()
	for i := range 3 {
		m.check(t, decodeResponse(t, post(t, s, fmt.Sprintf(`{"scenario":"tictactoe","n":2,"seed":%d,"policy":"random","allocators":["team","rae"],"reward_format":"dict"}`, i))), "rae")
	}
	// A service of its own starts afresh.
	m = newRAEModel()
	m.check(t, decodeResponse(t, post(t, newServer(t, server.Config{}), `{"scenario":"tictactoe","n":2,"seed":0,"policy":"random","allocators":["rae"]}`)), "")
}

func TestRAEConcurrentRequestsFollowTheAllocationOrder(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{AllocatorStateDir: dir})
	type answered struct {
		seq int
		res *rollout.Response
	}
	var (
		mu  sync.Mutex
		got []answered
		wg  sync.WaitGroup
	)
	for c := range 6 {
		wg.Go(func() {
			for i := range 4 {
				body := fmt.Sprintf(`{"scenario":"tictactoe","n":2,"seed":%d,"policy":"random","allocators":["rae","discount:of=rae"],"reward_format":"dict"}`, 10*c+i)
				a := post(t, s, body)
				if !assert.Equal(t, http.StatusOK, a.status, "%s", a.body) {
					return
				}
				seq, err := strconv.Atoi(a.header.Get(rollout.HeaderAllocationSeq))
				assert.NoError(t, err)
				var res rollout.Response
				assert.NoError(t, json.Unmarshal(a.body, &res))
				mu.Lock()
				got = append(got, answered{seq, &res})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, got, 24)
	slices.SortFunc(got, func(a, b answered) int { return a.seq - b.seq })
	// Applied in the service's allocation order, the answers are exactly
	// sequential RAE, and the saved state is the state after the last.
	m := newRAEModel()
	for i, a := range got {
		require.Equal(t, i+1, a.seq, "sequence numbers are 1..24")
		m.check(t, a.res, "rae")
	}
	require.NoError(t, s.Shutdown(context.Background()))
	files, err := filepath.Glob(filepath.Join(dir, "allocator-rae-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var f struct {
		State struct {
			Baselines []struct {
				Role     string  `json:"role"`
				Baseline float64 `json:"baseline"`
				Updates  int64   `json:"updates"`
			} `json:"baselines"`
		} `json:"state"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	require.Len(t, f.State.Baselines, 2)
	for _, b := range f.State.Baselines {
		assert.InDelta(t, m.b["tictactoe/"+b.Role], b.Baseline, 1e-12)
		assert.Equal(t, m.n["tictactoe/"+b.Role], b.Updates)
	}
	// The discounted RAE is a spec of its own, with its own file.
	files, err = filepath.Glob(filepath.Join(dir, "allocator-discount*.json"))
	require.NoError(t, err)
	assert.Len(t, files, 1)
}

func TestRequestsMayNotNameStateFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.json")
	require.NoError(t, os.WriteFile(secret, []byte(`{"version":1,"baselines":[]}`), 0o600))
	s := newServer(t, server.Config{})
	for _, spec := range []string{"rae:state=" + secret, "rae(state=" + secret + ")", "discount:of=rae(alpha=0.9;state=" + secret + ")", "rae: state =x"} {
		a := post(t, s, fmt.Sprintf(`{"scenario":"tictactoe","allocators":[%q]}`, spec))
		require.Equal(t, http.StatusBadRequest, a.status, spec)
		e := decodeError(t, a)
		assert.Equal(t, rollout.CodeBadAllocator, e.Code)
		assert.Contains(t, e.Message, "state=", spec)
		assert.Contains(t, e.Message, "--allocator-state")
	}
}

func TestBadAllocatorStateDir(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{AllocatorStateDir: dir})
	decodeResponse(t, post(t, s, `{"scenario":"tictactoe","allocators":["rae"]}`))
	require.NoError(t, s.Shutdown(context.Background()))
	files, err := filepath.Glob(filepath.Join(dir, "allocator-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	leftovers, err := filepath.Glob(filepath.Join(dir, ".*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "no temporary file is left")

	for _, tt := range []struct{ name, content, want string }{
		{"corrupt", `{"version":1,"allocator":"rae","state":{"version":1,"baselines":[{"scenario":"","role":"x"}]}}`, "without scenario or role"},
		{"not json", `{`, "not a state file"},
		{"other spec", `{"version":1,"allocator":"rae:alpha=0.5","state":{"version":1,"baselines":[]}}`, "whose file is"},
		{"stateless", `{"version":1,"allocator":"team","state":{}}`, "keeps no state"},
	} {
		require.NoError(t, os.WriteFile(files[0], []byte(tt.content), 0o600))
		_, err := server.New(server.Config{AllocatorStateDir: dir})
		require.ErrorIs(t, err, server.ErrBadConfig, tt.name)
		assert.Contains(t, err.Error(), files[0], tt.name)
		assert.Contains(t, err.Error(), tt.want, tt.name)
	}
}

func TestRefusedAnswerLeavesTheStateAlone(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{AllocatorStateDir: dir, MaxAnswerBytes: 20000})
	big := fmt.Sprintf("%q", strings.Repeat("x", 5000))
	for range 3 {
		a := post(t, s, `{"scenario":"tictactoe","n":2,"seed":1,"policy":"random","allocators":["rae"],"label":`+big+`}`)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		assert.Empty(t, a.header.Get(rollout.HeaderAllocationSeq))
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Empty(t, files, "nothing changed, nothing saved")

	// The first answered request starts from fresh baselines and is the
	// first in the allocation order.
	m := newRAEModel()
	a := post(t, s, `{"scenario":"tictactoe","n":2,"seed":1,"policy":"random","allocators":["rae"]}`)
	m.check(t, decodeResponse(t, a), "")
	assert.Equal(t, "1", a.header.Get(rollout.HeaderAllocationSeq))
	assertStateIs(t, dir, m)
}

// Every spelling of a stateful allocator is an instance for the life of
// the service and a file: a refused request creates none, a shutdown saves
// none that no request used, and there are at most MaxStatefulAllocators.
func TestStatefulAllocatorsAreBounded(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{AllocatorStateDir: dir})
	// Refused after the allocators parsed (an unknown policy): no instance.
	for i := range 3 {
		a := post(t, s, fmt.Sprintf(`{"scenario":"tictactoe","policy":"chess-master","allocators":["rae:alpha=0.%d1"]}`, i))
		require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	}
	for i := range server.MaxStatefulAllocators {
		a := post(t, s, fmt.Sprintf(`{"scenario":"tictactoe","policy":"random","allocators":["rae:alpha=0.%03d"]}`, i+1))
		require.Equal(t, http.StatusOK, a.status, "spec %d: %s", i, a.body)
	}
	a := post(t, s, `{"scenario":"tictactoe","policy":"random","allocators":["rae:alpha=0.999"]}`)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	e := decodeError(t, a)
	assert.Equal(t, rollout.CodeBadAllocator, e.Code)
	assert.Contains(t, e.Message, "MaxStatefulAllocators")
	// A spec the service already keeps is still served.
	require.Equal(t, http.StatusOK, post(t, s, `{"scenario":"tictactoe","policy":"random","allocators":["rae:alpha=0.001"]}`).status)

	require.NoError(t, s.Shutdown(context.Background()))
	files, err := filepath.Glob(filepath.Join(dir, "allocator-*.json"))
	require.NoError(t, err)
	assert.Len(t, files, server.MaxStatefulAllocators, "one file per spec a request used, none for the refused ones")
}
