package envserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/troupe-rl/troupe/envserver"
	"github.com/troupe-rl/troupe/envserver/envclient"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/seats"
)

// A harness plays x at tic-tac-toe against the house's minimax in o: the
// reset names x a harness seat and answers its URLs, and the harness
// observes and moves through the seat's function tools (its model calls
// would go to the seat's OpenAI base URL, forwarded to the model server).
func Example_harness() {
	model := llmtest.NewServer(llmtest.Options{Kind: llmtest.LlamaCpp})
	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Kind = "http://model.invalid/v1", llm.KindLlamaCpp
	client, _ := llm.NewClient(cfg, llm.WithRoundTripper(model.Transport()))
	defer client.Close()
	s, _ := envserver.New(envserver.Config{Token: "tok-0123456789abcdef", HarnessModel: func(string) (*llm.Client, error) { return client, nil }})
	hs := httptest.NewServer(s)
	defer hs.Close()
	defer s.Shutdown()

	seed := uint64(1)
	_, res, err := envclient.New(hs.URL, "tok-0123456789abcdef", nil).Reset(context.Background(), envclient.ResetRequest{Scenario: "tictactoe", Seed: &seed,
		EpisodeID: "game-1", Open: []string{"x"}, Harness: []string{"x"}, Policies: map[string]string{"o": "minimax"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	urls := res.Observation.Seats[0].Harness
	fmt.Println(strings.TrimPrefix(urls.OpenAIBaseURL, hs.URL))
	tool := func(name, args string) seats.ToolResult {
		req, _ := http.NewRequest(http.MethodPost, urls.ToolsURL+"/"+name, strings.NewReader(args))
		req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
		resp, err := http.DefaultClient.Do(req)
		var r seats.ToolResult
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
		}
		return r
	}
	for {
		o := tool("observe", `{}`).Observation
		if o.Done {
			fmt.Println(o.Status, o.End, "x scores", *o.Score)
			return
		}
		fmt.Println("x plays", o.Legal[0])
		tool("act", `{"action":"`+o.Legal[0]+`"}`)
	}
	// Output:
	// /episodes/game-1/seats/x/v1
	// x plays a1
	// x plays b1
	// x plays a2
	// completed terminated x scores -1
}
