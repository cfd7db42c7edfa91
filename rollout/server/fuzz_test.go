package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	_ "github.com/troupe-rl/troupe/internal/fuzzbound"
	"github.com/troupe-rl/troupe/rollout"
	"github.com/troupe-rl/troupe/rollout/server"
)

// FuzzRolloutRequest: whatever the body, the service answers 200 with a
// rollout response or a 4xx with an error body, and never panics or hangs.
func FuzzRolloutRequest(f *testing.F) {
	for _, seed := range []string{
		`{"scenario":"tictactoe","n":2,"rollout_id":1,"group_index":0,"index":0}`,
		`{"scenario":"signal","params":{"candidates":3,"vocab":"symbols"},"policies":{"speaker":"scripted"}}`,
		`{"scenario":"quiz","prompt":[{"role":"user","content":"q"}],"label":"42","allocators":["team","equal-split"],"reward_format":"dict"}`,
		`{"scenario":"tictactoe","limits":{"max_turns":2},"emit":["o"],"invalid":"forfeit"}`,
		`{"scenario":"signal","sampling":{"temperature":0,"extra":{"x":[1]}}}`,
		`[]`, `{`, ``, `{"scenario":1}`,
	} {
		f.Add(seed)
	}
	s, err := server.New(server.Config{Scenarios: registry(f), MaxEpisodesPerRequest: 4, MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		a := post(t, s, body)
		switch {
		case a.status == http.StatusOK:
			var r rollout.Response
			if err := jsonStrict(a.body, &r); err != nil {
				t.Fatalf("200 with an undecodable body: %v\n%s", err, a.body)
			}
		case a.status >= 400 && a.status < 500:
			var e rollout.ErrorBody
			if err := json.Unmarshal(a.body, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("%d without an error body: %s", a.status, a.body)
			}
		default:
			t.Fatalf("status %d for %q: %s", a.status, body, a.body)
		}
	})
}
