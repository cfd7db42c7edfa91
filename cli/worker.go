package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/troupe-rl/troupe/agents"
	"github.com/troupe-rl/troupe/agents/llm"
	"github.com/troupe-rl/troupe/distributed/natsrun"
	"github.com/troupe-rl/troupe/env"
)

// workerCommand is `troupe worker`: it pulls the episode requests of
// distributed runs from NATS JetStream, plays them, and stores their
// samples, until SIGTERM, when it hands back what it holds and exits 0.
func (a *App) workerCommand() *cobra.Command {
	nf := natsrun.DefaultFlags()
	var concurrency int
	llmCfg := llm.DefaultConfig()
	llmEnvErr := llmCfg.ApplyEnv(a.lookupEnv())
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Play the episodes of distributed runs, pulled from NATS JetStream (--nats URL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nf.ApplyEnv(a.lookupEnv())
			if concurrency == 0 {
				concurrency = runtime.GOMAXPROCS(0)
			}
			if llmEnvErr != nil {
				return &UsageError{Err: llmEnvErr}
			}
			client, err := llm.NewClient(llmCfg)
			if err != nil {
				return &UsageError{Err: err}
			}
			defer client.Close()
			logger := slog.New(slog.NewTextHandler(a.Stderr, nil))
			err = nf.RunWorker(cmd.Context(), a.Scenarios, a.workerPolicies(client, llmCfg), concurrency, logger)
			switch {
			case errors.Is(err, natsrun.ErrNoURL), errors.Is(err, natsrun.ErrBadConfig):
				return &UsageError{Err: err}
			case err != nil:
				fmt.Fprintf(a.Stderr, "troupe: worker: %v\n", err)
				return &exitError{code: ExitFailure, err: err}
			}
			return nil
		},
	}
	nf.BindWorker(cmd.Flags())
	llmCfg.BindFlags(cmd.Flags())
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", 0, "episodes played at once; 0: one per CPU (LLM episodes: many more)")
	return cmd
}

// workerPolicies makes the policies a distributed run names: the
// scenario's own, "random", and "llm" on the worker's --llm-* server (each
// worker may use a server of its own: the machine's local one, say).
func (a *App) workerPolicies(client *llm.Client, cfg llm.Config) natsrun.PolicyMaker {
	return func(info *env.Info, params env.Params, role, name string) (agents.Policy, error) {
		if name != llmPolicyName {
			return info.MakePolicy(params, role, name)
		}
		sc, err := a.Scenarios.Lookup(info.Name)
		if err != nil {
			return nil, err
		}
		return llm.NewPolicy(client, cfg, llm.ForScenario(sc, params)...)
	}
}
