package seats_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/protocol"
	"github.com/troupe-rl/troupe/seats"
)

// responsesBench is BenchmarkChat's request through the Responses API.
var responsesBench = `{"model":"m","temperature":0,"instructions":"You negotiate.","input":[{"role":"user","content":"` + strings.Repeat("Your move? ", 50) + `"}]}`

// BenchmarkChat measures what a seat's endpoint adds to a model call: a
// chat completion posted straight to a test server (direct, the
// yardstick) and through a seat in front of it (seat: read, check and
// rewrite the request, forward it, scan and validate the answer's token
// fields, relay it), both over loopback HTTP, the server answering at once.
// llamacpp adds the capture's own /apply-template, /tokenize and
// /detokenize calls. seat-stream asks for the answer streamed; the
// seat-responses variants ask through the Responses API (the request made
// a chat completion, the answer a Response object or its events). The
// seat's episode is over, so the calls are counted
// and not kept.
func BenchmarkChat(b *testing.B) {
	for _, kind := range []llmtest.Kind{llmtest.VLLM, llmtest.LlamaCpp} {
		srv := llmtest.NewServer(llmtest.Options{Kind: kind})
		base := srv.Listen()
		b.Cleanup(srv.Close)
		cfg := llm.DefaultConfig()
		cfg.BaseURL, cfg.Kind, cfg.Model, cfg.Tokenize = base, llm.Kind(kind), "m", true
		client, err := llm.NewClient(cfg)
		require.NoError(b, err)
		b.Cleanup(client.Close)
		setup, _ := negotiation(b, 3)
		tb, err := table.New(b.Context(), table.Config{Setup: setup, Open: []int{0}})
		require.NoError(b, err)
		seat, err := seats.New(b.Context(), tb, 0, client, seats.Options{})
		require.NoError(b, err)
		b.Cleanup(seat.Close)
		tb.Stop(protocol.StatusAborted, "benchmark", nil)
		hs := httptest.NewServer(seat.Handler())
		b.Cleanup(hs.Close)
		body := `{"model":"m","temperature":0,"logprobs":true,"top_logprobs":1,"messages":[{"role":"system","content":"You negotiate."},{"role":"user","content":"` + strings.Repeat("Your move? ", 50) + `"}]}`
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		post := func(b *testing.B, url, body string) {
			resp, err := hc.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		b.Run(string(kind)+"/direct", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				post(b, base+"/chat/completions", body)
			}
		})
		streamed := func(body string) string {
			return strings.Replace(body, `{"model":"m",`, `{"model":"m","stream":true,`, 1)
		}
		for _, route := range []struct{ name, path, body string }{
			{"seat", "/v1/chat/completions", body},
			{"seat-stream", "/v1/chat/completions", streamed(body)},
			{"seat-responses", "/v1/responses", responsesBench},
			{"seat-responses-stream", "/v1/responses", streamed(responsesBench)},
		} {
			b.Run(string(kind)+"/"+route.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					post(b, hs.URL+route.path, route.body)
				}
				if st := seat.Stats(); st.Trainable == 0 || st.EvalOnly != 0 {
					b.Fatalf("the seat captured no token ids: %+v", st)
				}
			})
		}
	}
}
