package seats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/episode"
	"github.com/troupe-rl/troupe/play/table"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/runspec"
	"github.com/troupe-rl/troupe/scenarios"
	"github.com/troupe-rl/troupe/seats"
	"github.com/troupe-rl/troupe/trajectories"
)

// A harness plays alice in a negotiation against the fair policy: its
// model calls go through alice's seat to the model server (here a test
// server in vLLM's shape), its move through the act tool, and alice's turn
// becomes a sample with the server's tokens.
func Example() {
	ctx := context.Background()
	// The model server and a client of it.
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM})
	defer srv.Close()
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind, cfg.Model = srv.Listen(), llm.KindVLLM, "my-model"
	client, err := llm.NewClient(cfg)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	// The episode: alice's seat open to the harness, bob the house's.
	spec := runspec.Spec{Scenario: "negotiation", Seed: 3, Episodes: 1, Policies: map[string]runspec.Policy{"bob": {Name: "fair"}}}
	run, err := spec.Resolve(runspec.Resolvers{Scenarios: scenarios.Builtin()})
	if err != nil {
		panic(err)
	}
	req := run.Config.Request(0)
	tb, err := table.New(ctx, table.Config{
		Setup: env.Setup{Play: run.Config.Play, Seed: req.Seed, PolicySeed: req.PolicySeed, RolloutID: req.RolloutID},
		Open:  []int{0},
	})
	if err != nil {
		panic(err)
	}
	seat, err := seats.New(ctx, tb, 0, client, seats.Options{})
	if err != nil {
		panic(err)
	}
	defer seat.Close()
	hs := httptest.NewServer(http.StripPrefix("/seats/alice", seat.Handler()))
	defer hs.Close()

	// The harness: its model is the seat's endpoint...
	resp, err := http.Post(hs.URL+"/seats/alice/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Your move?"}]}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("capture:", resp.Header.Get(seats.CaptureHeader))
	// ...and it moves with the act tool (here a function tool; /mcp serves
	// the same over MCP).
	resp, err = http.Post(hs.URL+"/seats/alice/tools/act", "application/json", strings.NewReader(`{"move":{"type":"walk"}}`))
	if err != nil {
		panic(err)
	}
	var res seats.ToolResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	fmt.Println("act:", res.Content)

	// The episode is over: its record goes through the run's output stage.
	<-tb.Done()
	var col trajectories.Collector
	out := run.Output(&col)
	write, err := out.Finish(ctx, []*episode.Record{tb.Record()})
	if err != nil {
		panic(err)
	}
	if _, err := write(0); err != nil {
		panic(err)
	}
	s := col.Episodes()[0].Samples[0]
	fmt.Println("sample:", s.Metadata.Agent, "text_only", s.Metadata.TextOnly, "tokens", len(s.Tokens) > s.ResponseLength, "calls", s.Metadata.Extra[seats.NoteCalls], "move", s.Metadata.Action)
	// Output:
	// capture: trainable
	// act: Move accepted: {"type":"walk"}
	// sample: alice text_only false tokens true calls 1 move {"type":"walk"}
}
