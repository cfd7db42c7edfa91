package envserver_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
)

// BenchmarkHarnessChat measures what the server's mount adds to a harness
// seat's chat call: a chat completion posted straight to a test model
// server (direct, the yardstick) and through a harness seat the server
// serves (served: the route, the token, the seat's capture, the forward),
// over loopback HTTP, the model server answering at once (vLLM's shape).
// The episode is over (the server shut down), so the calls are counted
// and not kept.
//
//	go test -run '^$' -bench HarnessChat -benchmem ./envserver
func BenchmarkHarnessChat(b *testing.B) {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM})
	base := srv.Listen()
	b.Cleanup(srv.Close)
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model = base, llm.KindVLLM, "m"
	client, err := llm.NewClient(cfg)
	require.NoError(b, err)
	b.Cleanup(client.Close)
	s, err := envserver.New(envserver.Config{Token: "t-0123456789abcdef", HarnessModel: func(string) (*llm.Client, error) { return client, nil }})
	require.NoError(b, err)
	hs := httptest.NewServer(s)
	b.Cleanup(hs.Close)
	_, res, err := envclient.New(hs.URL, "t-0123456789abcdef", hs.Client()).Reset(b.Context(), envclient.ResetRequest{Scenario: "negotiation", Open: []string{"alice"}, Harness: []string{"alice"}})
	require.NoError(b, err)
	s.Shutdown()
	seat := res.Observation.Seats[0].Harness.OpenAIBaseURL
	body := `{"model":"m","temperature":0,"logprobs":true,"top_logprobs":1,"messages":[{"role":"system","content":"You negotiate."},{"role":"user","content":"` + strings.Repeat("Your move? ", 50) + `"}]}`
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func(b *testing.B, url string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer t-0123456789abcdef")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, base+"/chat/completions")
		}
	})
	b.Run("served", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, seat+"/chat/completions")
		}
	})
}
