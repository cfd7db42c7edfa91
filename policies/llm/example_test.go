package llm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/env"
	"github.com/troupe-rl/troupe/play"
	"github.com/troupe-rl/troupe/policies/llm"
	"github.com/troupe-rl/troupe/policies/llm/llmtest"
	"github.com/troupe-rl/troupe/scenarios/tictactoe"
	"github.com/troupe-rl/troupe/trajectories"
)

// Self-play tic-tac-toe against an SGLang-shaped test server: every turn
// becomes a sample with the server's token ids and log-probs. Each player
// remembers its own turns, so its prompts grow with its conversation.
func Example() {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.SGLang})
	url := srv.Listen()
	defer srv.Close()

	cfg := llm.DefaultConfig()
	greedy := 0.0
	cfg.BaseURL, cfg.Kind, cfg.Model, cfg.Temperature = url, llm.KindSGLang, "qwen", &greedy
	client, err := llm.NewClient(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sc := tictactoe.New()
	policy, err := llm.NewPolicy(client, cfg, llm.WithScenario(sc.Info()))
	if err != nil {
		log.Fatal(err)
	}
	params, err := sc.Info().ParseParams(nil)
	if err != nil {
		log.Fatal(err)
	}
	var out trajectories.Collector
	if _, err := play.Run(context.Background(), play.Config{
		Play:     env.Play{Scenario: sc, Params: params, Policy: env.SamePolicy(policy)},
		Episodes: 1,
		Seed:     3,
	}, &trajectories.Output{Sink: &out}); err != nil {
		log.Fatal(err)
	}
	ep := out.Episodes()[0]
	for _, s := range ep.Samples {
		fmt.Printf("%s %s: %d prompt tokens, %d response tokens, %d log-probs\n",
			s.Metadata.Agent, s.Metadata.Action, len(s.Tokens)-s.ResponseLength, s.ResponseLength, len(s.RolloutLogProbs))
	}
	fmt.Println(ep.Status, ep.Score.Agents)
	// Output:
	// x c2: 314 prompt tokens, 6 response tokens, 6 log-probs
	// o b3: 321 prompt tokens, 6 response tokens, 6 log-probs
	// x a3: 443 prompt tokens, 6 response tokens, 6 log-probs
	// o c3: 447 prompt tokens, 6 response tokens, 6 log-probs
	// x b1: 567 prompt tokens, 6 response tokens, 6 log-probs
	// o c1: 569 prompt tokens, 6 response tokens, 6 log-probs
	// x b2: 686 prompt tokens, 6 response tokens, 6 log-probs
	// o a1: 686 prompt tokens, 6 response tokens, 6 log-probs
	// x a2: 801 prompt tokens, 6 response tokens, 6 log-probs
	// completed [1 -1]
}

// Play returns notes on how a turn went: here the server's first answer
// breaks the schema, and the re-ask is valid.
func ExamplePolicy_Act() {
	srv := llmtest.NewServer(llmtest.Options{Kind: llmtest.VLLM, Script: llmtest.FailCalls(1, llmtest.WrongSchema)})
	url := srv.Listen()
	defer srv.Close()

	cfg := llm.DefaultConfig()
	cfg.BaseURL, cfg.Model = url, "qwen"
	policy, err := llm.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer policy.Client().Close()
	turn, err := policy.Act(context.Background(), &agents.Observation{
		Agent: "alice", Role: "bidder", View: "Bid for the lamp.", Legal: []string{"pass", "bid 10", "bid 20"}, Seed: 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("action %q, invalid %q\n", turn.Text, turn.Invalid)
	fmt.Println("attempts:", turn.Notes["llm_attempts"])
	fmt.Println("rejected:", turn.Notes["llm_rejected"])
	// Output:
	// action "bid 20", invalid ""
	// attempts: 2
	// rejected: [invalid answer: the object has no "action" field (it has: move)]
}
